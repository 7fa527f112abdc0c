"""A context over the model's own window (issue 29): the provider's refusal is recognised, the
Error says how big the context was, the model's window and what to do, and the agent's budget
learns the window so the next turn fits, on the OpenAI wire (tests/fakes/openai_server.py;
the same against a real llama-server: tests/test_llama_server.py)."""

from __future__ import annotations

import pytest

from fakes.openai_server import Reply, ServerError
from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.window import budget_for_window
from chaz_nb.engine.backends import LiteLLMBackend
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent

#: llama-server's words for it (tools/server/server-context.cpp)
LLAMA_REFUSAL = "request (1200 tokens) exceeds the available context size (512 tokens), try increasing it"
#: OpenAI's and vLLM's
OPENAI_REFUSAL = ("This model's maximum context length is 4096 tokens. However, your messages resulted in "
                  "5000 tokens. Please reduce the length of the messages.")


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-context-limit")


def server_for(store, model_server, **kw) -> Server:
    agent = Agent("w", model="openai/small", api_base=model_server.openai_base, max_retries=0, **kw)
    return Server(store, [agent], backend=LiteLLMBackend(backoff=0.01))


async def send(server, s, text):
    return await (await server.send(s, text)).wait()


async def test_a_context_over_the_window_says_its_size_the_window_and_the_fix(store, model_server):
    model_server.script(Reply("short answer"), ServerError(400, LLAMA_REFUSAL))
    server = server_for(store, model_server)
    s = server.current_session("w")
    await send(server, s, "hello")
    error = await send(server, s, "word " * 1000)
    assert error.entry_type is T.ERROR
    assert "1,200 tokens" in error.content and "window of 512 tokens" in error.content
    assert "--context-tokens" in error.content and "%chaz compact" in error.content
    assert "model_options" not in error.content and "\n" not in error.content
    assert (error.payload["error_kind"], error.payload["context_window"], error.payload["context_tokens"]) == (
        "context_window", 512, 1200)
    assert len(model_server.chat_requests()) == 2  # a refusal is not retried


async def test_the_budget_learns_the_window_so_the_next_turn_fits(backend_store, model_server):
    store = backend_store
    model_server.script(Reply("short answer"), ServerError(400, LLAMA_REFUSAL), Reply("fits now"))
    server = server_for(store, model_server)
    s = server.current_session("w")
    await send(server, s, "hello")
    big = "word " * 1000  # ~1,250 tokens: in the 32k default budget, over the server's 512
    assert (await send(server, s, big)).entry_type is T.ERROR
    reply = await send(server, s, "and now a short one")
    assert reply.content == "fits now"
    sent = model_server.chat_requests()[-1].body["messages"]
    assert sent[-1]["content"] == "and now a short one" and all(m["content"] != big for m in sent)
    assert server.compaction.budget(server.agents["w"]) == budget_for_window(512) < 512


async def test_the_newest_message_alone_over_the_window_is_its_own_error(store, model_server):
    model_server.script(ServerError(400, LLAMA_REFUSAL))
    server = server_for(store, model_server, system="Be brief.")
    s = server.current_session("w")
    error = await send(server, s, "word " * 1000)
    assert "this message alone is 1,200 tokens" in error.content and "window of 512 tokens" in error.content
    assert "shorten" in error.content and "%chaz compact" not in error.content
    assert "\n" not in error.content


async def test_the_window_from_openais_words_and_the_agents_own_budget_is_capped(store, model_server):
    model_server.script(ServerError(400, OPENAI_REFUSAL), Reply("ok"))
    server = server_for(store, model_server, context_tokens=100_000)
    s = server.current_session("w")
    store.append(s, T.MESSAGE, "w", "y" * 40_000)  # the agent's own earlier reply: no run
    error = await send(server, s, "hi")
    assert "5,000 tokens" in error.content and "window of 4,096 tokens" in error.content
    assert server.compaction.budget(server.agents["w"]) == budget_for_window(4096)
    assert (await send(server, s, "hi again")).content == "ok"


async def test_a_window_litellm_knows_when_the_error_does_not_say(store, model_server):
    # no number in the provider's words: litellm's model info has gpt-4o-mini's window
    model_server.script(ServerError(400, "prompt is too long"))
    server = Server(store, [Agent("w", model="openai/gpt-4o-mini", api_base=model_server.openai_base,
                                  max_retries=0)], backend=LiteLLMBackend(backoff=0.01))
    s = server.current_session("w")
    error = await send(server, s, "hi")
    assert "window of 128,000 tokens" in error.content and error.payload["context_window"] == 128_000


def test_a_budget_for_a_window_leaves_room_for_the_reply_and_the_token_count():
    assert budget_for_window(512) < 512 and budget_for_window(128_000) < 128_000
    assert budget_for_window(512, max_tokens=400) < budget_for_window(512)
    assert budget_for_window(8) >= 1
