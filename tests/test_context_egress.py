"""Every model request that carries the notebook's data is in the ``data_egress`` ledger
(issue 41 §3, the outsider's findings 3 and 4): a reply written from a kernel tool's result sent
to another room member's model, to the agent redefined on another model, to a compaction's
model, to a fork's; and an agent's data policy holds for what its context carries.

Each test compares what reached the recording model server with the ledger."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.server import Server
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent

VALUE = "zebra-7731"
QUERY = {"tool": "kernel__query", "args": {"sql": "SELECT name FROM sales"}}


@pytest.fixture(autouse=True)
def openai_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real-000000000000")


def analyst(name: str = "a", *script: str) -> Agent:
    return Agent(name, model="chaz/script", script=[QUERY, "done: {result}", *script], tools=list(SAFE_DEFAULT_TOOLS))


def sales_server(store, *agents: Agent) -> Server:
    server = Server(store, list(agents))
    server.add_kernel({"sales": pd.DataFrame({"name": [VALUE]})})
    return server


def sent_value(model_server) -> list[bool]:
    return [VALUE in json.dumps(r.body) for r in model_server.chat_requests()]


def ledger(store, via: str) -> list[tuple]:
    return [tuple(r) for r in store.execute(
        "SELECT session_id, agent, model, host, variables FROM data_egress WHERE via = ? ORDER BY entry_id", [via])]


async def test_a_room_members_model_sent_anothers_query_result_is_a_row(backend_store, model_server):
    from fakes.openai_server import Reply

    model_server.script(Reply("noted"))
    bob = Agent("bob", model="openai/other", api_base=model_server.openai_base, tools=[], data="full")
    server = sales_server(backend_store, analyst("alice"), bob)
    room = server.create_room("lab", ["alice", "bob"])
    await (await server.send(room, "@alice look at sales")).wait()
    await (await server.send(room, "@bob what did alice find?")).wait()
    assert sent_value(model_server) == [True]
    rows = ledger(backend_store, "context")
    assert [r[:4] for r in rows] == [(room, "bob", "openai/other", "127.0.0.1")]
    await server.stop()


async def test_a_schema_member_is_not_sent_anothers_rows_and_reads_why(backend_store, model_server):
    from fakes.openai_server import Reply

    model_server.script(Reply("noted"))
    bob = Agent("bob", model="openai/other", api_base=model_server.openai_base, tools=[], data="schema")
    server = sales_server(backend_store, analyst("alice"), bob)
    room = server.create_room("lab", ["alice", "bob"])
    await (await server.send(room, "@alice look at sales")).wait()
    await (await server.send(room, "@bob what did alice find?")).wait()
    assert sent_value(model_server) == [False]
    body = json.dumps(model_server.chat_requests()[0].body)
    assert "withheld" in body and "sales" in body
    assert ledger(backend_store, "context") == []
    await server.stop()


async def test_an_agent_redefined_on_another_model_sends_its_old_results_with_a_row(backend_store, model_server):
    from fakes.openai_server import Reply

    model_server.script(Reply("new model here"), Reply("again"))
    server = sales_server(backend_store, analyst())
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    sid = h.session_id
    server.define_agent(Agent("a", model="openai/other", api_base=model_server.openai_base,
                              tools=list(SAFE_DEFAULT_TOOLS)))
    await (await server.send(sid, "what did you see?")).wait()
    await (await server.send(sid, "and now?")).wait()  # sent there already: no second row
    assert sent_value(model_server) == [True, True]
    rows = ledger(backend_store, "context")
    assert [r[:4] for r in rows] == [(sid, "a", "openai/other", "127.0.0.1")]
    assert (json.loads(rows[0][4]) if isinstance(rows[0][4], str) else rows[0][4]) == ["sales"]
    # the Ack with the row was written before the request left
    ack = next(e for e in backend_store.entries(sid, types=(T.ACK,)) if e.payload.get("egress"))
    assert ack.payload["egress"]["entries"]
    await server.stop()


async def test_compacting_a_fork_on_another_model_is_a_row(backend_store, model_server):
    from fakes.openai_server import Reply

    server = sales_server(backend_store, analyst("a", "second reply"))
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    await (await server.send(h.session_id, "thanks")).wait()
    model_server.script(Reply("summary: sales has names"))
    branch = server.fork(h.session_id, model="openai/other", api_base=model_server.openai_base)
    await server.compact(branch)
    assert sent_value(model_server) == [True]
    rows = ledger(backend_store, "compaction")
    assert [(r[0], r[2], r[3]) for r in rows] == [(branch, "openai/other", "127.0.0.1")]
    await server.stop()


async def test_a_forks_first_run_on_another_model_is_one_row(backend_store, model_server):
    from fakes.openai_server import Reply

    model_server.script(Reply("seen"), Reply("seen again"))
    server = sales_server(backend_store, analyst())
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    branch = server.fork(h.session_id, model="openai/other", api_base=model_server.openai_base)
    await (await server.send(branch, "what is there?")).wait()
    await (await server.send(branch, "more?")).wait()
    assert sent_value(model_server) == [True, True]
    assert [(r[0], r[2]) for r in ledger(backend_store, "fork_context")] == [(branch, "openai/other")]
    await server.stop()


async def test_a_recorded_replay_on_another_model_leaves_nothing_unrecorded(backend_store, model_server):
    """Each replayed result is its own row; the branch's later context (its replies written from
    them, sent to the same model) needs none more; every request that carried the value is
    after a row for that model."""
    from fakes.openai_server import Call, Reply

    model_server.script(Reply(tool_calls=[Call("kernel__query", QUERY["args"])]), Reply("seen " + VALUE),
                        Reply("still " + VALUE))
    server = sales_server(backend_store, analyst("a", "noted"))
    sid = server.current_session("a")
    await (await server.send(sid, "look at sales")).wait()
    await (await server.send(sid, "and?")).wait()
    branch = await server.replay(sid, model="openai/other", api_base=model_server.openai_base)
    assert sent_value(model_server) == [False, True, True]
    rows = [tuple(r) for r in backend_store.execute(
        "SELECT via, model FROM data_egress WHERE session_id = ? AND copied_from IS NULL", [branch])]
    assert rows == [("kernel__query", "openai/other")]
    await server.stop()


async def test_a_compaction_whose_model_call_fails_still_leaves_its_row(backend_store, model_server):
    from fakes.openai_server import ServerError

    from chaz_nb.errors import CompactionError

    server = sales_server(backend_store, analyst("a", "second reply"))
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    await (await server.send(h.session_id, "thanks")).wait()
    model_server.script(ServerError(400, "no such model"))
    branch = server.fork(h.session_id, model="openai/other", api_base=model_server.openai_base)
    with pytest.raises(CompactionError):
        await server.compact(branch)
    assert sent_value(model_server) == [True]  # the data left: the ledger says so
    rows = ledger(backend_store, "compaction")
    assert [(r[0], r[2], r[3]) for r in rows] == [(branch, "openai/other", "127.0.0.1")]
    await server.stop()


async def test_a_compactions_row_is_in_the_store_before_its_request_is_made(backend_store, model_server):
    from fakes.openai_server import Reply

    server = sales_server(backend_store, analyst("a", "second reply"))
    h = await server.send(server.current_session("a"), "look at sales")
    await h.wait()
    await (await server.send(h.session_id, "thanks")).wait()
    model_server.script(Reply("summary: sales has names"))
    branch = server.fork(h.session_id, model="openai/other", api_base=model_server.openai_base)
    seen_at_call: list[list[tuple]] = []
    complete = server.backend.complete

    async def checking(model, messages, *args, **kwargs):
        if VALUE in json.dumps(messages):  # the request that carries the data: the row is there already
            seen_at_call.append(ledger(backend_store, "compaction"))
        return await complete(model, messages, *args, **kwargs)

    server.backend.complete = checking  # type: ignore[method-assign]
    summary = await server.compact(branch)
    assert [[(r[0], r[2]) for r in rows] for rows in seen_at_call] == [[(branch, "openai/other")]]
    # one row per send (the Summary written after the reply adds none), and the Summary names
    # the model that read the data, so a later run on that model sends it nowhere new
    assert len(ledger(backend_store, "compaction")) == 1
    assert summary.payload["summarized_by"] == {"model": "openai/other", "host": "127.0.0.1"}
    await server.stop()


async def test_a_narrower_policy_run_reads_what_its_context_carries_once(backend_store, model_server, monkeypatch):
    """The run's Ack (what it sends) and its context (what it withholds) come from one read."""
    from fakes.openai_server import Reply

    from chaz_nb.server import egress

    model_server.script(Reply("noted"))
    bob = Agent("bob", model="openai/other", api_base=model_server.openai_base, tools=[], data="schema")
    server = sales_server(backend_store, analyst("alice"), bob)
    room = server.create_room("lab", ["alice", "bob"])
    await (await server.send(room, "@alice look at sales")).wait()
    reads: list[int] = []
    read = egress.context_data

    def counted(store, session_id):
        reads.append(session_id)
        return read(store, session_id)

    monkeypatch.setattr(egress, "context_data", counted)
    monkeypatch.setattr("chaz_nb.server.run.context_data", counted, raising=False)
    await (await server.send(room, "@bob what did alice find?")).wait()
    assert "withheld" in json.dumps(model_server.chat_requests()[0].body)
    assert reads == [room]
    await server.stop()
