import pytest

from chaz_nb.server.agents import Agent
from chaz_nb.server.ceiling import Ceiling, CeilingError
from chaz_nb.core.entries import EntryType as T
from chaz_nb.server import Server
from chaz_nb.engine.tools import ToolRegistry, tool


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool
def wipe() -> str:
    """Dangerous."""
    return "wiped"


def test_meet_is_the_narrower_of_both():
    a = Ceiling(frozenset({"add", "wipe"}), (frozenset({"add"}),), call_depth=1, max_call_depth=5)
    b = Ceiling(frozenset({"add"}), (frozenset({"*"}),), call_depth=2, max_call_depth=3)
    m = a.meet(b)
    assert m.tools == (frozenset({"add", "wipe"}), frozenset({"add"}))  # every level must admit a tool
    assert m.scope(ToolRegistry([add, wipe]), None).names == {"add"}
    assert m.auto_approve == (frozenset({"add"}), frozenset({"*"}))  # every level must agree
    assert (m.call_depth, m.max_call_depth) == (2, 3)
    assert Ceiling().meet(b) == b and b.meet(None) == b and b.meet(Ceiling()).tools == b.tools


def test_agent_tools_are_cut_to_the_ceiling_and_an_open_ceiling_cuts_nothing():
    registry = ToolRegistry([add, wipe])
    assert Ceiling(frozenset({"add"})).scope(registry, None).names == {"add"}
    assert Ceiling(frozenset({"add"})).scope(registry, ["wipe"]).names == frozenset()
    assert Ceiling().scope(registry, None).names == {"add", "wipe"}
    assert Ceiling(max_call_depth=2).depth_limit(10) == 2 and Ceiling().depth_limit(10) == 10


def test_stored_ceiling_round_trips_and_garbage_is_refused():
    c = Ceiling(frozenset({"add"}), (frozenset(), frozenset({"add"})), 1, 4)
    assert Ceiling.from_json(c.to_json()) == c
    assert Ceiling.from_json(None) is None
    # a ceiling stored as one list of names (before scopes were rules) is one level
    old = Ceiling.from_json('{"tools": ["add"], "auto_approve": [], "call_depth": 1, "max_call_depth": 2}')
    assert old is not None and old.tools == (frozenset({"add"}),)
    assert old.scope(ToolRegistry([add, wipe]), None).names == {"add"}
    assert Ceiling(()).tools is None and Ceiling.from_json(Ceiling().to_json()) == Ceiling()
    with pytest.raises(CeilingError, match="unreadable"):
        Ceiling.from_json('{"tools": ["add"]}')


async def test_session_with_an_unreadable_ceiling_does_not_run_open(store):
    server = Server(store, [Agent("a", model="chaz/script", script=[{"tool": "wipe", "args": {}}, "{result}"])],
                    ToolRegistry([add, wipe]))
    sid = store.create_session(
        "a", "child", ceiling='{"tools": "wipe", "auto_approve": [], "call_depth": 1, "max_call_depth": 1}'
    )
    reply = await server.post(sid, T.DIRECTIVE, "go", sender="user").wait()
    assert reply.entry_type is T.ERROR
    assert reply.content.startswith("the session's stored ceiling is unreadable")
    assert not any(e.entry_type is T.ACK for e in store.entries(sid))


def test_a_stored_ceiling_admits_a_tool_that_joins_later_only_within_every_level():
    registry = ToolRegistry([add])
    # what a child session keeps of the run that spawned it, through the database
    open_parent = Ceiling.from_json(Ceiling(registry.scope(["late__*", "add"]).rules).to_json())
    narrow_parent = Ceiling.from_json(Ceiling(registry.scope(["add"]).rules).to_json())
    assert open_parent is not None and narrow_parent is not None
    child = open_parent.scope(registry, None)  # the child agent asks for everything
    grandchild = open_parent.meet(narrow_parent).scope(registry, ["late__*"])
    capped = narrow_parent.scope(registry, ["late__*", "add"])

    @tool(name="late__x")
    def late_x() -> str:
        """Late."""
        return "x"

    registry.register(late_x)  # an MCP server became ready after the spawn
    assert child.names == {"add", "late__x"}
    assert "late__x" not in capped and capped.names == {"add"}  # never more than the parent had
    assert grandchild.names == frozenset()
