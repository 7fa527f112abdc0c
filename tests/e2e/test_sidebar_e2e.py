"""End-to-end: the chaz-nb JupyterLab extension in a real browser.

1. A saved notebook output of type application/vnd.chaz.session+json is drawn by the
   renderer as soon as the notebook opens (no cell run): the transcript survives a
   reopen without running anything.
2. A cell displays a bundle with IPython.display.display(..., raw=True): drawn too.
3. The Chaz sidebar (opened from the palette) says chaz is not loaded; after a cell
   registers the ``chaz`` comm target (with a scripted in-kernel fake server, until the
   real server is wired in), the sidebar connects on its own, lists sessions and pending
   approvals, gets a live push from a background write, and Approve / Deny / "approve
   oldest pending" reach ``server.decide`` in the kernel.

``test_approvals_notebook_from_sidebar`` is the hook for notebooks/02_approvals.ipynb
(run its pending call, approve from the sidebar, check the run finishes); it skips
while that notebook does not exist.

Screenshots: ``<tmp_path>/shots`` and copies in /tmp/chaz_e2e_shots.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
from waiting import poll

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
MIME = "application/vnd.chaz.session+json"

BUNDLE = {
    "version": 1,
    "session": {"id": 3, "agent": "assistant", "kind": "chat", "parent_id": None, "depth": 0},
    "status": "idle",
    "entries": [
        {"id": 1, "seq": 1, "type": "Message", "sender": "user",
         "content": "What is 2+3? <script>window.__pwned=1</script>",
         "tool_call_id": None, "tool_name": None, "payload": {},
         "created_at": "2026-12-02T15:00:00.123456"},
        {"id": 2, "seq": 2, "type": "Ack", "sender": "system", "content": "",
         "tool_call_id": None, "tool_name": None, "payload": {},
         "created_at": "2026-12-02T15:00:00.200000"},
        {"id": 3, "seq": 3, "type": "ToolCall", "sender": "assistant", "content": "",
         "tool_call_id": "call_1", "tool_name": "add",
         "payload": {"arguments": {"a": 2, "b": 3}, "run_id": 1},
         "created_at": "2026-12-02T15:00:01.000000"},
        {"id": 4, "seq": 4, "type": "ToolResult", "sender": "assistant", "content": "5",
         "tool_call_id": "call_1", "tool_name": "add",
         "payload": {"output": "5", "is_error": False, "duration_ms": 2.5},
         "created_at": "2026-12-02T15:00:01.010000"},
        {"id": 5, "seq": 5, "type": "ApprovalRequest", "sender": "assistant", "content": "",
         "tool_call_id": "call_2", "tool_name": "delete_file",
         "payload": {"request_id": "req-a", "tool_name": "delete_file", "risk_level": "high",
                     "arguments_display": {"path": "/tmp/x", "token": "***"},
                     "timeout_secs": 300, "agent": "assistant"},
         "created_at": "2026-12-02T15:00:02.000000"},
        {"id": 6, "seq": 6, "type": "ApprovalDecision", "sender": "user", "content": "",
         "tool_call_id": None, "tool_name": None,
         "payload": {"request_id": "req-a", "decision": "deny", "reason": "not today",
                     "decided_by": "user"},
         "created_at": "2026-12-02T15:00:03.000000"},
        {"id": 7, "seq": 7, "type": "Error", "sender": "system",
         "content": "model call failed: timeout", "tool_call_id": None, "tool_name": None,
         "payload": {}, "created_at": "2026-12-02T15:00:04.000000"},
        {"id": 8, "seq": 8, "type": "Message", "sender": "assistant", "content": "2+3 = 5",
         "tool_call_id": None, "tool_name": None, "payload": {},
         "created_at": "2026-12-02T15:00:05.000000"},
    ],
}

# In-kernel stand-in for the chaz server: only the interface labcomm uses.
FAKE_SERVER_CELL = r'''
import asyncio, json, datetime as dt
from types import SimpleNamespace
from chaz_nb.notebook.labcomm import register_comm_target

class _Store:
    def __init__(self):
        self.subs = []
        self.rows = [SimpleNamespace(id=1, agent="assistant", kind="chat", parent_id=None, depth=0),
                     SimpleNamespace(id=2, agent="researcher", kind="child", parent_id=1, depth=1)]
        self.last = {1: SimpleNamespace(id=9, seq=4, entry_type="ApprovalRequest", sender="assistant",
                                        content="delete_file needs approval", payload={},
                                        created_at=dt.datetime(2026, 12, 2, 15, 0, 2))}
    def subscribe(self, cb):
        self.subs.append(cb)
        return lambda: self.subs.remove(cb)
    def sessions(self): return list(self.rows)
    def latest(self, sid): return self.last.get(sid)
    def write(self):
        for cb in list(self.subs): cb(None)

class _Server:
    def __init__(self):
        self.store = _Store()
        self.pending = {"req-1": dict(request_id="req-1", session_id=1, agent="assistant",
                                      tool_name="delete_file", risk_level="high",
                                      arguments_display={"path": "/tmp/x", "token": "***"},
                                      created_at="2026-12-02T15:00:02")}
    def session_status(self, sid): return "parked" if sid == 1 and self.pending else "idle"
    def pending_approvals(self): return sorted(self.pending.values(), key=lambda p: p["created_at"])
    def decide(self, request_id, decision, reason=None, decided_by="user"):
        with open("decisions.jsonl", "a") as f:
            f.write(json.dumps([request_id, decision, reason, decided_by]) + "\n")
        p = self.pending.pop(request_id, None)
        if p is None:
            return False, f"no pending request {request_id}"
        return True, f"{decision} {p['tool_name']}: recorded"

chaz_server = _Server()
chaz_unregister = register_comm_target(get_ipython(), chaz_server)

def _later():
    # a background write on the kernel loop, after the cell ended: must reach the sidebar
    chaz_server.pending["req-0"] = dict(request_id="req-0", session_id=2, agent="researcher",
                                        tool_name="send_mail", risk_level="medium",
                                        arguments_display={"to": "<b>x@y.z</b>"},
                                        created_at="2026-12-02T15:00:01")
    chaz_server.store.last[2] = SimpleNamespace(id=10, seq=2, entry_type="ApprovalRequest",
                                                sender="researcher", content="send_mail needs approval",
                                                payload={}, created_at=dt.datetime(2026, 12, 2, 15, 0, 1))
    chaz_server.store.write()

asyncio.get_running_loop().call_later(4.0, _later)
print("chaz comm target registered")
'''


def _code(source: str, outputs: list | None = None) -> dict:
    return {"cell_type": "code", "source": source, "outputs": outputs or [], "execution_count": None}


def _decisions(root: Path) -> list:
    path = root / "decisions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


_wait = functools.partial(poll, timeout=20)


def test_renderer_and_sidebar(lab):
    page = lab.page
    saved_output = {
        "output_type": "display_data",
        "metadata": {},
        "data": {MIME: BUNDLE, "text/plain": ["<chaz session 3>"],
                 "text/html": ["<b>fallback html</b>"]},
    }
    lab.write_notebook(
        "e2e.ipynb",
        [
            _code("# saved output of an earlier run", [saved_output]),
            _code(
                "import json\nfrom IPython.display import display\n"
                f"bundle = json.loads({json.dumps(json.dumps(BUNDLE))})\n"
                "bundle['session']['id'] = 4\n"
                + f"display({{'{MIME}': bundle, 'text/plain': 'chaz session 4'}}, raw=True)"
            ),
            _code(FAKE_SERVER_CELL),
        ],
    )
    lab.open("e2e.ipynb")

    # 1. saved output, drawn without running anything
    first = page.locator(".jp-Cell").nth(0).locator(".chaz-transcript")
    first.wait_for(timeout=30_000)
    assert first.locator(".chaz-title").inner_text() == "Session 3"
    assert "fallback html" not in page.locator(".jp-Cell").nth(0).inner_text()
    badges = first.locator(".chaz-entries > .chaz-entry .chaz-badge").all_inner_texts()
    assert badges[:2] == ["Message", "Tool"]  # the idle session's Ack is over: not shown as working
    user_msg = first.locator(".chaz-type-message .chaz-content").first.inner_text()
    assert "<script>window.__pwned=1</script>" in user_msg  # shown as text
    assert page.evaluate("() => window.__pwned") is None
    tool = first.locator("details.chaz-tool")
    assert tool.count() == 1
    assert "add(a=2, b=3)" in tool.locator("summary").inner_text()
    assert not tool.locator(".chaz-tool-output").is_visible()  # folded
    tool.locator("summary").click()
    assert tool.locator(".chaz-tool-output").inner_text() == "5"
    assert first.locator(".chaz-approval-outcome").inner_text() == "denied by user: not today"
    assert first.locator(".chaz-type-error .chaz-content").inner_text() == "model call failed: timeout"
    lab.shot("saved-transcript")

    # 2. the sidebar from the palette: chaz not loaded in this kernel yet
    lab.palette("Chaz: show sessions")
    lab.sidebar.wait_for(state="visible")
    lab.wait_sidebar_status("unavailable")
    assert "%load_ext chaz_nb" in lab.sidebar_status()
    assert "e2e.ipynb" in lab.sidebar.locator(".chaz-panel-target").inner_text()
    lab.shot("sidebar-not-loaded")
    # no retry loop while the kernel lacks the target (its own comm_open makes the
    # kernel go busy -> idle; only finished cells may trigger a retry)
    page.evaluate(
        """() => {
            const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            window.__chazOpens = 0;
            const orig = k.createComm.bind(k);
            k.createComm = (...a) => { window.__chazOpens++; return orig(...a); };
        }"""
    )
    page.wait_for_timeout(4000)
    assert page.evaluate("() => window.__chazOpens") == 0

    # 3. run the cells: a displayed bundle, then the comm target with a fake server
    lab.run_all()
    second = page.locator(".jp-Cell").nth(1).locator(".chaz-transcript")
    second.wait_for(timeout=30_000)
    assert second.locator(".chaz-title").inner_text() == "Session 4"
    assert "chaz comm target registered" in page.locator(".jp-Cell").nth(2).inner_text()

    # the sidebar reconnects by itself after the cells ran
    lab.wait_sidebar_status("connected", timeout=30)
    assert 1 <= page.evaluate("() => window.__chazOpens") <= 3
    sessions = lab.sidebar.locator(".chaz-session")
    _wait(lambda: sessions.count() == 2, what="two sessions in the sidebar")
    assert lab.sidebar.locator(".chaz-session .chaz-agent").all_inner_texts() == ["researcher", "assistant"]
    cards = lab.pending_cards()
    _wait(lambda: cards.count() == 1, what="one pending card")
    assert cards.first.locator(".chaz-tool-name").inner_text() == "delete_file"
    assert cards.first.locator(".chaz-risk").inner_text() == "high risk"
    lab.shot("sidebar-connected")

    # a background write (call_later in the kernel) pushes a second request live
    _wait(lambda: cards.count() == 2, timeout=20, what="the live-pushed second pending card")
    assert "<b>x@y.z</b>" in lab.sidebar.locator('.chaz-card[data-request-id="req-0"] .chaz-card-args').inner_text()
    lab.shot("sidebar-live-update")

    # "approve oldest pending" from the palette -> req-0 (created 15:00:01)
    lab.palette("Chaz: approve oldest pending")
    _wait(lambda: _decisions(lab.server.root) == [["req-0", "approve", None, "user"]],
          what="approve-oldest to reach server.decide")
    _wait(lambda: cards.count() == 1, what="req-0 card to go away")
    _wait(lambda: "send_mail: recorded" in lab.sidebar.locator(".chaz-panel-notice").inner_text(),
          what="the decided notice")

    # Deny with a reason from the card
    card = lab.sidebar.locator('.chaz-card[data-request-id="req-1"]')
    card.locator(".chaz-reason").fill("not on my machine")
    lab.shot("sidebar-deny-reason")
    card.locator(".chaz-deny").click()
    _wait(lambda: _decisions(lab.server.root)[-1:] == [["req-1", "deny", "not on my machine", "user"]],
          what="deny to reach server.decide")
    _wait(lambda: cards.count() == 0, what="no pending cards")
    assert lab.sidebar.locator(".chaz-pending-list .chaz-empty").inner_text() == "Nothing waits for approval."
    lab.shot("sidebar-all-decided")

    # the same in the dark theme (CSS uses JupyterLab theme variables only)
    second.locator("details.chaz-tool summary").click()
    lab.command("apputils:change-theme", {"theme": "JupyterLab Dark"})
    page.wait_for_function(
        "() => document.body.dataset.jpThemeName === 'JupyterLab Dark'", timeout=20_000
    )
    page.wait_for_timeout(500)
    lab.shot("dark-theme")

    assert lab.page_errors == []


def test_approvals_notebook_from_sidebar(lab):
    """notebooks/02_approvals.ipynb: run its cells up to the call that parks, decide from the
    sidebar (not from a cell), check that the run finishes and the transcript renders."""
    nb = REPO / "notebooks" / "02_approvals.ipynb"
    if not nb.exists():
        pytest.skip("notebooks/02_approvals.ipynb does not exist yet")
    cells = json.loads(nb.read_text())["cells"]
    park = next(i for i, c in enumerate(cells)
                if c["cell_type"] == "code" and "".join(c["source"]).startswith("%chaz @ops"))
    shutil.copy(nb, lab.server.root / nb.name)
    lab.open(nb.name)
    page = lab.page
    # clear the saved outputs, then run the cells above the first decision cell
    lab.command("notebook:clear-all-cell-outputs")
    page.evaluate(
        "(i) => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = i; }", park + 1
    )
    lab.command("notebook:run-all-above")
    page.wait_for_timeout(300)
    lab.wait_kernel_idle(180)
    waiting = page.locator(".jp-Cell").nth(park)
    assert "waiting for approval" in waiting.inner_text()  # the tool row of the parked call
    # the live approval card (ipywidgets) is in the waiting cell
    waiting.locator(".chaz-approval-widget").wait_for(timeout=30_000)
    assert waiting.locator(".chaz-approval-widget button", has_text="Approve").count() >= 1
    lab.shot("approvals-cell-parked")

    lab.palette("Chaz: show sessions")
    lab.wait_sidebar_status("connected", timeout=60)
    cards = lab.pending_cards()
    _wait(lambda: cards.count() == 1, timeout=60, what="a pending approval in the sidebar")
    assert cards.first.locator(".chaz-tool-name").inner_text() == "deploy"
    args = cards.first.locator(".chaz-card-args").inner_text()
    assert "staging" in args and "••••••" in args and "ghp_" not in args  # the token is masked
    lab.shot("approvals-pending")
    cards.first.locator(".chaz-approve").click()
    # the run resumes, deploys to staging and parks again on production: a new card
    _wait(lambda: cards.count() == 1 and "production" in cards.first.locator(".chaz-card-args").inner_text(),
          timeout=60, what="the second (production) request")
    # the in-cell card of the first request shows who decided
    _wait(lambda: "approved by user" in waiting.inner_text(), timeout=30, what="the first card to show the decision")
    lab.shot("approvals-second-pending")
    card = cards.first
    card.locator(".chaz-reason").fill("not from the e2e test")
    card.locator(".chaz-deny").click()
    _wait(lambda: cards.count() == 0, timeout=60, what="the approvals to be consumed")
    # the waiting cell's view ends as the static transcript, drawn by the chaz renderer (the
    # live view's one widget draws .chaz-transcript parts of its own until then)
    transcript = waiting.locator(".chaz-session-output .chaz-transcript")
    transcript.wait_for(timeout=60_000)
    _wait(lambda: transcript.locator(".chaz-status").inner_text() == "idle", timeout=60, what="the cell idle")
    # the run is over: within a moment the sidebar says idle too, and its Stop is gone (no write
    # follows the run's closing entry: the run's end itself is pushed)
    statuses = lab.sidebar.locator(".chaz-session .chaz-status")
    _wait(lambda: statuses.count() >= 1 and all(s == "idle" for s in statuses.all_inner_texts()),
          timeout=5, what="all sessions idle in the sidebar once the cell is")
    _wait(lambda: lab.sidebar.locator(".chaz-session .chaz-stop").count() == 0, timeout=5,
          what="no Stop in the sidebar once the run is over")
    text = transcript.inner_text()
    assert "Staging is done. Production: deploy was denied by the user: not from the e2e test" in text
    # each gated call is one tool row that says who decided (no separate approval rows)
    outcomes = transcript.locator(".chaz-tool-approval").all_inner_texts()
    assert len(outcomes) == 2 and "approve" in outcomes[0] and "not from the e2e test" in outcomes[1]
    assert transcript.locator(".chaz-approval").count() == 0
    lab.shot("approvals-done")
    assert lab.page_errors == []


SLOW_AGENT = """%%chaz agent slow
model = "chaz/echo"
stream = false
model_options = {metadata = {chaz_delay = 1.5}}
"""


def _run_cell(lab, index: int, timeout: float = 120) -> None:
    lab.page.evaluate(
        "(i) => { const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = i;"
        " return window.jupyterapp.commands.execute('notebook:run-cell'); }",
        index,
    )
    lab.page.wait_for_timeout(300)
    lab.wait_kernel_idle(timeout)


def test_the_sidebar_says_idle_and_drops_stop_once_a_run_ends(lab):
    """A run whose reply comes after a quiet second: its closing entry is the last write, the run
    ends after it. Within a moment of the cell going idle the sidebar says idle, with no Stop."""
    page = lab.page
    lab.write_notebook("idle.ipynb", [_code("%load_ext chaz_nb"), _code(SLOW_AGENT), _code("%chaz @slow hello")])
    lab.open("idle.ipynb")
    lab.palette("Chaz: show sessions")
    lab.sidebar.wait_for(state="visible")
    for i in range(2):  # chaz loaded and the agent defined: the sidebar connects before the run
        _run_cell(lab, i)
    lab.wait_sidebar_status("connected", timeout=60)
    _run_cell(lab, 2)
    # the finished output (the lab renderer's), not the live widget: its frame is four
    # .chaz-transcript parts while the run is on
    transcript = page.locator(".jp-Cell").nth(2).locator(".chaz-session-output .chaz-transcript")
    transcript.wait_for(timeout=60_000)
    _wait(lambda: transcript.locator(".chaz-status").inner_text() == "idle", timeout=60, what="the cell idle")
    assert "echo: hello" in transcript.inner_text()
    status = lab.sidebar.locator(".chaz-session .chaz-status")
    _wait(lambda: status.count() == 1 and status.first.inner_text() == "idle", timeout=5,
          what="the sidebar to say idle once the cell is")
    assert lab.sidebar.locator(".chaz-session .chaz-stop").count() == 0
    assert lab.page_errors == []
