"""The sidebar chat's send over the control channel (notebook/chat_control.py), in a real kernel.

A ``%chaz @teller`` cell waits for a slowly streaming ``chaz/script`` reply; the sidebar's comm
would reach the kernel only after that wait. ``chaz_chat_send`` on the control channel is what
the lab extension sends instead: the Message to another agent is written, its run starts and
answers, all while the teller's cell still waits. Forged sends get a one-line reply.
"""

from __future__ import annotations

import json
import time

import pytest

from chaz_nb.notebook import chat_control
from kernel_harness import Kernel
from test_stop_control_kernel import TELLER, control, streaming_in


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(str(tmp_path_factory.mktemp("chatctl")))
    try:
        assert k.run("%load_ext chaz_nb").status == "ok"
        assert k.run("import chaz_nb; s = chaz_nb.current()").status == "ok"
        assert k.run(TELLER).status == "ok"
        assert k.run("%chaz agent echo --model chaz/echo").status == "ok"
        yield k
    finally:
        k.close()


def _rows(kernel: Kernel, sql: str) -> list:
    r = kernel.run(f"import json; print(json.dumps([list(map(str, row)) for row in s.store.execute({sql!r})]))")
    assert r.status == "ok", r.outputs
    return json.loads(r.stdout)


def test_the_hello_says_the_chat_goes_over_control(kernel):
    assert control(kernel, "chaz_stop_hello", {})["content"] == {"status": "ok", "protocol": 2}


def test_a_message_sent_over_control_is_written_and_answered_while_another_cell_waits(kernel):
    echo = int(kernel.run("print(s.current_session('echo'))").stdout)
    teller = int(kernel.run("print(s.current_session('teller'))").stdout)
    msg_id = kernel.send_execute("%chaz @teller tell me a story")
    kernel.wait_for(streaming_in(msg_id))
    t0 = time.monotonic()
    reply = control(kernel, "chaz_chat_send", {"request_id": "send-1", "text": "hello while you wait",
                                               "session_id": echo, "comm_id": "no-such-comm"})
    replied = time.monotonic() - t0
    assert reply["msg_type"] == "chaz_chat_reply"
    assert reply["content"] == {"status": "ok", "type": "sent", "request_id": "send-1", "ok": True,
                                "session_id": echo, "message": f"sent to @echo (session {echo})"}
    assert replied < 1.0, replied
    r = kernel.collect(msg_id, timeout=60)
    assert r.status == "ok" and r.error is None and not r.stderr
    # the Message and echo's answer were written before the teller's reply, which ends the wait
    rows = _rows(kernel, f"SELECT session_id, sender, content, created_at FROM entries "
                         f"WHERE session_id IN ({echo}, {teller}) AND entry_type = 'Message' ORDER BY created_at, id")
    order = [(int(sid), sender) for sid, sender, _, _ in rows]
    assert order.index((echo, "user")) < order.index((echo, "echo")) < order.index((teller, "teller")), rows
    assert [c for sid, sender, c, _ in rows if int(sid) == echo][-2:] == ["hello while you wait",
                                                                         "echo: hello while you wait"]
    r = kernel.run(f"m = [e for e in s.store.read_page({echo}) if e.sender == 'user'][-1]\n"
                   "print(json.dumps(m.payload['origin']))")
    assert r.status == "ok", r.outputs
    origin = json.loads(r.stdout)
    assert origin["via"] == "sidebar" and origin["cell_id"] is None


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ({"text": "hi", "session_id": 1}, "needs a request_id"),
        ({"request_id": "r" * 101, "text": "hi"}, "needs a request_id (at most 100"),
        ({"request_id": "r", "text": "hi", "comm_id": 7}, "comm_id is the sidebar's comm id"),
        ({"request_id": "r", "text": 5, "session_id": 1}, "send: text is the message (a string), not 5"),
        ({"request_id": "r", "text": "x" * 100_001, "session_id": 1}, "at most 100,000 are sent"),
        ({"request_id": "r", "text": "  ", "session_id": 1}, "nothing to send"),
        ({"request_id": "r", "text": "hi", "session_id": "1"}, "send: session_id is a session id (a number)"),
        ({"request_id": "r", "text": "hi", "session_id": True}, "send: session_id is a session id (a number)"),
        ({"request_id": "r", "text": "hi", "session_id": 99999}, "send: there is no session 99999"),
        ({"request_id": "r", "text": "hi", "agent": "<b>x"}, "@NAME is an agent name"),
        ({"request_id": "r", "text": "hi", "agent": "nobody", "new": True}, "unknown agent @nobody"),
        ({"request_id": "r", "text": "hi", "agent": "echo", "new": "yes"}, "send: new is true or false"),
        ({"request_id": "r", "text": "hi"}, "say who gets it"),
    ],
)
def test_forged_sends_get_a_one_line_reply_and_the_kernel_goes_on(kernel, content, needle):
    before = _rows(kernel, "SELECT count(*) FROM entries")
    reply = control(kernel, "chaz_chat_send", content)
    c = reply["content"]
    assert c["status"] == "ok" and c["type"] == "sent" and c["ok"] is False and c["session_id"] is None
    assert needle in c["message"] and "\n" not in c["message"], c
    assert _rows(kernel, "SELECT count(*) FROM entries") == before  # nothing written
    assert kernel.run("print(1 + 1)").stdout == "2\n"


def test_a_send_while_the_kernel_runs_other_code_is_queued_and_written_when_it_is_free(kernel):
    echo = int(kernel.run("print(s.current_session('echo'))").stdout)
    msg_id = kernel.send_execute("import time; print('busy', flush=True); time.sleep(3)")
    kernel.wait_for(
        lambda m: (
            m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream" and "busy" in m["content"]["text"]
        )
    )
    reply = control(kernel, "chaz_chat_send", {"request_id": "q", "text": "queued hello", "session_id": echo})
    assert reply["content"]["ok"] is True and reply["content"]["queued"] is True
    assert kernel.collect(msg_id).status == "ok"
    assert kernel.run(f"%chaz wait {echo}").status == "ok"
    r = kernel.run(f"print(s.store.latest({echo}).content)")
    assert r.stdout.strip() == "echo: queued hello"


def test_a_send_that_is_not_an_object_is_refused_before_the_kernel_loop():
    """(jupyter_client will not send list content; a raw frontend could)"""
    for content in ([1, 2], "hi", None):
        refused = chat_control.check(content)["refused"]
        assert refused["ok"] is False and refused["message"] == "a chaz_chat_send carries a JSON object"
    assert chat_control.check({"request_id": "r", "text": "t", "extra": 1, "comm_id": "c"}) == {
        "data": {"type": "send", "request_id": "r", "text": "t"}, "comm_id": "c"}


def _open_comm(kernel: Kernel) -> str:
    """Open a ``chaz`` comm as the sidebar does; its id (once the kernel sent its state)."""
    msg = kernel.kc.session.msg("comm_open", {"comm_id": "sidebar-1", "target_name": "chaz", "data": {}})
    kernel.kc.shell_channel.send(msg)
    kernel.wait_for(lambda m: m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == "sidebar-1"
                    and m["content"]["data"].get("type") == "state")
    return "sidebar-1"


def test_the_chats_other_comm_messages_over_control_are_answered_on_the_comm_while_a_cell_waits(kernel):
    comm_id = _open_comm(kernel)
    echo = int(kernel.run("print(s.current_session('echo'))").stdout)
    msg_id = kernel.send_execute("%chaz @teller another story")
    kernel.wait_for(streaming_in(msg_id))
    reply = control(kernel, "chaz_comm_msg", {"comm_id": comm_id, "data": {"type": "chat_open", "session_id": echo}})
    assert reply["msg_type"] == "chaz_comm_reply" and reply["content"] == {"status": "ok", "ok": True, "message": ""}
    seen = kernel.wait_for(lambda m: m["msg_type"] == "comm_msg" and m["content"]["data"].get("type") == "chat",
                           timeout=5)
    chat = seen[-1]["content"]["data"]
    assert chat["ok"] is True and chat["reset"] is True and chat["session_id"] == echo
    assert not any(m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                   and m["content"]["execution_state"] == "idle" for m in seen)  # the teller cell still waits
    # checked as on the comm: a bad chat_open is answered there in one line
    control(kernel, "chaz_comm_msg", {"comm_id": comm_id, "data": {"type": "chat_open", "session_id": "x"}})
    bad = kernel.wait_for(lambda m: m["msg_type"] == "comm_msg" and m["content"]["data"].get("type") == "chat",
                          timeout=5)[-1]["content"]["data"]
    assert bad["ok"] is False and "session id (a number)" in bad["message"]
    r = kernel.collect(msg_id, timeout=60)
    assert r.status == "ok" and r.error is None


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ({"data": {"type": "refresh"}}, "needs comm_id"),
        ({"comm_id": "x" * 101, "data": {"type": "refresh"}}, "needs comm_id"),
        ({"comm_id": "sidebar-1", "data": "refresh"}, "data is the comm message"),
        ({"comm_id": "forged", "data": {"type": "chat_close"}}, "no chaz comm 'forged' in this kernel"),
        ({"comm_id": "sidebar-1", "data": {"type": "decide", "request_id": "r", "decision": "approve"}},
         "'decide' goes over the comm"),
        ({"comm_id": "sidebar-1", "data": {"type": "send", "text": "hi"}}, "'send' goes over the comm"),
    ],
)
def test_forged_comm_messages_over_control_are_refused_in_one_line(kernel, content, needle):
    reply = control(kernel, "chaz_comm_msg", content)["content"]
    assert reply["status"] == "ok" and reply["ok"] is False and needle in reply["message"], reply
    assert kernel.run("print(1 + 1)").stdout == "2\n"
