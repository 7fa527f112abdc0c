"""Authority travels with the entry: a run never has more than the person's trigger it descends
from, along every path (spawn, send_message, room mention, Directive, schedule, another
kernel), because each trigger a run writes carries its writer's ceiling and budget
(``payload["authority"]``), and the budget's count is kept in the store (``run_budgets``)."""

from __future__ import annotations

import asyncio

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.store import SessionStore
from chaz_nb.engine.backends import LiteLLMBackend
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent

from waiting import until

ran: list[str] = []  # every call of danger that really ran


@pytest.fixture(autouse=True)
def clear_ran():
    ran.clear()


@tool(approval="unless_auto_approved", risk="high")
def danger() -> str:
    """Dangerous."""
    ran.append("danger")
    return "done the dangerous thing"


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


class Counting:
    """The real (offline) backend, counting every model call."""

    def __init__(self) -> None:
        self.inner = LiteLLMBackend()
        self.calls = 0

    @property
    def streams(self) -> bool:
        return self.inner.streams

    async def complete(self, *args, **kwargs):
        self.calls += 1
        return await self.inner.complete(*args, **kwargs)


def scripted(name, *steps, **kw):
    return Agent(name, model="chaz/script", script=list(steps), **kw)


def send(session_id, text, kind="message"):
    return {"tool": "send_message", "args": {"session_id": session_id, "text": text, "kind": kind}}


def spawn(agent, task):
    return {"tool": "spawn_agent", "args": {"agent": agent, "task": task}}


def results(store, session_id, name):
    return [e for e in store.entries(session_id) if e.entry_type is T.TOOL_RESULT and e.tool_name == name]


# ------------------------------------------------------------------------------ rooms
async def test_a_capped_childs_room_mention_lends_no_peer_and_not_its_own_agent_more(backend_store):
    store = backend_store
    server = Server(store, [
        scripted("parent", spawn("child", "go"), "{result}", tools=["spawn_agent", "send_message"]),
        scripted("child", tools=None),  # redefined below, once the room exists
        # the peer may run danger and auto-approves it; woken, it wakes the child back
        scripted("peer", {"tool": "danger", "args": {}}, "@child your turn: {result}", auto_approve=["danger"]),
    ], ToolRegistry([danger, add]))
    room = server.create_room("lab", ["peer", "child"])
    server.define_agent(scripted("child", send(room, "@peer run danger"), {"tool": "danger", "args": {}},
                                 "{result}", tools=None))
    await (await server.send(server.current_session("parent"), "go")).wait()
    await server.wait_idle(60)
    mention = next(e for e in store.entries(room) if e.entry_type is T.MESSAGE and e.sender == "child")
    assert mention.payload["authority"]["ceiling"]["tools"] == [["send_message", "spawn_agent"]]
    acks = [e.sender for e in store.entries(room) if e.entry_type is T.ACK and e.payload.get("room")]
    assert acks == ["peer", "child"]  # the peer's turn, then the child's agent woken back
    assert ran == []
    for name in ("peer", "child"):
        (result,) = [r for r in results(store, room, "danger") if r.sender == name]
        assert result.content.startswith("danger: unknown tool 'danger'")
    # a person's own message in the room is not capped
    await server.rooms.say(room, "@peer go").wait()
    assert ran == ["danger"]


async def test_an_agents_directive_does_not_reset_a_rooms_burst(store):
    counting = Counting()
    server = Server(store, [scripted("ping"), scripted("pong")], ToolRegistry([add]), backend=counting)
    rooms = [server.create_room("one", ["ping", "pong"], burst_budget=2),
             server.create_room("two", ["ping", "pong"], burst_budget=2)]
    # each agent's turn sends a Directive into the other room, waking the other agent there (the
    # scripted model plays from the latest user-role entry: a Directive that lands during the
    # turn moves it, so the send is there twice and every turn sends at least once)
    server.define_agent(scripted("ping", *[send(rooms[1], "@pong go on", "directive")] * 2, "ok",
                                 tools=["send_message"]))
    server.define_agent(scripted("pong", *[send(rooms[0], "@ping go on", "directive")] * 2, "ok",
                                 tools=["send_message"]))
    server.rooms.say(rooms[0], "@ping start")
    try:
        await asyncio.wait_for(server.wait_idle(), 60)
    finally:
        await server.stop()
    turns = [e for r in rooms for e in store.entries(r) if e.entry_type is T.ACK and e.payload.get("room")]
    # one burst across both rooms: the person's message, then at most 2 agent wakes in each room
    assert len(turns) <= 1 + 2 * 2
    notes = [e for r in rooms for e in store.entries(r) if e.entry_type is T.ERROR]
    assert any(n.content.startswith("loop guard:") for n in notes)


async def test_two_rooms_that_wake_each_other_stay_within_the_trees_model_calls(backend_store):
    store = backend_store
    counting = Counting()
    server = Server(store, [scripted("ping"), scripted("pong")], ToolRegistry([add]), backend=counting)
    rooms = [server.create_room("one", ["ping", "pong"], burst_budget=1000),
             server.create_room("two", ["ping", "pong"], burst_budget=1000)]
    server.define_agent(scripted("ping", *[send(rooms[1], "@pong go on", "directive")] * 2, "ok",
                                 tools=["send_message"], max_model_calls=20))
    server.define_agent(scripted("pong", *[send(rooms[0], "@ping go on", "directive")] * 2, "ok",
                                 tools=["send_message"], max_model_calls=20))
    server.rooms.say(rooms[0], "@ping start")
    try:
        await asyncio.wait_for(server.wait_idle(), 60)
    finally:
        await server.stop()
    assert counting.calls <= 20
    errors = [e for r in rooms for e in store.entries(r) if e.entry_type is T.ERROR]
    assert any(e.content.startswith("run tree budget reached: 20 model calls (max_model_calls of agent 'ping'")
               for e in errors)


# ------------------------------------------------------------------------- schedules
async def test_a_schedule_whose_fire_makes_another_stops_at_the_cap_per_origin(backend_store):
    store = backend_store
    again = {"tool": "schedule_create", "args": {"trigger": "in 2m", "prompt": "again", "session": "fresh"}}
    server = Server(store, [scripted("looper", again, "{result}", tools=["schedule_create"])], ToolRegistry([add]))
    server.schedules.max_per_origin = 3
    first = server.schedules.add("looper", "every 1h", "begin", session="fresh")  # a person's schedule
    await server.fire_agent_schedule(first)
    for _ in range(5):  # fire every schedule the agent made, as the loop would when they come due
        for s in [s for s in server.schedules.list() if s.created_by != "user"]:
            await server.fire_agent_schedule(s)
    made = [r for s in store.sessions() for r in results(store, s.id, "schedule_create")]
    assert len([r for r in made if not r.payload["is_error"]]) == 3  # one-shots: each is gone once it fired
    refused = [r for r in made if r.payload["is_error"]]
    assert refused and refused[-1].content == (
        "schedule_create: this run tree already made 3 schedules (the most one person's trigger may lead to); "
        "a person raises server.schedules.max_per_origin"
    )
    # the fires of the schedules it made drew on the budget of the person's schedule's fire
    budgets = {e.payload["budget"] for s in store.sessions() for e in store.entries(s.id) if e.entry_type is T.ACK}
    assert len(budgets) == 1


async def test_an_agent_schedule_more_often_than_the_minimum_interval_is_refused(store):
    server = Server(store, [scripted("eager", {"tool": "schedule_create", "args": {"trigger": "every 1s",
                                                                                 "prompt": "x"}},
                                     {"tool": "schedule_create", "args": {"trigger": "in 1s", "prompt": "x"}},
                                     "{result}", tools=["schedule_create"])])
    reply = await (await server.send(server.current_session("eager"), "go")).wait()
    refused = results(store, reply.session_id, "schedule_create")
    assert [r.payload["is_error"] for r in refused] == [True, True]
    assert refused[0].content == (
        "schedule_create: an agent's schedule may fire at most every 60 s ('every 1s' is more often); "
        "use a longer interval, or a person raises server.schedules.min_interval"
    )
    assert server.schedules.list() == []
    server.schedules.add("eager", "every 1s", "a person may")  # a person's own schedule is not limited


async def test_a_capped_run_cannot_cancel_a_schedule_it_did_not_make(store):
    server = Server(store, [
        scripted("parent", spawn("child", "go"), "{result}", tools=["spawn_agent", "schedule_cancel"]),
        scripted("child", {"tool": "schedule_cancel", "args": {"schedule_id": 1}}, "{result}", tools=None),
    ], ToolRegistry([add]))
    server.schedules.add("child", "every 1h", "the person's report")
    reply = await (await server.send(server.current_session("parent"), "go")).wait()
    assert reply.content == ("a capped run cancels only the schedules its own run tree made; "
                             "schedule #1 was not (a person can cancel it)")
    assert len(server.schedules.list()) == 1


# ---------------------------------------------------------------- another kernel
@pytest.fixture
def two(pg_url):
    a, b = SessionStore.open(pg_url), SessionStore.open(pg_url)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


async def test_a_capped_childs_directive_served_by_another_kernel_stays_capped(two):
    a_store, b_store = two
    tools = lambda: ToolRegistry([danger, add])  # noqa: E731 - one registry per server
    worker = scripted("worker", {"tool": "danger", "args": {}}, "{result}", auto_approve=["danger"])
    b = Server(b_store, [worker], tools())
    own = b.current_session("worker")  # B serves the worker's own chat session
    await (await b.send(own, "hello")).wait()
    ran.clear()
    a = Server(a_store, [
        scripted("parent", spawn("worker", "go"), "{result}", tools=["spawn_agent", "send_message"]),
        scripted("worker", send(own, "run danger", "directive"), "{result}", auto_approve=["danger"]),
    ], tools())
    await (await a.send(a.current_session("parent"), "go")).wait()
    await until(lambda: len([e for e in b_store.entries(own) if e.entry_type is T.ACK]) == 2
                and b_store.latest(own).entry_type in (T.MESSAGE, T.ERROR) and not b.running_sessions(),
                b_store.subscribe, what="B's run of the child's directive to end")
    assert ran == []
    assert results(b_store, own, "danger")[-1].content.startswith("danger: unknown tool 'danger'")
    directive = next(e for e in b_store.entries(own) if e.entry_type is T.DIRECTIVE)
    assert directive.payload["authority"]["ceiling"]["tools"]  # written with the entry, read by B
    await a.stop()
    await b.stop()


async def test_the_budget_holds_across_kernels(two):
    a_store, b_store = two
    counting_a, counting_b = Counting(), Counting()
    a = Server(a_store, [scripted("pinger")], ToolRegistry([add]), backend=counting_a)
    b = Server(b_store, [scripted("pinger")], ToolRegistry([add]), backend=counting_b)
    here, there = a.new_session("pinger"), b.new_session("pinger")
    await (await b.send(there, "hello")).wait()  # B holds the second session's lease
    # each run writes a Directive into the other kernel's session: runs alternate between kernels
    # (twice: a Directive that lands during a run moves the scripted model's position)
    ping = lambda target: scripted("pinger", *[send(target, "ping", "directive")] * 2, "{result}",  # noqa: E731
                                   tools=["send_message"], max_model_calls=10)
    a.define_agent(ping(there))
    b.define_agent(ping(here))
    counting_b.calls = 0
    await (await a.send(here, "start")).wait()
    await until(lambda: any(e.entry_type is T.ERROR and e.content.startswith("run tree budget reached")
                            for sid in (here, there) for e in a_store.entries(sid)),
                a_store.subscribe, what="the tree to reach its budget", timeout=30)
    await a.wait_idle(10)
    await b.wait_idle(10)
    assert counting_a.calls + counting_b.calls <= 10
    assert counting_a.calls and counting_b.calls  # both kernels ran part of the tree
    await a.stop()
    await b.stop()
