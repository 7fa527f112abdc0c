import asyncio

import pytest

from chaz_nb.engine.backends import ModelReply
from chaz_nb.engine.tree_budget import BudgetedBackend, TreeBudget, TreeBudgetExceeded


class Counting:
    def __init__(self):
        self.calls = 0

    async def complete(self, model, messages, tools=None, *, script=None, options=None):
        self.calls += 1
        return ModelReply(content="ok")


def test_reaching_one_limit_stops_the_whole_tree():
    tree = TreeBudget("root", max_spawns=2, max_model_calls=100)
    tree.take_spawn()
    tree.take_spawn()
    with pytest.raises(TreeBudgetExceeded, match=r"2 spawns \(max_spawns of agent 'root'"):
        tree.take_spawn()
    # the tree has stopped: its runs make no further model calls either
    with pytest.raises(TreeBudgetExceeded, match="2 spawns"):
        tree.take_model_call()
    assert tree.to_json() == {"root_agent": "root", "spawns": 2, "max_spawns": 2,
                              "model_calls": 0, "max_model_calls": 100}


async def test_budgeted_backend_refuses_the_call_past_the_limit_before_it_is_made():
    inner = Counting()
    backend = BudgetedBackend(inner, TreeBudget("root", max_spawns=0, max_model_calls=1))
    assert (await backend.complete("m", [])).content == "ok"
    with pytest.raises(TreeBudgetExceeded, match=r"1 model call \(max_model_calls"):
        await backend.complete("m", [])
    assert inner.calls == 1


async def test_a_root_turns_budget_row_is_written_with_its_ack_not_before_the_call(backend_store):
    """Issue 32: the row that opens a root's budget counts its first model call: one INSERT, not
    an INSERT and an UPDATE, and not in front of the call (the trigger's commit is the only one
    there): it is written in the transaction of the run's Ack (issue 30: no statement or commit
    of its own), while the call is in flight, so the next turn's call finds it. DuckDB and
    PostgreSQL."""
    from chaz_nb.core.entries import EntryType
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    store = backend_store
    real, real_commit = store.execute, store._commit_with
    statements: list[str] = []  # budget statements of their own
    commits: list[tuple[list[str], list[str]]] = []  # each group commit's entries and statements

    def execute(query, params=None):
        if "run_budgets" in query:
            statements.append(query.split()[0])
        return real(query, params)

    def commit_with(items, joined):
        commits.append(([EntryType(i.entry_type).value for i in items], [st.sql.split()[2] for st in joined]))
        return real_commit(items, joined)

    store.execute, store._commit_with = execute, commit_with
    at_call = []

    class Backend:
        async def complete(self, model, messages, tools=None, **kw):
            at_call.append((list(statements), [tuple(r) for r in real("SELECT model_calls FROM run_budgets")]))
            return ModelReply(content="ok")

    server = Server(store, [Agent("a", max_model_calls=3)], backend=Backend())
    try:
        s = server.current_session("a")
        await (await server.send(s, "hi")).wait()
        await (await server.send(s, "again")).wait()
    finally:
        await server.stop()
    assert at_call[0] == ([], [])  # no budget statement in front of the first call
    assert at_call[1] == ([], [(1,)])  # the first turn's row, its call counted; not yet the second's
    assert statements == []  # no budget statement of its own: each row went in its Ack's commit
    with_rows = [entries for entries, joined in commits if joined == ["run_budgets"]]
    assert len(with_rows) == 2 and all("Ack" in entries for entries in with_rows), commits
    [(first, second)] = [tuple(r) for r in real("SELECT count(*), sum(model_calls) FROM run_budgets")]
    assert (first, second) == (2, 2)  # each person's turn: a tree of its own


async def test_runs_calling_their_model_in_one_loop_turn_share_one_budget_statement(backend_store):
    """Issue 30: 50 sessions on one loop spent a third of the served time in one budget commit
    per model call. Runs whose model calls fall in the same loop turn are charged in one
    statement, each count in the store before its call; a tree charged twice in that turn
    (two runs of one budget) gets both charges, and the limit holds within the batch. (A root's
    first call is counted in the row its Ack writes: these are the calls after it.)"""
    import asyncio

    from chaz_nb.server.agents import Agent
    from chaz_nb.server.budgets import Budgets, ChargeBatch

    store = backend_store
    real = store.execute
    statements: list[str] = []

    def execute(query, params=None):
        if "run_budgets" in query and not query.startswith("SELECT"):
            statements.append(query.split()[0])
        return real(query, params)

    real_commit = store._commit_with
    commits: list[list[str]] = []

    def commit_with(items, joined):
        commits.append([st.sql.split()[0] for st in joined])
        return real_commit(items, joined)

    budgets = Budgets(store)
    trees = [budgets.open(None, Agent("a", max_model_calls=3), first_call=True) for _ in range(6)]
    for tree in trees:
        await tree.charge_model_call()  # the first call: counted in the row, no statement
        tree.write()  # what the run does when its Ack lands
    store.execute, store._commit_with = execute, commit_with
    await asyncio.gather(*(tree.charge_model_call() for tree in trees))  # six second calls
    store.execute, store._commit_with = real, real_commit
    assert statements == [] and commits == [["UPDATE"]]  # one statement for the six charges
    assert [tuple(r) for r in real("SELECT count(*), sum(model_calls) FROM run_budgets")] == [(6, 12)]
    assert [t.model_calls for t in trees] == [2] * 6

    # one budget charged three times in one turn, limit 2: two charges, one refusal
    tree = Budgets(store).open("shared", Agent("b", max_model_calls=2), first_call=True)
    results = await asyncio.gather(*(tree.charge_model_call() for _ in range(3)), return_exceptions=True)
    assert [type(r).__name__ for r in results].count("TreeBudgetExceeded") == 1
    row = real("SELECT model_calls, exhausted IS NOT NULL FROM run_budgets WHERE id = 'shared'")
    assert [tuple(r) for r in row] == [(2, True)]
    assert isinstance(tree.batch, ChargeBatch)


async def test_a_roots_row_rides_with_its_ack_and_a_row_there_already_is_charged_instead(backend_store):
    """Issue 30: the row is queued with the Ack and lands in its commit, with a charge queued
    behind it in the same commit (INSERT, then UPDATE). A row of that id there already (a
    trigger run again): the Ack still lands, and that row is charged when it does (``write``)."""
    from chaz_nb.core.entries import EntryType
    from chaz_nb.core.store import NewEntry
    from chaz_nb.server.agents import Agent
    from chaz_nb.server.budgets import Budgets

    store = backend_store
    sid = store.create_session("a")
    budgets = Budgets(store)
    tree = budgets.open("entry:1", Agent("a", max_model_calls=3), first_call=True)
    ack = store.write_behind([NewEntry(sid, EntryType.ACK, "a", "working")], window=3600)
    tree.write_with_next_commit()
    await tree.charge_model_call()  # the prepaid first call: nothing
    second = asyncio.ensure_future(tree.charge_model_call())  # queued behind the row
    await second
    assert ack.done() and tree._unwritten is None
    assert [tuple(r) for r in store.execute("SELECT model_calls FROM run_budgets WHERE id = 'entry:1'")] == [(2,)]

    again = budgets.open("entry:1", Agent("a", max_model_calls=3), first_call=True)  # the same root again
    ack2 = store.write_behind([NewEntry(sid, EntryType.ACK, "a", "working again")], window=3600)
    again.write_with_next_commit()
    store.hurry()
    [landed] = await ack2
    assert landed.content == "working again" and again._unwritten == 1  # the row was refused
    again.write()  # what the run does when its Ack lands
    assert [tuple(r) for r in store.execute("SELECT model_calls FROM run_budgets WHERE id = 'entry:1'")] == [(3,)]
