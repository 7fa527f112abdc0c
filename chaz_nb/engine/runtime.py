"""The ReAct loop: model call, tool calls, results fed back, until a final answer.

The runtime knows nothing of the store: it reports what it does through an optional
``asyncio.Queue`` of RuntimeEvents, which the server's event writer turns into ToolCall and
ToolResult entries while the loop goes on. Write-ahead: with ``record_calls`` (the server's),
a step's tools start only once its ToolCall events are durable, all of the step's in one
commit; a log that refuses them ends the run (``ToolCallsNotRecorded``) with no tool run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol
from collections.abc import Awaitable, Callable, Sequence

from .backends import DeltaCallback, ModelBackend, ModelReply, ProviderError, ToolCallRequest, Usage, streams
from .tools import REPLY_PAYLOAD_KEYS, ScopedTools, ToolError, ToolReply, parse_arguments
from ..core.redaction import redact_then_cut
from ..errors import ModelCallError, ToolCallsNotRecorded

FORCE_FINAL_NOTE = (
    "You have used all your steps. Do not call tools; answer now with what you have."
)
LOOP_NOTE = (
    "You called the same tool with the same arguments three times in a row. Do not call "
    "tools again; answer now with what you have."
)
LOOP_REPEATS = 3


# ---------------------------------------------------------------- events
@dataclass(frozen=True)
class ToolCallEvent:
    id: str
    name: str
    arguments: Any  # dict, or the raw text when it was not valid JSON


@dataclass(frozen=True)
class ToolResultEvent:
    id: str
    name: str
    output: str
    is_error: bool
    duration_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class RuntimeEvent:
    """The two runtime events, ToolCall and ToolResult (docs/design.md, "Tool events")."""

    ToolCall = ToolCallEvent
    ToolResult = ToolResultEvent


# --------------------------------------------------------------- tool side
@dataclass
class ToolOutcome:
    output: str
    is_error: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class ToolExecutor(Protocol):
    """What the loop needs to run tools: their schemas and a way to call one."""

    def schemas(self) -> list[dict[str, Any]]: ...

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome: ...


class ScopedToolExecutor:
    """Runs tools of a scope with a per-call timeout; any failure becomes an error result."""

    def __init__(self, scope: ScopedTools, timeout: float = 60.0) -> None:
        self.scope = scope
        self.timeout = timeout

    def schemas(self) -> list[dict[str, Any]]:
        return self.scope.schemas()

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        limit = self.timeout
        try:
            t = self.scope.get(name)
            limit = t.timeout if t.timeout is not None else self.timeout  # a tool's own wins
            result = await asyncio.wait_for(t.run(arguments, hold_limit=limit), limit)
        except ToolError as exc:
            return ToolOutcome(safe_text(exc), is_error=True)
        except asyncio.TimeoutError:
            return ToolOutcome(f"{name} timed out after {limit:g} s", is_error=True)
        except Exception as exc:  # noqa: BLE001 - the tool's own failure is data for the model
            return ToolOutcome(describe_exception(exc), is_error=True)
        if isinstance(result, ToolReply):  # text, error state and payload facts of the tool's own
            return ToolOutcome(safe_text(result.text), result.is_error,
                               {k: v for k, v in result.payload.items() if k in REPLY_PAYLOAD_KEYS})
        # Turning the value into text runs the tool's own __str__/__repr__ (or a default=
        # hook): a failure there is this tool's error, never the whole step's.
        try:
            output = format_output(result)
        except Exception as exc:  # noqa: BLE001 - runs the tool's own __str__/default hook
            return ToolOutcome(
                f"{name} returned a {type(result).__name__} that cannot be shown as text "
                f"({describe_exception(exc)})",
                is_error=True,
            )
        # Whatever a tool returns is data for the model: never an outcome object that could
        # claim an approval or an error state for itself.
        return ToolOutcome(output)


def format_output(value: Any) -> str:
    """A tool's return value as text: JSON where it can be, else ``str``, else ``repr``.

    Raises when the value's own ``__str__`` and ``__repr__`` both raise.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except Exception:  # noqa: BLE001 - default=str runs the value's own __str__
        pass
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - the value's own __str__ may raise anything
        return repr(value)


def safe_text(value: object) -> str:
    """``str(value)``, or a placeholder naming its type when its ``__str__`` raises."""
    try:
        return str(value)
    except Exception as exc:  # noqa: BLE001 - the value's own __str__ may raise anything
        return f"<{type(value).__name__}: str() raised {type(exc).__name__}>"


def describe_exception(exc: BaseException) -> str:
    """``Type: message``, even for an exception whose ``__str__`` raises."""
    return f"{type(exc).__name__}: {safe_text(exc)}"


# ----------------------------------------------------------------- budget
class IterationBudget:
    """Model calls left to a run; shared by a parent and its spawn_worker helpers."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.remaining = limit

    def take(self) -> bool:
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        return True


@dataclass
class RunResult:
    content: str
    usage: Usage
    steps: int
    stop_reason: str  # "final" | "max_iterations" | "loop_detected"


def one_line_reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    name = type(exc).__name__
    reason = text if text.startswith(name) else f"{name}: {text}"
    return redact_then_cut(reason, 300)


# ------------------------------------------------------------------- loop
#: the most characters of one tool result sent to the model (about 12k tokens): a tool that
#: returns megabytes would otherwise overflow the model's context or cost a fortune
DEFAULT_MAX_TOOL_OUTPUT = 50_000


def clip_for_model(output: str, limit: int | None) -> str:
    """``output`` as the model is sent it: its first ``limit`` characters and a note of the rest."""
    if limit is None or len(output) <= limit:
        return output
    cut = len(output) - limit
    return (f"{output[:limit]}\n[... {cut:,} more characters cut: the model is sent the first {limit:,}; "
            "the whole output is in the ToolResult entry]")


async def execute(
    *,
    model: str,
    messages: Sequence[dict[str, Any]],
    backend: ModelBackend,
    tools: ToolExecutor | None = None,
    events: asyncio.Queue | None = None,
    budget: IterationBudget | int = 10,
    script: list[Any] | None = None,
    options: dict[str, Any] | None = None,
    limiter: asyncio.Semaphore | None = None,
    on_delta: DeltaCallback | None = None,
    max_tool_output: int | None = DEFAULT_MAX_TOOL_OUTPUT,
    record_calls: Callable[[], Awaitable[None]] | None = None,
) -> RunResult:
    """Run the ReAct loop and return the final answer with the usage of every call.

    ``max_tool_output``: the most characters of one tool result the model is sent (``None``:
    all); the ToolResult event keeps the whole output, so the audit trail is complete.

    ``on_delta``: each piece of reply text as the model writes it (every model call of the
    run; only with a backend that ``streams``, else the calls are not streamed).

    ``record_calls``: awaited once a step's ToolCall events are queued and before any of its
    tools starts; it returns when they are durable. When it raises, no tool of the step runs
    and no ToolResult event is sent for its calls (nothing ran): ``ToolCallsNotRecorded``.
    """
    if isinstance(budget, int):
        budget = IterationBudget(budget)
    history: list[dict[str, Any]] = list(messages)
    usage = Usage()
    steps = 0
    last_key: tuple[str, str] | None = None
    repeats = 0
    stream_kw: dict[str, Any] = {"on_delta": on_delta} if on_delta is not None and streams(backend) else {}

    async def call_model(offer_tools: bool) -> ModelReply:
        nonlocal steps
        # Asked at every step: a scope is live (a tool that joined the registry during the
        # run, such as an MCP server's, is offered from the next step).
        schemas = tools.schemas() if offer_tools and tools is not None else []
        try:
            async with limiter if limiter is not None else contextlib.nullcontext():
                reply = await backend.complete(
                    model,
                    history,
                    schemas if offer_tools and schemas else None,
                    script=script,
                    options=options,
                    **stream_kw,
                )
        except asyncio.CancelledError:
            raise
        except ProviderError as exc:  # already one line that says what to do
            raise ModelCallError(str(exc), usage, steps, exc.details()) from exc
        except Exception as exc:  # any failure of the call (the provider's SDK raises many kinds): one ModelCallError
            raise ModelCallError(one_line_reason(exc), usage, steps) from exc
        steps += 1
        usage.add(reply.usage)
        return reply

    async def final(note: str, reason: str) -> RunResult:
        history.append({"role": "system", "content": note})
        reply = await call_model(offer_tools=False)
        return RunResult(reply.content, usage, steps, reason)

    while True:
        if not budget.take():
            return await final(FORCE_FINAL_NOTE, "max_iterations")
        reply = await call_model(offer_tools=True)
        if not reply.tool_calls:  # branch on tool_calls, never on finish_reason
            return RunResult(reply.content, usage, steps, "final")
        history.append(_assistant_message(reply))
        looped = False
        planned: list[tuple[ToolCallRequest, dict[str, Any] | None, str | None]] = []
        for call in reply.tool_calls:
            try:
                args: dict[str, Any] | None = parse_arguments(call.arguments)
                problem = None
            except ToolError as exc:
                args, problem = None, f"{call.name}: {exc}"
            key = (call.name, json.dumps(args, sort_keys=True, default=str) if args is not None else call.arguments)
            repeats = repeats + 1 if key == last_key else 1
            last_key = key
            if repeats >= LOOP_REPEATS and problem is None:
                problem = f"loop detected: {call.name} called {LOOP_REPEATS} times in a row with the same arguments"
                looped = True
            planned.append((call, args, problem))
            if events is not None:
                await events.put(ToolCallEvent(call.id, call.name, args if args is not None else call.arguments))

        # the calls whose ToolResult event went out: this step's own set, passed in (not closed
        # over) so each step's run_one writes to the set of its step
        answered: set[str] = set()
        # when each call of this step began: a call the stop cancels reports how long it ran
        began: dict[str, float] = {}

        async def run_one(
            call: ToolCallRequest, args: dict[str, Any] | None, problem: str | None, answered: set[str],
            began: dict[str, float],
        ) -> ToolOutcome:
            # Every ToolCall event gets exactly one ToolResult event, whatever happens here.
            started = began[call.id] = time.perf_counter()
            try:
                if problem is not None or tools is None:
                    outcome = ToolOutcome(problem or f"unknown tool {call.name!r}; no tools available", True)
                else:
                    outcome = await tools.call(call.id, call.name, args or {})
                    if not isinstance(outcome.output, str):
                        outcome.output = safe_text(outcome.output)
            except Exception as exc:  # noqa: BLE001 - an executor's own failure is still this call's result
                outcome = ToolOutcome(f"{call.name} failed: {describe_exception(exc)}", True)
            if events is not None:
                await events.put(
                    ToolResultEvent(
                        call.id,
                        call.name,
                        outcome.output,
                        outcome.is_error,
                        (time.perf_counter() - started) * 1000,
                        outcome.extra,
                    )
                )
                answered.add(call.id)
            return outcome

        try:
            if record_calls is not None:
                try:
                    await record_calls()  # write-ahead: no tool effect before its ToolCall is durable
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - any refusal: the step does not run
                    raise ToolCallsNotRecorded(
                        one_line_reason(exc), usage, steps, [(c.id, c.name) for c, _, _ in planned]
                    ) from exc
            outcomes = await asyncio.gather(*(run_one(*p, answered, began) for p in planned))
        except asyncio.CancelledError:
            # A cancelled run still closes each call it announced (some never started: a
            # task cancelled before its first step runs none of its code).
            if events is not None:
                stopped_at = time.perf_counter()
                for call, _, _ in planned:
                    if call.id not in answered:
                        ran_ms = (stopped_at - began[call.id]) * 1000 if call.id in began else 0.0
                        with contextlib.suppress(asyncio.QueueFull):
                            events.put_nowait(
                                ToolResultEvent(call.id, call.name, "cancelled: the run was stopped", True, ran_ms)
                            )
            raise
        for (call, _, _), outcome in zip(planned, outcomes, strict=True):
            history.append(
                {"role": "tool", "tool_call_id": call.id, "content": clip_for_model(outcome.output, max_tool_output)}
            )
        if looped:
            return await final(LOOP_NOTE, "loop_detected")


def _assistant_message(reply: ModelReply) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": reply.content or None,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in reply.tool_calls
        ],
    }
