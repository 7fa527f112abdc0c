"""Approved agent code as notebook cells (issue 44 §1).

When a person approves a ``kernel__run`` (as proposed or edited) and the code runs to its end,
``AgentCells`` (a part) tells its subscribers: an ``ApprovedCode`` carrying the code as the log
keeps it (masked as the card showed it), the outputs the code produced (nbformat outputs,
masked like every text the kernel's tools send) and who wrote, approved and edited it. The
notebook layer forwards it to the lab extension, which inserts it as a cell below the cell that
asked (``cell_id``; None for the sidebar chat: at the end of the notebook).

``approved_code(store, session_id)`` reads the same cells back from the log alone (``%chaz
cells``, ``%chaz export``: no outputs there, the log keeps what the agent read, not the cell's
outputs); ``session_record`` adds the session's messages, in log order.

What becomes a cell: a ``kernel__run`` ToolResult with ``approval: approved`` and a
``code_sha256`` (the code ran: a refused approve has none) that is not an error and was not
stopped. Code that failed stays in the log only: a cell that raises would stop Run All.
Not cells: calls auto-approved by an ``auto_approve`` that names kernel__run (no person approved them).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.codemask import code_argument
from ..core.entries import Entry, EntryType
from ..core.store import Store
from .ports import Part, ServerPort

log = logging.getLogger(__name__)

CODE_TOOL = "kernel__run"
#: outputs kept for runs whose ToolResult is not written yet (bounded: a result never written)
MAX_PENDING_OUTPUTS = 64
#: a message's text kept in an export's markdown cell
MAX_MESSAGE_CHARS = 20_000


@dataclass(frozen=True)
class ApprovedCode:
    """One approved ``kernel__run`` that ran to its end, as a notebook cell would carry it."""

    session_id: int
    tool_call: str
    agent: str
    model: str | None
    approved_by: str
    edited: bool
    #: the code as the log keeps it (a masked literal is ``[REDACTED]``-marked, as on the card)
    code: str
    code_sha256: str
    #: the entry's seq (log order)
    seq: int
    #: the cell whose message started the run; None: the sidebar chat, or not known
    cell_id: str | None = None
    #: nbformat outputs (stream, execute_result, display_data), as the code produced them
    outputs: list[dict[str, Any]] = field(default_factory=list)

    def metadata(self) -> dict[str, Any]:
        """The cell's ``chaz`` metadata."""
        return {"session": self.session_id, "tool_call": self.tool_call, "agent": self.agent,
                "model": self.model, "approved_by": self.approved_by, "edited": self.edited,
                "code_sha256": self.code_sha256}

    def header(self) -> str:
        """The first comment line a person reads."""
        by = "you" if self.approved_by in ("user", "") else self.approved_by
        model = f" ({self.model})" if self.model else ""
        how = "edited and approved" if self.edited else "approved"
        return (f"# chaz: written by @{self.agent}{model}, {how} by {by} — "
                f"session {self.session_id}, call {self.tool_call}")

    def source(self) -> str:
        """The cell's source: the header line, then the code."""
        return f"{_one_line(self.header())}\n{self.code.rstrip()}"

    def to_json(self) -> dict[str, Any]:
        """What the lab comm's ``cell`` message carries (the extension builds the cell from it)."""
        return {"session_id": self.session_id, "cell_id": self.cell_id, "source": self.source(),
                "outputs": self.outputs, "metadata": {"chaz": self.metadata()}}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def is_approved_run(entry: Entry) -> bool:
    """A ToolResult of ``kernel__run`` a person approved whose code ran to its end."""
    p = entry.payload
    return (entry.entry_type is EntryType.TOOL_RESULT and entry.tool_name == CODE_TOOL
            and p.get("approval") == "approved" and isinstance(p.get("code_sha256"), str)
            and not p.get("is_error"))


def _cell_from(result: Entry, calls: dict[str, Entry], runs: dict[int, Entry],
               triggers: dict[int, Entry]) -> ApprovedCode | None:
    p = result.payload
    call = calls.get(result.tool_call_id or "")
    edited = bool(p.get("edited"))
    args = p.get("arguments") if edited else (call.payload.get("arguments") if call is not None else None)
    code = code_argument(args) if isinstance(args, dict) else None
    if code is None:
        return None
    run_id = result.run_id
    ack = runs.get(run_id) if run_id is not None else None
    trigger_id = ack.payload.get("trigger_id") if ack is not None else None
    trigger = triggers.get(trigger_id) if isinstance(trigger_id, int) else None
    origin = trigger.payload.get("origin") if trigger is not None else None
    cell_id = origin.get("cell_id") if isinstance(origin, dict) else None
    model = ack.payload.get("model") if ack is not None else None
    return ApprovedCode(
        session_id=result.session_id, tool_call=str(result.tool_call_id or ""),
        agent=(ack.sender if ack is not None else result.sender), model=model if isinstance(model, str) else None,
        approved_by=str(p.get("decided_by") or "user"), edited=edited, code=code,
        code_sha256=str(p["code_sha256"]), seq=result.seq,
        cell_id=cell_id if isinstance(cell_id, str) and cell_id else None)


def session_record(store: Store, session_id: int) -> list[Entry | ApprovedCode]:
    """The session's Messages and its approved code, in log order (``%chaz export``).

    An unknown session is the store's StoreError."""
    store.session(session_id)
    entries = store.entries(session_id, types=[EntryType.MESSAGE, EntryType.ACK, EntryType.TOOL_CALL,
                                                EntryType.TOOL_RESULT])
    calls = {e.tool_call_id: e for e in entries if e.entry_type is EntryType.TOOL_CALL and e.tool_call_id}
    runs = {e.id: e for e in entries if e.entry_type is EntryType.ACK}
    triggers = {e.id: e for e in entries if e.entry_type is EntryType.MESSAGE}
    out: list[Entry | ApprovedCode] = []
    for e in entries:
        if e.entry_type is EntryType.MESSAGE:
            out.append(e)
        elif is_approved_run(e):
            cell = _cell_from(e, calls, runs, triggers)
            if cell is not None:
                out.append(cell)
    return out


def approved_code(store: Store, session_id: int) -> list[ApprovedCode]:
    """The session's approved code, in log order (``%chaz cells``)."""
    return [item for item in session_record(store, session_id) if isinstance(item, ApprovedCode)]


CellListener = Callable[[ApprovedCode], None]


class AgentCells(Part):
    """Tells subscribers of each approved ``kernel__run`` that ran (the module docstring).

    ``enabled`` is the kernel's switch (``%chaz cells off|on``); an agent's own is its
    ``cells`` field (``%chaz agent NAME --no-cells``)."""

    name = "cells"

    def __init__(self, port: ServerPort) -> None:
        self.port = port
        self.enabled = True
        self._listeners: list[CellListener] = []
        #: (session, code_sha256) -> nbformat outputs, put by ``kernel__run`` as the code ends
        self._outputs: OrderedDict[tuple[int, str], list[dict[str, Any]]] = OrderedDict()

    def subscribe(self, listener: CellListener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe

    def produced(self, session_id: int, sha256: str, outputs: list[dict[str, Any]]) -> None:
        """The outputs approved code produced (kernel/__init__.py), until its ToolResult lands."""
        self._outputs[(session_id, sha256)] = outputs
        while len(self._outputs) > MAX_PENDING_OUTPUTS:
            self._outputs.popitem(last=False)

    def on_write(self, entry: Entry) -> None:
        if entry.entry_type is not EntryType.TOOL_RESULT or entry.tool_name != CODE_TOOL:
            return
        sha = entry.payload.get("code_sha256")
        outputs = self._outputs.pop((entry.session_id, sha), []) if isinstance(sha, str) else []
        if not is_approved_run(entry) or not self.enabled or not self._listeners:
            return
        try:  # read after the write's callbacks: the store is not read inside its own write
            asyncio.get_running_loop().call_soon(self._announce, entry, outputs)
        except RuntimeError:
            self._announce(entry, outputs)

    def _announce(self, entry: Entry, outputs: list[dict[str, Any]]) -> None:
        try:
            cell = self._cell_of(entry)
        except Exception:  # noqa: BLE001 - a cell is a convenience: the run and its log go on
            log.warning("could not read approved code of %s", entry.tool_call_id, exc_info=True)
            return
        if cell is None:
            return
        agent = self.port.agents.get(cell.agent)
        if agent is not None and not getattr(agent, "cells", True):
            return
        cell = dataclasses.replace(cell, outputs=outputs)
        for listener in list(self._listeners):
            try:
                listener(cell)
            except Exception:  # noqa: BLE001 - one listener's failure must not keep the others
                log.warning("a cell listener failed", exc_info=True)

    def _cell_of(self, entry: Entry) -> ApprovedCode | None:
        for item in reversed(approved_code(self.port.store, entry.session_id)):
            if item.tool_call == entry.tool_call_id:
                return item
        return None
