"""Approve with edits: a person changes a parked call's arguments, the tool runs with them, and
the log and the audit views keep both argument sets (on DuckDB and on PostgreSQL)."""

from __future__ import annotations

import json

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent

from waiting import until

ran: list[tuple] = []
KEY = "sk-test-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"


@tool(approval="always", risk="high", sensitive_params=["token"])
def deploy(target: str, token: str, replicas: int = 1) -> str:
    """Deploy to a target."""
    ran.append(("deploy", target, token, replicas))
    return f"deployed {target} x{replicas}"


@tool(approval="always", risk="high")
def wipe(path: str) -> str:
    """Delete a path."""
    ran.append(("wipe", path))
    return f"wiped {path}"


@pytest.fixture
def store(backend_store):
    """Every case on DuckDB and on PostgreSQL."""
    return backend_store


@pytest.fixture(autouse=True)
def clear_ran():
    ran.clear()


def make(store, args=None):
    args = args or {"target": "prod", "token": "s3cret"}
    agent = Agent("ops", model="chaz/script", script=[{"tool": "deploy", "args": args}, "result: {result}"])
    return Server(store, [agent], ToolRegistry([deploy, wipe]))


async def parked(server):
    await until(lambda: server.pending_approvals(), server.store.subscribe, what="a pending approval")
    [request] = server.pending_approvals()
    return request


def of_type(store, sid, kind):
    return [e for e in store.entries(sid) if e.entry_type is kind]


def as_json(value):
    return json.loads(value) if isinstance(value, str) else value


async def test_the_tool_runs_with_the_edited_arguments_and_the_log_keeps_both(store):
    server = make(store)
    handle = await server.send(server.current_session("ops"), "ship it")
    req = await parked(server)
    edit = {"target": "staging", "token": "••••••", "replicas": 3}
    ok, message = server.decide(req["request_id"], "approve", arguments=edit)
    assert ok and "approve with edited arguments by user" in message
    reply = await handle.wait()
    # the untouched (masked) token reaches the tool as the model sent it; the rest as edited
    assert ran == [("deploy", "staging", "s3cret", 3)]
    assert reply.content == "result: deployed staging x3"
    [decision] = of_type(store, handle.session_id, T.APPROVAL_DECISION)
    assert decision.payload["edited"] is True
    assert decision.payload["original_arguments"] == {"target": "prod", "token": "••••••"}
    assert decision.payload["arguments"] == {"target": "staging", "token": "••••••", "replicas": 3}
    [result] = of_type(store, handle.session_id, T.TOOL_RESULT)
    assert result.payload["edited"] is True and result.payload["approval"] == "approved"
    assert result.payload["arguments"] == {"target": "staging", "token": "••••••", "replicas": 3}

    [row] = store.execute(
        "SELECT decision, edited, edited_arguments, arguments_display FROM approvals"
    )
    assert row[0] == "approve" and row[1] is True
    assert as_json(row[2]) == {"target": "staging", "token": "••••••", "replicas": 3}
    assert as_json(row[3]) == {"target": "prod", "token": "••••••"}
    [call] = store.execute("SELECT tool, edited, edited_arguments, arguments, proposed_arguments FROM tool_calls")
    assert call[:2] == ("deploy", True)
    # arguments: what the tool ran with (the edit); the model's proposal is kept beside it
    assert as_json(call[2])["target"] == "staging" and as_json(call[3])["target"] == "staging"
    assert as_json(call[4])["target"] == "prod"
    assert "s3cret" not in json.dumps([str(e.payload) for e in store.entries(handle.session_id)])


async def test_a_plain_approve_is_not_edited_in_the_views(store):
    server = make(store)
    handle = await server.send(server.current_session("ops"), "ship it")
    req = await parked(server)
    # the arguments as shown, unchanged: a plain approve
    assert server.decide(req["request_id"], "approve", arguments=dict(req["arguments_display"]))[0]
    await handle.wait()
    assert ran == [("deploy", "prod", "s3cret", 1)]
    [decision] = of_type(store, handle.session_id, T.APPROVAL_DECISION)
    assert "edited" not in decision.payload
    assert store.execute("SELECT edited, edited_arguments FROM approvals") == [(False, None)]
    assert store.execute("SELECT edited, edited_arguments FROM tool_calls") == [(False, None)]


@pytest.mark.parametrize(
    "edit, needle",
    [
        ({"target": 7, "token": "x"}, "target: 7 is not of type 'string'"),
        ({"token": "x"}, "'target' is a required property"),
        ({"target": "prod", "token": "x", "path": "/"}, "path"),
        ('{"target": "prod", ', "edited arguments are not JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
async def test_a_bad_edit_is_one_line_and_the_request_stays_open(store, edit, needle):
    server = make(store)
    handle = await server.send(server.current_session("ops"), "ship it")
    req = await parked(server)
    before = len(store.entries(handle.session_id))
    ok, message = server.decide(req["request_id"], "approve", arguments=edit)
    assert not ok and needle in message and "\n" not in message
    assert "the request stays open" in message
    assert len(store.entries(handle.session_id)) == before  # nothing written
    assert server.pending_approvals() == [req] and server.session_status(handle.session_id) == "parked"
    assert ran == []
    assert server.decide(req["request_id"], "approve", arguments={"target": "dev", "token": "••••••"})[0]
    await handle.wait()
    assert ran == [("deploy", "dev", "s3cret", 1)]


async def test_an_edit_cannot_make_the_call_another_tool(store):
    """The edit is arguments only: naming another tool's argument is refused, and a decision
    entry written with edited arguments that do not fit (another kernel, a forged entry) is
    ignored with an Error; the request stays open."""
    server = make(store)
    handle = await server.send(server.current_session("ops"), "ship it")
    req = await parked(server)
    ok, message = server.decide(req["request_id"], "approve", arguments={"path": "/"})
    assert not ok and "deploy" in message
    forged = {"request_id": req["request_id"], "decision": "approve", "decided_by": "user", "edited": True,
              "tool_name": "wipe", "arguments": {"path": "/"}}
    store.append(handle.session_id, T.APPROVAL_DECISION, "user", "approve", payload=forged)
    [error] = of_type(store, handle.session_id, T.ERROR)
    assert "ApprovalDecision ignored: edited arguments of deploy refused" in error.content
    assert server.pending_approvals() == [req]
    assert server.decide(req["request_id"], "approve", arguments={"target": "qa", "token": "••••••"})[0]
    await handle.wait()
    assert ran == [("deploy", "qa", "s3cret", 1)]  # never wipe
    assert store.execute("SELECT decision, edited FROM approvals") == [("approve", True)]


async def test_an_edit_written_as_an_entry_by_another_bridge_runs_once_checked(store):
    server = make(store)
    handle = await server.send(server.current_session("ops"), "ship it")
    req = await parked(server)
    payload = {"request_id": req["request_id"], "decision": "approve", "decided_by": "user", "edited": True,
               "arguments": {"target": "canary", "token": "••••••"}}
    store.append(handle.session_id, T.APPROVAL_DECISION, "user", "approve", payload=payload)
    await handle.wait()
    assert ran == [("deploy", "canary", "s3cret", 1)]


async def test_edits_go_with_approve_only(store):
    server = make(store)
    handle = await server.send(server.current_session("ops"), "ship it")
    req = await parked(server)
    for decision in ("approve_all", "deny"):
        ok, message = server.decide(req["request_id"], decision, arguments={"target": "x", "token": "y"})
        assert not ok and "edited arguments go with approve" in message
    server.decide(req["request_id"], "deny")
    await handle.wait()


async def test_a_secret_typed_into_an_edit_is_redacted_in_the_log_but_reaches_the_tool(store):
    server = make(store)
    handle = await server.send(server.current_session("ops"), "ship it")
    req = await parked(server)
    target = f"prod?key={KEY}"
    assert server.decide(req["request_id"], "approve", arguments={"target": target, "token": "••••••"})[0]
    await handle.wait()
    assert ran == [("deploy", target, "s3cret", 1)]
    dumped = json.dumps([[e.content, e.payload] for e in store.entries(handle.session_id)])
    assert KEY not in dumped and "[REDACTED]" in dumped
    assert KEY not in json.dumps(store.execute("SELECT edited_arguments FROM approvals"), default=str)


async def test_an_edited_hidden_character_stays_as_the_person_wrote_it(store):
    """The card names hidden characters (<U+202E>); an argument the person leaves as shown
    reaches the tool as the model sent it, one they change is taken as written."""
    server = make(store, {"target": "/srv/\u202etxt.sgol", "token": "t"})
    handle = await server.send(server.current_session("ops"), "ship it")
    req = await parked(server)
    shown = req["arguments_display"]
    assert shown["target"] == "/srv/<U+202E>txt.sgol"
    assert server.decide(req["request_id"], "approve", arguments={**shown, "replicas": 2})[0]
    await handle.wait()
    assert ran == [("deploy", "/srv/\u202etxt.sgol", "t", 2)]
