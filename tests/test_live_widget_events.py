"""Forged and stale events from the live view's page (session_live.py), on both stores.

The page's widget sends ``decide`` / ``approve_edited`` / ``stop`` / ``earlier`` events; a
page that is stale, or a front end that forges them, may send another view's request id, a
decided request's id, wrong types or a huge text. Each gets one line on the view (the card's
status, or the view's notice line when there is no card to speak on) and decides nothing.
"""

from __future__ import annotations

from html import unescape

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.notebook.views.session import SessionView
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent

from waiting import until

ran: list = []


@tool(approval="always", risk="high")
def run_code(code: str) -> str:
    """Run code (a tool whose one argument is code, as kernel__run)."""
    ran.append(("code", code))
    return "ran"


@tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy to a target."""
    ran.append(("deploy", target))
    return "deployed"


@pytest.fixture(autouse=True)
def clear_ran():
    ran.clear()


async def parked_view(server, agent, step):
    """A live view of ``agent``'s session parked on ``step``'s call; (view, handle, card's request id)."""
    server.agents[agent] = Agent(agent, model="chaz/script", script=[step, "done: {result}"])
    sid = server.current_session(agent)
    view = SessionView(server.store, sid, status=server.session_status, follow=True, approvals=server, interval=0.01)
    handle = await server.send(sid, "go")
    await until(lambda: view._approval_widgets and server.session_status(sid) == "parked",
                view.on_update, server.store.subscribe, what="the approval card")
    view.flush()
    [rid] = view._approval_widgets
    return view, handle, rid


def decisions(store):
    return store.find_entries(T.APPROVAL_DECISION, "true")


def one_line(view, rid=None) -> str:
    """What the view says about the last event: the card's status, else the notice line."""
    state = view.widget.chaz_state
    html = state["cards"][rid]["status"] if rid else state["notice"]
    assert html and "\n" not in html and len(html) < 600, html
    assert "<script" not in html and "\u202e" not in html
    return unescape(html)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"text": ["print(1)"]}, "the edited arguments are text, not list"),
        ({"text": None}, "the edited arguments are text, not NoneType"),
        ({}, "the edited arguments are text, not NoneType"),
        ({"text": 0}, "the edited arguments are text, not int"),
        ({"text": {"code": "x"}}, "the edited arguments are text, not dict"),
    ],
)
async def test_an_approve_edited_with_no_text_runs_nothing(backend_store, fields, needle):
    """It ran the code tool with ``str(text or "")``: an empty program for a missing text,
    ``"['print(1)']"`` for a list, code the person never saw."""
    server = Server(backend_store, [], ToolRegistry([run_code]))
    view, handle, rid = await parked_view(server, "ops", {"tool": "run_code", "args": {"code": "print('hi')"}})
    view.frontend_event("approve_edited", request_id=rid, **fields)
    assert needle in one_line(view, rid)
    assert not decisions(backend_store) and server.session_status(handle.session_id) == "parked"
    view.frontend_event("approve_edited", request_id=rid, text="print('edited')")
    await handle.wait()
    assert ran == [("code", "print('edited')")]
    assert not view.live or "notice" not in view.live.state or not view.live.state["notice"]


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"decision": "approve_edited"}, "decision is approve, deny or approve_all, not 'approve_edited'"),
        ({"decision": ["approve"]}, "decision is approve, deny or approve_all, not ['approve']"),
        ({"decision": "deny", "reason": {"x": 1}}, "the reason is text, not dict"),
        ({"decision": "deny", "reason": "r" * 5_000_000}, "a decision keeps at most 2,000"),
    ],
)
async def test_a_bad_decide_is_one_line_on_the_card_and_decides_nothing(backend_store, fields, needle):
    server = Server(backend_store, [], ToolRegistry([deploy]))
    view, handle, rid = await parked_view(server, "ops", {"tool": "deploy", "args": {"target": "prod"}})
    view.frontend_event("decide", request_id=rid, **fields)
    assert needle in one_line(view, rid) and "rrrrrrrrrr" not in one_line(view, rid)
    assert not decisions(backend_store) and server.session_status(handle.session_id) == "parked"
    view.frontend_event("decide", request_id=rid, decision="deny", reason="no")
    assert "denied by the user: no" in (await handle.wait()).content


async def test_another_views_or_a_forged_request_id_decides_nothing_and_says_so(backend_store):
    """A page may only decide the cards its own view shows: not another session's request
    (which ``server.decide`` would take), not ``last``, not a made-up or decided one."""
    server = Server(backend_store, [], ToolRegistry([deploy]))
    mine, my_handle, my_rid = await parked_view(server, "ops", {"tool": "deploy", "args": {"target": "prod"}})
    theirs, their_handle, their_rid = await parked_view(server, "dev", {"tool": "deploy", "args": {"target": "qa"}})
    for rid in (their_rid, "last", "x" * 100_000, 12, None, ["a"], "<script>alert(1)</script>\u202e"):
        mine.frontend_event("decide", request_id=rid, decision="approve")
        mine.frontend_event("approve_edited", request_id=rid, text='{"target": "evil"}')
        notice = one_line(mine)
        assert "no open approval card" in notice and "in this view" in notice and "x" * 50 not in notice
    assert not decisions(backend_store) and ran == []
    for handle in (my_handle, their_handle):
        assert server.session_status(handle.session_id) == "parked"
    theirs.frontend_event("decide", request_id=their_rid, decision="deny")
    await their_handle.wait()
    mine.frontend_event("decide", request_id=their_rid, decision="approve")  # decided: still not mine
    assert "no open approval card" in one_line(mine)
    mine.frontend_event("decide", request_id=my_rid, decision="approve")
    assert (await my_handle.wait()).content == "done: deployed"
    assert ran == [("deploy", "prod")]
    [d1, d2] = decisions(backend_store)
    assert (d1.payload["request_id"], d1.payload["decision"]) == (their_rid, "deny")
    assert (d2.payload["request_id"], d2.payload["decision"]) == (my_rid, "approve")


@pytest.mark.parametrize("content", [{"event": "approve_all_everywhere"}, {"event": "x" * 100_000}])
async def test_an_unknown_event_is_one_line(store, content):
    server = Server(store, [], ToolRegistry([deploy]))
    view, handle, rid = await parked_view(server, "ops", {"tool": "deploy", "args": {"target": "prod"}})
    view.live.event(content)
    assert "the page sent an event this view does not know" in one_line(view)
    assert not decisions(store)
    view.frontend_event("decide", request_id=rid, decision="approve")
    await handle.wait()


async def test_a_drawn_widget_is_not_redrawn_by_timed_refreshes(store):
    """JupyterLab draws a NEW widget view for each update of a cell's output, losing what a person
    typed in a card. Once the page says it draws the widget ("shown"), entries written while the
    card is open reach the widget only; the output is updated again when the run ends."""
    server = Server(store, [], ToolRegistry([deploy]))
    view, handle, rid = await parked_view(server, "ops", {"tool": "deploy", "args": {"target": "prod"}})
    updates: list[bool] = []
    view._displayed, view.static_interval = True, 0.0  # as if shown in a cell; refresh at once
    view._update_static = lambda widget: updates.append(widget)  # type: ignore[method-assign]

    server.post(handle.session_id, "Message", "tick 1", sender="ops")
    await until(lambda: any(e.content == "tick 1" for e in view.transcript.entries), view.on_update, what="tick 1")
    view.flush()
    assert updates, "a page that draws no widget (nbclient, a static viewer) still gets the timed refresh"

    view.frontend_event("shown")
    assert view.widget.chaz_state["notice"] == ""  # not an unknown event
    updates.clear()
    sends = view.stats.widget_sends
    server.post(handle.session_id, "Message", "tick 2", sender="ops")
    await until(lambda: any(e.content == "tick 2" for e in view.transcript.entries), view.on_update, what="tick 2")
    view.flush()
    assert updates == [] and view.stats.widget_sends > sends  # the widget got the row, the output nothing
    assert any("tick 2" in row for row in view.widget.chaz_state["rows"])

    view.frontend_event("decide", request_id=rid, decision="approve")
    await handle.wait()
    await until(lambda: view.live is None, view.on_update, what="the view to finish")
    assert updates and updates[-1] is False  # the final static output, without the widget
