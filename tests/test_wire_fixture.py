"""The wire fixture itself, read by litellm's real providers: what later streaming work relies on.

Streamed replies are asked for with ``stream=True`` straight through ``litellm.acompletion``
and assembled by litellm, so these tests prove the fixture serves what litellm parses.
"""

from __future__ import annotations

import json

import pytest

from fakes.openai_server import Call, DropMidStream, Reply, openai_chunks

MSGS = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


@pytest.fixture
def litellm():
    from chaz_nb.engine.backends import litellm_module

    return litellm_module()


async def collect(stream):
    return [chunk async for chunk in stream]


async def test_sse_stream_with_parallel_tool_calls_split_across_chunks(litellm, model_server):
    reply = Reply("let me add", tool_calls=[Call("add", {"a": 1, "b": 2}), Call("add", {"a": 30, "b": 4})],
                  prompt_tokens=12, completion_tokens=9, arg_pieces=3)
    model_server.script(reply)
    chunks = await collect(await litellm.acompletion(
        model="openai/fake", api_base=model_server.openai_base, api_key="sk-test", messages=MSGS, tools=TOOLS,
        stream=True, stream_options={"include_usage": True}))
    arg_deltas = [tc.function.arguments for c in chunks for ch in c.choices for tc in (ch.delta.tool_calls or [])
                  if tc.function and tc.function.arguments]
    assert len(arg_deltas) >= 6  # each call's arguments came in several pieces
    built = litellm.stream_chunk_builder(chunks, messages=MSGS)
    message = built.choices[0].message
    assert message.content == "let me add"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
        ("add", {"a": 1, "b": 2}), ("add", {"a": 30, "b": 4})]
    assert (built.usage.prompt_tokens, built.usage.completion_tokens) == (12, 9)
    [req] = model_server.chat_requests()
    assert req.body["stream"] is True


def test_sse_usage_rides_in_the_last_chunk():
    chunks = openai_chunks(Reply("a b"), "m", include_usage=True)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 18
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:3]] == ["a ", "b"]


async def test_sse_stream_dropped_mid_way_raises_in_litellm(litellm, model_server):
    model_server.script(DropMidStream(Reply("one two three four five"), after_chunks=3))
    seen = []
    with pytest.raises(Exception) as info:
        async for chunk in await litellm.acompletion(
                model="openai/fake", api_base=model_server.openai_base, api_key="sk-test", messages=MSGS,
                stream=True, max_retries=0):
            seen.extend(ch.delta.content or "" for ch in chunk.choices)
    assert "".join(seen) == "one two "  # the partial text arrived before the drop
    assert "Connection" in str(info.value) or "connection" in str(info.value)


async def test_ollama_stream_is_ndjson_that_ollama_chat_assembles(litellm, model_server):
    model_server.script(Reply("local words arrive", prompt_tokens=5, completion_tokens=3))
    chunks = await collect(await litellm.acompletion(
        model="ollama_chat/llama3.1", api_base=model_server.ollama_base, messages=MSGS, stream=True))
    assert len(chunks) >= 3
    built = litellm.stream_chunk_builder(chunks, messages=MSGS)
    assert built.choices[0].message.content == "local words arrive"
    assert model_server.chat_requests()[0].path == "/api/chat"


async def test_unscripted_request_is_an_error_the_test_can_see(litellm, model_server):
    with pytest.raises(Exception, match="nothing scripted"):
        await litellm.acompletion(model="openai/fake", api_base=model_server.openai_base, api_key="sk-test",
                                  messages=MSGS, max_retries=0)
    assert len(model_server.unscripted) == 1
