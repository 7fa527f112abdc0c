"""Stopping a run (chaz_nb/server/stopping.py): over the wire fixture, through the real Server.

A person stops a run that is waiting on a slow model, running a tool, or parked on an
approval; the run ends with an Ack of status ``cancelled`` (runs view ``cancelled``), nothing
written before is lost, and the session answers the next Message.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from fakes.openai_server import Call, Reply, Slow, StallMidStream
from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.store import StoreError
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent
from waiting import until

tool_events: list[str] = []
tool_started: dict[str, asyncio.Event] = {}
tool_started_at: dict[str, float] = {}


@tool
async def crunch(n: int) -> str:
    """A long computation (it waits until cancelled)."""
    tool_events.append("started")
    tool_started_at["crunch"] = time.perf_counter()
    tool_started["crunch"].set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        tool_events.append("cancelled")
        raise
    return "never"


@tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy to a target."""
    tool_events.append(f"deploy {target}")
    return f"deployed {target}"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-stop")
    tool_events.clear()


@pytest.fixture
def make(store, model_server, wire_backend):
    """A Server on the wire fixture, litellm in this process or in the model worker."""
    def build(*names: str, **kw) -> Server:
        agents = [Agent(n, model=f"openai/{n}-model", api_base=model_server.openai_base, **kw) for n in names]
        tools = ToolRegistry([crunch, deploy])
        return Server(store, agents, tools, backend=wire_backend)

    return build


def slow() -> Slow:
    # far longer than any test: only the stop ends the wait (the fixture's close frees it)
    return Slow(600)


async def arrived(model_server, n: int) -> None:
    # generous: the first call waits for litellm's cold import, seconds on a loaded machine
    await asyncio.to_thread(model_server.wait_for_requests, n, 120)


def kinds(store, session_id: int) -> list[str]:
    return [e.entry_type.value for e in store.entries(session_id)]


def run_status(store, run_id: int) -> str:
    [(status,)] = store.execute("SELECT status FROM runs WHERE run_id = ?", [run_id])
    return status


async def test_stop_during_a_slow_model_call_ends_the_run_cancelled(make, store, model_server):
    model_server.script(slow(), Reply("back again"))
    server = make("w")
    s = server.current_session("w")
    handle = await server.send(s, "think hard")
    await arrived(model_server, 1)

    [stopped] = await server.stop_runs(s)

    ack, closing = [e for e in store.entries(s) if e.entry_type is T.ACK]
    assert (stopped.session_id, stopped.run_id, stopped.was) == (s, ack.id, "running")
    assert closing.payload["status"] == "cancelled" and closing.payload["stopped_by"] == "user"
    assert closing.run_id == ack.id and closing.content == "w was stopped by user"
    assert kinds(store, s) == ["Message", "Ack", "Ack"]  # no reply Message, no Error
    assert run_status(store, ack.id) == "cancelled"
    assert await handle.wait() is None
    assert server.session_status(s) == "idle"

    reply = await (await server.send(s, "and now?")).wait()
    assert reply.entry_type is T.MESSAGE and reply.content == "back again"
    assert kinds(store, s) == ["Message", "Ack", "Ack", "Message", "Ack", "Message"]
    # the second request carries the whole log, the stopped turn's Message included
    sent = model_server.chat_requests()[1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["think hard", "and now?"]


async def test_a_run_stopped_while_its_ack_is_in_its_commit_window_is_reported_with_its_id(
        make, store, model_server, monkeypatch):
    """The Ack commits once the model request has left; a stop that comes before that commit
    (a fresh-clone CI run hit it) still reports the run it stopped, not ``run_id=None``."""
    import chaz_nb.server.run as run_module

    monkeypatch.setattr(run_module, "ACK_WINDOW", 600.0)  # only the stop hurries the Ack
    monkeypatch.setattr(store, "flush_when_idle", lambda: None)
    model_server.script(slow())
    server = make("w")
    s = server.current_session("w")
    handle = await server.send(s, "think hard")
    await arrived(model_server, 1)
    assert [e.entry_type for e in store.entries(s)] == [T.MESSAGE]  # the Ack is not committed yet

    [stopped] = await server.stop_runs(s)

    ack, closing = [e for e in store.entries(s) if e.entry_type is T.ACK]
    assert (stopped.run_id, stopped.was) == (ack.id, "running")
    assert closing.run_id == ack.id and closing.payload["status"] == "cancelled"
    assert await handle.wait() is None


async def test_stopping_a_stream_keeps_the_text_so_far_in_the_cancelled_ack(make, store, model_server):
    # the role chunk and three words reach the screen, then the provider goes quiet
    model_server.script(StallMidStream(Reply("one two three four five"), after_chunks=4), Reply("again"))
    server = make("w")
    s = server.current_session("w")
    await server.send(s, "tell me")
    await arrived(model_server, 1)
    await until(lambda: getattr(server.current_stream(s), "text", None) == "one two three ",
                lambda cb: server.subscribe_stream(s, cb), what="three streamed words")

    [stopped] = await server.stop_runs(s)

    closing = store.entries(s, types=[T.ACK])[-1]
    assert closing.payload["status"] == "cancelled"
    assert closing.payload["partial_text"] == "one two three "  # what the user saw is kept
    assert kinds(store, s) == ["Message", "Ack", "Ack"]  # the text so far is no Message
    assert server.current_stream(s) is None
    assert (await (await server.send(s, "once more")).wait()).content == "again"


async def test_a_server_shutdown_mid_stream_keeps_the_text_so_far_in_its_error(make, store, model_server):
    model_server.script(StallMidStream(Reply("one two three four five"), after_chunks=3))
    server = make("w")
    s = server.current_session("w")
    await server.send(s, "tell me")
    await arrived(model_server, 1)
    await until(lambda: getattr(server.current_stream(s), "text", None) == "one two ",
                lambda cb: server.subscribe_stream(s, cb), what="two streamed words")

    await server.stop()

    error = store.entries(s, types=[T.ERROR])[-1]
    assert error.content == "interrupted: run cancelled" and error.payload["partial_text"] == "one two "


async def test_stopping_a_run_with_nothing_streamed_has_no_partial_text(make, store, model_server):
    model_server.script(slow())
    server = make("w")
    s = server.current_session("w")
    await server.send(s, "think")
    await arrived(model_server, 1)

    await server.stop_runs(s)

    assert "partial_text" not in store.entries(s, types=[T.ACK])[-1].payload


async def test_stop_during_a_running_tool_cancels_the_tool(make, store, model_server):
    model_server.script(Reply(tool_calls=[Call("crunch", {"n": 7})]), Reply("done"))
    server = make("calc", tools=["crunch"])
    s = server.current_session("calc")
    tool_started["crunch"] = asyncio.Event()
    await server.send(s, "crunch 7")
    await asyncio.wait_for(tool_started["crunch"].wait(), 30)

    [stopped] = await server.stop_runs(s)

    assert tool_events == ["started", "cancelled"]
    assert kinds(store, s) == ["Message", "Ack", "ToolCall", "ToolResult", "Ack"]
    result = store.entries(s, types=[T.TOOL_RESULT])[0]
    assert result.payload["is_error"] and "cancelled" in result.payload["output"]
    assert run_status(store, stopped.run_id) == "cancelled"
    [(tool_row,)] = store.execute("SELECT is_error FROM tool_calls WHERE run_id = ?", [stopped.run_id])
    assert tool_row is True
    reply = await (await server.send(s, "again")).wait()
    assert reply.content == "done"


async def test_stop_of_a_parked_run_closes_its_approval(make, store, model_server):
    model_server.script(Reply(tool_calls=[Call("deploy", {"target": "prod"})]), Reply("later"))
    server = make("ops", tools=["deploy"])
    s = server.current_session("ops")
    await server.send(s, "ship it")
    await until(lambda: server.session_status(s) == "parked", store.subscribe)

    [stopped] = await server.stop_runs(s)

    assert stopped.was == "parked"
    assert server.pending_approvals() == [] and server.session_status(s) == "idle"
    assert tool_events == []  # the tool never ran
    [(decision, reason)] = store.execute("SELECT decision, reason FROM approvals WHERE session_id = ?", [s])
    assert decision == "timed_out" and "cancelled" in reason
    assert run_status(store, stopped.run_id) == "cancelled"
    assert kinds(store, s)[-2:] == ["ToolResult", "Ack"]
    assert (await (await server.send(s, "status?")).wait()).content == "later"


async def test_stop_all_stops_every_running_session(make, store, model_server):
    model_server.script(slow(), slow())
    server = make("a", "b")
    sa, sb = server.current_session("a"), server.current_session("b")
    await server.send(sa, "one")
    await server.send(sb, "two")
    await arrived(model_server, 2)

    stopped = await server.stop_runs()

    assert sorted((x.session_id, x.agent) for x in stopped) == [(sa, "a"), (sb, "b")]
    assert [r[0] for r in store.execute("SELECT status FROM runs ORDER BY run_id")] == ["cancelled"] * 2
    assert server.running_sessions() == []


async def test_stopping_an_idle_session_stops_nothing(make, store, model_server):
    model_server.script(Reply("hi"))
    server = make("w")
    s = server.current_session("w")
    await (await server.send(s, "hello")).wait()
    before = kinds(store, s)
    assert await server.stop_runs(s) == []
    assert await server.stop_runs() == []
    assert kinds(store, s) == before


async def test_stopping_an_unknown_session_is_one_line_error(make):
    server = make("w")
    with pytest.raises(StoreError, match=r"no session 999\b"):
        await server.stop_runs(999)


async def test_stop_drops_the_queued_follow_up(make, store, model_server):
    model_server.script(slow(), Reply("fresh start"))
    server = make("w")
    s = server.current_session("w")
    await server.send(s, "first")
    await arrived(model_server, 1)
    queued = await server.send(s, "second, while busy")

    [stopped] = await server.stop_runs(s)

    assert stopped.dropped == 1
    assert await queued.wait() is None
    closing = store.entries(s, types=[T.ACK])[-1]
    assert closing.payload["dropped"] == [queued.trigger.id]
    assert len(model_server.chat_requests()) == 1  # the follow-up never called the model
    assert (await (await server.send(s, "third")).wait()).content == "fresh start"


async def test_a_message_written_while_the_stop_lands_gets_its_run(make, store, model_server):
    model_server.script(slow(), Reply("answered"))
    server = make("w")
    s = server.current_session("w")
    await server.send(s, "first")
    await arrived(model_server, 1)

    assert len(server.request_stop(s)) == 1
    handle = server.post(s, "Message", "right after the stop")  # the cancel has not landed yet

    reply = await handle.wait()
    assert reply is not None and reply.content == "answered"
    assert [e.payload.get("status") for e in store.entries(s, types=[T.ACK])] == [None, "cancelled", None]


async def test_stopping_a_parent_stops_its_spawned_child(make, store, model_server):
    model_server.script(Reply(tool_calls=[Call("spawn_agent", {"agent": "child", "task": "dig"})]),
                        model="parent-model")
    model_server.script(slow(), model="child-model")
    server = make("parent", "child", tools=["spawn_agent"])
    s = server.current_session("parent")
    await server.send(s, "delegate")
    await arrived(model_server, 2)
    [child] = [x.id for x in store.sessions() if x.parent_id == s]

    stopped = await server.stop_runs(s)

    assert [(x.session_id, x.via) for x in stopped] == [(s, None), (child, s)]
    assert [r[0] for r in store.execute("SELECT status FROM runs ORDER BY run_id")] == ["cancelled"] * 2
    assert server.running_sessions() == []


async def test_stopping_a_child_alone_gives_the_parent_a_tool_error(make, store, model_server):
    model_server.script(Reply(tool_calls=[Call("spawn_agent", {"agent": "child", "task": "dig"})]),
                        Reply("the child was stopped, so I stop too"), model="parent-model")
    model_server.script(slow(), model="child-model")
    server = make("parent", "child", tools=["spawn_agent"])
    s = server.current_session("parent")
    handle = await server.send(s, "delegate")
    await arrived(model_server, 2)
    [child] = [x.id for x in store.sessions() if x.parent_id == s]

    [stopped] = await server.stop_runs(child)

    assert stopped.session_id == child
    reply = await handle.wait()
    assert reply.content == "the child was stopped, so I stop too"
    result = store.entries(s, types=[T.TOOL_RESULT])[0]
    assert result.payload["is_error"] and "was stopped by user" in result.payload["output"]


async def test_a_tool_the_stop_cancels_records_how_long_it_ran(make, store, model_server):
    """Not "error · 0.0 ms": the ToolResult's duration is the time the tool ran until the stop."""
    model_server.script(Reply(tool_calls=[Call("crunch", {"n": 7})]), Reply("done"))
    server = make("calc", tools=["crunch"])
    s = server.current_session("calc")
    tool_started["crunch"] = asyncio.Event()
    await server.send(s, "crunch 7")
    await asyncio.wait_for(tool_started["crunch"].wait(), 30)
    ran_ms = (time.perf_counter() - tool_started_at["crunch"]) * 1000  # at least this long
    [stopped] = await server.stop_runs(s)
    result = store.entries(s, types=[T.TOOL_RESULT])[0]
    assert result.payload["duration_ms"] >= ran_ms > 0
    [(row_ms,)] = store.execute("SELECT duration_ms FROM tool_calls WHERE run_id = ?", [stopped.run_id])
    assert row_ms >= ran_ms
