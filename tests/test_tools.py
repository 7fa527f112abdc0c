from typing import Literal

import pytest

from chaz_nb.engine.tools import ToolError, ToolRegistry, parse_arguments, tool


@tool
def search(query: str, limit: int = 5, tags: list[str] | None = None) -> list[str]:
    """Search the notes.

    Args:
        query: words to look for
        limit: how many hits to return
    """
    return [query] * limit


@tool(name="fetch_page", approval="always", risk="high", sensitive_params=["token"])
async def fetch(url: str, token: str, mode: Literal["fast", "full"] = "fast") -> str:
    """Fetch a page."""
    return f"{url}:{mode}"


def test_schema_comes_from_signature_and_docstring():
    fn = search.schema["function"]
    assert fn["name"] == "search"
    assert fn["description"] == "Search the notes."
    assert fn["parameters"] == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "words to look for"},
            "limit": {"type": "integer", "description": "how many hits to return", "default": 5},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["query"],
    }
    assert fetch.parameters["properties"]["mode"] == {"enum": ["fast", "full"], "default": "fast"}
    assert (fetch.name, fetch.approval, fetch.risk, fetch.sensitive_params) == (
        "fetch_page",
        "always",
        "high",
        ("token",),
    )


def test_decorated_function_still_callable():
    assert search("x", limit=2) == ["x", "x"]


async def test_sync_and_async_tools_run_with_validated_arguments():
    assert await search.run({"query": "q", "limit": 1}) == ["q"]
    assert await fetch.run({"url": "u", "token": "t"}) == "u:fast"


@pytest.mark.parametrize(
    "args, message",
    [
        ({}, "missing required argument(s): query"),
        ({"query": 3}, "argument 'query' must be string, got integer"),
        ({"query": "q", "limit": "many"}, "argument 'limit' must be integer"),
        ({"query": "q", "bogus": 1}, "unknown argument(s): bogus"),
        ([1, 2], "arguments must be a JSON object, got array"),
    ],
)
def test_arguments_that_do_not_fit_the_schema_are_tool_errors(args, message):
    with pytest.raises(ToolError) as info:
        search.validate(args)
    assert message in str(info.value)


def test_trailing_underscore_parameter_is_exposed_without_it():
    @tool
    def go(async_: bool = False) -> bool:
        return async_

    assert "async" in go.parameters["properties"]
    assert go.validate({"async": True}) == {"async_": True}


def test_bad_policy_values_are_refused():
    def f(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="approval must be one of"):
        tool(f, approval="sometimes")
    with pytest.raises(ValueError, match="not parameters"):
        tool(f, sensitive_params=["password"])
    with pytest.raises(ValueError, match="1-64 letters"):
        tool(lambda: 1)


def test_parse_arguments_of_json_nested_past_the_stack_is_a_tool_error():
    """A model (or an injected prompt) that sends arguments nested 100,000 deep made
    ``json.loads`` raise RecursionError, which ended the whole run with an Error; it is now a
    tool error the model sees, as any other bad arguments."""
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    with pytest.raises(ToolError, match="nest over 200 levels"):
        parse_arguments(deep)
    with pytest.raises(ToolError, match="nest over 200 levels"):  # parses, but the store could not write it
        parse_arguments('{"a":' + "[" * 900 + "]" * 900 + "}")
    assert "a" in parse_arguments('{"a":' + "[" * 150 + "]" * 150 + "}")
    with pytest.raises(ToolError, match="must be a JSON object"):
        parse_arguments("null")


def test_parse_arguments_rejects_invalid_json():
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("") == {}
    with pytest.raises(ToolError, match="not valid JSON"):
        parse_arguments("{oops")
    with pytest.raises(ToolError, match="JSON object"):
        parse_arguments("[1]")


def test_registry_matches_names_and_globs():
    reg = ToolRegistry([search, fetch])

    @tool
    def web_get(url: str) -> str:
        return url

    reg.register(web_get)
    assert reg.match(None) == {"search", "fetch_page", "web_get"}
    assert reg.match(["web_*", "search"]) == {"web_get", "search"}
    assert reg.match(["nothing*"]) == frozenset()


def test_child_scope_is_its_definition_intersected_with_parent_scope():
    reg = ToolRegistry([search, fetch])
    parent = reg.scope(["search"])
    child = reg.scope(None, parent=parent)  # child asks for everything
    assert child.names == {"search"}
    grandchild = reg.scope(["fetch_page"], parent=child)
    assert grandchild.names == frozenset()
    assert "fetch_page" not in grandchild
    with pytest.raises(ToolError, match="unknown tool 'fetch_page'; tools available: none"):
        grandchild.get("fetch_page")


def test_scope_narrow_keeps_within_scope():
    reg = ToolRegistry([search, fetch])
    scope = reg.scope(["search"])
    assert scope.narrow(["search", "fetch_page"]).names == {"search"}
    assert scope.narrow(None) is scope
    assert [s["function"]["name"] for s in scope.schemas()] == ["search"]


def test_scopes_are_rules_over_the_live_registry_and_a_child_never_exceeds_its_parent():
    reg = ToolRegistry([search])
    parent = reg.scope(["late__*", "search"])
    child = reg.scope(None, parent=parent)  # asks for everything
    narrowed = parent.narrow(["late__x"])
    other = reg.scope(["search"])
    assert parent.names == child.names == {"search"} and narrowed.names == frozenset()

    @tool(name="late__x")
    def late_x() -> str:
        return "x"

    @tool(name="late__y")
    def late_y() -> str:
        return "y"

    reg.register(late_x)  # joins after the scopes were made (an MCP server became ready)
    reg.register(late_y)
    assert parent.names == child.names == {"search", "late__x", "late__y"}
    assert narrowed.names == {"late__x"} and "late__y" not in narrowed
    assert "late__x" not in other and other.get("search") is search
    assert [s["function"]["name"] for s in narrowed.schemas()] == ["late__x"]
    reg.unregister("late__x")  # and leaves
    assert "late__x" not in parent and narrowed.names == frozenset()
    with pytest.raises(ToolError, match="unknown tool 'late__x'; tools available: none"):
        narrowed.get("late__x")


def test_a_sync_function_cannot_be_made_to_run_on_the_kernel_loop():
    from chaz_nb.engine.tools import Tool

    def blocking(seconds: float) -> str:
        return "slept"

    with pytest.raises(ValueError, match=r"blocking: in_thread=False .* async def"):
        tool(blocking, in_thread=False)
    with pytest.raises(ValueError, match="in_thread=False"):
        Tool("blocking", "d", {"type": "object", "properties": {}}, blocking, in_thread=False)

    async def on_loop() -> str:
        return "fine"

    assert tool(on_loop, in_thread=False).name == "on_loop"  # async: it awaits, the loop goes on


async def test_a_blocking_sync_tool_leaves_the_loop_beating():
    import asyncio
    import threading

    released = threading.Event()

    @tool
    def waits_for_the_loop() -> bool:
        """Blocks until the loop has beaten five times (a tool on the loop never would be)."""
        return released.wait(10)

    beats = 0

    async def heartbeat():
        nonlocal beats
        while beats < 5:
            await asyncio.sleep(0)
            beats += 1
        released.set()

    beating = asyncio.ensure_future(heartbeat())
    assert await waits_for_the_loop.run({}) is True
    assert beats == 5
    await beating
