import asyncio

import pytest

from chaz_nb.backends import LiteLLMBackend
from chaz_nb.runtime import (
    IterationBudget,
    ModelCallError,
    ScopedToolExecutor,
    ToolCallEvent,
    ToolResultEvent,
    execute,
)
from chaz_nb.tools import ToolRegistry, tool


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool
def boom() -> str:
    """Always fails."""
    raise RuntimeError("disk on fire")


@tool
async def slow() -> str:
    """Sleeps."""
    await asyncio.sleep(5)
    return "late"


@pytest.fixture
def executor():
    return ScopedToolExecutor(ToolRegistry([add, boom, slow]).scope(None), timeout=0.2)


async def run(script, executor, budget=10):
    events = asyncio.Queue()
    result = await execute(
        model="chaz/script",
        messages=[{"role": "user", "content": "go"}],
        backend=LiteLLMBackend(),
        tools=executor,
        events=events,
        budget=budget,
        script=script,
    )
    got = []
    while not events.empty():
        got.append(events.get_nowait())
    return result, got


async def test_tool_loop_feeds_results_back(executor):
    result, events = await run([{"tool": "add", "args": {"a": 2, "b": 3}}, "sum={result}"], executor)
    assert result.content == "sum=5" and result.steps == 2 and result.stop_reason == "final"
    assert events[0] == ToolCallEvent(events[0].id, "add", {"a": 2, "b": 3})
    assert isinstance(events[1], ToolResultEvent) and events[1].output == "5" and not events[1].is_error
    assert result.usage.prompt_tokens > 0


async def test_parallel_tool_calls_all_run(executor):
    result, events = await run([[{"tool": "add", "args": {"a": 1, "b": 1}}, {"tool": "add", "args": {"a": 2, "b": 2}}], "ok"], executor)
    outputs = sorted(e.output for e in events if isinstance(e, ToolResultEvent))
    assert outputs == ["2", "4"] and result.steps == 2


async def test_raising_tool_becomes_error_result_and_loop_goes_on(executor):
    result, events = await run([{"tool": "boom", "args": {}}, "saw: {result}"], executor)
    err = [e for e in events if isinstance(e, ToolResultEvent)][0]
    assert err.is_error and err.output == "RuntimeError: disk on fire"
    assert result.content == "saw: RuntimeError: disk on fire"


async def test_unknown_tool_and_bad_arguments_are_fed_back(executor):
    result, events = await run(
        [{"tool": "nope", "args": {}}, {"tool": "add", "args": {"a": "x", "b": 1}}, "recovered"], executor
    )
    errors = [e.output for e in events if isinstance(e, ToolResultEvent)]
    assert errors[0].startswith("unknown tool 'nope'")
    assert "argument 'a' must be integer" in errors[1]
    assert result.content == "recovered"


async def test_tool_timeout_becomes_error_result(executor):
    result, events = await run([{"tool": "slow", "args": {}}, "{result}"], executor)
    assert result.content == "slow timed out after 0.2 s"


async def test_same_call_three_times_stops_the_loop(executor):
    call = {"tool": "add", "args": {"a": 1, "b": 1}}
    result, events = await run([call, call, call, call, "final words"], executor)
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.is_error for r in results] == [False, False, True]
    assert "loop detected" in results[-1].output
    assert result.stop_reason == "loop_detected" and result.content == "final words"


async def test_iteration_cap_forces_a_final_answer_without_tools(executor):
    script = [{"tool": "add", "args": {"a": i, "b": 0}} for i in range(10)] + ["forced answer"]
    result, events = await run(script, executor, budget=3)
    assert result.stop_reason == "max_iterations"
    assert result.content == "forced answer"
    assert result.steps == 4  # three steps with tools, one final call without


async def test_shared_budget_is_consumed_across_runs(executor):
    budget = IterationBudget(2)
    await run([{"tool": "add", "args": {"a": 1, "b": 1}}, "x"], executor, budget=budget)
    assert budget.remaining == 0


async def test_invalid_json_arguments_are_an_error_result():
    from chaz_nb.backends import ModelReply, ToolCallRequest, Usage

    class OneBadCall:
        """Stands in for the ModelBackend interface (not for litellm)."""

        def __init__(self):
            self.calls = 0

        async def complete(self, model, messages, tools=None, *, script=None, options=None):
            self.calls += 1
            if self.calls == 1:
                return ModelReply("", [ToolCallRequest("c1", "add", "{not json")], Usage())
            return ModelReply(messages[-1]["content"], [], Usage())

    events = asyncio.Queue()
    result = await execute(model="m", messages=[], backend=OneBadCall(),
                           tools=ScopedToolExecutor(ToolRegistry([add]).scope(None)), events=events)
    call = events.get_nowait()
    assert call.arguments == "{not json"
    assert "not valid JSON" in result.content


async def test_model_failure_raises_model_call_error_with_one_line_reason():
    with pytest.raises(ModelCallError) as info:
        await execute(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}],
                      backend=LiteLLMBackend(), options={"mock_response": "litellm.RateLimitError", "num_retries": 0})
    assert "HTTP 429" in info.value.reason and "\n" not in info.value.reason
    assert info.value.details["status"] == 429
