"""Streaming over the wire (tests/fakes/openai_server.py): the reply text reaches the session's
stream subscribers as the model writes it, the store gets one Message (or one Error that keeps
the text so far), tool-call argument deltas make one correct ToolCall, and the usage of the
stream's last chunk is what the ``runs`` view shows."""

from __future__ import annotations

import asyncio

import pytest

from fakes.openai_server import Call, DropMidStream, Reply
from chaz_nb.core.entries import EntryType as T
from chaz_nb.engine.backends import LiteLLMBackend
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stream-test-0123456789")


@pytest.fixture
def server(store):
    return Server(store, [], ToolRegistry([add]), backend=LiteLLMBackend(backoff=0.01))


def define(server: Server, base: str, model: str = "openai/fake", **kw) -> int:
    server.define_agent(Agent("w", model=model, api_base=base, **kw))
    return server.current_session("w")


class Timeline:
    """Stream events and entry writes of one session, in the order they happened."""

    def __init__(self, server: Server, store, session_id: int) -> None:
        self.items: list[tuple[str, object]] = []
        server.subscribe_stream(session_id, lambda ev: self.items.append(("stream", ev)))
        store.subscribe(lambda e: self.items.append(("entry", e)) if e.session_id == session_id else None)

    def deltas(self) -> list[str]:
        return [ev.text for kind, ev in self.items if kind == "stream" and not ev.done]

    def index(self, entry_type: T, sender: str = "w") -> int:
        return next(i for i, (k, e) in enumerate(self.items)
                    if k == "entry" and e.entry_type is entry_type and e.sender == sender)


async def test_text_deltas_arrive_in_order_before_the_message(server, store, model_server):
    model_server.script(Reply("one two three four five"))
    s = define(server, model_server.openai_base)
    seen = Timeline(server, store, s)
    reply = await (await server.send(s, "count")).wait()
    assert reply.content == "one two three four five"
    assert seen.deltas() == ["one ", "one two ", "one two three ", "one two three four ", "one two three four five"]
    last_delta = max(i for i, (k, ev) in enumerate(seen.items) if k == "stream" and not ev.done)
    assert last_delta < seen.index(T.MESSAGE)
    done = [ev for k, ev in seen.items if k == "stream" and ev.done]
    assert len(done) == 1 and done[0].run_id == reply.run_id and server.current_stream(s) is None
    body = model_server.chat_requests()[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_tool_call_arguments_split_across_chunks_make_one_tool_call(server, store, model_server):
    model_server.script(
        Reply(tool_calls=[Call("add", {"a": 2, "b": 3}), Call("add", {"a": 10, "b": 20})], arg_pieces=5),
        Reply("5 and 30"),
    )
    s = define(server, model_server.openai_base)
    reply = await (await server.send(s, "add")).wait()
    assert reply.content == "5 and 30"
    calls = store.entries(s, types=[T.TOOL_CALL])
    assert [c.payload["arguments"] for c in calls] == [{"a": 2, "b": 3}, {"a": 10, "b": 20}]
    assert [r.payload["output"] for r in store.entries(s, types=[T.TOOL_RESULT])] == ["5", "30"]
    assert len({c.tool_call_id for c in calls}) == 2
    assert all(r.body["stream"] is True for r in model_server.chat_requests())  # assembled from deltas


async def test_usage_from_the_last_chunk_lands_in_the_runs_view(server, store, model_server):
    model_server.script(Reply("priced", prompt_tokens=1234, completion_tokens=56))
    s = define(server, model_server.openai_base, model="openai/gpt-4o-mini")
    reply = await (await server.send(s, "hi")).wait()
    [(prompt, completion, cost)] = store.execute(
        "SELECT prompt_tokens, completion_tokens, cost_usd FROM runs WHERE run_id = ?", [reply.run_id])
    assert (prompt, completion) == (1234, 56)
    assert cost is not None and cost > 0
    assert model_server.chat_requests()[0].body["stream_options"] == {"include_usage": True}


async def test_a_model_litellm_cannot_price_streams_with_cost_null(server, store, model_server):
    model_server.script(Reply("unpriced", prompt_tokens=9, completion_tokens=3))
    s = define(server, model_server.openai_base, model="openai/no-such-priced-model")
    reply = await (await server.send(s, "hi")).wait()
    assert reply.entry_type is T.MESSAGE and reply.payload["cost_usd"] is None
    [(prompt, cost)] = store.execute("SELECT prompt_tokens, cost_usd FROM runs WHERE run_id = ?", [reply.run_id])
    assert prompt == 9 and cost is None
    assert model_server.chat_requests()[0].body["stream"] is True


async def test_stream_dropped_after_text_is_one_error_that_keeps_the_text(server, store, model_server):
    # role chunk, "this ", "reply ": then the connection drops
    model_server.script(DropMidStream(Reply("this reply is cut off half way"), after_chunks=3), Reply("whole now"))
    s = define(server, model_server.openai_base)
    seen = Timeline(server, store, s)
    error = await (await server.send(s, "hi")).wait()
    assert error.entry_type is T.ERROR
    assert "stream broke" in error.content and "partial_text" in error.content
    assert error.payload["partial_text"] == "this reply " == seen.deltas()[-1]
    assert error.payload["stream_broken"] is True and error.payload["error_kind"] == "connection"
    assert len(model_server.chat_requests()) == 1  # the user saw text: not retried
    assert len(store.entries(s, types=[T.ERROR])) == 1 and not store.entries(s, types=[T.MESSAGE])[1:]
    assert server.current_stream(s) is None
    assert (await (await server.send(s, "again")).wait()).content == "whole now"


async def test_ollama_replies_stream_too(server, store, model_server):
    model_server.script(Reply("local model words", prompt_tokens=21, completion_tokens=4))
    s = define(server, model_server.ollama_base, model="ollama_chat/llama3.1")
    seen = Timeline(server, store, s)
    reply = await (await server.send(s, "hi")).wait()
    assert reply.content == "local model words"
    assert seen.deltas() == ["local ", "local model ", "local model words"]
    assert model_server.chat_requests()[0].body["stream"] is True
    assert (reply.payload["prompt_tokens"], reply.payload["completion_tokens"]) == (21, 4)


async def test_an_agent_with_stream_off_gets_whole_replies(server, store, model_server):
    model_server.script(Reply("all at once"))
    s = define(server, model_server.openai_base, stream=False)
    seen = Timeline(server, store, s)
    reply = await (await server.send(s, "hi")).wait()
    assert reply.content == "all at once" and seen.deltas() == []
    assert not model_server.chat_requests()[0].body.get("stream")


async def test_a_view_that_subscribes_mid_stream_gets_the_text_so_far(server, store, model_server):
    model_server.script(Reply("slow words come one by one", chunk_delay=0.05))
    s = define(server, model_server.openai_base)
    first: asyncio.Future = asyncio.get_running_loop().create_future()
    server.subscribe_stream(s, lambda ev: first.done() or ev.done or first.set_result(ev))
    handle = await server.send(s, "hi")
    await asyncio.wait_for(first, 30)
    late: list = []
    server.subscribe_stream(s, late.append)
    assert late and late[0].text.startswith("slow ")  # replayed at once, not after the next delta
    await handle.wait()
    assert late[-1].done
