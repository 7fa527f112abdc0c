"""The live view's one widget in a real kernel (issue 32, item 1): what a cell costs on the
wire, and the page's events (views/static/session.js: ``model.send``) reaching the server.

Counted as bench/bench_cell.py counts: every iopub message of the cell but its own
``status`` and ``execute_input``; widgets are the ``comm_open`` of ``jupyter.widget``.
"""

from __future__ import annotations

import collections

import pytest

from fakes.openai_server import FakeModelServer, Reply
from kernel_harness import Kernel

SETUP = '''
import chaz_nb

@chaz_nb.tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy."""
    return f"deployed {target}"
'''

OPS = (
    "%chaz agent ops --model chaz/script --tools deploy --script "
    "'[{\"tool\": \"deploy\", \"args\": {\"target\": \"prod\"}}, \"done: {result}\"]'"
)


@pytest.fixture(scope="module")
def model():
    server = FakeModelServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, model):
    k = Kernel(str(tmp_path_factory.mktemp("live")), env={"CHAZ_DB": ":memory:", "OPENAI_API_KEY": "sk-live"})
    try:
        assert k.run("%load_ext chaz_nb").status == "ok"
        assert k.run(SETUP).status == "ok"
        assert k.run(OPS).status == "ok"
        r = k.run(f"%chaz agent a --model openai/fake --api-base {model.openai_base} --no-stream")
        assert r.status == "ok", r.outputs
        yield k
    finally:
        k.close()


def test_a_one_step_turn_is_one_widget_and_at_most_8_messages(kernel, model):
    model.script(*[Reply(f"hello {i} <b>back</b>") for i in range(4)])
    assert kernel.run("%chaz @a warm up").status == "ok"  # the kernel's shared Layout is made here
    for i in range(3):
        r = kernel.run(f"%chaz @a hello {i}")
        assert r.status == "ok" and r.error is None, r.outputs
        kinds = collections.Counter(m["msg_type"] for m in r.outputs)
        widgets = [m for m in r.of("comm_open") if m["content"].get("target_name") == "jupyter.widget"]
        assert len(widgets) <= 2 and len(r.outputs) <= 8, kinds  # issue 32's targets (the old view: ~12, ~49)
        assert len(widgets) == 1 and widgets[0]["content"]["data"]["state"]["_model_module"] == "anywidget"
        assert kinds["comm_close"] == 1  # the finished view lets its widget go
        final = r.of("update_display_data")[-1]["content"]["data"]
        assert "application/vnd.jupyter.widget-view+json" not in final  # the static form stays
        assert f"hello {i + 1} &lt;b&gt;back&lt;/b&gt;" in final["text/html"]  # (reply 0 was the warm-up's)


def _view_open(r):
    """The view widget's comm id and its state as the page has it (the open's state, then each
    update's changes)."""
    [view] = [m for m in r.of("comm_open") if "cards" in m["content"]["data"]["state"]]
    comm_id, state = view["content"]["comm_id"], dict(view["content"]["data"]["state"])
    state["cards"] = dict(state["cards"])
    for m in r.of("comm_msg"):
        change = m["content"]["data"].get("content") or {}
        if m["content"]["comm_id"] == comm_id and m["content"]["data"].get("method") == "custom":
            state["cards"].update(change.pop("cards", {}))
            state.update({k: v for k, v in change.items() if k != "rows"})
    return comm_id, state


def _send_event(kernel, comm_id, event):
    """What session.js's ``model.send(event)`` puts on the wire."""
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": event}})
    kernel.kc.shell_channel.send(msg)


def test_the_pages_stop_event_stops_a_parked_run(kernel):
    r = kernel.run("%chaz @ops ship it")  # the cell stops waiting when the run parks
    assert "· waiting for approval" in r.texts()[-1]
    comm_id, state = _view_open(r)
    assert state["stop"]["shown"] and not state["stop"]["disabled"] and len(state["cards"]) == 1
    _send_event(kernel, comm_id, {"event": "stop"})
    # the kernel answers the click on the same widget: the Stop row says "stopping…"
    kernel.wait_for(lambda m: m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id
                    and "stopping" in str(m["content"]["data"].get("content", {}).get("stop", {}).get("note")))
    assert kernel.run("%chaz wait").status == "ok"
    r = kernel.run(
        "s = chaz_nb.current(); sid = s.current_session('ops'); "
        "print(s.session_status(sid), '|', s.store.execute('SELECT status FROM runs WHERE session_id = ? "
        "ORDER BY run_id', [sid])[-1][0])"
    )
    assert r.stdout.strip() == "idle | cancelled"


def test_the_pages_deny_event_with_a_reason_reaches_the_approval(kernel):
    r = kernel.run("%chaz @ops ship it now")
    comm_id, state = _view_open(r)
    [rid] = state["cards"]
    _send_event(kernel, comm_id, {"event": "decide", "request_id": rid, "decision": "deny", "reason": "not <now>"})
    assert kernel.run("%chaz wait").status == "ok"
    r = kernel.run(f"print(s.store.execute('SELECT decision, reason FROM approvals WHERE request_id = ?', [{rid!r}]))")
    assert r.stdout.strip() == "[('deny', 'not <now>')]"
