"""The event writer: a run's tool events become ToolCall / ToolResult entries.

The runtime puts ``ToolCallEvent``/``ToolResultEvent`` on a queue; ``write_events`` commits
what is queued in one write (a group-commit window of ``EVENT_COMMIT_WINDOW``), so a fast
tool's ToolResult joins its ToolCall in one commit. A tool's ``sensitive_params`` are masked
before anything is written: the tool got the real values, the log only ever sees the mask.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from ..core.entries import EntryType
from ..core.redaction import redact as redact_secrets
from ..core.redaction import redact_then_cut
from ..core.store import NewEntry, SessionStore
from ..engine.runtime import ToolCallEvent, ToolResultEvent
from ..engine.tools import ToolRegistry
from .approvals import mask_arguments

log = logging.getLogger(__name__)

DISPLAY_LIMIT = 500  # characters of a tool result shown in a ToolResult entry's content
EVENT_COMMIT_WINDOW = 0.005  # seconds the event writer gathers tool events before a commit


async def write_events(
    store: SessionStore, tools: ToolRegistry, session_id: int, sender: str, run_id: int, events: asyncio.Queue
) -> None:
    """Turn runtime events into ToolCall/ToolResult entries until a ``None`` arrives."""
    done = False
    while not done:
        batch = [await events.get()]
        if batch[0] is not None:
            # Group-commit window: a fast tool's ToolResult joins its ToolCall in one
            # commit, and the commit tends to fall inside the next model call's wait.
            await asyncio.sleep(EVENT_COMMIT_WINDOW)
        while not events.empty():
            batch.append(events.get_nowait())
        items = []
        for event in batch:
            if event is None:
                done = True
                continue
            items.append(event_entry(session_id, sender, run_id, masked(tools, event), mcp_server_of(tools, event),
                                     redact=store.redact))
        if items:
            try:
                await store.write(items)
            except Exception as exc:  # noqa: BLE001 - said in the log itself, below
                log.exception("could not write tool events of run %s", run_id)
                await _note_lost(store, session_id, run_id, items, exc)
        for _ in batch:
            events.task_done()


async def _note_lost(store: SessionStore, session_id: int, run_id: int, items: list[NewEntry],
                     exc: Exception) -> None:
    """An Error entry in place of tool events the store refused: the tools ran, and the log
    must show it rather than a silent gap. It carries no run_id, as it does not end the run."""
    calls = ", ".join(f"{item.entry_type.value} {item.tool_name}" for item in items)
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = f"could not write {len(items)} tool event(s) of run {run_id} ({calls}): {reason}"
    payload = {"unwritten_run": run_id, "tool_call_ids": [item.tool_call_id for item in items]}
    try:
        await store.write([NewEntry(session_id, EntryType.ERROR, "system", text, payload=payload)])
    except Exception:  # noqa: BLE001 - the log above has it
        log.exception("could not write the note of run %s's lost tool events either", run_id)


async def drain(events: asyncio.Queue, writer: asyncio.Task) -> None:
    """End the writer and wait until every queued event is written."""
    await events.put(None)
    try:
        await asyncio.shield(writer)
    except Exception:
        log.exception("event writer failed")


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
