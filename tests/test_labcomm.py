"""Unit tests of the kernel side of the ``chaz`` comm (no kernel, fakes only)."""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import json
import time
from types import SimpleNamespace

import pytest

from chaz_nb.notebook import labcomm
from chaz_nb.notebook.labcomm import LabBridge, build_state, register_comm_target

from waiting import calls, until
from fakes.comm import FakeComm, FakeManager


class EntryType(str, enum.Enum):
    Message = "Message"
    ApprovalRequest = "ApprovalRequest"


class FakeStore:
    def __init__(self):
        self.subscribers = []
        self._sessions = [
            SimpleNamespace(id=1, agent="assistant", kind="chat", parent_id=None, depth=0),
            SimpleNamespace(id=2, agent="helper", kind="child", parent_id=1, depth=1),
        ]
        self._latest = {
            1: SimpleNamespace(
                id=7,
                seq=3,
                entry_type=EntryType.ApprovalRequest,
                sender="assistant",
                content="x" * 2000,
                payload={},
                created_at=dt.datetime(2026, 12, 2, 15, 0, 0, 123456),
            ),
            2: None,
        }
        self.latest_calls = 0

    def subscribe(self, cb):
        self.subscribers.append(cb)
        return lambda: self.subscribers.remove(cb)

    def sessions(self):
        return list(self._sessions)

    def latest(self, session_id):
        self.latest_calls += 1
        return self._latest.get(session_id)

    def write(self):
        for cb in list(self.subscribers):
            cb(SimpleNamespace(id=99))


class FakeServer:
    def __init__(self):
        self.store = FakeStore()
        self.decisions = []
        self.pending = [
            {
                "request_id": "req-1",
                "session_id": 1,
                "agent": "assistant",
                "tool_name": "delete_file",
                "risk_level": "high",
                "arguments_display": {"path": "/tmp/x", "token": "***"},
                "created_at": dt.datetime(2026, 12, 2, 15, 0, 1),
            }
        ]

    def session_status(self, session_id):
        return "parked" if session_id == 1 else "idle"

    def pending_approvals(self):
        return list(self.pending)

    def decide(self, request_id, decision, reason=None, decided_by="user"):
        self.decisions.append((request_id, decision, reason, decided_by))
        if request_id != "req-1":
            return False, f"no pending request {request_id}"
        self.pending = []
        return True, f"{decision}d delete_file"




class FakeScheduler:
    """call_later that records calls; run() fires due ones."""

    def __init__(self, clock):
        self.clock = clock
        self.calls = []

    def __call__(self, delay, fn):
        handle = SimpleNamespace(when=self.clock.now + delay, fn=fn, cancelled=False)
        handle.cancel = lambda: setattr(handle, "cancelled", True)
        self.calls.append(handle)
        return handle

    def run_due(self):
        due = [c for c in self.calls if c.when <= self.clock.now and not c.cancelled]
        self.calls = [c for c in self.calls if c not in due]
        for c in due:
            c.fn()
        return len(due)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def env():
    clock = Clock()
    sched = FakeScheduler(clock)
    server = FakeServer()
    bridge = LabBridge(server, call_later=sched, clock=clock, min_interval=0.25)
    return SimpleNamespace(clock=clock, sched=sched, server=server, bridge=bridge)


def test_state_message_shape():
    state = build_state(FakeServer())
    assert state["type"] == "state"
    assert [s["id"] for s in state["sessions"]] == [2, 1]  # newest first
    s1 = next(s for s in state["sessions"] if s["id"] == 1)
    assert s1 == {
        "id": 1,
        "agent": "assistant",
        "kind": "chat",
        "status": "parked",
        "last_entry": {
            "type": "ApprovalRequest",
            "sender": "assistant",
            "content": "x" * (labcomm.MAX_CONTENT - 1) + "…",
            "created_at": "2026-12-02T15:00:00.123456",
        },
    }
    s2 = next(s for s in state["sessions"] if s["id"] == 2)
    assert s2["last_entry"] is None and s2["kind"] == "child" and s2["status"] == "idle"
    assert state["pending"] == [
        {
            "request_id": "req-1",
            "session_id": 1,
            "agent": "assistant",
            "tool_name": "delete_file",
            "risk_level": "high",
            "arguments_display": {"path": "/tmp/x", "token": "***"},
            "created_at": "2026-12-02T15:00:01",
            "kind": "tool",  # (egress: the gate's card, Allow once / for this session / Deny)
        }
    ]
    json.dumps(state)


def test_a_code_calls_check_reaches_the_sidebar_typed_and_nothing_else():
    """The sidebar's card says what the cell's card says about code (Approve refused, masked
    literals, sha256): the request's code_check goes with the pending request, only its fields."""
    server = FakeServer()
    check = {"problem": "line 1: a secret outside a string literal (masking it would hide code)",
             "masked_literals": 1, "sha256": "ab" * 32, "extra": "<script>"}
    server.pending = [dict(server.pending[0], code_check=check)]
    [p] = build_state(server)["pending"]
    assert p["code_check"] == {k: check[k] for k in ("problem", "masked_literals", "sha256")}
    server.pending = [dict(server.pending[0], code_check={"problem": ["x"], "masked_literals": True, "sha256": 3})]
    assert "code_check" not in build_state(server)["pending"][0]
    server.pending = [dict(server.pending[0], code_check=None)]
    assert "code_check" not in build_state(server)["pending"][0]


def test_open_sends_state_and_refresh(env):
    comm = FakeComm()
    env.bridge.open(comm, {})
    assert [m["type"] for m in comm.sent] == ["state"]
    comm.receive({"type": "refresh"})
    assert [m["type"] for m in comm.sent] == ["state", "state"]
    comm.receive({"type": "bogus"})
    comm.receive("not a dict")
    assert len(comm.sent) == 2


def test_writes_are_throttled(env):
    comm = FakeComm()
    env.bridge.open(comm, {})
    comm.sent.clear()
    # First write after a long quiet time: scheduled with no delay.
    env.server.store.write()
    assert len(env.sched.calls) == 1 and env.sched.calls[0].when == env.clock.now
    # More writes before it fires: coalesced, nothing new scheduled.
    for _ in range(50):
        env.server.store.write()
    assert len(env.sched.calls) == 1
    env.sched.run_due()
    assert [m["type"] for m in comm.sent] == ["state"]
    # A write right after a send waits for the interval.
    env.server.store.write()
    assert len(env.sched.calls) == 1
    assert env.sched.calls[0].when == pytest.approx(env.clock.now + 0.25)
    assert env.sched.run_due() == 0
    env.clock.now += 0.25
    assert env.sched.run_due() == 1
    assert len(comm.sent) == 2


def test_at_most_four_per_second(env):
    comm = FakeComm()
    env.bridge.open(comm, {})
    comm.sent.clear()
    for _ in range(100):  # a write every 10 ms for one second
        env.server.store.write()
        env.clock.now += 0.01
        env.sched.run_due()
    assert 3 <= len(comm.sent) <= 5


def test_no_broadcast_without_comms(env):
    env.server.store.write()
    assert env.sched.calls == []


def test_broadcast_to_all_comms_and_close(env):
    a, b = FakeComm(), FakeComm()
    env.bridge.open(a, {})
    env.bridge.open(b, {})
    env.server.store.write()
    env.sched.run_due()
    assert len(a.sent) == 2 and len(b.sent) == 2
    b.frontend_close()
    env.clock.now += 1
    env.server.store.write()
    env.sched.run_due()
    assert len(a.sent) == 3 and len(b.sent) == 2


def test_decide_answers_then_fresh_state(env):
    a, b = FakeComm(), FakeComm()
    env.bridge.open(a, {})
    env.bridge.open(b, {})
    a.sent.clear()
    b.sent.clear()
    a.receive({"type": "decide", "request_id": "req-1", "decision": "deny", "reason": "no"})
    assert env.server.decisions == [("req-1", "deny", "no", "user")]
    assert a.sent[0] == {"type": "decided", "request_id": "req-1", "ok": True, "message": "denyd delete_file"}
    assert a.sent[1]["type"] == "state" and a.sent[1]["pending"] == []
    assert [m["type"] for m in b.sent] == ["state"]


def test_decide_failures_are_reported(env):
    comm = FakeComm()
    env.bridge.open(comm, {})
    comm.sent.clear()
    comm.receive({"type": "decide", "request_id": "nope", "decision": "approve", "reason": None})
    assert comm.sent[0] == {"type": "decided", "request_id": "nope", "ok": False, "message": "no pending request nope"}
    comm.sent.clear()
    comm.receive({"type": "decide", "request_id": "req-1", "decision": "approve_everything"})
    assert comm.sent[0]["ok"] is False and "unknown decision" in comm.sent[0]["message"]
    assert env.server.decisions == [("nope", "approve", None, "user")]

    def boom(*a, **k):
        raise RuntimeError("store is closed")

    env.server.decide = boom
    comm.sent.clear()
    comm.receive({"type": "decide", "request_id": "req-1", "decision": "approve"})
    assert comm.sent[0]["ok"] is False and comm.sent[0]["message"] == "RuntimeError: store is closed"


def test_broken_comm_is_dropped_and_nothing_printed(env, capsys):
    class Broken(FakeComm):
        def send(self, data):
            raise OSError("socket closed")

    bad, good = Broken(), FakeComm()
    env.bridge.open(bad, {})
    env.bridge.open(good, {})
    assert bad.comm_id not in env.bridge.comms
    env.server.store.write()
    env.sched.run_due()
    assert len(good.sent) == 2

    def broken_sessions():
        raise RuntimeError("db gone")

    env.server.store.sessions = broken_sessions
    env.clock.now += 1
    env.server.store.write()
    env.sched.run_due()  # state building fails: logged, not raised, not printed
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_close_unsubscribes_and_closes_comms(env):
    comm = FakeComm()
    env.bridge.open(comm, {})
    env.server.store.write()
    assert len(env.sched.calls) == 1
    env.bridge.close()
    assert env.sched.calls[0].cancelled
    assert env.server.store.subscribers == []
    assert comm.closed
    late = FakeComm()
    env.bridge.open(late, {})
    assert late.closed and late.sent == []




def test_register_comm_target_with_fake_kernel():
    manager = FakeManager()
    ipython = SimpleNamespace(kernel=SimpleNamespace(comm_manager=manager))
    server = FakeServer()
    unregister = register_comm_target(ipython, server)
    assert set(manager.targets) == {"chaz"}
    comm = FakeComm()
    manager.targets["chaz"](comm, {"content": {"target_name": "chaz", "data": {}}})
    assert comm.sent[0]["type"] == "state"
    assert len(server.store.subscribers) == 1

    # A second registration (e.g. %reload_ext) replaces the target; the first
    # unregister must not remove the second one's target.
    unregister2 = register_comm_target(ipython, server)
    unregister()
    assert "chaz" in manager.targets
    assert comm.closed
    unregister2()
    unregister2()  # idempotent
    assert manager.targets == {}
    assert server.store.subscribers == []


def test_register_without_kernel_is_a_noop():
    unregister = register_comm_target(SimpleNamespace(), FakeServer())
    unregister()
    assert register_comm_target(SimpleNamespace(kernel=None), FakeServer())() is None


async def test_default_scheduler_on_a_running_loop():
    server = FakeServer()
    bridge = LabBridge(server, min_interval=0.05)
    comm = FakeComm()
    sends = calls(comm, "send")
    sent_at = []
    sends(lambda: sent_at.append(time.monotonic()))  # the bridge's default clock
    bridge.open(comm, {})
    for _ in range(20):
        server.store.write()
    await until(lambda: len(comm.sent) >= 2, sends, what="the first broadcast")
    assert len(comm.sent) == 2
    server.store.write()
    # one loop iteration; a timer due now (a broadcast with no delay) runs only after it
    await asyncio.sleep(0)
    assert len(comm.sent) == 2  # still inside the interval
    await until(lambda: len(comm.sent) >= 3, sends, what="the throttled broadcast")
    assert len(comm.sent) == 3
    # not before the interval (measured from the previous send, which follows its clock read)
    assert sent_at[2] - sent_at[1] >= 0.04
    bridge.close()


async def test_write_from_another_thread_is_sent_on_the_loop():
    import threading

    server = FakeServer()
    bridge = LabBridge(server, min_interval=0.0)
    comm = FakeComm()
    bridge.open(comm, {})
    loop_thread = threading.get_ident()
    threads = []
    orig = comm.send

    def send(data):
        threads.append(threading.get_ident())
        orig(data)

    comm.send = send
    t = threading.Thread(target=server.store.write)
    t.start()
    t.join()
    await until(lambda: threads, calls(comm, "send"), what="the broadcast")
    assert threads == [loop_thread]
    bridge.close()


async def test_async_decide_is_awaited():
    server = FakeServer()
    sync_decide = server.decide

    async def decide(*a, **k):
        await asyncio.sleep(0)
        return sync_decide(*a, **k)

    server.decide = decide
    bridge = LabBridge(server)
    comm = FakeComm()
    bridge.open(comm, {})
    comm.sent.clear()
    comm.receive({"type": "decide", "request_id": "req-1", "decision": "approve", "reason": None})
    await until(lambda: comm.sent, calls(comm, "send"), what="the decided message")
    assert comm.sent[0] == {"type": "decided", "request_id": "req-1", "ok": True, "message": "approved delete_file"}
    bridge.close()


class StreamingServer(FakeServer):
    """A FakeServer with a real StreamHub behind subscribe_stream/current_stream."""

    def __init__(self):
        from chaz_nb.server.streams import StreamHub

        super().__init__()
        self.hub = StreamHub()
        self.subscribe_stream = self.hub.subscribe
        self.current_stream = self.hub.current


class StreamingBridge:
    """A LabBridge open on a StreamingServer, with a fake clock and scheduler (0.25 s throttle)."""

    def __init__(self):
        self.clock = Clock()
        self.sched = FakeScheduler(self.clock)
        self.server = StreamingServer()
        self.bridge = LabBridge(self.server, call_later=self.sched, clock=self.clock, min_interval=0.25)
        self.comm = FakeComm()
        self.bridge.open(self.comm, {})
        self.comm.sent.clear()


@pytest.fixture
def streaming():
    return StreamingBridge()


def test_a_streamed_reply_reaches_the_sidebar_throttled_and_leaves_with_its_entry(streaming):
    clock, sched, server, bridge, comm = (streaming.clock, streaming.sched, streaming.server, streaming.bridge,
                                          streaming.comm)
    for i in range(100):  # 100 deltas before the first broadcast fires: one state message
        server.hub.delta(2, 7, f"w{i} ")
    assert len(sched.calls) == 1
    sched.run_due()
    [state] = comm.sent
    s2 = next(s for s in state["sessions"] if s["id"] == 2)
    assert s2["streaming"] == "".join(f"w{i} " for i in range(100))
    server.hub.clear(2, 7)
    clock.now += 0.25
    sched.run_due()
    assert "streaming" not in next(s for s in comm.sent[-1]["sessions"] if s["id"] == 2)
    bridge.close()
    assert not server.hub._listeners[None]


async def test_a_stop_request_stops_the_sessions_parked_run_then_sends_a_fresh_state(store):
    from chaz_nb.core.entries import EntryType as T
    from chaz_nb.engine.tools import ToolRegistry, tool
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    @tool(approval="always")
    def wipe(path: str) -> str:
        """Delete a file."""
        return f"wiped {path}"

    agent = Agent("janitor", model="chaz/script", tools=["wipe"],
                  script=[{"tool": "wipe", "args": {"path": "/tmp/x"}}, "done: {result}"])
    server = Server(store, [agent], ToolRegistry([wipe]))
    s = server.current_session("janitor")
    bridge = LabBridge(server)
    comm = FakeComm()
    bridge.open(comm, {})
    await server.send(s, "clean up")
    await until(lambda: server.session_status(s) == "parked", store.subscribe, what="the approval")
    comm.sent.clear()

    comm.receive({"type": "stop", "session_id": s})

    stopped, fresh = comm.sent[:2]
    assert stopped["type"] == "stopped" and stopped["session_id"] == s and stopped["ok"] is True
    assert stopped["message"].startswith(f"stopped session {s} (janitor, run_id ")
    assert "was parked" in stopped["message"]
    assert fresh["type"] == "state"
    await until(lambda: server.session_status(s) == "idle", store.subscribe, what="the stopped run's end")
    closing = store.latest(s)
    assert closing.entry_type is T.ACK and closing.payload["status"] == "cancelled"
    assert server.pending_approvals() == []
    await until(lambda: comm.sent[-1]["type"] == "state" and not comm.sent[-1]["pending"]
                and comm.sent[-1]["sessions"][0]["status"] == "idle",
                calls(comm, "send"), what="the state after the stop")
    bridge.close()


async def test_the_sidebar_hears_a_run_end_idle_with_no_write_after_its_closing_entry(store):
    """The run's closing entry is written while the run is still on (status running); the loop
    ends after it with no further write: that end must reach the sidebar as an idle state."""
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    server = Server(store, [Agent("w", model="chaz/echo")])
    s = server.current_session("w")
    # each write is sent at once (no throttle): the last state sent is the one after the last event
    bridge = LabBridge(server, call_later=lambda delay, fn: fn())
    comm = FakeComm()
    bridge.open(comm, {})
    await server.send(s, "hello")
    await server.wait_idle()
    states = [m for m in comm.sent if m["type"] == "state"]
    assert "running" in [m["sessions"][0]["status"] for m in states]
    assert states[-1]["sessions"][0]["status"] == "idle", [m["sessions"][0]["status"] for m in states]
    bridge.close()


@pytest.mark.parametrize(
    ("session_id", "ok", "message"),
    [(1, True, "session 1 has no run to stop"), (999, False, "no session 999"),
     ("1", False, "stop needs a session id (a number), not '1'"), (None, False, "not None")],
)
def test_a_stop_request_that_stops_nothing_says_why(store, session_id, ok, message):
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    server = Server(store, [Agent("w", model="chaz/echo")])
    server.current_session("w")
    bridge = LabBridge(server, call_later=lambda delay, fn: None)
    comm = FakeComm()
    bridge.open(comm, {})
    comm.sent.clear()
    comm.receive({"type": "stop", "session_id": session_id})
    answer = comm.sent[0]
    assert (answer["type"], answer["ok"]) == ("stopped", ok) and message in answer["message"]
    assert comm.sent[1]["type"] == "state"
    bridge.close()


def test_page_answers_the_entries_before_a_seq_for_show_earlier(env):
    from chaz_nb.core.entries import EntryType as RealType
    from chaz_nb.core.store import NewEntry, SessionStore

    real = SessionStore(":memory:")
    sid = real.create_session("assistant")
    real.append_many([NewEntry(sid, RealType.MESSAGE, "user", f"<b>m{i}</b>") for i in range(1, 121)])
    env.server.store.read_page = real.read_page
    comm = FakeComm()
    env.bridge.open(comm, {})
    comm.sent.clear()
    comm.receive({"type": "page", "request_id": "p1", "session_id": sid, "before_seq": 71, "limit": 50})
    reply = comm.sent[0]
    assert (reply["type"], reply["request_id"], reply["ok"], reply["session_id"]) == ("page", "p1", True, sid)
    assert [e["seq"] for e in reply["entries"]] == list(range(21, 71))
    assert reply["entries"][0]["content"] == "<b>m21</b>"  # data, not HTML: the renderer sets it as text
    assert (reply["first_seq"], reply["earlier"]) == (21, 20)
    comm.sent.clear()
    comm.receive({"type": "page", "request_id": "p2", "session_id": sid, "before_seq": 21, "limit": 100000})
    assert [e["seq"] for e in comm.sent[0]["entries"]] == list(range(1, 21)) and comm.sent[0]["earlier"] == 0
    comm.sent.clear()
    comm.receive({"type": "page", "request_id": "p3", "session_id": "nope"})
    assert comm.sent[0]["ok"] is False and comm.sent[0]["message"].startswith("ValueError: ")
    real.close()


def test_a_page_answer_stays_bounded_however_big_the_entries_are(env):
    """A tool (an MCP server) may return megabytes, and the log keeps all of it: a page answer
    is cut to a byte budget (fewer entries, each string clipped), so one "show earlier" click
    never sends the frontend hundreds of megabytes; what it leaves out stays reachable."""
    import json

    from chaz_nb.core.entries import EntryType as RealType
    from chaz_nb.core.store import NewEntry, SessionStore
    from chaz_nb.notebook import labcomm

    real = SessionStore(":memory:")
    sid = real.create_session("assistant")
    huge = "y" * 400_000
    real.append_many([NewEntry(sid, RealType.TOOL_RESULT, "t", huge, tool_call_id=f"c{i}", tool_name="t",
                               payload={"output": huge}) for i in range(1, 41)])
    env.server.store.read_page = real.read_page
    comm = FakeComm()
    env.bridge.open(comm, {})
    comm.sent.clear()
    comm.receive({"type": "page", "request_id": "p", "session_id": sid, "limit": labcomm.PAGE_MAX})
    reply = comm.sent[0]
    assert reply["ok"] is True
    assert len(json.dumps(reply)) <= labcomm.PAGE_BYTES + 1000
    seqs = [e["seq"] for e in reply["entries"]]
    assert seqs and seqs == list(range(seqs[0], 41))  # the newest ones, contiguous
    assert (reply["first_seq"], reply["earlier"]) == (seqs[0], seqs[0] - 1)  # show earlier goes on from there
    assert reply["entries"][-1]["content"].startswith("y" * 1000)
    assert "more characters" in reply["entries"][-1]["content"]
    real.close()


def test_a_key_in_a_streamed_reply_is_masked_in_the_sidebar(streaming):
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0"
    sched, server, bridge, comm = streaming.sched, streaming.server, streaming.bridge, streaming.comm
    server.hub.delta(2, 7, "x" * 600 + " key: " + key[:10])  # the key split across deltas,
    server.hub.delta(2, 7, key[10:])  # and the sidebar's tail cut inside the text before it
    sched.run_due()
    s2 = next(s for s in comm.sent[-1]["sessions"] if s["id"] == 2)
    assert key not in s2["streaming"] and key[10:] not in s2["streaming"] and "[REDACTED]" in s2["streaming"]
    bridge.close()


@pytest.mark.parametrize(("reason", "passed"), [({"<b>why</b>": [1]}, "{'<b>why</b>': [1]}"), (42, "42"),
                                                 ("", None), (None, None), ("ok", "ok")])
def test_a_decide_reason_reaches_the_server_as_text_whatever_type_the_frontend_sent(env, reason, passed):
    """The ApprovalDecision's payload ``reason`` is text for every reader (the views, the audit
    views, the renderer); a dict from the comm was stored as an object."""
    comm = FakeComm()
    env.bridge.open(comm, {})
    comm.receive({"type": "decide", "request_id": "req-1", "decision": "deny", "reason": reason})
    assert env.server.decisions == [("req-1", "deny", passed, "user")]


def test_an_empty_page_says_nothing_comes_before_it(env):
    """A page before seq 10**30 of a session with no such entries: nothing before it either
    (it said 10**30 - 1 earlier entries, which the renderer offered to show)."""
    env.server.store.read_page = lambda *a, **k: []
    comm = FakeComm()
    env.bridge.open(comm, {})
    comm.sent.clear()
    comm.receive({"type": "page", "request_id": "p", "session_id": 1, "before_seq": 10**30})
    reply = comm.sent[0]
    assert reply["ok"] is True and reply["entries"] == [] and reply["earlier"] == 0


# ------------------------------------------------------------------ approve with edits (a real server)
async def test_an_approve_with_edited_arguments_from_the_sidebar_runs_the_tool_with_them(store):
    from chaz_nb.engine.tools import ToolRegistry, tool
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    ran = []

    @tool(approval="always", risk="high")
    def wipe(path: str) -> str:
        """Delete a path."""
        ran.append(path)
        return f"wiped {path}"

    agent = Agent("ops", model="chaz/script", script=[{"tool": "wipe", "args": {"path": "/"}}, "{result}"])
    server = Server(store, [agent], ToolRegistry([wipe]))
    handle = await server.send(server.current_session("ops"), "tidy up")
    await until(lambda: server.pending_approvals(), store.subscribe, what="a pending approval")
    [request] = server.pending_approvals()
    rid = request["request_id"]
    bridge = LabBridge(server, call_later=lambda delay, fn: None)
    comm = FakeComm()
    bridge.open(comm, {})
    comm.sent.clear()

    for arguments, needle in [
        ({"path": 3}, "path: 3 is not of type 'string'"),
        ('{"path": ', "not JSON"),
        ({"path": "/tmp", "recursive": True}, "recursive"),
    ]:
        comm.receive({"type": "decide", "request_id": rid, "decision": "approve", "arguments": arguments})
        answer = comm.sent[0]
        assert answer["type"] == "decided" and answer["ok"] is False, answer
        assert needle in answer["message"] and "stays open" in answer["message"] and "\n" not in answer["message"]
        assert [p["request_id"] for p in comm.sent[1]["pending"]] == [rid]  # still open in the fresh state
        comm.sent.clear()
    comm.receive({"type": "decide", "request_id": rid, "decision": "deny", "arguments": {"path": "/tmp"}})
    assert comm.sent[0]["ok"] is False and "go with approve" in comm.sent[0]["message"]
    comm.sent.clear()

    comm.receive({"type": "decide", "request_id": rid, "decision": "approve", "arguments": {"path": "/tmp/cache"}})
    assert comm.sent[0] == {"type": "decided", "request_id": rid, "ok": True,
                            "message": "wipe: approve with edited arguments by user"}
    assert comm.sent[1]["pending"] == []
    assert (await handle.wait()).content == "wiped /tmp/cache"
    assert ran == ["/tmp/cache"]
    bridge.close()


def test_a_field_over_the_bound_is_refused_whole_and_nothing_decided(env):
    comm = FakeComm()
    env.bridge.open(comm, {})
    comm.sent.clear()
    comm.receive({"type": "decide", "request_id": "req-1", "decision": "deny", "reason": "x" * 50_000_000})
    assert env.server.decisions == []  # it never reached the server
    assert comm.sent[0]["type"] == "decided" and comm.sent[0]["ok"] is False
    assert comm.sent[0]["message"].startswith("'reason' is over 10,000 characters; the message was ignored")
    comm.sent.clear()
    comm.receive({"type": "page", "session_id": 1, "request_id": ["r"] * 100_000})
    assert comm.sent[0] == {"type": "page", "request_id": "", "ok": False,
                            "message": comm.sent[0]["message"]} and "'request_id' is over" in comm.sent[0]["message"]


@pytest.mark.parametrize("kind", ["stop", "decide"])
def test_any_failure_of_a_message_is_a_one_line_reply_not_a_kernel_traceback(store, kind):
    """handle_msg is the comm's one guard: a bug past the checks (here a stopped run that
    cannot describe itself, a decision that returns garbage) is a one-line error reply."""
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    class Unsayable:
        def describe(self) -> str:
            raise RuntimeError("cannot say\nwhat stopped")

    server = Server(store, [Agent("w", model="chaz/echo")])
    sid = server.current_session("w")
    server.request_stop = lambda session_id, by: [Unsayable()]
    server.decide = lambda *a, **k: None
    bridge = LabBridge(server, call_later=lambda delay, fn: None)

    def garbled(comm, request_id, result):
        raise KeyError("oops")

    bridge._decided_result = garbled  # a bug after the decision was taken
    comm = FakeComm()
    bridge.open(comm, {})
    comm.sent.clear()
    comm.receive({"type": kind, "session_id": sid, "request_id": "r1", "decision": "approve"})
    answer = comm.sent[0]
    expected = {"stop": ("stopped", "RuntimeError: cannot say what stopped"), "decide": ("decided", "KeyError: 'oops'")}
    assert (answer["type"], answer["ok"], answer["message"]) == (*expected[kind][:1], False, expected[kind][1])
    bridge.close()


def test_the_new_chat_list_hears_an_agent_defined_or_forgotten_without_a_refresh(backend_store):
    """Issue 42 #8: an agent defined after the sidebar opened reaches its "New chat with" list
    (the state's ``agents``) at once, and a forgotten one leaves it; no Refresh, no write."""
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    server = Server(backend_store, [Agent("w", model="chaz/echo")], keep_agents=True)
    bridge = LabBridge(server, call_later=lambda delay, fn: fn())
    comm = FakeComm()
    bridge.open(comm, {})
    assert comm.sent[-1]["agents"] == ["w"]
    comm.sent.clear()

    server.define_agent(Agent("late", model="chaz/echo"))  # kept in the store: no entry written
    assert [m["agents"] for m in comm.sent if m["type"] == "state"] == [["late", "w"]]
    server.define_agent(Agent("quick", model="chaz/echo"), keep=False)
    assert comm.sent[-1]["agents"] == ["late", "quick", "w"]
    server.forget_agent("late")
    assert comm.sent[-1]["agents"] == ["quick", "w"]

    bridge.close()
    comm.sent.clear()
    server.define_agent(Agent("after", model="chaz/echo"), keep=False)
    assert comm.sent == []  # a closed bridge no longer listens
