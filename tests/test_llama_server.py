"""chaz_nb against a real language model server nobody here wrote (issue 29): llama.cpp's
llama-server with SmolLM2-135M-Instruct (tests/fakes/llama_server.py), through litellm's
ordinary providers (``openai/`` and ``hosted_vllm/`` with ``api_base``), in this process and in
the model worker (every test both ways: ``wire_backend``).

Its own SSE framing, token counts, context limit, chat template and a model that follows no
script: replies are checked for what a user sees (a Message, a stream that grows, usage from
the server's counts), never for their words. Replies are kept short (max_tokens) for time.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.window import budget_for_window
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent
from fakes.llama_server import LlamaServer, locate
from waiting import until

SHORT = {"max_tokens": 12, "temperature": 0}
LONG = {"max_tokens": 200, "temperature": 0}


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-llama-local")  # llama-server asks for none; litellm wants one
    monkeypatch.setenv("HOSTED_VLLM_API_KEY", "sk-llama-local")


#: the backend of the test running now (``wire_backend``: litellm in this process, or the worker)
_backend: dict[str, object] = {}


@pytest.fixture(autouse=True)
def backend(wire_backend):
    _backend["now"] = wire_backend
    yield wire_backend
    _backend.clear()


def agent(name: str, base: str, model: str = "openai/smollm2", **kw) -> Agent:
    kw.setdefault("model_options", SHORT)
    kw.setdefault("tools", [])  # offered tools bring the template's note (a test of its own)
    return Agent(name, model=model, api_base=base, system="Be brief.", **kw)


def serve(store, *agents: Agent) -> Server:
    return Server(store, list(agents), ToolRegistry([add]), backend=_backend["now"])  # type: ignore[arg-type]


async def send(server: Server, s: int, text: str):
    return await asyncio.wait_for((await server.send(s, text)).wait(), 120)


def kinds(store, s: int) -> list[str]:
    return [e.entry_type.value for e in store.entries(s)]


def server_tokens(llama: LlamaServer, messages: list[dict[str, str]]) -> int:
    """The prompt's length in the server's own tokens (its chat template, its tokenizer)."""
    def post(path: str, body: dict) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{llama.port}{path}", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    prompt = post("/apply-template", {"messages": messages})["prompt"]
    return len(post("/tokenize", {"content": prompt, "add_special": True})["tokens"])


def run_row(store, run_id: int) -> tuple:
    [row] = store.execute(
        "SELECT status, prompt_tokens, completion_tokens FROM runs WHERE run_id = ?", [run_id])
    return row


@pytest.mark.parametrize("model", ["openai/smollm2", "hosted_vllm/smollm2"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_plain_turn(store, llama_log, model, stream):
    llama = llama_log
    server = serve(store, agent("w", llama.base, model=model, stream=stream))
    s = server.current_session("w")
    seen: list[str] = []
    server.subscribe_stream(s, lambda e: seen.append(e.text) if not e.done else None)

    reply = await send(server, s, "Say hello.")

    assert reply.entry_type is T.MESSAGE and reply.content.strip(), kinds(store, s)
    assert kinds(store, s) == ["Message", "Ack", "Message"]  # one Message, whatever streamed before it
    if stream:  # the view's text grew, piece by piece, to the reply
        assert len(seen) >= 2 and seen == sorted(seen, key=len) and seen[-1] == reply.content
    else:
        assert seen == []
    # usage from the server's own counts: its template and tokenizer, not 4 characters a token
    status, prompt, completion = run_row(store, reply.run_id)
    expected = server_tokens(llama, [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "Say hello."}])
    assert (status, prompt) == ("ok", expected) and 0 < completion <= SHORT["max_tokens"]
    assert reply.payload["cost_usd"] is None  # a local model litellm cannot price: NULL
    await server.stop()


async def test_stop_in_the_middle_of_a_long_streamed_reply(store, llama_log):
    server = serve(store, agent("w", llama_log.base, model_options=LONG))
    s = server.current_session("w")
    await server.send(s, "Write a long story about a dragon and a knight.")
    shown = await until(lambda: len(getattr(server.current_stream(s), "text", "")) >= 40 and
                        server.current_stream(s).text,
                        lambda cb: server.subscribe_stream(s, cb), timeout=60, what="40 streamed characters")

    await server.stop_runs(s)

    closing = store.entries(s, types=[T.ACK])[-1]
    assert closing.payload["status"] == "cancelled"
    assert closing.payload["partial_text"].startswith(shown)  # what the user saw is kept
    assert len(closing.payload["partial_text"]) < 4 * LONG["max_tokens"]  # and the reply was cut short
    assert kinds(store, s) == ["Message", "Ack", "Ack"]
    server.agents["w"].model_options = SHORT
    assert (await send(server, s, "Say hi.")).entry_type is T.MESSAGE
    await server.stop()


async def test_two_sessions_at_once_against_the_one_server(store, llama_log):
    server = serve(store, agent("a", llama_log.base), agent("b", llama_log.base))
    sa, sb = server.current_session("a"), server.current_session("b")

    ra, rb = await asyncio.gather(send(server, sa, "Name a colour."), send(server, sb, "Name a fruit."))

    assert ra.entry_type is rb.entry_type is T.MESSAGE
    assert kinds(store, sa) == kinds(store, sb) == ["Message", "Ack", "Message"]
    [(a0, a1), (b0, b1)] = [store.execute("SELECT started_at, finished_at FROM runs WHERE run_id = ?", [r.run_id])[0]
                            for r in (ra, rb)]
    assert a0 < b1 and b0 < a1  # served side by side (two slots), not one after the other
    await server.stop()


async def test_a_context_over_the_servers_window(store, llama_log):
    window = llama_log.ctx
    server = serve(store, agent("w", llama_log.base))
    s = server.current_session("w")
    assert (await send(server, s, "Say hello.")).entry_type is T.MESSAGE
    big = "The quick brown fox jumps over the lazy dog. " * 60  # ~600 server tokens; 32k default budget

    error = await send(server, s, big)

    assert error.entry_type is T.ERROR and "\n" not in error.content
    assert f"over the model's window of {window} tokens" in error.content
    assert error.payload["context_tokens"] > window and error.payload["context_window"] == window
    assert "--context-tokens" in error.content and "%chaz compact" in error.content
    assert "model_options" not in error.content
    # the budget learned the window: the next turn fits, the oversized message left out
    assert server.compaction.budget(server.agents["w"]) == budget_for_window(window, SHORT["max_tokens"])
    assert (await send(server, s, "Say hi.")).entry_type is T.MESSAGE
    # and the advice holds: compaction summarizes what fits the window, then the session goes on
    summary = await server.compact(s)
    assert summary.entry_type is T.SUMMARY and summary.content.strip()
    assert (await send(server, s, "Say bye.")).entry_type is T.MESSAGE
    # a new message alone over the window: its own error, that says to shorten it
    alone = await send(server, server.new_session("w"), big)
    assert "this message alone is" in alone.content and "shorten it" in alone.content
    await server.stop()


async def test_the_server_killed_mid_stream_and_restarted(store, tmp_path):
    found = locate()
    if isinstance(found, str):
        pytest.skip(found)
    llama = LlamaServer(*found, tmp_path / "llama-server.log", slots=1).start()
    try:
        server = serve(store, agent("w", llama.base, model_options=LONG))
        s = server.current_session("w")
        handle = await server.send(s, "Write a long story about a dragon and a knight.")
        await until(lambda: len(getattr(server.current_stream(s), "text", "")) >= 20,
                    lambda cb: server.subscribe_stream(s, cb), timeout=60, what="streamed text")

        llama.kill()
        error = await asyncio.wait_for(handle.wait(), 60)

        assert error.entry_type is T.ERROR and "the reply stream broke after" in error.content
        assert error.payload["partial_text"] and error.payload["error_kind"] == "connection"
        assert kinds(store, s) == ["Message", "Ack", "Error"]  # one Error, no retry of a shown reply
        llama.start()  # the same port
        server.agents["w"].model_options = SHORT
        assert (await send(server, s, "Say hi.")).entry_type is T.MESSAGE
        await server.stop()
    finally:
        print(llama.log_tail(40))
        llama.stop()


async def test_a_tool_offered_to_a_model_that_may_not_call_it_ends_the_run_cleanly(store, llama_log):
    # SmolLM2-135M, offered a tool through the server's --jinja template, mostly answers in
    # text (or writes a call in its prose): whatever it returns, the run ends cleanly
    server = serve(store, agent("calc", llama_log.base, tools=["add"], model_options={"max_tokens": 40}))
    s = server.current_session("calc")

    end = await send(server, s, "Use the add tool to add 2 and 3.")

    entries = store.entries(s)
    assert end.entry_type is T.MESSAGE or (end is None and entries[-1].payload.get("status") == "silent")
    calls = [e for e in entries if e.entry_type is T.TOOL_CALL]
    results = [e for e in entries if e.entry_type is T.TOOL_RESULT]
    assert len(calls) == len(results)  # a call it did make was answered
    assert all(e.entry_type is not T.ERROR or e.payload.get("note") for e in entries)  # (the template's note)
    ack = next(e for e in entries if e.entry_type is T.ACK)
    assert run_row(store, ack.id)[0] == "ok"
    await server.stop()


async def test_a_template_that_drops_the_tools_is_said_once_in_the_session(store, llama_log):
    # SmolLM2-135M's chat template has no tool section: llama-server takes the request's tools
    # and leaves them out of the prompt; its /props says supports_tools false, and so does the session
    server = serve(store, agent("calc", llama_log.base, tools=["add"]))
    s = server.current_session("calc")

    await send(server, s, "Add 2 and 3.")
    note = await until(lambda: next((e for e in store.entries(s) if e.entry_type is T.ERROR), None),
                       store.subscribe, what="the note")
    await send(server, s, "Add 4 and 5.")

    assert note.payload["note"] is True and "\n" not in note.content
    assert "chat template takes no tools" in note.content and llama_log.base.removesuffix("/v1") in note.content
    assert [e.entry_type for e in store.entries(s)].count(T.ERROR) == 1
    await server.stop()
