"""The approval widget and %chaz pending/approve/deny (no kernel: asyncio, globalipapp)."""

from __future__ import annotations

import json

import pytest

from chaz_nb.server.agents import Agent
from chaz_nb.core.entries import EntryType as T
from chaz_nb.notebook.views.approval import ApprovalWidget
from chaz_nb.notebook.views.display import WIDGET_MIME
from chaz_nb.notebook.views.session import SessionView
from chaz_nb.server import Server
from chaz_nb.engine.tools import ToolRegistry, tool

from ipython_harness import ip, one_line_error
from waiting import until

EVIL = "<script>alert('x')</script>"
ran: list = []


@tool(approval="always", risk="high", sensitive_params=["token"])
def deploy(target: str, token: str) -> str:
    """Deploy to a target."""
    ran.append((target, token))
    return f"deployed {target}"


@tool(approval="unless_auto_approved", risk="medium")
def search(query: str) -> str:
    """Search."""
    ran.append(("search", query))
    return f"hits for {query}"


@pytest.fixture(autouse=True)
def clear_ran():
    ran.clear()


def deployer(name="ops", target="prod", calls=1):
    step = {"tool": "deploy", "args": {"target": target, "token": "s3cret"}}
    return Agent(name, model="chaz/script", script=[step] * calls + ["result: {result}"])


async def start(store, agent=None):
    server = Server(store, [agent or deployer()], ToolRegistry([deploy, search]))
    sid = server.current_session("ops")
    handle = await server.send(sid, "ship it")
    await until(lambda: server.pending_approvals(), store.subscribe, what="a pending approval")
    return server, sid, handle


# ------------------------------------------------------------------ clicks
async def test_a_click_on_approve_resumes_the_parked_run(store):
    server, sid, handle = await start(store)
    assert server.session_status(sid) == "parked"
    [req] = server.pending_approvals()
    w = ApprovalWidget(server, req)
    assert not any(b.disabled for b in w.buttons.values())
    w.buttons["approve"].click()  # fires on_click, as a browser click does
    assert all(b.disabled for b in w.buttons.values()) and w.reason.disabled
    assert w.decided and w.outcome() == "✓ approved by user"
    assert "approved by user" in w._status.value
    reply = await handle.wait()
    assert reply.content == "result: deployed prod"
    assert ran == [("prod", "s3cret")]
    assert server.session_status(sid) == "idle"


async def test_deny_with_a_reason_tells_the_agent(store):
    server, sid, handle = await start(store)
    w = ApprovalWidget(server, server.pending_approvals()[0])
    w.reason.value = "not on a Friday"
    w.buttons["deny"].click()
    reply = await handle.wait()
    assert ran == []
    assert "denied by the user: not on a Friday" in reply.content
    assert w.outcome() == "✗ denied by user: not on a Friday"
    decision = store.find_entries(T.APPROVAL_DECISION, "true")[0]
    assert decision.payload["decision"] == "deny" and decision.payload["reason"] == "not on a Friday"


async def test_approve_all_button_records_a_session_grant(store):
    step = {"tool": "search", "args": {"query": "q"}}
    server, sid, handle = await start(store, Agent("ops", model="chaz/script", script=[step, step, "r: {result}"]))
    w = ApprovalWidget(server, server.pending_approvals()[0])
    w.buttons["approve_all"].click()
    reply = await handle.wait()
    assert reply.content == "r: hits for q"
    assert ran == [("search", "q")] * 2  # the second call did not ask
    [decision] = store.find_entries(T.APPROVAL_DECISION, "true")
    assert decision.payload["decision"] == "approve_all" and decision.payload["scope"] == "session"
    assert server.approvals.session_grant(sid, "ops", "search")
    assert "all calls to this tool in this session" in w.outcome()


async def test_a_decision_from_elsewhere_updates_the_open_widget(store):
    server, sid, handle = await start(store)
    w = ApprovalWidget(server, server.pending_approvals()[0])
    ok, _ = server.decide("last", "deny", reason="from the sidebar", decided_by="alice")
    assert ok
    assert all(b.disabled for b in w.buttons.values())
    assert w.outcome() == "✗ denied by alice: from the sidebar"
    # a late click is a no-op that says who decided first
    w.buttons["approve"].click()
    await handle.wait()
    assert ran == []
    assert len(store.find_entries(T.APPROVAL_DECISION, "true")) == 1


async def test_timeout_shows_in_the_widget(store):
    agent = deployer()
    agent.approval_timeout = 0.05
    server, sid, handle = await start(store, agent)
    w = ApprovalWidget(server, server.pending_approvals()[0])
    await handle.wait()
    assert w.decided and w.outcome().startswith("⌛ timed out (denied by default) by system")


async def test_a_widget_for_a_decided_request_starts_disabled(store):
    server, sid, handle = await start(store)
    [req] = server.pending_approvals()
    server.decide(req["request_id"], "approve")
    await handle.wait()
    w = ApprovalWidget(server, req)
    assert w.decided and all(b.disabled for b in w.buttons.values())
    assert w._unsubscribe is None


async def test_session_view_shows_one_card_under_the_call_it_gates(store):
    server = Server(store, [deployer()], ToolRegistry([deploy]))
    sid = server.current_session("ops")
    view = SessionView(store, sid, status=server.session_status, follow=True, approvals=server, interval=0.01)
    handle = await server.send(sid, "ship it")
    await until(lambda: view._approval_widgets and server.session_status(sid) == "parked",
                view.on_update, server.store.subscribe, what="the approval widget")
    view.flush()
    [aw] = view._approval_widgets.values()
    state = view.widget.chaz_state  # what the page's one widget draws
    # the card sits right under the row of the deploy call (session.js draws it after that row)
    card = state["cards"][aw.request_id]
    gated = state["rows"][card["row"]]
    assert "deploy" in gated and "waiting for approval" in gated
    assert "".join(state["rows"]).count("chaz-ap") == 0  # the live card is not drawn twice
    assert "deploy" in card["html"] and not card["done"]
    text = view.text()
    assert text.count("approval needed") == 1  # one card
    assert "asks to run" not in text and "waiting for a person" not in text
    [row] = [line for line in text.splitlines() if "⚙ deploy(" in line]
    assert row.endswith("· waiting for approval")
    assert text.index("⚙ deploy(") < text.index("approval needed")
    view.frontend_event("decide", request_id=aw.request_id, decision="approve")  # the card's Approve
    assert state["cards"][aw.request_id]["done"]  # the card says so at once (buttons disabled)
    await handle.wait()
    await until(lambda: not view.following, view.on_update, what="the view to finish")
    text = view.text()
    [row] = [line for line in text.splitlines() if "⚙ deploy(" in line]
    assert '"token": "••••••"' in row and "s3cret" not in text
    assert row.endswith("· ✓ approved by user → deployed prod")
    assert "approval needed" not in text  # decided: the row says it, no card left


# ------------------------------------------------------------------ escaping
async def test_everything_from_the_agent_is_escaped(store):
    evil = Agent("ops", model="chaz/script",
                 script=[{"tool": "deploy", "args": {"target": EVIL, "token": EVIL}}, "x"])
    server, sid, handle = await start(store, evil)
    w = ApprovalWidget(server, server.pending_approvals()[0])
    bundle = w.bundle()
    assert {"text/plain", "text/html"} <= set(bundle)
    page = bundle["text/html"] + w._head.value
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert EVIL in bundle["text/plain"]  # plain text is not HTML
    w.reason.value = EVIL
    w.buttons["deny"].click()
    assert "<script>" not in w._status.value and "&lt;script&gt;" in w._status.value
    view_html = SessionView(store, sid).html()
    assert "<script>alert" not in view_html
    await handle.wait()


class NoServer:
    """A server that decides nothing (the card's buttons are not pressed here)."""

    class store:
        @staticmethod
        def subscribe(cb):
            return lambda: None

    approvals = None

    def decide(self, *a, **k):
        return False, "nope"


def test_widget_bundle_without_a_server_entry_is_static():
    w = ApprovalWidget(NoServer(), {"request_id": "r1", "tool_name": "t<b>", "agent": "a", "session_id": 1,
                                "risk_level": "low", "arguments_display": {"x": "<i>"}}, widget=False)
    assert WIDGET_MIME not in w.bundle()
    assert "t&lt;b&gt;" in w.html() and "&lt;i&gt;" in w.html()
    assert "%chaz approve last" in w.text()


# ------------------------------------------------------------------ magics

TOOLS = """
import chaz_nb

@chaz_nb.tool(approval="always", risk="high", sensitive_params=["token"])
def deploy(target: str, token: str) -> str:
    '''Deploy.'''
    return f"deployed {target}"
"""

AGENT = """%%chaz agent ops
model = "chaz/script"
tools = ["deploy"]
script = [
  {tool = "deploy", args = {target = "staging", token = "s3cret"}},
  {tool = "deploy", args = {target = "prod", token = "s3cret"}},
  "done: {result}",
]
"""


@pytest.fixture
def chaz(chaz):
    ip.run_cell(TOOLS).raise_error()
    ip.run_cell(AGENT).raise_error()
    return chaz


LOOK = "@chaz_nb.tool(approval='unless_auto_approved')\ndef look(x: str) -> str:\n    \"\"\"Look.\"\"\"\n    return x"


def test_pending_approve_deny_from_cells(chaz, capsys):
    ip.run_line_magic("chaz", "pending")
    assert capsys.readouterr().out.strip() == "no pending approval requests"
    ip.run_line_magic("chaz", "@ops ship it")
    sid = chaz.current_session("ops")
    out = capsys.readouterr().out
    assert "· waiting for approval" in out and "%chaz approve last" in out  # the view says so
    ip.run_line_magic("chaz", "pending")
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["request", "session", "agent", "tool", "risk", "arguments"]
    rid = chaz.pending_approvals()[0]["request_id"]
    assert table[1].split()[:5] == [rid, str(sid), "ops", "deploy", "high"]
    assert '"token": "••••••"' in table[1] and "s3cret" not in table[1]
    ip.run_cell("%chaz approve last\n%chaz wait").raise_error()
    out = capsys.readouterr().out
    assert "deploy: approve by user" in out
    assert "· waiting for approval" in out  # the second call parks the run again
    ip.run_cell('%chaz deny last --reason "not prod"\n%chaz wait').raise_error()
    out = capsys.readouterr().out
    assert "deploy: deny by user (not prod)" in out
    assert chaz.session_status(sid) == "idle"
    assert chaz.store.latest(sid).content == "done: deploy was denied by the user: not prod"
    decisions = [(e.payload["decision"], e.payload["decided_by"]) for e in chaz.store.entries(sid)
                 if e.entry_type is T.APPROVAL_DECISION]
    assert decisions == [("approve", "user"), ("deny", "user")]


class _Opened(list):
    """``state.views`` that also remembers every view the cells opened (the kernel lets go of a
    finished one; a test still reads what its output showed)."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list = []

    def append(self, view) -> None:
        self.opened.append(view)
        super().append(view)


def _views(session):
    from chaz_nb.notebook import extension

    views = extension._state.views
    return [v for v in getattr(views, "opened", views) if getattr(v, "session_id", None) == session]


def test_each_cell_view_covers_its_own_step_of_the_run(chaz, capsys):
    from chaz_nb.notebook import extension

    extension._state.views = _Opened()
    ip.run_line_magic("chaz", "@ops ship it")
    sid = chaz.current_session("ops")
    [parks] = _views(sid)
    at_park = parks.text()
    ip.run_cell("%chaz approve last\n%chaz wait").raise_error()
    resumed = [v for v in _views(sid) if v is not parks][-1]
    at_second_park = resumed.text()
    ip.run_cell('%chaz deny last --reason "not prod"\n%chaz wait').raise_error()
    capsys.readouterr()
    # the first cell's output stays what it showed when its cell stopped waiting
    assert not parks.following and parks.widget is None
    assert WIDGET_MIME not in parks._sent
    assert parks._sent["text/plain"] == at_park
    first = at_park.splitlines()
    assert first[1] == "#1 user: ship it"
    assert first[2] == '#3   ⚙ deploy({"target": "staging", "token": "••••••"}) · waiting for approval'
    assert first[-1] == f"full log: %chaz log {sid}"
    # the second cell's view starts with the decision it wrote: the call's outcome, then the next park
    second = resumed._sent["text/plain"]
    assert second == at_second_park
    assert "ship it" not in second
    assert second.splitlines()[1] == "#5   ⚙ deploy · ✓ approved by user → deployed staging"
    assert second.splitlines()[2] == '#7   ⚙ deploy({"target": "prod", "token": "••••••"}) · waiting for approval'
    # the third starts with the denial; together the three views show every entry once
    third = [v for v in _views(sid) if v not in (parks, resumed)][-1]
    assert third.text().splitlines()[1].startswith("#9   ⚙ deploy · ✗ denied by user: not prod → ✗")
    shown = [e.seq for v in (parks, resumed, third) for e in v.transcript.entries if e.seq <= v._sent_seq]
    assert shown == [e.seq for e in chaz.store.entries(sid)]


def test_a_parked_wait_prints_nothing_the_view_would_contradict(chaz, capsys):
    ip.run_line_magic("chaz", "@ops ship it")
    out = capsys.readouterr().out
    assert "is waiting for a person" not in out  # no stdout line that goes stale
    [view] = _views(chaz.current_session("ops"))
    assert "· waiting for approval" in view.text()
    ip.run_line_magic("chaz", "approve last")
    view.flush()
    assert "waiting for approval" not in view.text().splitlines()[2]


def test_an_open_widget_follows_percent_chaz_approve(chaz, capsys):
    ip.run_line_magic("chaz", "@ops ship it")
    w = ApprovalWidget(chaz, chaz.pending_approvals()[0])
    ip.run_line_magic("chaz", "approve last")
    assert w.decided and all(b.disabled for b in w.buttons.values())
    assert w.outcome() == "✓ approved by user"


def test_approve_all_decides_every_open_request(chaz, capsys):
    ip.run_line_magic("chaz", "@ops ship it")
    ip.run_line_magic("chaz", "approve all")
    assert chaz.pending_approvals() == []
    assert "deploy: approve by user" in capsys.readouterr().out


def test_approve_all_calls_grants_the_session(chaz, capsys):
    ip.run_cell(LOOK).raise_error()
    ip.run_line_magic(
        "chaz", "agent viewer --model chaz/script --tools look --script "
        + repr('[{"tool": "look", "args": {"x": "a"}}, {"tool": "look", "args": {"x": "b"}}, "saw {result}"]')
    )
    ip.run_line_magic("chaz", "@viewer look twice")
    ip.run_cell("%chaz approve last --all-calls\n%chaz wait").raise_error()
    sid = chaz.current_session("viewer")
    assert chaz.store.latest(sid).content == "saw b"
    assert chaz.approvals.session_grant(sid, "viewer", "look")


def test_bad_input_is_one_line(chaz, capsys):
    one_line_error(capsys, "%chaz approve last", "no pending approval requests")
    one_line_error(capsys, "%chaz approve all", "no pending approval requests")
    one_line_error(capsys, "%chaz pending now", "takes no arguments")
    one_line_error(capsys, "%chaz approve", "say which request")
    one_line_error(capsys, "%chaz deny", "say which request")
    ip.run_line_magic("chaz", "@ops ship it")
    one_line_error(capsys, "%chaz approve nosuchid", "no approval request 'nosuchid'")
    one_line_error(capsys, "%chaz approve last --fast", "unknown option --fast")
    one_line_error(capsys, "%chaz deny last --reason", "--reason needs a text")
    one_line_error(capsys, "%chaz deny last --why x", "unknown option --why")
    one_line_error(capsys, "%chaz deny a b", "say which request")
    one_line_error(capsys, "%chaz deny 'unclosed", "cannot parse")
    rid = chaz.pending_approvals()[0]["request_id"]
    ip.run_line_magic("chaz", f"deny {rid}")
    one_line_error(capsys, f"%chaz approve {rid}", "already decided: deny by user")


def test_agent_auto_approve_option(chaz, capsys):
    ip.run_cell(LOOK).raise_error()
    ip.run_line_magic(
        "chaz", "agent viewer --model chaz/script --tools look --auto-approve look --approval-timeout 5 "
        "--script '[{\"tool\": \"look\", \"args\": {\"x\": \"ok\"}}, \"saw {result}\"]'"
    )
    assert "auto-approves look" in capsys.readouterr().out
    agent = chaz.agents["viewer"]
    assert agent.auto_approve == ["look"] and agent.approval_timeout == 5.0
    ip.run_line_magic("chaz", "@viewer look")
    assert chaz.store.latest(chaz.current_session("viewer")).content == "saw ok"
    ip.run_cell('%%chaz agent v2\nmodel = "chaz/echo"\nauto_approve = ["look"]\napproval_timeout = 9').raise_error()
    assert chaz.agents["v2"].auto_approve == ["look"] and chaz.agents["v2"].approval_timeout == 9


def test_a_long_argument_cannot_push_the_others_out_of_the_approval_card():
    """The card cut the whole JSON at 4,000 characters: a model that sent a 5,000-character
    ``note`` first had its ``target`` approved unseen. Each long value is cut on its own (saying
    by how much), so every argument is in the card."""
    from chaz_nb.notebook.views.approval import pretty_arguments

    shown = pretty_arguments({"note": "x" * 5000, "nested": {"blob": ["y" * 5000]}, "target": "/etc/passwd"})
    assert '"target": "/etc/passwd"' in shown and '"nested"' in shown
    assert "more characters" in shown and len(shown) < 4000
    shown = pretty_arguments({f"k{i}": "v" * 300 for i in range(40)})  # many medium values: all keys, or a count
    assert '"k0"' in shown and ("k39" in shown or "more characters" in shown)
    assert pretty_arguments('{"a": 1}') == '{\n  "a": 1\n}'


# ------------------------------------------------------------------ approve with edits
@tool(approval="always", risk="high")
def run_code(code: str) -> str:
    """Run code (a tool whose one argument is code, as kernel__run)."""
    ran.append(("code", code))
    return f"ran {len(code.splitlines())} lines"


async def start_code(store, code):
    agent = Agent("ops", model="chaz/script", script=[{"tool": "run_code", "args": {"code": code}}, "{result}"])
    server = Server(store, [agent], ToolRegistry([run_code]))
    handle = await server.send(server.current_session("ops"), "go")
    await until(lambda: server.pending_approvals(), store.subscribe, what="a pending approval")
    return server, handle


async def test_edit_then_approve_edited_runs_the_tool_with_the_edited_arguments(store):
    server, sid, handle = await start(store)
    w = ApprovalWidget(server, server.pending_approvals()[0])
    assert w.editor.layout.display == "none" and w.buttons["approve_edited"].layout.display == "none"
    w.edit_button.click()
    assert w.editor.layout.display is None and w.buttons["approve_edited"].layout.display is None
    assert json.loads(w.editor.value) == {"target": "prod", "token": "••••••"}
    w.editor.value = w.editor.value.replace('"prod"', '"staging"')
    w.buttons["approve_edited"].click()
    assert w.decided and w.outcome() == "✓ approved by user with edited arguments"
    assert w.editor.disabled and all(b.disabled for b in w.buttons.values())
    assert "edited to:" in w.html() and "staging" in w.html() and "edited to:" in w.text()
    await handle.wait()
    assert ran == [("staging", "s3cret")]  # the masked token, untouched, reached the tool as sent


async def test_a_bad_edit_says_why_in_the_card_and_the_request_stays_open(store):
    server, sid, handle = await start(store)
    w = ApprovalWidget(server, server.pending_approvals()[0])
    w.edit_button.click()
    w.editor.value = '{"target": 42, "token": "••••••"}'
    w.buttons["approve_edited"].click()
    assert not w.decided and not any(b.disabled for b in w.buttons.values())
    assert "target: 42 is not of type" in w._status.value and "stays open" in w._status.value
    assert server.session_status(sid) == "parked" and len(server.pending_approvals()) == 1
    w.editor.value = '{"target": "qa", "token": "••••••"'  # not JSON
    w.buttons["approve_edited"].click()
    assert not w.decided and "not JSON" in w._status.value
    w.editor.value = '{"target": "qa", "token": "••••••"}'
    w.buttons["approve_edited"].click()
    await handle.wait()
    assert ran == [("qa", "s3cret")]


async def test_a_code_call_is_shown_and_edited_as_code(store):
    code = "x = 1\nprint('<b>' if x else '\u202e')\n"
    server, handle = await start_code(store, code)
    w = ApprovalWidget(server, server.pending_approvals()[0])
    page = w.html()
    # a numbered code block, escaped, the hidden character named; not JSON
    assert "class='chaz-code'" in page and "<span class='chaz-code-no'>2</span>" in page
    assert "&lt;b&gt;" in page and "<b>'" not in page and "&lt;U+202E&gt;" in page and "\u202e" not in page
    assert '"code":' not in page
    assert " 1 │ x = 1" in w.text()
    w.edit_button.click()
    assert w.editor.value == "x = 1\nprint('<b>' if x else '<U+202E>')\n"  # the code, not JSON
    w.editor.value = "x = 2\nprint(x)\n"
    w.buttons["approve_edited"].click()
    assert (await handle.wait()).content == "ran 2 lines"
    assert ran == [("code", "x = 2\nprint(x)\n")]
    assert "edited to:" in w.html() and "x = 2" in w.html()


async def test_an_untouched_code_edit_is_a_plain_approve_of_the_code_as_sent(store):
    code = "print('\u202eabc')"
    server, handle = await start_code(store, code)
    w = ApprovalWidget(server, server.pending_approvals()[0])
    w.edit_button.click()
    w.buttons["approve_edited"].click()
    await handle.wait()
    assert ran == [("code", code)]  # the named character, left as shown, is the model's own
    assert w.outcome() == "✓ approved by user"


async def test_the_session_view_shows_code_calls_as_code_and_what_the_approver_edited(store):
    server, handle = await start_code(store, "import os\nos.remove('<x>')")
    view = SessionView(store, handle.session_id)
    page = view.html()
    assert "<div class='chaz-label'>code</div><pre class='chaz-code'>" in page
    assert "os.remove(&#x27;&lt;x&gt;&#x27;)" in page
    [req] = server.pending_approvals()
    assert server.decide(req["request_id"], "approve", arguments={"code": "print('kept')"})[0]
    await handle.wait()
    page = SessionView(store, handle.session_id).html()
    assert "<div class='chaz-label'>ran as edited by the approver</div>" in page and "print(&#x27;kept&#x27;)" in page
    # the collapsed row shows the code that ran; the model's is kept, marked as proposed
    assert "(code=&quot;print(&#x27;kept&#x27;)&quot;)" in page and "proposed by the model" in page
    assert "os.remove(&#x27;&lt;x&gt;&#x27;)" in page
    assert "⚙ run_code({\"code\": \"print('kept')\"})" in SessionView(store, handle.session_id).text()
    assert ran == [("code", "print('kept')")]


async def test_a_huge_deny_reason_in_the_card_is_refused_in_one_line_and_the_card_stays_open(store):
    server, sid, handle = await start(store)
    w = ApprovalWidget(server, server.pending_approvals()[0])
    w.reason.value = "r" * 5_000_000
    w.buttons["deny"].click()
    assert not w.decided and not store.find_entries(T.APPROVAL_DECISION, "true")
    assert "a decision keeps at most 2,000" in w._status.value and "rrrrrrrrrr" not in w._status.value
    w.reason.value = "too long, sorry"
    w.buttons["deny"].click()
    assert "denied by the user: too long, sorry" in (await handle.wait()).content


def test_approve_has_one_colour_in_the_cell_and_in_the_sidebar():
    """Issue 26 §5: Approve was green in the cell (ipywidgets success) and blue in the sidebar
    (jp-mod-accept); both now take --chaz-approve-color from the lab extension's base.css."""
    import pathlib
    import re

    w = ApprovalWidget(NoServer(), {"request_id": "r1", "tool_name": "t", "agent": "a", "session_id": 1,
                                "risk_level": "low", "arguments_display": {}})
    assert "chaz-ap-approve" in w.buttons["approve"]._dom_classes
    w.close()
    css = (pathlib.Path(__file__).parent.parent / "labextension/style/base.css").read_text()
    assert re.search(r"--chaz-approve-color:\s*var\(--jp-", css)
    rule = re.search(r"([^{}]*)\{\s*background-color:\s*var\(--chaz-approve-color\)", css)
    assert rule, "no rule paints buttons with --chaz-approve-color"
    selectors = rule.group(1)
    assert ".chaz-panel button.jp-mod-styled.chaz-approve" in selectors  # the sidebar's Approve
    assert ".jupyter-button.widget-button.chaz-ap-approve" in selectors  # the cell's Approve
