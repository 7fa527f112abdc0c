"""Stop over the control channel (notebook/stop_control.py), in a real kernel, while a cell waits.

A ``%chaz @teller`` cell waits for a slowly streaming ``chaz/script`` reply; a widget click
would reach the kernel only after that wait. ``chaz_stop_request`` on the control channel is
what the lab extension sends instead: the run stops at once and the cell ends with the view's
stopped line, no error output. Forged requests get a clear reply and leave the kernel working.
"""

from __future__ import annotations

import queue
import time

import pytest

from kernel_harness import Kernel
from view_text import rows

#: 60 words, one every 0.1 s: the cell waits ~6 s unless stopped
TELLER = """%%chaz agent teller
model = "chaz/script"
script = ["STORY"]
[model_options.metadata]
chaz_word_delay = 0.1
""".replace("STORY", " ".join(f"once{i}" for i in range(60)))


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(str(tmp_path_factory.mktemp("stopctl")))
    try:
        assert k.run("%load_ext chaz_nb").status == "ok"
        assert k.run("import chaz_nb; s = chaz_nb.current()").status == "ok"
        r = k.run(TELLER)
        assert r.status == "ok", r.outputs
        yield k
    finally:
        k.close()


def control(kernel: Kernel, msg_type: str, content: dict, timeout: float = 10) -> dict:
    """Send a control message; its reply (other control replies are skipped)."""
    msg = kernel.kc.session.msg(msg_type, content)
    kernel.kc.control_channel.send(msg)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no reply to {msg_type} in {timeout}s")
        try:
            reply = kernel.kc.control_channel.get_msg(timeout=left)
        except queue.Empty:
            continue
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return reply


def streaming_in(msg_id: str):
    """The waiting cell's view shows streamed words (the run is in the model call): an update
    of the view's one widget (a custom message with what changed, views/live.py)."""
    return lambda m: (
        m["parent_header"].get("msg_id") == msg_id
        and m["msg_type"] == "comm_msg"
        and "once3 " in str(m["content"]["data"].get("content", {}).get("tail", ""))
    )


def stop_row_note(msgs: list[dict]) -> list[str]:
    """The Stop row's notes the view's widget was sent (at its open, or in an update)."""
    notes = []
    for m in msgs:
        data = m["content"].get("data") or {}
        stop = (data.get("state") or {}).get("stop") if m["msg_type"] == "comm_open" else (
            (data.get("content") or {}).get("stop") if m["msg_type"] == "comm_msg" else None)
        if isinstance(stop, dict):
            notes.append(str(stop.get("note", "")))
    return notes


def test_a_stop_request_on_control_stops_the_run_a_waiting_cell_waits_for(kernel):
    hello = control(kernel, "chaz_stop_hello", {})
    assert hello["msg_type"] == "chaz_stop_hello_reply"
    assert hello["content"] == {"status": "ok", "protocol": 2}
    sid = int(kernel.run("print(s.current_session('teller'))").stdout)

    msg_id = kernel.send_execute("%chaz @teller tell me a story")
    kernel.wait_for(streaming_in(msg_id))
    t0 = time.monotonic()
    reply = control(kernel, "chaz_stop_request", {"session_id": sid})
    replied = time.monotonic() - t0
    assert reply["msg_type"] == "chaz_stop_reply"
    content = reply["content"]
    assert content["ok"] is True and content["session_id"] == sid
    assert content["message"].startswith(f"stopped session {sid} (teller, run_id ")
    r = kernel.collect(msg_id)
    ended = time.monotonic() - t0
    assert replied < 1.0 and ended < 1.0, (replied, ended)
    assert r.status == "ok" and r.error is None and not r.stderr
    final = r.of("update_display_data")[-1]["content"]["data"]
    assert "application/vnd.jupyter.widget-view+json" not in final
    lines = rows(final["text/plain"])
    assert any(line.startswith("■ teller was stopped by user") for line in lines), lines
    assert "once59" not in final["text/plain"]  # the stream did not run to its end
    r = kernel.run(f"print(s.store.execute('SELECT status FROM runs WHERE session_id = ?', [{sid}]))")
    assert r.stdout.strip() == "[('cancelled',)]"


def test_the_next_turn_works_after_a_stop_over_control(kernel):
    sid = int(kernel.run("print(s.current_session('teller'))").stdout)
    r = kernel.run("%chaz @teller once more", timeout=60)
    assert r.status == "ok" and r.error is None
    r = kernel.run(f"print(s.store.latest({sid}).content.split()[-1])")
    assert r.stdout.strip() == "once59"


def test_without_a_hello_a_waiting_cells_stop_row_says_when_a_click_acts(tmp_path):
    k = Kernel(str(tmp_path))
    try:
        assert k.run("%load_ext chaz_nb").status == "ok"
        assert k.run(TELLER).status == "ok"
        msg_id = k.send_execute("%chaz @teller tell me a story")
        seen = k.wait_for(streaming_in(msg_id))
        notes = stop_row_note(seen)
        assert any("Stop acts when this cell stops waiting" in n for n in notes), notes
        sid = 1
        reply = control(k, "chaz_stop_request", {"session_id": sid})
        assert reply["content"]["ok"] is True  # a request acts with or without the hello
        r = k.collect(msg_id)
        assert r.status == "ok" and r.error is None
    finally:
        k.close()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ({"session_id": "1"}, "needs a session id (an integer), not '1'"),
        ({"session_id": True}, "needs a session id (an integer), not 'True'"),
        ({"session_id": 1.5}, "needs a session id (an integer)"),
        ({}, "needs a session id (an integer), not 'None'"),
        ({"session_id": -4}, "there is no session -4"),
        ({"session_id": 2**80}, "there is no session"),
        ({"session_id": 99999}, "could not stop session 99999: "),
    ],
)
def test_forged_stop_requests_get_a_clear_reply_and_the_kernel_goes_on(kernel, content, needle):
    reply = control(kernel, "chaz_stop_request", content)
    assert reply["content"]["status"] == "ok" and reply["content"]["ok"] is False
    assert needle in reply["content"]["message"], reply["content"]
    assert kernel.run("print(1 + 1)").stdout == "2\n"


def test_a_stop_request_of_an_idle_session_says_there_is_nothing_to_stop(kernel):
    sid = int(kernel.run("print(s.current_session('teller'))").stdout)
    reply = control(kernel, "chaz_stop_request", {"session_id": sid})
    assert reply["content"] == {
        "status": "ok",
        "ok": True,
        "session_id": sid,
        "message": f"session {sid} has no run to stop",
    }


def test_a_stop_while_the_kernel_runs_other_code_is_queued_and_done_when_it_is_free(kernel):
    """The control thread never waits long for a busy loop: it says the stop is queued."""
    sid = int(kernel.run("print(s.current_session('teller'))").stdout)
    assert kernel.run("%chaz --no-wait @teller a story in the background").status == "ok"
    # a cell busy in its own code (not a wait): the kernel loop runs nothing meanwhile
    msg_id = kernel.send_execute("import time; print('busy', flush=True); time.sleep(3)")
    kernel.wait_for(
        lambda m: (
            m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream" and "busy" in m["content"]["text"]
        )
    )
    t0 = time.monotonic()
    reply = control(kernel, "chaz_stop_request", {"session_id": sid})
    assert time.monotonic() - t0 < 2.0
    assert reply["content"]["ok"] is True and reply["content"]["queued"] is True
    assert "stops when it is free" in reply["content"]["message"]
    assert kernel.collect(msg_id).status == "ok"
    r = kernel.run("%chaz wait")
    assert r.status == "ok"
    r = kernel.run(
        f"print(s.store.execute('SELECT status FROM runs WHERE session_id = ? ORDER BY run_id', [{sid}])[-1])"
    )
    assert r.stdout.strip() == "('cancelled',)"
