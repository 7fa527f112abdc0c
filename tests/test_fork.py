"""Forks and recorded replay (server/fork.py, server/replay.py, core/forksql.py) on both stores."""

from __future__ import annotations

import asyncio

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.engine.tools import tool
from chaz_nb.errors import ServerError, StoreError
from chaz_nb.server.agents import Agent
from chaz_nb.server.facade import Server


def counting_tools():
    """A tool that counts its own calls (``count``) and one that needs approval (``deploy``)."""
    calls: list[str] = []

    @tool
    def count(label: str) -> str:
        """Count a call."""
        calls.append(label)
        return f"{label}={len(calls)}"

    @tool(approval="always")
    def deploy(target: str) -> str:
        """Deploy (asks a person)."""
        calls.append("deploy " + target)
        return f"deployed {target}"

    return calls, [count, deploy]


def script(*labels: str, reply: str = "done {result}") -> list:
    return [*({"tool": "count", "args": {"label": label}} for label in labels), reply]


async def two_turns(store, calls_tools, steps=("a", "b")):
    calls, tools = calls_tools
    server = Server(store, [Agent("analyst", model="chaz/script", tools=["count"], script=script(*steps))], tools)
    sid = server.new_session("analyst")
    for text in ("go", "again"):
        await (await server.send(sid, text)).wait()
    return server, sid


def kinds(store, sid):
    return [(e.seq, e.entry_type.value) for e in store.entries(sid)]


async def test_a_fork_copies_the_log_up_to_seq_with_gapless_seqs_and_says_where_each_copy_comes_from(backend_store):
    store = backend_store
    server, sid = await two_turns(store, counting_tools())
    source = store.entries(sid)
    branch = server.fork(sid, 7)
    info = store.session(branch)
    assert (info.forked_from, info.forked_at_seq, info.agent) == (sid, 7, "analyst")
    copies = store.entries(branch)
    assert [e.seq for e in copies] == list(range(1, 8))
    assert [e.payload["copied_from"] for e in copies] == [e.id for e in source[:7]]
    assert [(e.entry_type, e.sender, e.content) for e in copies] == [(e.entry_type, e.sender, e.content)
                                                                     for e in source[:7]]
    # the copied run is a run of the branch: its entries name the copy of its Ack
    assert {e.run_id for e in copies[1:]} == {copies[1].id}
    # the branch goes on from #8, and a fork of the fork too
    handle = await server.send(branch, "and now?")
    await handle.wait()
    assert [e.seq for e in store.entries(branch)] == list(range(1, len(store.entries(branch)) + 1))
    grandchild = server.fork(branch, 9)
    assert store.session(grandchild).forked_from == branch
    assert [e.payload["copied_from"] for e in store.entries(grandchild)[:9]] == \
        [e.id for e in store.entries(branch)[:9]]
    assert store.entries(grandchild)[9].payload["status"] == "forked"  # #9 opened a run: closed in the copy
    # the source is untouched
    assert store.entries(sid) == source
    await server.stop()


async def test_bad_seq_unknown_session_and_an_existing_id_are_one_line_errors_that_write_nothing(backend_store):
    store = backend_store
    server, sid = await two_turns(store, counting_tools())
    before = store.execute("SELECT count(*) FROM entries")[0][0], len(store.sessions())
    for bad in (15, -1, "3"):
        with pytest.raises(StoreError, match=r"^cannot fork session 1 at .*: its entries are #1-#14") as err:
            server.fork(sid, bad)  # type: ignore[arg-type]
        assert "\n" not in str(err.value)
    with pytest.raises(StoreError, match="no session 99"):
        server.fork(99)
    with pytest.raises(StoreError, match="session 1 exists"):
        store.fork_session(sid, 3, into=sid)
    with pytest.raises(ServerError, match="unknown agent 'nobody'"):
        server.fork(sid, 3, agent="nobody")
    assert (store.execute("SELECT count(*) FROM entries")[0][0], len(store.sessions())) == before
    # and the store still writes: the counters did not move past a failed fork
    assert server.fork(sid, 3) == before[1] + 1
    await server.stop()


async def test_a_fork_inside_a_run_closes_the_runs_copy_as_forked(backend_store):
    store = backend_store
    server, sid = await two_turns(store, counting_tools())
    branch = server.fork(sid, 3)  # between ToolCall #3 and its ToolResult #4
    assert kinds(store, branch)[-2:] == [(3, "ToolCall"), (4, "Ack")]
    closing = store.entries(branch)[-1]
    assert closing.payload["status"] == "forked" and "copied_from" not in closing.payload
    status = store.sql("SELECT status FROM runs WHERE session_id = ?", [branch]).fetchall()
    assert status == [("forked",)]
    assert server.session_status(branch) == "idle"
    await server.stop()


async def test_a_fork_while_the_source_runs_copies_only_committed_entries_and_closes_what_is_open(backend_store):
    store = backend_store
    gate = asyncio.Event()
    entered = asyncio.Event()

    @tool
    async def slow(label: str) -> str:
        """Wait for the gate."""
        entered.set()
        await gate.wait()
        return "slow " + label

    server = Server(store, [Agent("analyst", model="chaz/script", tools=["slow"],
                                  script=[{"tool": "slow", "args": {"label": "x"}}, "ok {result}"])], [slow])
    sid = server.new_session("analyst")
    handle = await server.send(sid, "go")
    await asyncio.wait_for(entered.wait(), 30)
    await asyncio.sleep(0.05)  # the ToolCall is committed (the event writer's window)
    committed = store.entries(sid)
    assert [e.entry_type for e in committed] == [T.MESSAGE, T.ACK, T.TOOL_CALL]
    branch = server.fork(sid)
    assert kinds(store, branch) == [(1, "Message"), (2, "Ack"), (3, "ToolCall"), (4, "Ack")]
    assert store.session(branch).forked_at_seq == 3
    gate.set()
    reply = await handle.wait()
    assert reply is not None and reply.content == "ok slow x"  # the source's run went on untouched
    assert len(store.entries(branch)) == 4  # and nothing of it reached the branch
    await server.stop()


async def test_a_fork_while_an_approval_is_open_closes_its_copy_and_leaves_the_source_waiting(backend_store):
    store = backend_store
    calls, tools = counting_tools()
    server = Server(store, [Agent("ops", model="chaz/script", tools=["deploy"],
                                  script=[{"tool": "deploy", "args": {"target": "prod"}}, "ok {result}"])], tools)
    sid = server.new_session("ops")
    handle = await server.send(sid, "ship it")
    for _ in range(300):
        if server.pending_approvals():
            break
        await asyncio.sleep(0.01)
    [pending] = server.pending_approvals()
    branch = server.fork(sid)
    decision, ack = store.entries(branch)[-2:]
    assert decision.payload["decision"] == "forked" and decision.payload["request_id"] != pending["request_id"]
    assert ack.payload["status"] == "forked"
    # the branch's decision closes the branch's copy only: the source still waits for a person
    assert [p["request_id"] for p in server.pending_approvals()] == [pending["request_id"]]
    assert server.session_status(sid) == "parked"
    ok, _ = server.decide(pending["request_id"], "approve")
    assert ok and (await handle.wait()).content == "ok deployed prod"
    assert calls == ["deploy prod"]
    await server.stop()


async def test_recorded_replay_answers_reordered_and_repeated_calls_and_refuses_extra_ones(backend_store):
    store = backend_store
    calls_tools = counting_tools()
    calls, _ = calls_tools
    server, sid = await two_turns(store, calls_tools, steps=("a", "b"))
    assert calls == ["a", "b", "a", "b"]
    # another model: b before a (reordered), a third time (repeated: the source has two),
    # z (extra), and never c; the recording has a and b twice each
    server.define_agent(Agent("critic", model="chaz/script", tools=["count"],
                              script=[{"tool": "count", "args": {"label": "b"}},
                                      [{"tool": "count", "args": {"label": "a"}},
                                       {"tool": "count", "args": {"label": "z"}}],
                                      {"tool": "count", "args": {"label": "a"}},
                                      {"tool": "count", "args": {"label": "a"}},
                                      "critic: {result}"]))
    branch = await server.replay(sid, agent="critic")
    assert calls == ["a", "b", "a", "b"]  # no tool ran in the branch
    results = [e for e in store.entries(branch) if e.entry_type is T.TOOL_RESULT]
    source_results = {e.id: e for e in store.entries(sid) if e.entry_type is T.TOOL_RESULT}
    first = results[:5]  # the first turn's calls: b, a, z, a, a
    outputs = [(e.payload["output"], e.payload["is_error"]) for e in first]
    assert outputs[0] == ("b=2", False) and outputs[1] == ("a=1", False)
    assert outputs[2][1] and "not in the recording of session 1" in outputs[2][0]  # extra: z
    assert outputs[3] == ("a=3", False)  # the second recorded a
    assert outputs[4][1] and "not in the recording" in outputs[4][0]  # a third a: repeated
    for e in first:
        ref = e.payload.get("replayed_from")
        if ref is not None:
            assert source_results[ref].payload["output"] == e.payload["output"]
            assert e.payload["replayed_from_session"] == sid
    await server.stop()


async def test_recorded_replay_of_an_approval_gated_tool_asks_nobody_and_live_replay_asks(backend_store):
    store = backend_store
    calls, tools = counting_tools()
    agent = Agent("ops", model="chaz/script", tools=["deploy"],
                  script=[{"tool": "deploy", "args": {"target": "prod"}}, "ok {result}"])
    server = Server(store, [agent], tools)
    sid = server.new_session("ops")
    handle = await server.send(sid, "ship it")
    for _ in range(300):
        if server.pending_approvals():
            break
        await asyncio.sleep(0.01)
    server.decide("last", "approve")
    await handle.wait()
    assert calls == ["deploy prod"]
    branch = await asyncio.wait_for(server.replay(sid, model="chaz/script"), 30)
    assert calls == ["deploy prod"] and not server.pending_approvals()
    assert not [e for e in store.entries(branch) if e.entry_type is T.APPROVAL_REQUEST]
    assert store.entries(branch)[-1].content == "ok deployed prod"
    live = server.fork_session(sid, 0, say="ship it", replay="live")
    for _ in range(300):
        if server.pending_approvals():
            break
        await asyncio.sleep(0.01)
    assert [p["session_id"] for p in server.pending_approvals()] == [live.session_id]
    server.decide("last", "deny")
    assert live.handle is not None
    await live.handle.wait()
    await server.stop()


async def test_a_fork_with_another_model_is_a_new_definition_whose_context_keeps_the_replies_its_own(backend_store):
    store = backend_store
    server, sid = await two_turns(store, counting_tools())
    result = server.fork_session(sid, 7, model="chaz/echo", say="what now?")
    assert result.agent == "analyst@chaz-echo" and result.defined
    assert "forked from session 1 at #7" in result.describe() and "analyst@chaz-echo" in result.describe()
    assert server.agents["analyst@chaz-echo"].model == "chaz/echo"
    assert server.current_session_id("analyst@chaz-echo") == result.session_id
    assert result.handle is not None
    await result.handle.wait()
    messages = await server.forks.run_messages(result.session_id, server.agents["analyst@chaz-echo"], None)
    assert messages is not None
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    # the same change again: the same definition
    assert server.fork_session(sid, 7, model="chaz/echo").agent == "analyst@chaz-echo"
    await server.stop()


async def test_rerun_writes_the_trigger_again_in_its_place_and_replays_its_tools(backend_store):
    store = backend_store
    calls_tools = counting_tools()
    calls, _ = calls_tools
    server, sid = await two_turns(store, calls_tools)
    result = server.fork_session(sid, 11, rerun=True)  # #11 is in the second run: its trigger is #8
    assert result.rerun_of is not None and result.rerun_of.seq == 8 and result.at_seq == 7
    assert result.handle is not None
    reply = await result.handle.wait()
    assert reply is not None and reply.content == "done b=4" and calls == ["a", "b", "a", "b"]
    entries = store.entries(result.session_id)
    assert entries[7].content == "again" and entries[7].payload["rerun_of"] == result.rerun_of.id
    await server.stop()


async def test_the_branches_view_and_forked_from_in_runs_and_messages(backend_store):
    store = backend_store
    server, sid = await two_turns(store, counting_tools())
    result = server.fork_session(sid, 7, model="chaz/echo", say="again")
    assert result.handle is not None
    await result.handle.wait()
    rows = store.sql(
        "SELECT session_id, forked_from, forked_at_seq, agent, model, runs, tool_calls, source_agent, "
        "source_model, source_runs, source_tool_calls FROM branches").fetchall()
    assert rows == [(result.session_id, sid, 7, "analyst@chaz-echo", "chaz/echo", 1, 0, "analyst", "chaz/script", 1, 2)]
    assert store.sql("SELECT DISTINCT forked_from FROM runs WHERE session_id = ?", [result.session_id]).fetchall() \
        == [(sid,)]
    assert store.sql("SELECT DISTINCT forked_from FROM messages WHERE session_id = ?",
                     [result.session_id]).fetchall() == [(sid,)]
    await server.stop()


async def test_a_forked_child_keeps_its_ceiling_and_parent(backend_store):
    store = backend_store
    server = Server(store, [Agent("analyst", model="chaz/echo")])
    parent = server.new_session("analyst")
    child = store.create_session("analyst", "child", parent_id=parent, ceiling='{"rules": [["count"]]}')
    store.append(child, T.DIRECTIVE, "analyst", "do it")
    branch = store.session(server.fork(child))
    assert (branch.kind, branch.parent_id, branch.depth, branch.ceiling) == ("child", parent, 1,
                                                                            '{"rules": [["count"]]}')
    await server.stop()


async def test_a_forked_room_keeps_its_members(backend_store):
    store = backend_store
    server = Server(store, [Agent("a", model="chaz/echo"), Agent("b", model="chaz/echo")])
    room = server.create_room("lab", ["a", "b"], host="a")
    branch = server.fork(room)
    assert server.rooms.members(branch) == ["a", "b"]
    with pytest.raises(ServerError, match="is a room"):
        server.fork(room, model="chaz/echo")
    await server.stop()


async def test_copies_are_no_news_to_on_write_callbacks_on_either_store(backend_store):
    store = backend_store
    server, sid = await two_turns(store, counting_tools())
    seen = []
    unsubscribe = store.subscribe(seen.append)
    branch = server.fork(sid, 3)
    if hasattr(store, "catch_up"):
        store.catch_up()  # PostgreSQL: what the listener would bring from the table
        await asyncio.sleep(0.2)  # (the listener's own catch-up, if it ran meanwhile)
    unsubscribe()
    assert [(e.session_id, e.entry_type.value) for e in seen] == [(branch, "Ack")]  # the closing Ack only
    assert not server.running_sessions()
    await server.stop()


async def test_compare_and_branches_after_a_fork_made_mid_run_count_what_the_source_did_after_the_point(
        backend_store):
    # the source's first run: #1 go, #2 Ack, #3 count(a), #4 result, #5 count(b), #6 result, #7 reply;
    # forked at #4 (inside that run), the branch asks something else and calls no tool
    store = backend_store
    server, sid = await two_turns(store, counting_tools())
    result = server.fork_session(sid, 4, model="chaz/echo", say="what now?")
    assert result.handle is not None
    await result.handle.wait()
    c = server.compare(sid, result.session_id)
    assert c.point == 4
    [continued, second] = c.a.runs
    assert continued.tool_calls == ['count({"label": "b"})'] and continued.reply == "done b=2"
    assert continued.seq == 2 and continued.continued  # opened before the point, went on after it
    assert second.tool_calls == ['count({"label": "a"})', 'count({"label": "b"})'] and not second.continued
    [own] = c.b.runs
    assert own.tool_calls == [] and own.reply == "echo: what now?" and not own.continued
    assert c.first_difference == 0
    rows = store.sql("SELECT runs, tool_calls, source_runs, source_tool_calls, source_steps FROM branches "
                     "WHERE session_id = ?", [result.session_id]).fetchall()
    # the source's continued run and its second run; their calls after #4 (b, then a and b); a
    # run's steps are recorded when it ends: the whole runs' (3 each)
    assert rows == [(1, 0, 2, 3, 6)]
    await server.stop()


async def test_a_forks_copies_are_marked_in_every_audit_view_and_left_out_of_the_audit_totals(backend_store):
    from chaz_nb.notebook.views.audit import AuditView

    store = backend_store
    server, sid = await two_turns(store, counting_tools())
    # a record of data sent to the model (not a trigger: an agent's): an egress row the fork copies
    store.append(sid, T.MESSAGE, "analyst", "see this", payload={"egress": {"agent": "analyst", "chars": 4}})
    source = {e.seq: e for e in store.entries(sid)}
    mid = server.fork(sid, 3)  # inside the first run: its copy is closed as forked
    result = server.fork_session(sid, 15, model="chaz/echo", say="and now?")
    assert result.handle is not None
    await result.handle.wait()
    branch = result.session_id

    def rows(sql: str) -> list:
        return [tuple(r) for r in store.sql(sql, [branch]).fetchall()]

    calls = rows("SELECT tool, copied_from FROM tool_calls WHERE session_id = ? ORDER BY call_entry_id")
    assert calls == [("count", source[n].id) for n in (3, 5, 10, 12)]
    runs = rows("SELECT status, copied_from FROM runs WHERE session_id = ? ORDER BY run_id")
    assert runs == [("ok", source[2].id), ("ok", source[9].id), ("ok", None)]  # the copies, then its own run
    assert [tuple(r) for r in store.sql("SELECT status, copied_from FROM runs WHERE session_id = ?",
                                        [mid]).fetchall()] == [("forked", source[2].id)]
    messages = rows("SELECT seq, copied_from FROM messages WHERE session_id = ? ORDER BY seq")
    assert messages[-3:] == [(15, source[15].id), (16, None), (18, None)]  # a copy, then its own
    # the copy (it sent nothing itself), and the branch's first run sending that copied context
    # to its own model, chaz/echo, which the source never sent it to (a send of its own)
    assert rows("SELECT via, chars_sent, copied_from FROM data_egress WHERE session_id = ? ORDER BY entry_id") == [
        ("attachment", 4, source[15].id), ("fork_context", 4, None)]
    for view in ("approvals", "variable_changes"):
        assert "copied_from" in store.sql(f"SELECT * FROM {view} LIMIT 0").columns
    # %chaz audit of the branch: the copies are rows marked as copies, and no part of its totals
    audit = AuditView(store, branch, follow=False, widget=False)
    assert [r.copied for r in audit.rows] == [True] * 4
    totals = audit.totals()
    own_tokens = store.sql("SELECT prompt_tokens + completion_tokens FROM runs WHERE session_id = ? "
                           "AND copied_from IS NULL", [branch]).fetchall()[0][0]
    assert (totals.calls, totals.tool_ms, totals.tokens, totals.copied) == (0, 0.0, own_tokens, 4)
    line = audit.text().splitlines()[1]
    assert line.startswith("0 calls · 0 errors · tool time 0.0 ms · ")
    assert line.endswith(" · 4 calls copied by a fork, not counted")
    assert "ok (copy)" in audit.text() and "ok (copy)" in audit.html()
    await server.stop()
