"""Approvals in a real kernel: the waiting cell stops when its run parks, a later cell decides,
``%chaz wait`` gets the reply; a widget click (comm message) between cells resumes a run."""

from __future__ import annotations

import time

import pytest

from kernel_harness import Kernel

SETUP = '''
import chaz_nb

@chaz_nb.tool(approval="always", risk="high", sensitive_params=["token"])
def deploy(target: str, token: str) -> str:
    """Deploy."""
    return f"deployed {target}"
'''

AGENT = (
    "%chaz agent ops --model chaz/script --tools deploy --script "
    "'[{\"tool\": \"deploy\", \"args\": {\"target\": \"prod\", \"token\": \"s3cret\"}}, \"done: {result}\"]'"
)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("kernel")
    k = Kernel(str(cwd), env={"CHAZ_DB": ":memory:"})
    assert k.run("%load_ext chaz_nb").status == "ok"
    assert k.run(SETUP).status == "ok"
    assert k.run(AGENT).status == "ok"
    yield k
    k.close()


def test_waiting_cell_stops_at_the_park_and_a_later_cell_decides(kernel):
    t0 = time.monotonic()
    r = kernel.run("%chaz @ops ship it", timeout=60)
    assert r.status == "ok", r.outputs
    assert time.monotonic() - t0 < 30  # it did not wait for the 300 s timeout
    # the view says it (the tool row waits, the card says how to decide); stdout says nothing
    assert "⚠ session" not in r.stdout
    assert "· waiting for approval" in r.texts()[-1] and "%chaz approve last" in r.texts()[-1]
    # the live view's one widget carries the card (session.js draws its buttons)
    assert len([m for m in r.of("comm_open") if "cards" in m["content"]["data"]["state"]]) == 1  # one view widget
    cards = [m["content"]["data"]["content"]["cards"] for m in r.of("comm_msg")
             if "cards" in m["content"]["data"].get("content", {})]
    assert len(cards) == 1 and len(cards[0]) == 1
    assert any("approval needed" in t for t in r.texts())
    r = kernel.run("print(chaz_nb.current().pending_approvals()[0]['arguments_display'])")
    assert r.stdout.strip() == "{'target': 'prod', 'token': '••••••'}"
    r = kernel.run("%chaz approve last")
    assert r.status == "ok" and r.stdout.strip() == "deploy: approve by user"
    r = kernel.run("%chaz wait")  # the run may have finished already while the kernel idled
    assert r.status == "ok", r.outputs
    r = kernel.run(
        "s = chaz_nb.current(); sid = s.current_session('ops'); "
        "print(s.session_status(sid), '|', s.store.latest(sid).content)"
    )
    assert r.stdout.strip() == "idle | done: deployed prod"


def test_a_button_click_after_the_cell_resumes_the_run(kernel):
    r = kernel.run("%chaz @ops ship it again")
    assert "· waiting for approval" in r.texts()[-1]
    [view] = [m for m in r.of("comm_open") if "cards" in m["content"]["data"]["state"]]
    comm_id = view["content"]["comm_id"]
    [rid] = [rid for m in r.of("comm_msg") for rid in m["content"]["data"].get("content", {}).get("cards", {})]
    # what session.js sends when the card's Approve is clicked (model.send)
    event = {"event": "decide", "request_id": rid, "decision": "approve", "reason": None}
    msg = kernel.kc.session.msg(
        "comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": event}}
    )
    kernel.kc.shell_channel.send(msg)
    # the click is handled before the next cell (one shell channel); this cell waits for the run
    assert kernel.run("%chaz wait").status == "ok"
    r = kernel.run("print(s.session_status(sid), '|', s.store.latest(sid).content)")
    assert r.stdout.strip() == "idle | done: deployed prod"
    r = kernel.run(
        "print([e.payload['decided_by'] for e in s.store.entries(sid) if e.entry_type.value == 'ApprovalDecision'])"
    )
    assert r.stdout.strip() == "['user', 'user']"
