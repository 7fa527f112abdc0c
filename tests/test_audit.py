"""The audit views answer what happened, from the entries alone."""

import asyncio
import json

import pytest

from chaz_nb.server.agents import Agent
from chaz_nb.core.audit import VIEWS
from chaz_nb.core.entries import EntryType as T
from chaz_nb.server import Server
from chaz_nb.engine.tools import ToolRegistry, tool

from waiting import until


@pytest.fixture
def store(backend_store):
    """Every case on DuckDB and on PostgreSQL (tests/conftest.py's backend_store)."""
    return backend_store


@tool(approval="unless_auto_approved", risk="medium")
def search(query: str) -> str:
    """Search."""
    return f"hits for {query}"


@tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy."""
    return "deployed"


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool
def explode() -> str:
    """Fails."""
    raise RuntimeError("kaboom")


async def wait_pending(server, n=1):
    await until(lambda: len(server.pending_approvals()) >= n, server.store.subscribe, what="a pending approval")
    return server.pending_approvals()


@pytest.fixture
async def scenario(store):
    server = Server(
        store,
        [
            Agent("lead", model="chaz/script", script=[
                {"tool": "search", "args": {"query": "papers"}},
                {"tool": "spawn_agent", "args": {"agent": "helper", "task": "crunch"}},
                {"tool": "deploy", "args": {"target": "prod"}},
                "lead done",
            ]),
            Agent("helper", model="chaz/script", tools=["add", "explode"], script=[
                {"tool": "add", "args": {"a": 1, "b": 2}}, {"tool": "explode", "args": {}}, "helper done",
            ]),
            Agent("broken", model="gpt-4o-mini", model_options={"mock_response": "litellm.InternalServerError"}),
        ],
        ToolRegistry([search, deploy, add, explode]),
    )
    lead = server.current_session("lead")
    handle = await server.send(lead, "go")
    [first] = await wait_pending(server)
    server.decide(first["request_id"], "approve")
    await until(lambda: server.pending_approvals() and server.pending_approvals()[0]["tool_name"] == "deploy",
                store.subscribe, what="the deploy approval")
    server.decide("last", "deny", reason="frozen")
    await handle.wait()
    await (await server.send(server.current_session("broken"), "hi")).wait()
    return server, lead


def rows(store, query):
    rel = store.sql(query)
    return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]


async def test_views_exist_in_every_store(store):
    query = "SELECT table_name FROM information_schema.tables WHERE table_type = 'VIEW'"
    names = {r[0] for r in store.sql(query).fetchall()}
    assert set(VIEWS) <= names


async def test_tool_calls_view(scenario, store):
    server, lead = scenario
    calls = rows(store, "SELECT * FROM tool_calls ORDER BY call_entry_id")
    assert [(c["agent"], c["tool"]) for c in calls] == [
        ("lead", "search"), ("lead", "spawn_agent"), ("helper", "add"), ("helper", "explode"), ("lead", "deploy"),
    ]
    by_tool = {c["tool"]: c for c in calls}
    assert json.loads(by_tool["search"]["arguments"]) == {"query": "papers"}
    assert by_tool["search"]["output"] == "hits for papers"
    assert (by_tool["search"]["approval"], by_tool["search"]["decided_by"]) == ("approved", "user")
    assert (by_tool["deploy"]["approval"], by_tool["deploy"]["is_error"]) == ("denied", True)
    assert by_tool["deploy"]["output"] == "deploy was denied by the user: frozen"
    assert by_tool["explode"]["is_error"] and by_tool["explode"]["output"] == "RuntimeError: kaboom"
    assert by_tool["add"]["approval"] == "none" and by_tool["add"]["is_error"] is False
    for c in calls:
        assert c["finished_at"] >= c["started_at"]
        assert c["duration_ms"] is not None and c["duration_ms"] >= 0
        assert c["run_id"] is not None and c["tool_call_id"]
    # the wait for a person is not tool time
    assert by_tool["search"]["duration_ms"] < 1000


async def test_runs_view(scenario, store):
    server, lead = scenario
    runs = {r["agent"]: r for r in rows(store, "SELECT * FROM runs")}
    assert set(runs) == {"lead", "helper", "broken"}
    lead_run, helper_run, broken_run = runs["lead"], runs["helper"], runs["broken"]
    assert (lead_run["status"], lead_run["trigger_type"], lead_run["steps"], lead_run["tool_calls"]) == (
        "ok",
        "Message",
        4,
        3,
    )
    assert lead_run["prompt_tokens"] > 0 and lead_run["completion_tokens"] > 0 and lead_run["cost_usd"] == 0.0
    assert (helper_run["trigger_type"], helper_run["parent_run"], helper_run["status"]) == (
        "Directive",
        lead_run["run_id"],
        "ok",
    )
    assert lead_run["parent_run"] is None
    assert broken_run["status"] == "error" and broken_run["steps"] == 0 and broken_run["cost_usd"] == 0.0
    assert lead_run["latency_ms"] >= helper_run["latency_ms"] > 0
    assert lead_run["finished_at"] >= lead_run["started_at"]
    assert lead_run["model"] == "chaz/script"
    assert lead_run["answers"] == helper_run["answers"] == 1


async def test_runs_view_counts_the_messages_each_run_answers(store):
    server = Server(store, [Agent("assistant")])
    s = server.current_session("assistant")
    handles = await asyncio.gather(*(server.send(s, f"m{i}") for i in range(5)))
    await asyncio.gather(*(h.wait() for h in handles))
    runs = rows(store, "SELECT run_id, answers FROM runs ORDER BY run_id")
    acks = {e.id: e.payload["answers_count"] for e in store.entries(s) if e.entry_type is T.ACK}
    assert {r["run_id"]: r["answers"] for r in runs} == acks
    assert sum(r["answers"] for r in runs) == 5 and len(runs) < 5  # answered together


async def test_runs_view_shows_parked_and_running(store):
    server = Server(
        store,
        [Agent("ops", model="chaz/script", script=[{"tool": "deploy", "args": {"target": "x"}}, "ok"])],
        ToolRegistry([deploy]),
    )
    handle = await server.send(server.current_session("ops"), "go")
    await wait_pending(server)
    assert rows(store, "SELECT status FROM runs") == [{"status": "parked"}]
    assert rows(store, "SELECT decision FROM approvals") == [{"decision": "pending"}]
    server.decide("last", "approve")
    await handle.wait()
    assert rows(store, "SELECT status FROM runs") == [{"status": "ok"}]


async def test_approvals_view(scenario, store):
    approvals = rows(store, "SELECT * FROM approvals ORDER BY requested_at, entry_id")
    assert [(a["tool_name"], a["decision"], a["decided_by"], a["reason"]) for a in approvals] == [
        ("search", "approve", "user", None), ("deploy", "deny", "user", "frozen"),
    ]
    for a in approvals:
        assert a["agent"] == "lead" and a["wait_ms"] >= 0 and a["timeout_secs"] == 300
        assert a["risk_level"] in ("medium", "high")
        assert json.loads(a["arguments_display"])


async def test_approvals_view_ignores_agent_and_second_decisions(scenario, store):
    server, lead = scenario
    request_id = rows(store, "SELECT request_id FROM approvals WHERE tool_name = 'search'")[0]["request_id"]
    store.append(lead, T.APPROVAL_DECISION, "user", "deny", payload={"request_id": request_id, "decision": "deny"})
    store.append(lead, T.APPROVAL_DECISION, "lead", "deny", payload={"request_id": request_id, "decision": "deny"})
    assert rows(store, f"SELECT decision FROM approvals WHERE request_id = '{request_id}'") == [{"decision": "approve"}]


async def test_messages_view_is_the_conversation(scenario, store):
    server, lead = scenario
    msgs = rows(store, f"SELECT entry_type, sender, content FROM messages WHERE session_id = {lead} ORDER BY seq")
    assert msgs == [
        {"entry_type": "Message", "sender": "user", "content": "go"},
        {"entry_type": "Message", "sender": "lead", "content": "lead done"},
    ]
    directive = rows(store, "SELECT * FROM messages WHERE entry_type = 'Directive'")[0]
    assert (directive["sender"], directive["content"], directive["session_agent"], directive["session_kind"]) == (
        "lead", "crunch", "helper", "child")


async def test_interrupted_run_shows_as_interrupted(db_path):
    from chaz_nb.core.store import SessionStore

    store = SessionStore(db_path)
    server = Server(
        store,
        [Agent("ops", model="chaz/script", script=[{"tool": "deploy", "args": {"target": "x"}}, "ok"])],
        ToolRegistry([deploy]),
    )
    await server.send(server.current_session("ops"), "go")
    await wait_pending(server)
    store._con.close()  # the kernel dies
    reopened = SessionStore(db_path)
    Server(reopened, [], ToolRegistry([deploy]))
    assert rows(reopened, "SELECT status FROM runs") == [{"status": "interrupted"}]
    assert rows(reopened, "SELECT decision, decided_by FROM approvals") == [
        {"decision": "timed_out", "decided_by": "system"}
    ]
    reopened.close()


async def test_cost_comes_from_litellms_price_map_and_is_null_when_unknown(store):
    server = Server(store, [
        Agent("known", model="gpt-4o-mini", model_options={"mock_response": "priced answer"}),
        Agent("unknown", model="openai/some-private-model", model_options={"mock_response": "unpriced"}),
    ])
    for name in ("known", "unknown"):
        await (await server.send(server.current_session(name), "hello there")).wait()
    costs = {r["agent"]: r["cost_usd"] for r in rows(store, "SELECT agent, cost_usd FROM runs")}
    assert costs["known"] is not None and costs["known"] > 0
    assert costs["unknown"] is None
