"""The audit widget: rows from the audit views, filters, totals, live refresh, static fallback."""

from __future__ import annotations

import asyncio
import re

import pytest

from chaz_nb.server.agents import Agent
from chaz_nb.core.entries import EntryType as T
from chaz_nb.notebook.views.audit import ALL, AuditView, Totals
from chaz_nb.notebook.views.display import WIDGET_MIME
from chaz_nb.server import Server
from chaz_nb.engine.tools import ToolRegistry, tool

from waiting import past, until

EVIL = "<script>alert('x')</script>"


@tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy."""
    return f"deployed {target}"


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool
def explode(why: str) -> str:
    """Fails."""
    raise RuntimeError(f"kaboom {why}")


async def wait_pending(server, n=1):
    await until(lambda: len(server.pending_approvals()) >= n, server.store.subscribe, what="a pending approval")
    return server.pending_approvals()


@pytest.fixture
async def scenario(store):
    """lead: spawns helper (add, then a failing explode), then deploy (approved)."""
    server = Server(
        store,
        [
            Agent("lead", model="chaz/script", tools=["spawn_agent", "deploy", "add", "explode"], script=[
                {"tool": "spawn_agent", "args": {"agent": "helper", "task": "crunch"}},
                {"tool": "deploy", "args": {"target": "prod"}},
                "lead done",
            ]),
            Agent("helper", model="chaz/script", tools=["add", "explode"], script=[
                {"tool": "add", "args": {"a": 1, "b": 2}},
                {"tool": "explode", "args": {"why": EVIL}},
                "helper done",
            ]),
        ],
        ToolRegistry([deploy, add, explode]),
    )
    lead = server.current_session("lead")
    handle = await server.send(lead, "go")
    await wait_pending(server)
    server.decide("last", "approve")
    await handle.wait()
    return server, lead


async def test_rows_come_from_the_tool_calls_view(scenario, store):
    server, lead = scenario
    view = AuditView(store, follow=False, widget=False)
    assert [(r.agent, r.tool, r.status, r.approval) for r in view.rows] == [
        ("lead", "spawn_agent", "ok", ""),
        ("helper", "add", "ok", ""),
        ("helper", "explode", "error", ""),
        ("lead", "deploy", "ok", "approved"),
    ]
    assert view.rows[3].approval_text() == "approved by user"
    assert view.rows[1].arguments == '{"a": 1, "b": 2}' and view.rows[1].output == "3"
    assert view.agents() == ["helper", "lead"]
    assert view.tools() == ["add", "deploy", "explode", "spawn_agent"]


async def test_session_scope_covers_the_session_and_its_children(scenario, store):
    server, lead = scenario
    child = next(s.id for s in store.sessions() if s.kind == "child")
    assert len(AuditView(store, lead, follow=False, widget=False).rows) == 4
    only_child = AuditView(store, child, follow=False, widget=False)
    assert [r.tool for r in only_child.rows] == ["add", "explode"]
    assert f"session {child} and the sessions it spawned" in only_child.text()


async def test_filters_narrow_the_rows(scenario, store):
    view = AuditView(store, follow=False)
    assert len(view.visible_rows()) == 4
    view.set_filter(agent="helper")
    assert [r.tool for r in view.visible_rows()] == ["add", "explode"]
    view.set_filter(errors_only=True)
    assert [r.tool for r in view.visible_rows()] == ["explode"]
    view.set_filter(agent=ALL, errors_only=False, approval_only=True)
    assert [r.tool for r in view.visible_rows()] == ["deploy"]
    view.set_filter(approval_only=False, tool="add")
    assert [r.tool for r in view.visible_rows()] == ["add"]
    assert "tool add" in view.text()
    # the widgets drive the same filters
    view.set_filter(tool=ALL)
    view._agent_dd.value = "lead"
    assert [r.tool for r in view.visible_rows()] == ["spawn_agent", "deploy"]
    view._errors_cb.value = True
    assert view.visible_rows() == [] and "no tool call matches the filters" in view._table_w.value
    view._errors_cb.value = False
    view._approval_cb.value = True
    assert [r.tool for r in view.visible_rows()] == ["deploy"]
    assert "deploy" in view._table_w.value and "spawn_agent" not in view._table_w.value
    assert set(view._agent_dd.options) == {ALL, "helper", "lead"}
    view.close()


async def test_totals_line(scenario, store):
    view = AuditView(store, follow=False, widget=False)
    totals = view.totals()
    calls = store.execute("SELECT count(*), count(*) FILTER (is_error), sum(duration_ms) FROM tool_calls")[0]
    tokens, cost = store.execute(
        "SELECT sum(prompt_tokens) + sum(completion_tokens), sum(cost_usd) FROM runs")[0]
    assert (totals.calls, totals.errors) == (4, 1) == (calls[0], calls[1])
    assert totals.tool_ms == pytest.approx(calls[2])
    assert totals.tokens == tokens > 0
    assert totals.cost == cost == 0.0
    line = view.text().splitlines()[1]
    assert line.startswith("4 calls · 1 error · tool time ") and line.endswith(f" · {tokens:,} tokens · cost $0.0000")
    assert line in view.html()
    view.set_filter(agent="helper")
    helper_tokens = store.execute(
        "SELECT sum(prompt_tokens) + sum(completion_tokens) FROM runs WHERE agent = 'helper'")[0][0]
    t = view.totals()
    assert (t.calls, t.errors, t.tokens) == (2, 1, helper_tokens)


def test_unpriced_runs_make_the_cost_unknown():
    assert Totals(tokens=7, cost=None).text().endswith("7 tokens · cost n/a")
    assert Totals(cost=0.5, unpriced=2).text().endswith("cost $0.5000 (+2 runs without a price)")
    assert (
        Totals(calls=1, tool_ms=12_345.0, cost=0.0).text()
        == "1 call · 0 errors · tool time 12.3 s · 0 tokens · cost $0.0000"
    )


async def test_a_new_tool_call_appears_live_after_the_throttle(store):
    sid = store.create_session("calc")
    view = AuditView(store, interval=0.2)
    assert view.following and view.rows == []
    assert "(no tool calls)" in view.text()
    refreshes = view.refreshes
    loop = asyncio.get_running_loop()
    first_write = loop.time()
    for i in range(20):  # a burst: one refresh, not twenty
        store.append(sid, T.TOOL_CALL, "calc", f"add {i}", tool_call_id=f"c{i}", tool_name="add",
                     payload={"arguments": {"a": i, "b": 1}})
    await asyncio.sleep(0)  # one loop iteration: a refresh scheduled on write would run here
    assert view.rows == []  # not before the throttle
    await until(lambda: view.refreshes > refreshes, view.on_update, what="the throttled refresh")
    assert loop.time() - first_write >= view.interval  # the refresh came after the throttle
    assert len(view.rows) == 20 and view.refreshes == refreshes + 1
    assert [r.status for r in view.rows] == ["running"] * 20
    assert "add" in view._table_w.value and "add" in view._tool_dd.options
    store.append(sid, T.TOOL_RESULT, "calc", "add: 1", tool_call_id="c0", tool_name="add",
                 payload={"output": "1", "is_error": False, "duration_ms": 2.5})
    refreshes = view.refreshes
    await until(lambda: view.refreshes > refreshes, view.on_update, what="the refresh after the result")
    assert view.rows[0].status == "ok" and view.rows[0].duration_ms == 2.5
    n_subscribers = len(store._subscribers)
    view.close()
    assert len(store._subscribers) == n_subscribers - 1 and not view.following
    store.append(sid, T.TOOL_CALL, "calc", "late", tool_call_id="late", tool_name="add", payload={"arguments": {}})
    await past(view.interval)  # a refresh the write could have armed would have run by now
    assert len(view.rows) == 20


async def test_a_pending_approval_shows_as_waiting(store):
    server = Server(store, [Agent("ops", model="chaz/script", tools=["deploy"],
                                  script=[{"tool": "deploy", "args": {"target": "x"}}, "ok"])],
                    ToolRegistry([deploy]))
    view = AuditView(store, interval=0.05)
    handle = await server.send(server.current_session("ops"), "go")
    await wait_pending(server)
    await until(lambda: view.rows and view.rows[0].approval, view.on_update, what="the row's approval state")
    assert [(r.tool, r.status, r.approval) for r in view.rows] == [("deploy", "waiting", "pending")]
    view.set_filter(approval_only=True)
    assert len(view.visible_rows()) == 1
    server.decide("last", "deny", reason="no")
    await handle.wait()
    await until(lambda: view.rows[0].status not in ("waiting", "running"), view.on_update, what="the finished row")
    assert [(r.status, r.approval) for r in view.rows] == [("error", "denied")]
    view.close()


async def test_static_fallback_has_the_rows_escaped(scenario, store):
    view = AuditView(store, follow=False)
    bundle = view.bundle()
    assert set(bundle) >= {"text/plain", "text/html"}
    html = bundle["text/html"]
    assert "<script" not in html
    assert "kaboom &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    for tool_name in ("spawn_agent", "add", "explode", "deploy"):
        assert f"<td>{tool_name}</td>" in html
    assert html.count("<details>") == 4 and "arguments:<pre>" in html and "output:<pre>" in html
    text = bundle["text/plain"]
    lines = text.splitlines()
    assert lines[0] == "tool calls · all sessions"
    assert lines[2].split()[:7] == ["#", "session", "agent", "tool", "status", "approval", "arguments"]
    assert len(lines) == 3 + 4
    assert re.search(r"helper +explode +error", text) and "approved by user" in text
    assert EVIL[:20] in text  # plain text is text
    # the widget view is in the bundle where a widget exists
    if view.widget is not None and getattr(view.widget, "model_id", None):
        assert WIDGET_MIME in bundle
    view.close()


async def test_the_views_queries_cannot_change_the_store(scenario, store, monkeypatch):
    """Its SQL runs in a read-only transaction: even a query that deletes would be refused."""
    import duckdb

    from chaz_nb.notebook.views import audit as audit_widget

    view = AuditView(store, follow=False, widget=False)
    before = store.execute("SELECT count(*) FROM entries")
    monkeypatch.setattr(audit_widget, "_RUNS", (
        "WITH gone AS (DELETE FROM entries RETURNING id) "
        "SELECT 'x', count(*), 0, 0.0, 0 FROM gone WHERE id NOT IN ({scope})"
    ))
    with pytest.raises(duckdb.Error, match="read-only"):
        view.load()
    assert store.execute("SELECT count(*) FROM entries") == before


@pytest.fixture
def outputs(monkeypatch):
    """What a frontend holds for each display_id: the last bundle sent (display or update)."""
    import IPython.display as ipd

    shown: dict[str, tuple[dict, dict]] = {}

    def display(obj, raw=False, metadata=None, display_id=None, **kw):
        shown[display_id] = (obj, metadata or {})

    def update_display(obj, raw=False, metadata=None, display_id=None, **kw):
        assert display_id in shown, "an update for an output that was never displayed"
        shown[display_id] = (obj, metadata or {})

    monkeypatch.setattr(ipd, "display", display)
    monkeypatch.setattr(ipd, "update_display", update_display)
    return shown


async def test_a_finished_audit_view_leaves_its_static_output(scenario, store, outputs):
    view = AuditView(store, loop=asyncio.get_running_loop())
    view.display()
    data, metadata = outputs[view.display_id]
    assert metadata == {"chaz_nb": {"static_fallback": True}}  # saved without the widget by the lab extension
    assert view.widget is not None and WIDGET_MIME in data  # live: the widget view
    view.finish()
    data, metadata = outputs[view.display_id]
    assert WIDGET_MIME not in data  # the output now renders without a kernel
    assert "<td>deploy</td>" in data["text/html"] and "tool calls · all sessions" in data["text/plain"]
    assert view.widget is None and not view.following
    view.close()


async def test_a_finished_session_view_leaves_its_static_output(store, outputs):
    from chaz_nb.notebook.views.session import SessionView

    server = Server(store, [Agent("calc", model="chaz/echo")], ToolRegistry([add]))
    sid = server.current_session("calc")
    view = SessionView(store, sid, status=server.session_status, follow=True, interval=0.01)
    view.display()
    assert WIDGET_MIME in outputs[view.display_id][0]
    handle = await server.send(sid, "hello")
    await handle.wait()
    await until(lambda: not view.following, view.on_update, what="the view to finish")
    data, metadata = outputs[view.display_id]
    assert WIDGET_MIME not in data and "calc: echo: hello" in data["text/plain"]
    assert metadata == {"chaz_nb": {"static_fallback": True}}



def test_nothing_priced_reads_n_a_not_zero_dollars():
    """Issue 26 §5: six runs of a model without a price (and free offline runs) read
    ``cost n/a (6 runs without a price)``, not ``cost $0.0000 (+6 runs without a price)``."""
    assert Totals(cost=0.0, unpriced=6).text().endswith("cost n/a (6 runs without a price)")
    assert Totals(cost=None, unpriced=1).text().endswith("cost n/a (1 run without a price)")
    assert Totals(cost=0.25, unpriced=6).text().endswith("cost $0.2500 (+6 runs without a price)")


def test_audit_cells_do_not_wrap_and_the_table_scrolls_sideways():
    from chaz_nb.notebook.views import audit

    assert "white-space:nowrap" in audit._CSS.split(".chaz-audit .chaz-io{")[1].split("}")[0]
    assert "word-break:break-word" not in audit._CSS
