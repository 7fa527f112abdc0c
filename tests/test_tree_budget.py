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
