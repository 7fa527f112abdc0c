"""The event writer: a run's tool events become ToolCall / ToolResult entries.

The runtime puts ``ToolCallEvent``/``ToolResultEvent`` on ``EventWriter.queue``; the writer
commits what is queued in one write. The log is write-ahead (issue 24): after a step's
ToolCall events the runtime awaits ``calls_recorded``, which queues a ``Landed`` marker and
wakes the writer, so the step's ToolCalls are committed at once, together, and its tools
start only then; a store that refuses them fails the marker (the run ends, see runs.py).
ToolResults nobody waits on are gathered for up to ``EVENT_COMMIT_WINDOW``, so their commit
tends to fall inside the next model call's wait. A tool's ``sensitive_params`` are masked
before anything is written: the tool got the real values, the log only ever sees the mask.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.codemask import code_argument, code_sha256, code_summary
from ..core.entries import Entry, EntryType
from ..core.redaction import redact as redact_secrets
from ..core.redaction import redact_then_cut
from ..core.store import NewEntry, Store
from ..engine.runtime import ToolCallEvent, ToolResultEvent
from ..engine.tools import ToolRegistry
from .approval_rules import mask_arguments

log = logging.getLogger(__name__)

DISPLAY_LIMIT = 500  # characters of a tool result shown in a ToolResult entry's content
EVENT_COMMIT_WINDOW = 0.005  # seconds the event writer gathers ToolResults before a commit


@dataclass(frozen=True)
class Landed:
    """Queued after a step's ToolCall events: resolved once they are committed, with the
    store's exception when it refused them."""

    future: asyncio.Future[None]


@dataclass
class _Request:
    """Consecutive events of one kind, written as one request of the group commit (so that a
    refused ToolResult cannot sink the next step's ToolCalls, nor the other way round)."""

    calls: bool
    items: list[NewEntry]
    landed: list[Landed]


class EventWriter:
    """A run's event queue and the task that writes it (``write``, once the Ack has landed)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self._wake = asyncio.Event()

    async def calls_recorded(self) -> None:
        """Return once every ToolCall queued so far is committed; raise the store's refusal."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(Landed(future))
        self._wake.set()  # a tool waits: no gathering window
        await future

    async def drain(self, writer: asyncio.Task) -> None:
        """End the writer and wait until every queued event is written."""
        self.queue.put_nowait(None)
        self._wake.set()
        try:
            await asyncio.shield(writer)
        except Exception:  # the writer's own failure is logged: the run still closes
            log.exception("event writer failed")

    async def abandon(self, exc: BaseException) -> None:
        """The run's Ack could not be written: nothing can name the run. Take events until
        the end, failing each ``Landed`` (no tool runs unrecorded)."""
        while (event := await self.queue.get()) is not None:
            if isinstance(event, Landed) and not event.future.done():
                event.future.set_exception(exc)

    async def write(self, store: Store, tools: ToolRegistry, session_id: int, sender: str,
                    run_id: int) -> None:
        """Turn queued events into ToolCall/ToolResult entries until a ``None`` arrives."""
        done = False
        while not done:
            batch = [await self.queue.get()]
            self._take_queued(batch)
            if not self._urgent(batch):
                # Gathering window: ToolResults nobody waits on share a commit, which tends to
                # fall inside the next model call's wait; a Landed or the end cuts it short.
                self._wake.clear()
                timer = asyncio.get_running_loop().call_later(EVENT_COMMIT_WINDOW, self._wake.set)
                await self._wake.wait()
                timer.cancel()
                self._take_queued(batch)
            done = any(event is None for event in batch)
            requests = self._requests(store, tools, session_id, sender, run_id, batch)
            await self._commit(store, session_id, run_id, requests)

    def _take_queued(self, batch: list[Any]) -> None:
        while not self.queue.empty():
            batch.append(self.queue.get_nowait())

    @staticmethod
    def _urgent(batch: list[Any]) -> bool:
        return any(event is None or isinstance(event, Landed) for event in batch)

    @staticmethod
    def _requests(store: Store, tools: ToolRegistry, session_id: int, sender: str, run_id: int,
                  batch: list[Any]) -> list[_Request]:
        requests: list[_Request] = []
        for event in batch:
            if event is None:
                continue
            if isinstance(event, Landed):
                if not requests or not requests[-1].calls or requests[-1].landed:
                    requests.append(_Request(True, [], []))  # nothing of its own to wait for
                requests[-1].landed.append(event)
                continue
            calls = isinstance(event, ToolCallEvent)
            if not requests or requests[-1].calls != calls or requests[-1].landed:
                requests.append(_Request(calls, [], []))
            requests[-1].items.append(event_entry(session_id, sender, run_id, masked(tools, event),
                                                  mcp_server_of(tools, event), redact=store.redact))
        return requests

    @staticmethod
    async def _commit(store: Store, session_id: int, run_id: int, requests: list[_Request]) -> None:
        """Write ``requests`` in one group commit (each alone when the batch fails), in order."""
        writes: list[asyncio.Future[list[Entry]]] = []
        for i, request in enumerate(requests):
            if not request.items:
                continue
            try:
                # all but the last queued behind; the last one's write commits them all now
                last = all(not r.items for r in requests[i + 1:])
                writes.append(asyncio.ensure_future(store.write(request.items)) if last
                              else store.write_behind(request.items))
            except Exception as exc:  # noqa: BLE001 - a closed store: that request's failure
                failed: asyncio.Future[list[Entry]] = asyncio.get_running_loop().create_future()
                failed.set_exception(exc)
                writes.append(failed)
        results = await asyncio.gather(*writes, return_exceptions=True)
        outcomes = iter(results)
        for request in requests:
            outcome = next(outcomes) if request.items else None
            waiting = [m.future for m in request.landed if not m.future.done()]
            if isinstance(outcome, BaseException):
                if waiting:
                    for future in waiting:  # the run ends with an Error naming the calls and why
                        future.set_exception(outcome)
                    continue
                log.error("could not write tool events of run %s", run_id, exc_info=outcome)
                await _note_lost(store, session_id, run_id, request.items, outcome)
            for future in waiting:
                future.set_result(None)


async def _note_lost(store: Store, session_id: int, run_id: int, items: list[NewEntry],
                     exc: BaseException) -> None:
    """An Error entry in place of tool events the store refused (ToolResults: their tools ran),
    so the log shows it rather than a silent gap. It carries no run_id: it does not end the run.
    (A step's refused ToolCalls are not noted here: the run ends with an Error that says so.)"""
    calls = ", ".join(f"{item.entry_type.value} {item.tool_name}" for item in items)
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = f"could not write {len(items)} tool event(s) of run {run_id} ({calls}): {reason}"
    payload = {"unwritten_run": run_id, "tool_call_ids": [item.tool_call_id for item in items]}
    try:
        await store.write([NewEntry(session_id, EntryType.ERROR, "system", text, payload=payload)])
    except Exception:  # noqa: BLE001 - the log above has it
        log.exception("could not write the note of run %s's lost tool events either", run_id)


def masked(tools: ToolRegistry, event: Any) -> Any:
    """A ToolCall event with the tool's ``sensitive_params`` masked for the log.

    The tool itself got the real values; the session log, the transcript and the audit
    views only ever see the mask (as the person asked for approval does).
    """
    if not isinstance(event, ToolCallEvent) or not isinstance(event.arguments, dict):
        return event
    t = tools.get(event.name)
    if t is None or not t.sensitive_params:
        return event
    return ToolCallEvent(event.id, event.name, mask_arguments(t, event.arguments))


def mcp_server_of(tools: ToolRegistry, event: Any) -> str | None:
    """The MCP server a ToolCall event's tool comes from (None for Python tools)."""
    if not isinstance(event, ToolCallEvent):
        return None
    t = tools.get(event.name)
    return t.mcp_server if t is not None else None


def event_entry(session_id: int, sender: str, run_id: int, event: Any, mcp_server: str | None = None,
                redact: Callable[[str], str] = redact_secrets) -> NewEntry:
    """The entry one runtime event is written as (a ToolCall of an MCP tool names its server).

    ``redact``: the store's; a ToolResult's text is cut after it, as a secret cut in two no
    longer matches (the store redacts the whole output in the payload itself).
    """
    if isinstance(event, ToolCallEvent):
        args = event.arguments
        shown = json.dumps(args, ensure_ascii=False, default=str) if not isinstance(args, str) else args
        payload: dict[str, Any] = {"run_id": run_id, "arguments": args}
        code = code_argument(args)
        if code is not None:
            # the text rules of redaction would hide code after a name like api_key= in the
            # content: the payload keeps the code (masked by token) and the hash of its bytes
            shown = code_summary(code)
            payload["code_sha256"] = code_sha256(code)
        if mcp_server is not None:
            payload["mcp_server"] = mcp_server
        return NewEntry(
            session_id,
            EntryType.TOOL_CALL,
            sender,
            f"{event.name}({shown})",
            tool_call_id=event.id,
            tool_name=event.name,
            payload=payload,
        )
    assert isinstance(event, ToolResultEvent)
    output = event.output
    shown = output if len(output) <= DISPLAY_LIMIT else redact_then_cut(output, DISPLAY_LIMIT, redact_text=redact)
    return NewEntry(
        session_id,
        EntryType.TOOL_RESULT,
        sender,
        f"{event.name}: {shown}",
        tool_call_id=event.id,
        tool_name=event.name,
        payload={
            **event.extra,  # approval facts from the proxy; the fields below always win
            "run_id": run_id,
            "output": output,
            "is_error": event.is_error,
            "duration_ms": round(event.duration_ms, 3),
        },
    )
