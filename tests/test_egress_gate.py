"""The gate on what leaves the kernel, before it leaves (issue 44 §2): an agent's egress rule
(``allow``, ``deny``, ``ask`` and the hosts it may always send to), the card a person answers
(an ApprovalRequest of kind ``egress``), and the ledger's ``decision`` column.

The provider is a real socket (tests/fakes/openai_server.py) that records every request body:
the tests look for the notebook's value in the bytes that reached it."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from waiting import until

from chaz_nb.core.entries import EntryType as T
from chaz_nb.server import Server
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent

VALUE = "zebra-7731"
QUERY_ARGS = {"sql": "SELECT name FROM sales"}


@pytest.fixture(autouse=True)
def openai_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real-000000000000")


def remote(model_server, **kw) -> Agent:
    """An agent on the recording provider, which it treats as another host (no local default)."""
    kw.setdefault("egress_hosts", [])
    kw.setdefault("tools", list(SAFE_DEFAULT_TOOLS))
    return Agent("a", model="openai/m", api_base=model_server.openai_base, data="full", **kw)


def sales_server(store, agent: Agent, timeout: float = 30.0) -> Server:
    server = Server(store, [agent], approval_timeout=timeout)
    server.add_kernel({"sales": pd.DataFrame({"name": [VALUE]})})
    return server


def script_query(model_server, *then: str) -> None:
    from fakes.openai_server import Call, Reply

    model_server.script(Reply(tool_calls=[Call("kernel__query", QUERY_ARGS)]), *(Reply(t) for t in then))


def on_wire(model_server) -> list[bool]:
    """Per request the provider received: whether the value is in its bytes."""
    return [VALUE.encode() in r.raw for r in model_server.chat_requests()]


def decisions(store) -> list[tuple]:
    return [tuple(r) for r in store.execute(
        "SELECT via, decision, chars_sent FROM data_egress ORDER BY entry_id")]


async def egress_request(server: Server) -> dict:
    """The open egress card, once the run has asked."""
    return await until(lambda: next((p for p in server.approvals.pending()
                                     if str(p["tool_name"]).startswith("egress:")), None),
                       server.store.subscribe, what="the egress request")


async def test_deny_sends_not_one_byte_and_the_model_reads_one_line(backend_store, model_server):
    script_query(model_server, "ok, nothing to see")
    server = sales_server(backend_store, remote(model_server))
    h = await server.send(server.current_session("a"), "look at sales")
    card = await egress_request(server)
    shown = card["arguments_display"]
    assert shown["to"] == "openai/m at 127.0.0.1" and VALUE in shown["preview"]
    assert shown["variables"] and shown["characters"] > 0
    ok, _ = server.approvals.decide(card["request_id"], "deny")
    assert ok
    await h.wait()
    assert on_wire(model_server) == [False, False]
    tool_msg = [m for m in model_server.chat_requests()[1].body["messages"] if m["role"] == "tool"]
    assert len(tool_msg) == 1 and tool_msg[0]["content"].startswith("[withheld:")
    assert "\n" not in tool_msg[0]["content"]
    assert decisions(backend_store) == [("kernel__query", "deny", 0)]
    # the decision is an entry
    decided = backend_store.entries(h.session_id, types=(T.APPROVAL_DECISION,))
    assert [e.payload["decision"] for e in decided] == ["deny"]
    await server.stop()


async def test_allow_once_sends_and_asks_again(backend_store, model_server):
    from fakes.openai_server import Call, Reply

    model_server.script(Reply(tool_calls=[Call("kernel__query", QUERY_ARGS)]),
                        Reply(tool_calls=[Call("kernel__query", QUERY_ARGS)]), Reply("done"))
    server = sales_server(backend_store, remote(model_server))
    h = await server.send(server.current_session("a"), "look at sales twice")
    first = await egress_request(server)
    server.approvals.decide(first["request_id"], "approve")
    second = await until(lambda: next((p for p in server.approvals.pending()
                                       if p["request_id"] != first["request_id"]), None),
                         backend_store.subscribe, what="the second card")
    server.approvals.decide(second["request_id"], "deny")
    await h.wait()
    assert on_wire(model_server) == [False, True, True]  # the allowed result stays in the context
    assert [d[1] for d in decisions(backend_store)] == ["allow_once", "deny"]
    await server.stop()


async def test_allow_for_the_session_asks_once(backend_store, model_server):
    from fakes.openai_server import Call, Reply

    model_server.script(Reply(tool_calls=[Call("kernel__query", QUERY_ARGS)]),
                        Reply(tool_calls=[Call("kernel__query", QUERY_ARGS)]), Reply("done"))
    server = sales_server(backend_store, remote(model_server))
    h = await server.send(server.current_session("a"), "look at sales twice")
    card = await egress_request(server)
    server.approvals.decide(card["request_id"], "approve_all")
    await h.wait()
    assert on_wire(model_server) == [False, True, True]
    assert [d[1] for d in decisions(backend_store)] == ["allow_session", "allow_session"]
    assert len(backend_store.entries(h.session_id, types=(T.APPROVAL_REQUEST,))) == 1
    await server.stop()


async def test_no_answer_in_the_approval_timeout_is_deny(backend_store, model_server):
    script_query(model_server, "ok")
    server = sales_server(backend_store, remote(model_server, approval_timeout=0.2))
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    assert on_wire(model_server) == [False, False]
    assert decisions(backend_store) == [("kernel__query", "timed_out", 0)]
    await server.stop()


async def test_a_local_host_is_allowed_by_default_and_asks_nobody(backend_store, model_server):
    script_query(model_server, "seen")
    agent = Agent("a", model="openai/m", api_base=model_server.openai_base, tools=list(SAFE_DEFAULT_TOOLS),
                  data="full")
    assert agent.egress == "ask" and "127.0.0.1" in agent.egress_hosts
    server = sales_server(backend_store, agent)
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    assert on_wire(model_server) == [False, True]
    assert decisions(backend_store) == [("kernel__query", "allow", decisions(backend_store)[0][2])]
    assert backend_store.entries(h.session_id, types=(T.APPROVAL_REQUEST,)) == []
    await server.stop()


async def test_rule_deny_and_rule_allow_ask_nobody(backend_store, model_server):
    script_query(model_server, "nothing")
    server = sales_server(backend_store, remote(model_server, egress="deny"))
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    assert on_wire(model_server) == [False, False]
    server.define_agent(remote(model_server, egress="allow"))
    script_query(model_server, "seen")
    await (await server.send(h.session_id, "again")).wait()
    assert on_wire(model_server)[2:] == [False, True]
    assert [d[1] for d in decisions(backend_store)] == ["deny", "allow"]
    assert backend_store.entries(h.session_id, types=(T.APPROVAL_REQUEST,)) == []
    await server.stop()


async def test_a_fork_on_a_remote_host_asks_before_its_copied_context_leaves(backend_store, model_server):
    """Kernel-derived content already in the context (a fork's copy of a local run's replies)
    is gated too: denied, the model reads one line in its place and the value never leaves."""
    from fakes.openai_server import Reply

    local = Agent("a", model="chaz/script", script=[{"tool": "kernel__query", "args": QUERY_ARGS},
                                                    "found {result}"], tools=list(SAFE_DEFAULT_TOOLS), data="full")
    server = sales_server(backend_store, local)
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    branch = server.fork(h.session_id, model="openai/other", api_base=model_server.openai_base)
    server.define_agent(Agent(server.store.session(branch).agent, model="openai/other",
                              api_base=model_server.openai_base, tools=[], data="full", egress_hosts=[]))
    model_server.script(Reply("I see no data"))
    run = await server.send(branch, "what did you find?")
    card = await egress_request(server)
    assert VALUE in card["arguments_display"]["preview"]
    server.approvals.decide(card["request_id"], "deny")
    await run.wait()
    assert on_wire(model_server) == [False]
    body = json.dumps(model_server.chat_requests()[0].body)
    assert "withheld" in body and "what did you find?" in body
    assert [(d[1], d[2]) for d in decisions(backend_store) if d[0] != "kernel__query"] == [("deny", 0)]
    await server.stop()


async def test_a_compaction_has_no_card_so_what_its_rule_would_ask_about_stays(backend_store, model_server):
    from fakes.openai_server import Reply

    local = Agent("a", model="chaz/script", script=[{"tool": "kernel__query", "args": QUERY_ARGS},
                                                    "found {result}", "thanks"],
                  tools=list(SAFE_DEFAULT_TOOLS), data="full")
    server = sales_server(backend_store, local)
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    await (await server.send(h.session_id, "thanks")).wait()
    branch = server.fork(h.session_id, model="openai/other", api_base=model_server.openai_base)
    server.define_agent(Agent(server.store.session(branch).agent, model="openai/other",
                              api_base=model_server.openai_base, tools=[], data="full", egress_hosts=[]))
    model_server.script(Reply("summary: a table was looked at"))
    await server.compact(branch)
    assert on_wire(model_server) == [False]
    assert "withheld" in json.dumps(model_server.chat_requests()[0].body)
    assert [(d[1], d[2]) for d in decisions(backend_store) if d[0] == "compaction"] == [("deny", 0)]
    assert backend_store.entries(branch, types=(T.APPROVAL_REQUEST,)) == []
    await server.stop()


@pytest.mark.parametrize("verdict", ["deny", "approve"])
async def test_a_with_attachment_waits_for_the_card_of_the_run_that_reads_it(backend_store, model_server, verdict):
    """``%chaz @a --with sales``: under ``ask`` the Message's row waits (``egress_pending``);
    the run asks before its request. Denied: the person's words go, the description does not;
    allowed: one row, ``via = 'attachment'``, with the decision."""
    from fakes.openai_server import Reply

    from chaz_nb.notebook.magics.turns import attachments

    model_server.script(Reply("ok"))
    agent = remote(model_server, tools=[])
    server = sales_server(backend_store, agent)
    sid = server.current_session("a")
    block, extra = attachments(server, "a", ["sales"], sid)
    assert "egress" not in extra and extra["egress_pending"]["variables"] == ["sales"]
    h = await server.send(sid, "how many names?\n\n" + block, payload=extra)
    card = await egress_request(server)
    assert card["arguments_display"]["what"] == "attached variables"
    server.approvals.decide(card["request_id"], verdict)
    await h.wait()
    body = json.dumps(model_server.chat_requests()[0].body)
    assert "how many names?" in body
    assert on_wire(model_server) == [verdict == "approve"]
    sent = extra["egress_pending"]["chars"]
    assert sent > 0
    expected = ("attachment", "deny", 0) if verdict == "deny" else ("attachment", "allow_once", sent)
    assert decisions(backend_store) == [expected]
    [run_id] = [r[0] for r in backend_store.execute("SELECT run_id FROM runs WHERE session_id = ?", [sid])]
    assert [r[0] for r in backend_store.execute("SELECT run_id FROM data_egress")] == [run_id]
    await server.stop()


async def test_on_a_shared_store_another_kernel_allows_for_the_session(pg_url, model_server):
    """The card is an approval like any: kernel B lists A's egress request and answers it;
    A's run resumes and sends the data (PostgreSQL, two kernels)."""
    from chaz_nb.core.store import SessionStore

    script_query(model_server, "seen")
    a_store, b_store = SessionStore.open(pg_url), SessionStore.open(pg_url)
    try:
        a = sales_server(a_store, remote(model_server))
        b = Server(b_store, [Agent("assistant")])
        sid = a.current_session("a")
        handle = await a.send(sid, "look at sales")
        [req] = await until(lambda: b.pending_approvals(), b.store.subscribe, what="A's card, seen from B")
        assert req["kind"] == "egress" and req["tool_name"] == "egress:127.0.0.1"
        ok, message = b.decide(req["request_id"], "approve_all")
        assert ok, message
        await handle.wait()
        assert on_wire(model_server) == [False, True]
        assert [d[1] for d in decisions(a_store)] == ["allow_session"]
        await a.stop()
        await b.stop()
    finally:
        a_store.close()
        b_store.close()


async def test_a_recorded_replay_on_a_remote_model_asks_anew(backend_store, model_server):
    """A result the source's offline model was allowed to read is replayed to a remote model:
    the gate decides that send (denied here): the value is not on the wire."""
    from fakes.openai_server import Call, Reply

    local = Agent("a", model="chaz/script", script=[{"tool": "kernel__query", "args": QUERY_ARGS}, "found {result}"],
                  tools=list(SAFE_DEFAULT_TOOLS), data="full")
    server = sales_server(backend_store, local, timeout=0.3)
    sid = server.current_session("a")
    await (await server.send(sid, "look at sales")).wait()
    model_server.script(Reply(tool_calls=[Call("kernel__query", QUERY_ARGS)]), Reply("nothing here"))
    server.define_agent(Agent("remote", model="openai/other", api_base=model_server.openai_base,
                              tools=list(SAFE_DEFAULT_TOOLS), data="full", egress_hosts=[]))
    branch = await server.replay(sid, agent="remote")
    assert on_wire(model_server) == [False, False]
    rows = [tuple(r) for r in backend_store.execute(
        "SELECT via, decision FROM data_egress WHERE session_id = ? AND copied_from IS NULL", [branch])]
    assert rows == [("kernel__query", "timed_out")]
    await server.stop()
