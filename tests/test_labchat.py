"""The sidebar's chat, kernel side (labchat.py), through the comm entry point.

A fake frontend opens the ``chaz`` comm that ``%load_ext chaz_nb`` registers (or that
``register_comm_target`` registers on a server of its own), follows a session, writes
Messages with the box's ``send`` and sends forged ones: each bad message gets a one-line
answer, writes nothing and raises nothing in the kernel.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.notebook import labchat
from chaz_nb.notebook.labcomm import register_comm_target

from ipython_harness import ip
from waiting import calls, until
from fakes.comm import FakeComm, FakeManager






def open_comm(server) -> tuple[FakeComm, object, object]:
    """A comm opened on ``server``'s ``chaz`` target, as the sidebar opens it; (comm, bridge, unregister)."""
    manager = FakeManager()
    unregister = register_comm_target(SimpleNamespace(kernel=SimpleNamespace(comm_manager=manager)), server)
    comm = FakeComm()
    manager.targets["chaz"](comm, {})
    return comm, unregister.bridge, unregister


@pytest.fixture
def sidebar(chaz):
    comm, bridge, unregister = open_comm(chaz)
    yield comm, bridge
    unregister()


def test_a_message_from_the_box_is_an_entry_that_percent_chaz_log_shows(chaz, sidebar, capsys):
    comm, bridge = sidebar
    ip.run_line_magic("chaz", "@assistant first")  # a session with a turn in it
    sid = chaz.current_session("assistant")
    comm.receive({"type": "chat_open", "session_id": sid})
    reset = comm.of("chat")[0]
    assert reset["ok"] and reset["reset"] and reset["session_id"] == sid
    bundle = reset["bundle"]  # the cell view's bundle: the same renderer draws it
    assert bundle["version"] == 1 and bundle["session"]["agent"] == "assistant"
    assert [e["content"] for e in bundle["entries"] if e["type"] == "Message"] == ["first", "echo: first"]

    comm.receive({"type": "send", "request_id": "r1", "session_id": sid, "text": "hello <b>there</b>\nline 2"})
    [sent] = comm.of("sent")
    assert sent == {"type": "sent", "request_id": "r1", "ok": True, "session_id": sid,
                    "message": f"sent to @assistant (session {sid})"}
    written = [e for e in chaz.store.entries(sid) if e.entry_type is EntryType.MESSAGE][-1]
    assert (written.sender, written.content) == ("user", "hello <b>there</b>\nline 2")
    assert written.payload["origin"]["via"] == "sidebar"
    capsys.readouterr()
    ip.run_line_magic("chaz", f"wait {sid}")
    ip.run_line_magic("chaz", f"log {sid}")
    out = capsys.readouterr().out
    assert "user: hello <b>there</b>" in out and "assistant: echo: hello <b>there</b>" in out

    bridge.broadcast()  # (the throttled send, due now: what changed since the reset)
    deltas = [m for m in comm.of("chat") if not m["reset"]]
    assert deltas and deltas[-1]["ok"] and deltas[-1]["status"] == "idle" and deltas[-1]["stream"] is None
    assert [e["content"] for m in deltas for e in m["entries"] if e["type"] == "Message"] == [
        "hello <b>there</b>\nline 2", "echo: hello <b>there</b>\nline 2"]
    n = len(comm.sent)
    bridge.broadcast()
    assert [m["type"] for m in comm.sent[n:]] == ["state"]  # nothing new: no chat message


def test_at_name_and_new_chat_pick_the_session(chaz, sidebar):
    comm, bridge = sidebar
    ip.run_line_magic("chaz", "agent other --model chaz/echo")
    first = chaz.current_session("assistant")
    comm.receive({"type": "chat_open", "session_id": first})
    assert "other" in comm.of("state")[-1]["agents"] or "other" in bridge.state()["agents"]

    # @other in the box of assistant's chat: other's current session, and the chat follows it
    comm.receive({"type": "send", "request_id": "a", "session_id": first, "agent": "other", "text": "hi"})
    sent = comm.of("sent")[-1]
    other = chaz.current_session("other")
    assert sent["ok"] and sent["session_id"] == other and other != first
    assert comm.of("chat")[-1]["reset"] and comm.of("chat")[-1]["session_id"] == other
    assert chaz.store.entries(other)[0].content == "hi"

    # @assistant in assistant's own chat: that session
    comm.receive({"type": "chat_open", "session_id": first})
    comm.receive({"type": "send", "request_id": "b", "session_id": first, "agent": "assistant", "text": "again"})
    assert comm.of("sent")[-1]["session_id"] == first

    # "new chat with @assistant": a fresh session, now assistant's current one (as %chaz new)
    comm.receive({"type": "send", "request_id": "c", "agent": "assistant", "new": True, "text": "fresh"})
    sent = comm.of("sent")[-1]
    assert sent["ok"] and sent["session_id"] not in (first, other)
    assert chaz.current_session("assistant") == sent["session_id"]
    assert comm.of("chat")[-1]["session_id"] == sent["session_id"]


def test_in_a_room_at_name_takes_the_turn(chaz, sidebar):
    comm, _ = sidebar
    ip.run_line_magic("chaz", "agent b --model chaz/echo")
    room = chaz.create_room("desk", ["assistant", "b"])
    comm.receive({"type": "chat_open", "session_id": room})
    comm.receive({"type": "send", "request_id": "r", "session_id": room, "agent": "b", "text": "your turn"})
    sent = comm.of("sent")[-1]
    assert sent["ok"] and sent["session_id"] == room, sent
    msg = chaz.store.entries(room)[0]
    assert msg.content == "your turn" and msg.payload["to"] == ["b"]


def test_a_long_session_opens_at_its_newest_page_and_pages_back(chaz, sidebar):
    from chaz_nb.core.store import NewEntry

    comm, _ = sidebar
    sid = chaz.new_session("assistant")
    chaz.store.append_many([NewEntry(sid, EntryType.MESSAGE, "assistant", f"line {i}") for i in range(1, 121)])
    comm.receive({"type": "chat_open", "session_id": sid})
    bundle = comm.of("chat")[0]["bundle"]
    assert [e["seq"] for e in bundle["entries"]] == list(range(71, 121))
    assert (bundle["first_seq"], bundle["earlier"]) == (71, 70)
    assert bundle["earlier_command"] == f"%chaz log {sid} --before 71"
    comm.receive({"type": "page", "request_id": "p", "session_id": sid, "before_seq": 71, "limit": 50})
    page = comm.of("page")[0]
    assert page["ok"] and [e["seq"] for e in page["entries"]] == list(range(21, 71)) and page["earlier"] == 20


BAD_SENDS = [
    ({"text": ["not", "text"]}, "text is the message (a string)"),
    ({"text": None}, "text is the message (a string)"),
    ({"text": "   \n "}, "nothing to send"),
    ({"text": "x" * (labchat.MAX_MESSAGE_CHARS + 1)}, "at most 100,000 are sent"),
    ({"text": "hi", "session_id": "1"}, "session id (a number)"),
    ({"text": "hi", "session_id": True}, "session id (a number)"),
    ({"text": "hi", "session_id": 1.5}, "session id (a number)"),
    ({"text": "hi", "session_id": 999}, "there is no session 999"),
    ({"text": "hi", "agent": "<img src=x onerror=alert(1)>"}, "@NAME is an agent name"),
    ({"text": "hi", "agent": 7}, "@NAME is an agent name"),
    ({"text": "hi", "agent": "nobody"}, "unknown agent @nobody"),
    ({"text": "hi", "agent": "assistant", "new": "yes"}, "new is true or false"),
    ({"text": "hi", "new": True}, "a new chat needs @NAME"),
    ({"text": "hi"}, "open a session or start with @NAME"),
]


@pytest.mark.parametrize(("fields", "needle"), BAD_SENDS)
def test_a_bad_send_gets_one_line_and_writes_nothing(chaz, sidebar, fields, needle):
    comm, _ = sidebar
    chaz.current_session("assistant")
    before = chaz.store.sql("SELECT count(*) FROM entries").fetchall()[0][0]
    comm.receive({"type": "send", "request_id": "bad", **fields})
    [answer] = comm.of("sent")
    assert answer["ok"] is False and answer["request_id"] == "bad" and answer["session_id"] is None
    assert needle in answer["message"] and "\n" not in answer["message"], answer
    assert len(answer["message"]) < 300  # the forged value is not echoed back whole
    assert chaz.store.sql("SELECT count(*) FROM entries").fetchall()[0][0] == before


def test_a_child_session_is_not_written_from_the_box(chaz, sidebar):
    comm, _ = sidebar
    child = chaz.store.create_session("assistant", "child")
    comm.receive({"type": "send", "request_id": "c", "session_id": child, "text": "psst"})
    answer = comm.of("sent")[-1]
    assert not answer["ok"] and f"session {child} is a child session" in answer["message"]
    assert chaz.store.entries(child) == []


def test_a_session_no_kernel_serves_whose_agent_is_not_defined_here_is_refused(chaz, sidebar):
    comm, _ = sidebar
    ghost = chaz.store.create_session("ghost", "chat")  # e.g. left by a kernel that defined @ghost
    comm.receive({"type": "send", "request_id": "g", "session_id": ghost, "text": "anyone?"})
    answer = comm.of("sent")[-1]
    assert not answer["ok"] and "no kernel serves session" in answer["message"] and "@ghost" in answer["message"]
    assert chaz.store.entries(ghost) == []


@pytest.mark.parametrize(
    "data",
    [
        {"type": "chat_open"},
        {"type": "chat_open", "session_id": "3"},
        {"type": "chat_open", "session_id": 999},
        {"type": "chat_open", "session_id": {"x": 1}},
        {"type": "chat_open", "session_id": "y" * 50_000},
        {"type": "send", "request_id": "z" * 50_000, "text": "hi", "session_id": 1},
        {"type": "send", "request_id": {"nested": 1}, "text": "hi", "session_id": 1},
        {"type": "chat_close", "session_id": [1, 2]},
        {"type": "send"},
    ],
)
def test_forged_messages_raise_nothing_and_answer_in_one_line(chaz, sidebar, data):
    comm, _ = sidebar
    chaz.current_session("assistant")
    comm.receive(data)  # must not raise
    for answer in comm.sent:
        assert len(json.dumps(answer)) < 10_000, answer
        if answer.get("ok") is False:
            assert "\n" not in answer["message"]
    if data["type"] == "chat_open":
        [refusal] = comm.of("chat")
        assert refusal["ok"] is False and refusal["message"]


def test_non_dict_and_unknown_messages_are_ignored(chaz, sidebar):
    comm, bridge = sidebar
    n = len(comm.sent)
    for data in (None, [], "send", 5, {"type": "send_all"}, {"type": None}):
        comm.receive(data)
    assert len(comm.sent) == n
    assert bridge.chat.watches == {}


def test_chat_close_and_a_closed_comm_stop_the_following(chaz, sidebar):
    comm, bridge = sidebar
    sid = chaz.current_session("assistant")
    comm.receive({"type": "chat_open", "session_id": sid})
    assert list(bridge.chat.watches) == [comm.comm_id]
    comm.receive({"type": "chat_close"})
    assert bridge.chat.watches == {}
    comm.receive({"type": "chat_open", "session_id": sid})
    comm._on_close({"content": {"comm_id": comm.comm_id, "data": {}}})
    assert bridge.chat.watches == {}


async def test_the_chat_shows_the_approval_then_streams_the_reply(store):
    """A scripted agent's gated call parks its run: the open chat gets the ApprovalRequest and
    the parked status; a decide from the comm resumes it, and the reply streams word by word
    into the chat before its entry lands."""
    from chaz_nb.engine.tools import ToolRegistry, tool
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    @tool(approval="always")
    def wipe(path: str) -> str:
        """Delete a file."""
        return f"wiped {path}"

    words = " ".join(f"word{i}" for i in range(30))
    agent = Agent("janitor", model="chaz/script", tools=["wipe"],
                  script=[{"tool": "wipe", "args": {"path": "/tmp/x"}}, words + " {result}"],
                  model_options={"metadata": {"chaz_word_delay": 0.02}})
    server = Server(store, [agent], ToolRegistry([wipe]))
    sid = server.current_session("janitor")
    comm, bridge, unregister = open_comm(server)
    comm.receive({"type": "chat_open", "session_id": sid})
    comm.receive({"type": "send", "request_id": "s", "session_id": sid, "text": "clean up"})
    assert comm.of("sent")[-1]["ok"]
    await until(lambda: server.session_status(sid) == "parked", store.subscribe, what="the approval")
    await until(lambda: any(m.get("status") == "parked" and any(e["type"] == "ApprovalRequest"
                                                                 for e in m.get("entries", []))
                            for m in comm.of("chat")), calls(comm, "send"), what="the request in the chat")
    [pending] = bridge.state()["pending"]
    comm.receive({"type": "decide", "request_id": pending["request_id"], "decision": "approve"})
    await until(lambda: any(m.get("stream") for m in comm.of("chat")), calls(comm, "send"),
                what="a streamed part of the reply in the chat")
    streamed = next(m["stream"] for m in comm.of("chat") if m.get("stream"))
    assert streamed["sender"] == "janitor" and streamed["text"].startswith("word0")
    final = words + " wiped /tmp/x"
    # the run's end clears its stream: that event sends the chat its idle status
    await until(lambda: comm.of("chat")[-1]["status"] == "idle", calls(comm, "send"), what="the idle chat")
    assert any(e["content"] == final for m in comm.of("chat") for e in m.get("entries", []))
    assert comm.of("chat")[-1]["stream"] is None and server.session_status(sid) == "idle"
    unregister()


async def test_a_message_from_one_kernels_sidebar_reaches_the_kernel_that_serves_it(pg_url):
    """A shared PostgreSQL store, two kernels: A defines and serves @w; B's sidebar writes to
    w's session (B does not define w). A runs it, and both sidebars' chats get the Message and
    the reply."""
    from chaz_nb.core.store import SessionStore
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    first, second = SessionStore.open(pg_url), SessionStore.open(pg_url)
    a = Server(first, [Agent("w", model="chaz/echo")])
    b = Server(second, [])
    comm_a, _, unregister_a = open_comm(a)
    comm_b, _, unregister_b = open_comm(b)
    try:
        sid = a.current_session("w")
        await (await a.send(sid, "first")).future  # A serves the session from now on
        for comm in (comm_a, comm_b):
            comm.receive({"type": "chat_open", "session_id": sid})
        comm_b.receive({"type": "send", "request_id": "x", "session_id": sid, "text": "from kernel B"})
        assert comm_b.of("sent")[-1]["ok"], comm_b.of("sent")

        def got(comm) -> list:
            shown = [e for m in comm.of("chat") for e in m.get("entries", m.get("bundle", {}).get("entries", []))]
            return [e["content"] for e in shown if e["type"] == "Message"]

        for comm, store in ((comm_a, first), (comm_b, second)):
            await until(lambda c=comm: "echo: from kernel B" in got(c), calls(comm, "send"), store.subscribe,
                        what="the reply in each kernel's chat")
            assert "from kernel B" in got(comm)
        written = [e for e in first.entries(sid) if e.content == "from kernel B"]
        assert written[0].sender == "user" and written[0].payload["origin"]["via"] == "sidebar"
    finally:
        unregister_a()
        unregister_b()
        await a.wait_idle(5)
        first.close()
        second.close()
