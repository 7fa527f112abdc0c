"""Offline streaming (engine/streaming.py and the chaz/* models' litellm streaming hooks):
chaz/echo and chaz/script stream word by word through the same litellm path a real model
takes, and the entries a streamed run writes are the ones a whole-reply run writes."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from chaz_nb.engine.streaming import StreamAssembly, words
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent, AgentError


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


SCRIPT = [{"tool": "add", "args": {"a": 2, "b": 3}}, "the sum is {result}, as asked"]


def comparable(store, session_id):
    """The session's entries without what differs between two runs (ids, times)."""
    out = []
    for e in store.entries(session_id):
        payload = {k: v for k, v in (e.payload or {}).items()
                   if k not in ("run_id", "trigger_id", "answers", "duration_ms", "budget")}
        content = e.content.replace(f"{e.sender} is working", "AGENT is working")  # the Ack names its agent
        out.append((e.entry_type.value, e.sender, content, payload))
    return out


async def run_both(store, **agent):
    """One turn with streaming on and one with it off, each in its own session."""
    server = Server(store, [Agent("on", **agent), Agent("off", stream=False, **agent)], ToolRegistry([add]))
    deltas: list[str] = []
    on, off = server.current_session("on"), server.current_session("off")
    server.subscribe_stream(on, lambda ev: deltas.append(ev.text) if not ev.done else None)
    server.subscribe_stream(off, lambda ev: deltas.append("off: " + ev.text))
    await (await server.send(on, "hello big world")).wait()
    await (await server.send(off, "hello big world")).wait()
    return server, deltas, comparable(store, on), comparable(store, off)


async def test_echo_streams_word_by_word(store):
    _, deltas, _, _ = await run_both(store, model="chaz/echo")
    assert deltas == ["echo: ", "echo: hello ", "echo: hello big ", "echo: hello big world"]


async def test_echo_streamed_writes_the_same_entries(store):
    _, _, on, off = await run_both(store, model="chaz/echo")
    assert [(t, c, p) for t, _, c, p in on] == [(t, c, p) for t, _, c, p in off]


async def test_script_streams_its_text_and_its_tool_calls_land_whole(store):
    _, deltas, on, off = await run_both(store, model="chaz/script", script=SCRIPT)
    assert deltas[-1] == "the sum is 5, as asked" and deltas[0] == "the "
    assert [(t, c, p) for t, _, c, p in on] == [(t, c, p) for t, _, c, p in off]
    calls = [p for t, _, _, p in on if t == "ToolCall"]
    assert [c["arguments"] for c in calls] == [{"a": 2, "b": 3}]


async def test_a_script_asks_for_a_per_word_delay(store):
    server = Server(store, [Agent("slow", model="chaz/echo",
                                  model_options={"metadata": {"chaz_word_delay": 0.01}})])
    stamps: list[float] = []
    import asyncio

    loop = asyncio.get_running_loop()
    s = server.current_session("slow")
    server.subscribe_stream(s, lambda ev: stamps.append(loop.time()) if not ev.done else None)
    await (await server.send(s, "a b c d")).wait()
    assert len(stamps) == 5 and stamps[-1] - stamps[0] >= 0.03  # four waits between five words


def test_stream_must_be_a_bool():
    with pytest.raises(AgentError, match="stream must be true or false"):
        Agent("x", stream="no")  # type: ignore[arg-type]


def _chunk(content=None, calls=None):
    return NS(choices=[NS(delta=NS(content=content, tool_calls=calls))])


def _call(index, id=None, name=None, args=""):
    return NS(index=index, id=id, function=NS(name=name, arguments=args))


def test_interleaved_tool_call_deltas_are_assembled_by_index():
    a = StreamAssembly()
    for chunk in [_chunk("Let "), _chunk("me."), _chunk(calls=[_call(0, "c0", "add", "")]),
                  _chunk(calls=[_call(1, "c1", "mul", '{"x"')]), _chunk(calls=[_call(0, args='{"a": 1')]),
                  _chunk(calls=[_call(1, args=": 2}")]), _chunk(calls=[_call(0, args=", \"b\": 2}")]),
                  NS(choices=[], usage=NS(prompt_tokens=3))]:
        a.add(chunk)
    assert a.partial_text == "Let me."
    assert a.tool_calls() == [("c0", "add", '{"a": 1, "b": 2}'), ("c1", "mul", '{"x": 2}')]


def test_words_join_back_to_the_text():
    text = "two  spaces\nand a newline "
    assert "".join(words(text)) == text and words("a b") == ["a ", "b"]


async def test_a_streamed_turn_does_not_assemble_the_whole_response_again_on_the_loop(store, monkeypatch):
    """Issue 30: the usage of a streamed call comes with the stream (litellm's own assembly of
    it, off the loop); assembling the chunks again on the loop cost ~3 ms a call. Only a priced
    model's cost needs the whole response. The usage written is the same as a whole reply's."""
    import threading

    from chaz_nb.engine.backends import litellm_ready

    litellm = await litellm_ready()
    real = litellm.stream_chunk_builder
    on_loop: list[str] = []

    def builder(*args, **kwargs):
        if threading.current_thread() is threading.main_thread():
            on_loop.append("stream_chunk_builder")
        return real(*args, **kwargs)

    monkeypatch.setattr(litellm, "stream_chunk_builder", builder)
    _, _, on, off = await run_both(store, model="chaz/script", script=SCRIPT)
    assert on_loop == []
    assert [(t, c, p) for t, _, c, p in on] == [(t, c, p) for t, _, c, p in off]
    reply = [p for t, s, _, p in on if t == "Message" and s == "on"][0]
    assert reply["prompt_tokens"] > 0 and reply["completion_tokens"] > 0
