"""The kernel's tools offered by a Server (``Server.add_kernel``): recorded like every tool,
kernel__run behind its approval, and the ``data_egress`` / ``variable_changes`` views, on
DuckDB and on PostgreSQL."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.server import Server
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent

from waiting import until


@pytest.fixture
def store(backend_store):
    return backend_store


def analyst(**kw):
    script = kw.pop("script", [
        {"tool": "kernel__variables"},
        {"tool": "kernel__describe", "args": {"name": "sales"}},
        {"tool": "kernel__query",
         "args": {"sql": "SELECT region, sum(amount) AS total FROM sales GROUP BY 1 ORDER BY 1"}},
        "done: {result}",
    ])
    return Agent("analyst", model="chaz/script", script=script, tools=list(SAFE_DEFAULT_TOOLS), **kw)


def make(store, *agents):
    server = Server(store, list(agents))
    ns = {"sales": pd.DataFrame({"region": ["north", "south", "north"], "amount": [1.0, 2.0, 4.0]})}
    server.add_kernel(ns)
    return server, ns


async def test_a_scripted_agent_lists_describes_and_queries_and_the_egress_is_recorded(store):
    server, _ = make(store, analyst(data_rows=2, api_base="https://models.example.com/v1"))
    s = server.current_session("analyst")
    reply = await (await server.send(s, "which region sold most?")).wait()
    assert reply.content.splitlines() == ["done: region | total", "north | 5.0", "south | 2.0"]
    results = [e for e in store.entries(s) if e.entry_type is T.TOOL_RESULT]
    assert [e.tool_name for e in results] == ["kernel__variables", "kernel__describe", "kernel__query"]
    assert "first 2 rows:" in results[1].payload["output"]
    rows = store.execute(
        "SELECT via, agent, model, provider, host, rows_sent, columns_sent, chars_sent, policy, variables"
        " FROM data_egress ORDER BY entry_id")
    assert [r[:7] for r in rows] == [
        ("kernel__variables", "analyst", "chaz/script", "chaz", "models.example.com", 0, 0),
        ("kernel__describe", "analyst", "chaz/script", "chaz", "models.example.com", 2, 2),
        ("kernel__query", "analyst", "chaz/script", "chaz", "models.example.com", 2, 2),
    ]
    assert all(r[7] > 0 and r[8] == "sample" for r in rows)
    assert [json.loads(r[9]) if isinstance(r[9], str) else r[9] for r in rows] == [["sales"]] * 3


async def test_kernel_run_parks_for_approval_and_its_changes_are_one_query_away(store):
    server, ns = make(store, analyst(script=[
        {"tool": "kernel__run",
         "args": {"code": "top = sales.groupby('region').amount.sum()\ndel sales\ntop.idxmax()"}},
        "ran: {result}",
    ], auto_approve=["*"]))  # a glob does not waive kernel__run's approval
    s = server.current_session("analyst")
    handle = await server.send(s, "make a summary")
    await until(lambda: server.pending_approvals(), store.subscribe, what="the approval request")
    [req] = server.pending_approvals()
    assert req["tool_name"] == "kernel__run" and "top" not in ns
    server.decide(req["request_id"], "approve")
    reply = await handle.wait()
    assert "result: 'north'" in reply.content and "created top (pandas.Series, shape 2)" in reply.content
    assert "top" in ns and "sales" not in ns
    rows = store.execute("SELECT agent, variable, change, type, shape, tool_call_id FROM variable_changes"
                         " ORDER BY variable")
    assert [(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows] == [
        ("analyst", "sales", "deleted", "pandas.DataFrame", [3, 2]),
        ("analyst", "top", "created", "pandas.Series", [2]),
    ]
    # "which agent call made top?": the call is in tool_calls, with its code
    [(tool, arguments)] = store.execute(
        "SELECT c.tool, c.arguments FROM tool_calls c JOIN variable_changes v ON v.tool_call_id = c.tool_call_id"
        " WHERE v.variable = 'top'")
    assert tool == "kernel__run" and "groupby" in str(arguments)


async def test_an_auto_approve_that_names_kernel_run_waives_its_approval(store):
    server, ns = make(store, analyst(script=[{"tool": "kernel__run", "args": {"code": "x = 41 + 1"}}, "ok"],
                                     auto_approve=["kernel__run"]))
    s = server.current_session("analyst")
    reply = await (await server.send(s, "go")).wait()
    assert reply.content == "ok" and ns["x"] == 42
    assert server.pending_approvals() == []


async def test_over_the_openai_wire_every_byte_of_data_that_left_is_in_the_log(store, model_server, monkeypatch):
    """The same flow against an OpenAI-compatible HTTP server: what the provider received as
    tool results is exactly what the log holds, and data_egress names that host and size."""
    from fakes.openai_server import Call, Reply

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    query = "SELECT region, sum(amount) AS total FROM sales GROUP BY 1 ORDER BY 1"
    model_server.script(Reply(tool_calls=[Call("kernel__describe", {"name": "sales"})]),
                        Reply(tool_calls=[Call("kernel__query", {"sql": query})]), Reply("north sold most"))
    agent = Agent("analyst", model="openai/fake", api_base=model_server.openai_base, data_rows=2,
                  tools=list(SAFE_DEFAULT_TOOLS))
    server, _ = make(store, agent)
    s = server.current_session("analyst")
    reply = await (await server.send(s, "which region sold most?")).wait()
    assert reply.content == "north sold most"
    sent = [m["content"] for r in model_server.chat_requests() for m in r.body["messages"] if m["role"] == "tool"]
    sent = list(dict.fromkeys(sent))  # each request repeats the earlier tool messages
    results = [e for e in store.entries(s) if e.entry_type is T.TOOL_RESULT]
    assert sent == [e.payload["output"] for e in results]
    assert "first 2 rows:" in sent[0] and "north | 5.0" in sent[1]
    rows = store.execute("SELECT via, host, rows_sent, chars_sent FROM data_egress ORDER BY entry_id")
    assert rows == [("kernel__describe", "127.0.0.1", 2, len(sent[0])), ("kernel__query", "127.0.0.1", 2, len(sent[1]))]


async def test_a_new_string_is_reported_with_its_length_not_a_shape(store):
    server, _ = make(store, analyst(script=[
        {"tool": "kernel__run", "args": {"code": "word = 'abcd'\nitems = [1, 2, 3]"}}, "ran: {result}",
    ], auto_approve=["*"]))
    s = server.current_session("analyst")
    handle = await server.send(s, "make a word")
    await until(lambda: server.pending_approvals(), store.subscribe, what="the approval request")
    server.decide(server.pending_approvals()[0]["request_id"], "approve")
    reply = await handle.wait()
    assert "created word (str, length 4)" in reply.content and "created items (list, length 3)" in reply.content
    assert "shape" not in reply.content
