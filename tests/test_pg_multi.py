"""A person acts from any kernel on a shared store: two Servers, each on its own connection to
one PostgreSQL database, stand for two kernels (the real-kernel forms are in
test_pg_kernels.py). Entries reach the other one only through the store's LISTEN/NOTIFY
listener, as between processes."""

from __future__ import annotations

import asyncio
import json

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.store import SessionStore
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.errors import ServerError, StoreError
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent
from chaz_nb.server.remote import RemoteRun

from waiting import until

ran: list[str] = []


@tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy to a target."""
    ran.append(target)
    return f"deployed {target}"


async def lease_freed(store, sid: int, deadline: float = 30.0) -> None:
    """PostgreSQL sends no event when a backend that held an advisory lock exits, so this polls
    ``pg_locks`` (through ``held_elsewhere``) until the lock is gone, within a bounded deadline."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while store.held_elsewhere(sid):
        assert loop.time() < end, f"the lease on session {sid} was not freed in {deadline:g} s"
        await asyncio.sleep(0.05)


def ops() -> Agent:
    return Agent("ops", model="chaz/script",
                 script=[{"tool": "deploy", "args": {"target": "prod"}}, "result: {result}"])


@pytest.fixture
def two(pg_url):
    ran.clear()
    a, b = SessionStore.open(pg_url), SessionStore.open(pg_url)
    servers = [Server(a, [ops(), Agent("assistant")], ToolRegistry([deploy])),
               Server(b, [ops(), Agent("assistant")], ToolRegistry([deploy]))]
    try:
        yield servers
    finally:
        a.close()
        b.close()


async def test_pending_lists_every_kernels_requests_and_an_approval_in_b_resumes_the_run_in_a(two):
    a, b = two
    sid = a.current_session("ops")
    handle = await a.send(sid, "ship it")  # A serves the session: it holds the lease
    # pending reads the whole table; a status, only the entries B's listener has handed B's views
    # (serving.py), which may come a moment later: the wait is for both
    await until(lambda: b.pending_approvals() and b.session_status(sid) == "parked", b.store.subscribe,
                what="A's request and A's parked run, seen from B")
    [req] = b.pending_approvals()
    assert (req["session_id"], req["tool_name"]) == (sid, "deploy")
    with SessionStore.open(a.store.url) as store:  # a kernel started after the request lists it too
        assert [r["request_id"] for r in Server(store, [ops()]).pending_approvals()] == [req["request_id"]]
    ok, message = b.decide("last", "approve")
    assert ok, message
    reply = await handle.wait()  # A's parked run resumed from B's decision
    assert reply.content == "result: deployed prod" and ran == ["prod"]
    assert a.pending_approvals() == b.pending_approvals() == []
    del b.agents["ops"]  # a kernel that does not define the agent: its reply is no trigger
    await until(lambda: b.session_status(sid) == "idle", b.store.subscribe, what="A's run closed, seen from B")
    errors = [e for e in a.store.entries(sid) if e.entry_type is T.ERROR]
    assert errors == []  # nobody answered the person's decision with an Error
    assert len([e for e in a.store.entries(sid) if e.entry_type is T.ACK]) == 1  # one run, A's


async def test_a_bad_decision_gets_one_error_from_the_serving_kernel_only(two):
    a, b = two
    sid = a.current_session("ops")
    handle = await a.send(sid, "ship it")
    [req] = await until(lambda: b.pending_approvals(), b.store.subscribe, what="the request in B")
    b.store.append(sid, T.APPROVAL_DECISION, "ops", "approve", payload={"request_id": req["request_id"],
                                                                     "decision": "approve"})
    await until(lambda: [e for e in b.store.entries(sid) if e.entry_type is T.ERROR], b.store.subscribe,
                what="the Error on the agent's decision")
    assert [r["request_id"] for r in b.pending_approvals()] == [req["request_id"]]  # still open
    assert b.decide(req["request_id"], "deny")[0]
    await handle.wait()
    errors = [e for e in a.store.entries(sid) if e.entry_type is T.ERROR]
    assert len(errors) == 1 and "only a person can decide" in errors[0].content


async def test_a_message_written_where_the_session_is_not_served_resolves_from_the_serving_kernels_reply(two):
    a, b = two
    sid = a.current_session("assistant")
    await (await a.send(sid, "one")).wait()
    assert b.use_session(sid).agent == "assistant"
    assert b.current_session("assistant") == sid
    handle = await b.send(sid, "two")  # B does not serve it: A answers
    assert isinstance(handle, RemoteRun)
    reply = await handle.wait()
    assert (reply.sender, reply.content) == ("assistant", "echo: two")
    handle = b.post(sid, T.MESSAGE, "three")
    assert isinstance(handle, RemoteRun)
    assert (await handle.wait()).content == "echo: three"
    replies = [e.content for e in a.store.entries(sid, types=[T.MESSAGE]) if e.sender == "assistant"]
    assert replies == ["echo: one", "echo: two", "echo: three"]  # one reply each, all A's
    assert not b.is_busy(sid) and b.running_sessions() == []


async def test_a_remote_handle_resolves_with_an_error_and_with_a_silent_run(two):
    a, b = two
    sid = a.current_session("assistant")
    await (await a.send(sid, "one")).wait()
    a.define_agent(Agent("assistant", model="chaz/script", script=[""]))  # A's agent is silent now
    assert await (await b.send(sid, "two")).wait() is None
    del a.agents["assistant"]  # A serves the session but no longer defines the agent
    error = await (await b.send(sid, "three")).wait()
    assert error.entry_type is T.ERROR and "unknown agent" in error.content


def test_use_session_errors(two):
    a, b = two
    with pytest.raises(StoreError, match="no session 999"):
        b.use_session(999)
    room = a.create_room("team", ["assistant", "ops"])
    with pytest.raises(ServerError, match="is a room"):
        b.use_session(room)


async def test_taking_a_session_over_closes_the_run_and_the_request_its_holder_left_open(two, pg_url):
    a, b = two
    sid = a.current_session("ops")
    await a.send(sid, "ship it")
    await until(lambda: b.pending_approvals(), b.store.subscribe, what="A's request")
    await a.stop_runs(sid)  # (stopping closes the run; reopen one by hand to stand for a crash)
    ack = a.store.append(sid, T.ACK, "ops", "ops is working", payload={"trigger_id": 1})
    a.store.append(sid, T.APPROVAL_REQUEST, "ops", "deploy?", payload={"request_id": "crashed", "run_id": ack.id})
    await until(lambda: any(r["request_id"] == "crashed" for r in b.pending_approvals()), b.store.subscribe,
                what="the open request in B")
    a.store.close()  # A's connections close: its lease frees (a SIGKILL does the same)
    await lease_freed(b.store, sid)
    b.define_agent(Agent("ops"))  # B's ops answers without tools
    handle = await b.send(sid, "again")
    assert not isinstance(handle, RemoteRun)  # B took the lease
    assert (await handle.wait()).content == "echo: again"
    entries = b.store.entries(sid)
    closing = [e for e in entries if e.payload.get("run_id") == ack.id and e.id != ack.id
               and e.entry_type is not T.APPROVAL_REQUEST]
    assert [e.entry_type for e in closing] == [T.APPROVAL_DECISION, T.ERROR]
    assert closing[0].payload["decision"] == "timed_out" and closing[1].content == "interrupted: kernel stopped"
    assert b.pending_approvals() == []


async def test_only_a_kernel_that_defines_the_sessions_agent_takes_it(pg_url):
    a, b, writer = SessionStore.open(pg_url), SessionStore.open(pg_url), SessionStore.open(pg_url)
    try:
        defines = Server(a, [ops()], ToolRegistry([deploy]))
        person = Server(b, [Agent("assistant")])  # this kernel does not define ops
        sid = writer.create_session("ops")
        writer.append(sid, T.MESSAGE, "user", "ship it")  # written by a third process
        await until(lambda: defines.pending_approvals(), a.subscribe, what="the run in the defining kernel")
        # B sees the request once its listener has brought it (B's status reads what it was handed)
        await until(lambda: person.session_status(sid) == "parked", b.subscribe, what="the request in B")
        assert a.holds(sid) and not b.holds(sid)
        assert [e.content for e in b.entries(sid) if e.entry_type is T.ERROR] == []  # no "unknown agent"
        with pytest.raises(ServerError):
            person.current_session("ops")  # nothing to choose here without %chaz use
        person.use_session(sid)
        assert person.decide("last", "deny")[0]
        await until(lambda: [e for e in a.entries(sid) if e.entry_type is T.MESSAGE and e.sender == "ops"],
                    a.subscribe, what="the reply after the denial")
    finally:
        for s in (a, b, writer):
            s.close()


async def test_a_parked_run_whose_server_holds_no_lease_still_resumes_on_a_decision_from_elsewhere(two):
    a, b = two  # (rooms run turns without a lease; here the lease is given up while the run waits)
    sid = a.current_session("ops")
    handle = await a.send(sid, "ship it")
    [req] = await until(lambda: b.pending_approvals(), b.store.subscribe, what="the request in B")
    a.store.release(sid)
    assert not a.store.holds(sid)
    assert b.decide(req["request_id"], "approve")[0]
    reply = await asyncio.wait_for(handle.wait(), 30)  # (the bound only ends a failing test)
    assert reply.content == "result: deployed prod" and ran == ["prod"]


@pytest.fixture
def held(two):
    """``two``, with A serving a session whose agent's tool holds its run until ``release``."""
    a, b = two
    release = asyncio.Event()

    @tool
    async def hold() -> str:
        """Wait until the test releases the run."""
        await release.wait()
        return "released"

    a.tools.register(hold)
    a.define_agent(Agent("holder", model="chaz/script", tools=["hold"],
                         script=[{"tool": "hold", "args": {}}, "done: {result}"]))
    return a, b, release


async def wait_remotely(held, poll_interval: float):
    """A's run holds; B writes to the session (A serves it) and starts the wait a cell makes on
    a run served elsewhere (magics/turns.py): woken by the session's entries, else polled."""
    from chaz_nb.notebook.kernel_loop import watch_run
    from chaz_nb.server.remote import session_writes

    a, b, _release = held
    sid = a.current_session("holder")
    first = await a.send(sid, "hold on")  # A serves the session: it holds the lease
    await until(lambda: b.session_status(sid) == "running", b.store.subscribe, what="A's run, seen from B")
    handle = b.post(sid, T.MESSAGE, "are you there?")
    assert isinstance(handle, RemoteRun)
    await until(lambda: a.store.dispatched_id >= handle.trigger.id, a.store.subscribe,
                what="B's message, queued in A")
    reads: list[str] = []
    looked = asyncio.Event()

    def status() -> str:
        reads.append(status := b.session_status(sid))
        looked.set()
        return status

    watch = asyncio.ensure_future(watch_run(
        lambda: status() == "idle", lambda: status() == "parked",
        wake=session_writes(b.store, sid), poll_interval=poll_interval,
    ))
    await looked.wait()  # the wait has read the status once: it is running
    assert set(reads) == {"running"}
    return sid, first, watch, reads


async def test_a_wait_on_a_run_served_elsewhere_is_woken_by_the_listener_not_a_poll(held):
    a, b, release = held
    hour = 3600.0  # no poll ends this wait: only the entries B's listener hands out can
    sid, first, watch, reads = await wait_remotely(held, poll_interval=hour)
    release.set()  # A answers "hold on", then B's message, in a second run
    outcome = await asyncio.wait_for(watch, 30)  # (the bound only ends a failing test)
    assert outcome.state == "done" and (await first.wait()).content == "done: released"
    replies = [e for e in b.store.entries(sid, types=[T.MESSAGE]) if e.sender == "holder"]
    assert len(replies) == 2  # "hold on" and B's message (a second run) are both answered
    entries = len(b.store.entries(sid))
    assert reads[-1] == "idle" and len(reads) <= 2 * entries  # one look (two reads) an entry at most


async def test_a_wait_on_a_run_served_elsewhere_ends_when_its_lease_frees_with_no_entry(held):
    from chaz_nb.server.remote import REMOTE_POLL_INTERVAL

    a, b, release = held
    sid, first, watch, reads = await wait_remotely(held, poll_interval=REMOTE_POLL_INTERVAL)
    try:
        a.store.release(sid)  # as a dead kernel's lease frees: no entry says so, the slow poll sees it
        outcome = await asyncio.wait_for(watch, 30)
        assert outcome.state == "done" and reads[-1] == "idle" and not first.done()
    finally:
        release.set()
        await first.wait()


async def held_run(held):
    """A's run of ``holder`` waits in its tool; B has seen it running (through its listener)."""
    a, b, _release = held
    sid = a.current_session("holder")
    handle = await a.send(sid, "hold on")  # A serves the session: it holds the lease
    await until(lambda: b.session_status(sid) == "running" and b.store.entries(sid, types=[T.TOOL_CALL]),
                b.store.subscribe, what="A's run in its tool, seen from B")
    return sid, handle


def cancelled_acks(store, sid: int) -> list:
    return [e for e in store.entries(sid, types=[T.ACK]) if e.payload.get("status") == "cancelled"]


async def test_a_stop_from_another_kernel_stops_the_run_where_it_is_served(held):
    a, b, release = held
    sid, handle = await held_run(held)
    try:
        stopped = await b.stop_runs(sid, by="bea")  # B does not serve the session: A stops its run
    finally:
        release.set()  # (a failing stop must not leave A's run waiting)
    [run] = stopped
    assert (run.session_id, run.agent, run.was, run.elsewhere) == (sid, "holder", "running", True)
    assert run.describe() == f"stopped session {sid} (holder, run_id {run.run_id}, was running, in another kernel)"
    assert await handle.wait() is None and not a.is_busy(sid)  # A's run ended on the stop
    [ack] = cancelled_acks(b.store, sid)  # B's subscribers had it before B's stop returned
    assert ack.payload["run_id"] == run.run_id and ack.sender == "holder"
    assert (ack.content, ack.payload["stopped_by"]) == ("holder was stopped by bea", "bea")
    assert b.session_status(sid) == "idle"
    assert [e.content for e in a.store.entries(sid, types=[T.ERROR])] == []  # no second closing entry


async def test_a_stop_button_in_another_kernel_asks_the_serving_kernel_without_waiting(held):
    a, b, release = held
    sid, handle = await held_run(held)
    try:
        [run] = b.request_stop(sid, by="user")  # what the Stop button and the sidebar call
        assert (run.session_id, run.elsewhere, run.was) == (sid, True, "running")
        assert await asyncio.wait_for(handle.wait(), 30) is None  # (the bound only ends a failing test)
    finally:
        release.set()
    [ack] = await until(lambda: cancelled_acks(b.store, sid), b.store.subscribe, what="A's cancelled Ack in B")
    assert ack.payload["stopped_by"] == "user" and ack.payload["run_id"] == run.run_id


async def test_garbage_on_the_stop_channel_is_ignored_and_the_listener_goes_on(held):
    from chaz_nb.server.stop_relay import STOP_CHANNEL

    a, b, release = held
    sid, handle = await held_run(held)
    garbage = ["", "not json", "[]", "null", "17", '{"stop": true, "by": "x", "id": "g1"}',
               f'{{"stop": {sid}, "by": "x"}}', f'{{"stop": {sid}, "by": 5, "id": "g2"}}',
               f'{{"stop": {sid}, "by": "", "id": "g3"}}', f'{{"stop": {sid}, "by": "x", "id": 4}}',
               f'{{"stop": {sid}, "by": "x", "id": "{"i" * 200}"}}', f'{{"stop": -{sid}, "by": "x", "id": "g5"}}',
               '{"stop": 1e999, "by": "x", "id": "g6"}', f'{{"stop": "{sid}", "by": "x", "id": "g7"}}',
               '{"stopped": "g8", "runs": "all"}', '{"stopped": "g9", "runs": [{"session_id": "1"}]}',
               '{"stopped": 5, "runs": []}', '{"id": "g10"}', '{"stop": 99999, "by": "x", "id": "g11"}',
               "[" * 5000, '{"stop": ' * 800]
    try:
        for relay in (a._engine.relay, b._engine.relay):  # straight to the handler: it never raises
            for payload in garbage:
                relay._heard(payload)
        for payload in garbage:  # and over the channel, through both kernels' listeners
            b.store.notify(STOP_CHANNEL, payload)
        assert a.session_status(sid) == "running" and not handle.done()
        # the listeners hear notices in order: a stop sent now is handled after all of that
        [run] = await b.stop_runs(sid, by="bea")
    finally:
        release.set()
    assert await handle.wait() is None
    [ack] = cancelled_acks(a.store, sid)  # stopped once, by the real request
    assert ack.payload["stopped_by"] == "bea" and run.run_id == ack.payload["run_id"]
    assert not a.store._listener.done() and not b.store._listener.done()


def test_a_stop_request_is_read_strictly():
    from chaz_nb.server.stop_relay import MAX_BY, parse_runs, plain_label

    assert plain_label("bea\n\x07 (kernel B)") == "bea (kernel B)"
    assert plain_label("x" * 500) == "x" * MAX_BY
    assert plain_label(" \n") is None and plain_label(7) is None
    run = {"session_id": 3, "agent": "ops", "run_id": 17, "was": "parked", "via": None, "dropped": 1}
    [parsed] = parse_runs([run])
    assert (parsed.session_id, parsed.run_id, parsed.was, parsed.dropped) == (3, 17, "parked", 1)
    assert parsed.elsewhere
    for bad in ({"run_id": "17"}, {"was": "done"}, {"session_id": True}, {"dropped": -1}, {"via": 1.5},
                {"agent": ""}):
        assert parse_runs([{**run, **bad}]) is None, bad
    assert parse_runs({"session_id": 3}) is None and parse_runs([run] * 41) is None


async def test_a_stop_of_a_run_nobody_serves_says_how_it_gets_closed(two):
    a, b = two
    sid = a.store.create_session("ops")
    assert await b.stop_runs(sid) == [] and b.request_stop(sid) == []  # nothing open, nobody serves it
    ack = a.store.append(sid, T.ACK, "ops", "ops is working", payload={"trigger_id": 1})  # a dead kernel's run
    assert not a.store.holds(sid) and not b.store.holds(sid)
    message = (f"no kernel serves session {sid}: the kernel that ran it is gone and left its run open; "
               "a message to it from a kernel that defines ops closes that run and answers")
    with pytest.raises(ServerError) as stop:
        await b.stop_runs(sid)
    assert str(stop.value) == message
    with pytest.raises(ServerError, match="no kernel serves session"):
        b.request_stop(sid)
    a.define_agent(Agent("ops"))  # what the message says: A's ops answers without tools
    assert (await (await a.send(sid, "again")).wait()).content == "echo: again"
    closing = [e for e in a.store.entries(sid) if e.payload.get("run_id") == ack.id and e.id != ack.id]
    assert [e.content for e in closing] == ["interrupted: kernel stopped"]
    assert await b.stop_runs(sid) == []  # A serves it now, and it is idle


async def test_a_stop_the_serving_kernel_does_not_answer_is_a_one_line_error(held, monkeypatch):
    import chaz_nb.server.run_stops as run_stops

    a, b, release = held
    sid, handle = await held_run(held)
    a._engine.relay.close()  # A hears no request, as a kernel whose loop a long cell holds
    monkeypatch.setattr(run_stops, "REMOTE_STOP_TIMEOUT", 0.2)  # (the bound under test, not a wait for A)
    try:
        with pytest.raises(ServerError) as stop:
            await b.stop_runs(sid)
        assert str(stop.value) == (f"asked the kernel that serves session {sid} to stop its run; no answer in "
                                   f"0.2 s (is a cell running there?); %chaz log {sid} shows when it ends")
        assert not handle.done() and a.session_status(sid) == "running"
    finally:
        release.set()
    assert (await handle.wait()).content == "done: released"


async def test_a_lost_answer_to_a_stop_is_made_up_from_the_log(held, monkeypatch):
    a, b, release = held
    sid, handle = await held_run(held)
    relay = b._engine.relay

    async def answer_lost(session_id: int, by: str, timeout: float) -> list | None:
        relay.send(session_id, by)  # A stops the run; its answer is lost (B's listener reconnected)
        await until(lambda: cancelled_acks(b.store, sid), b.store.subscribe, what="A's cancelled Ack in B")
        return None  # what ask() returns when no answer came in time

    monkeypatch.setattr(relay, "ask", answer_lost)
    try:
        [run] = await b.stop_runs(sid)
    finally:
        release.set()
    [ack] = cancelled_acks(b.store, sid)
    assert (run.session_id, run.run_id, run.elsewhere) == (sid, ack.payload["run_id"], True)
    assert await handle.wait() is None


async def test_a_run_parked_in_one_kernel_is_stopped_from_another_and_its_request_closes(two):
    a, b = two
    sid = a.current_session("ops")
    handle = await a.send(sid, "ship it")
    [req] = await until(lambda: b.pending_approvals(), b.store.subscribe, what="A's request in B")
    [run] = await b.stop_runs(sid, by="bea")
    assert (run.session_id, run.agent, run.was, run.elsewhere) == (sid, "ops", "parked", True)
    assert await handle.wait() is None and ran == []  # the tool never ran
    assert a.pending_approvals() == b.pending_approvals() == []
    [decision] = [e for e in b.store.entries(sid, types=[T.APPROVAL_DECISION])]
    assert (decision.payload["request_id"], decision.payload["decision"]) == (req["request_id"], "timed_out")
    [ack] = cancelled_acks(b.store, sid)
    assert ack.payload["stopped_by"] == "bea" and b.session_status(sid) == "idle"


async def test_an_edit_decided_in_b_runs_in_a_with_the_edited_arguments_and_a_bad_one_stays_open(two):
    a, b = two
    sid = a.current_session("ops")
    handle = await a.send(sid, "ship it")
    await until(lambda: b.pending_approvals(), b.store.subscribe, what="A's request, seen from B")
    [req] = b.pending_approvals()
    # an edit written in B that does not fit the tool (as another bridge could): A refuses it
    bad = {"request_id": req["request_id"], "decision": "approve", "decided_by": "user", "edited": True,
           "arguments": {"target": 7}}
    b.store.append(sid, T.APPROVAL_DECISION, "user", "approve", payload=bad)
    await until(lambda: any(e.entry_type is T.ERROR for e in b.store.entries(sid)), b.store.subscribe,
                what="A's Error on the bad edit, seen from B")
    assert [r["request_id"] for r in b.pending_approvals()] == [req["request_id"]]
    ok, message = b.decide("last", "approve", arguments={"target": "staging"})
    assert ok, message
    reply = await handle.wait()
    assert reply.content == "result: deployed staging" and ran == ["staging"]
    [row] = a.store.execute("SELECT decision, edited, edited_arguments FROM approvals")
    assert row[:2] == ("approve", True) and json.loads(row[2]) == {"target": "staging"}


@tool(approval="unless_auto_approved")
def look(target: str) -> str:
    """Look at a target."""
    ran.append(f"look {target}")
    return f"saw {target}"


async def test_approve_all_from_another_kernel_is_granted_to_the_agent_whose_call_it_was(pg_url):
    ran.clear()

    def member(name: str) -> Agent:
        return Agent(name, model="chaz/script", script=[{"tool": "look", "args": {"target": name}}, "{result}"])

    a, b = SessionStore.open(pg_url), SessionStore.open(pg_url)
    try:
        sa = Server(a, [member("alice"), member("bob")], ToolRegistry([look]))
        sb = Server(b, [member("alice"), member("bob")], ToolRegistry([look]))
        room = sa.create_room("lab", ["alice", "bob"])
        handle = await sa.send(room, "@alice look")  # A serves the room
        [req] = await until(lambda: sb.pending_approvals(), b.subscribe, what="alice's request, seen from B")
        assert sb.decide(req["request_id"], "approve_all")[0]
        assert (await handle.wait()).content == "saw alice"
        # both kernels book the grant for alice only
        assert sa.approvals.session_grant(room, "alice", "look") and sb.approvals.session_grant(room, "alice", "look")
        assert not sa.approvals.session_grant(room, "bob", "look")
        assert not sb.approvals.session_grant(room, "bob", "look")
        handle = await sa.send(room, "@bob look")
        [req] = await until(lambda: sb.pending_approvals(), b.subscribe, what="bob's request, seen from B")
        assert req["agent"] == "bob" and ran == ["look alice"]
        assert sb.decide(req["request_id"], "deny")[0]
        await handle.wait()
    finally:
        a.close()
        b.close()


def test_a_trigger_written_before_the_ack_of_a_run_that_does_not_answer_it_keeps_the_session_running(two):
    """B's status read "idle" between A's first reply and A's next run, when B's message had
    landed before the first run's Ack committed (the Ack commits once the model request has
    left): "a trigger since the last Ack" missed it, and a cell's wait on the session in B
    ended before its message was answered (test_a_wait_on_a_run_served_elsewhere_... failed
    that way under load). A trigger no Ack lists in ``answers`` (or ``dropped``) is waiting."""
    a, b = two
    with SessionStore.open(a.store.url) as other:  # the serving kernel (no Server here: it writes by hand)
        sid = other.create_session("holder")
        assert other.claim(sid)
        one = other.append(sid, T.MESSAGE, "user", "hold on")
        two_ = other.append(sid, T.MESSAGE, "user", "are you there?")  # before the Ack that answers `one`
        ack = other.append(sid, T.ACK, "holder", "holder is working",
                           payload={"trigger_id": one.id, "answers": [one.id], "answers_count": 1})
        other.append(sid, T.MESSAGE, "holder", "done", payload={"run_id": ack.id})
        b.store.catch_up()
        assert b.session_status(sid) == "running"  # the run that answers `two_` is about to start
        later = other.append(sid, T.ACK, "holder", "holder is working",
                             payload={"trigger_id": two_.id, "answers": [two_.id], "answers_count": 1})
        other.append(sid, T.MESSAGE, "holder", "yes", payload={"run_id": later.id})
        b.store.catch_up()
        assert b.session_status(sid) == "idle"
        # a stopped run's closing Ack lists the follow-ups it dropped: nothing waits for them
        three = other.append(sid, T.MESSAGE, "user", "three")
        four = other.append(sid, T.MESSAGE, "user", "four")
        run = other.append(sid, T.ACK, "holder", "holder is working",
                           payload={"trigger_id": three.id, "answers": [three.id], "answers_count": 1})
        other.append(sid, T.ACK, "holder", "holder was stopped by user",
                     payload={"run_id": run.id, "status": "cancelled", "dropped": [four.id]})
        b.store.catch_up()
        assert b.session_status(sid) == "idle"
