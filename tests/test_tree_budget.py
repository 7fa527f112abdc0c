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
    there): it is written when the run's Ack lands, while the call is in flight, so the next
    turn's call finds it. DuckDB and PostgreSQL."""
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    store = backend_store
    real = store.execute
    statements: list[str] = []

    def execute(query, params=None):
        if "run_budgets" in query:
            statements.append(query.split()[0])
        return real(query, params)

    store.execute = execute
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
    assert at_call[1] == (["INSERT"], [(1,)])  # the first turn's row, its call counted; not yet the second's
    [(first, second)] = [tuple(r) for r in real("SELECT count(*), sum(model_calls) FROM run_budgets")]
    assert (first, second) == (2, 2)  # each person's turn: a tree of its own
