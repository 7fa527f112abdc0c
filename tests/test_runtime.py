import asyncio
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaz_nb.engine.backends import LiteLLMBackend
from chaz_nb.engine.runtime import (
    IterationBudget,
    ModelCallError,
    ScopedToolExecutor,
    ToolCallEvent,
    ToolResultEvent,
    execute,
)
from chaz_nb.engine.tools import ToolRegistry, tool
from recording import Recording


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
    """Never finishes by itself."""
    await asyncio.Event().wait()  # only the executor's timeout ends it, however fast the machine
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
    result, events = await run(
        [[{"tool": "add", "args": {"a": 1, "b": 1}}, {"tool": "add", "args": {"a": 2, "b": 2}}], "ok"], executor
    )
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
    from chaz_nb.engine.backends import ModelReply, ToolCallRequest, Usage

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


# ------------------------------------------- every ToolCall gets exactly one ToolResult
class Unprintable:
    """A value whose str() and repr() both raise, as a broken __str__ in user code does."""

    def __str__(self):
        raise ValueError("no text for you")

    __repr__ = __str__


class UnprintableError(Exception):
    def __str__(self):
        raise ValueError("no message either")


gate_never_set = None  # an asyncio.Event made per run: the "times out" tool waits on it


@tool
async def ok(i: int) -> int:
    """Returns its argument (async: no thread hop, so it cannot time out on a busy machine)."""
    return i


@tool
def fails(i: int) -> str:
    """Raises."""
    raise RuntimeError(f"failure {i}")


@tool
def unprintable(i: int) -> object:
    """Returns a value that cannot be shown as text."""
    return Unprintable()


@tool
def fails_unprintably(i: int) -> str:
    """Raises an exception whose message cannot be shown."""
    raise UnprintableError()


@tool
async def hangs(i: int) -> str:
    """Waits on an event nobody sets (until the tool timeout)."""
    await gate_never_set.wait()
    return "never"


KINDS = {"ok": ok, "fails": fails, "unprintable": unprintable, "fails_unprintably": fails_unprintably, "hangs": hangs}


class ParallelCalls:
    """A ModelBackend whose first reply calls the given tools in parallel, then answers."""

    def __init__(self, names):
        self.names = names
        self.calls = 0

    async def complete(self, model, messages, tools=None, *, script=None, options=None):
        from chaz_nb.engine.backends import ModelReply, ToolCallRequest, Usage

        self.calls += 1
        if self.calls == 1:
            calls = [ToolCallRequest(f"c{i}", n, json.dumps({"i": i})) for i, n in enumerate(self.names)]
            return ModelReply("", calls, Usage())
        results = [m["content"] for m in messages if m.get("role") == "tool"]
        return ModelReply(f"saw {len(results)} results", [], Usage())


async def run_parallel(names, timeout=0.05):
    global gate_never_set
    gate_never_set = asyncio.Event()
    events = asyncio.Queue()
    executor = ScopedToolExecutor(ToolRegistry(list(KINDS.values())).scope(None), timeout=timeout)
    result = await execute(model="m", messages=[], backend=ParallelCalls(names), tools=executor, events=events)
    got = []
    while not events.empty():
        got.append(events.get_nowait())
    return result, got


async def test_unprintable_result_is_that_tools_error_and_its_siblings_still_answer():
    result, events = await run_parallel(["ok", "unprintable", "ok"])
    results = {e.id: e for e in events if isinstance(e, ToolResultEvent)}
    assert sorted(results) == ["c0", "c1", "c2"]
    bad = results["c1"]
    assert bad.is_error and "unprintable" in bad.output and "cannot be shown" in bad.output
    assert results["c0"].output == "0" and results["c2"].output == "2"
    assert result.content == "saw 3 results"


async def test_exception_whose_message_raises_is_still_an_error_result():
    result, events = await run_parallel(["fails_unprintably"])
    (res,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert res.is_error and res.output.startswith("UnprintableError")
    assert result.content == "saw 1 results"


async def test_a_failing_executor_still_gives_every_call_a_result():
    class Broken:
        def schemas(self):
            return []

        async def call(self, call_id, name, arguments):
            raise KeyError("executor bug")

    events = asyncio.Queue()
    result = await execute(
        model="m", messages=[], backend=ParallelCalls(["ok", "fails"]), tools=Broken(), events=events
    )
    results = [e for e in events._queue if isinstance(e, ToolResultEvent)]
    assert sorted(r.id for r in results) == ["c0", "c1"]
    assert all(r.is_error and r.output.startswith(r.name) for r in results)
    assert result.content == "saw 2 results"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=7))
def test_every_tool_call_gets_exactly_one_tool_result(names):
    result, events = asyncio.run(run_parallel(names, timeout=0.05))
    calls = [e.id for e in events if isinstance(e, ToolCallEvent)]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert sorted(calls) == sorted(r.id for r in results) == sorted(f"c{i}" for i in range(len(names)))
    for r in results:
        kind = names[int(r.id[1:])]
        assert r.name == kind and r.is_error == (kind != "ok")
        if r.is_error:
            assert kind in r.output or r.output.startswith(("RuntimeError", "UnprintableError"))
    assert result.stop_reason == "final" and result.content == f"saw {len(names)} results"


async def test_a_cancelled_run_closes_every_open_call_with_a_result():
    global gate_never_set
    gate_never_set = asyncio.Event()
    events = asyncio.Queue()
    executor = ScopedToolExecutor(ToolRegistry(list(KINDS.values())).scope(None), timeout=60)
    run_task = asyncio.ensure_future(
        execute(model="m", messages=[], backend=ParallelCalls(["hangs", "hangs"]), tools=executor, events=events)
    )
    seen = [await events.get(), await events.get()]  # both ToolCall events: the calls are running
    assert all(isinstance(e, ToolCallEvent) for e in seen)
    run_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run_task
    results = [e for e in events._queue if isinstance(e, ToolResultEvent)]
    assert sorted(r.id for r in results) == ["c0", "c1"] and all(r.is_error for r in results)


@tool
async def hogs_the_loop() -> str:
    """An async tool that blocks instead of awaiting."""
    import time

    time.sleep(0.3)
    return "done hogging"


async def test_an_async_tool_that_holds_the_loop_past_the_timeout_is_an_error_result(caplog):
    executor = ScopedToolExecutor(ToolRegistry([hogs_the_loop]).scope(None), timeout=0.1)
    outcome = await executor.call("c1", "hogs_the_loop", {})
    assert outcome.is_error
    assert re.match(r"hogs_the_loop held the kernel loop for \d+\.\d s", outcome.output)
    assert "0.1 s tool timeout" in outcome.output
    assert "hogs_the_loop held the kernel loop" in caplog.text  # noticed in the log as well




@tool
def dump(n: int) -> str:
    """A huge output."""
    return "x" * n


async def test_a_huge_tool_output_reaches_the_model_clipped_and_the_log_whole():
    backend = Recording()
    events = asyncio.Queue()
    await execute(
        model="chaz/script",
        messages=[{"role": "user", "content": "go"}],
        backend=backend,
        tools=ScopedToolExecutor(ToolRegistry([dump]).scope(None)),
        events=events,
        script=[{"tool": "dump", "args": {"n": 300_000}}, "done"],
        max_tool_output=1000,
    )
    seen = [m for m in backend.calls[-1][0] if m["role"] == "tool"][0]["content"]
    assert seen.startswith("x" * 1000) and len(seen) < 1300
    assert "299,000 more characters cut" in seen and "ToolResult" in seen
    results = [e for e in [events.get_nowait() for _ in range(events.qsize())] if isinstance(e, ToolResultEvent)]
    assert len(results[0].output) == 300_000  # the audit trail keeps the whole output


async def test_a_tool_output_within_the_limit_reaches_the_model_unchanged():
    backend = Recording()
    await execute(
        model="chaz/script",
        messages=[{"role": "user", "content": "go"}],
        backend=backend,
        tools=ScopedToolExecutor(ToolRegistry([dump]).scope(None)),
        script=[{"tool": "dump", "args": {"n": 1000}}, "done"],
        max_tool_output=1000,
    )
    assert [m for m in backend.calls[-1][0] if m["role"] == "tool"][0]["content"] == "x" * 1000


def test_one_line_reason_redacts_before_it_cuts(monkeypatch):
    """A run's Error is the exception cut at 300 characters, and the store redacts after: a
    secret the message quoted across the cut no longer matched and its first part was kept."""
    from chaz_nb.engine.runtime import one_line_reason

    monkeypatch.setenv("MY_SERVICE_PASSWORD", "Hunter2-very-secret-pw")
    reason = one_line_reason(ValueError("x" * 275 + " pw=Hunter2-very-secret-pw end"))
    assert "Hunter" not in reason and len(reason) <= 300
