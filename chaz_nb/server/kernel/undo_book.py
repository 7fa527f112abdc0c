"""What ``%chaz undo`` needs of a ``kernel__run`` call: the variables it created, rebound,
deleted or changed in place, with *references* to the objects it rebound or deleted (never
copies), and what it did that no undo can take back (effects.py).

Kept in memory, in the kernel that ran the call, bounded: the last ``UNDO_KEEP`` calls of
each of the ``UNDO_SESSIONS`` sessions that ran code most recently. An older call's record is
dropped (its objects are freed if nothing else holds them); every record goes when the server
stops (the extension unloaded, the kernel shut down, another database) or when a person frees a
session's with ``%chaz undo --release``. A kernel restart loses them all: the log says what the
call changed, but the objects were in the old process.
"""

from __future__ import annotations

import contextvars
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ...engine.runtime import ToolExecutor, ToolOutcome
from ..ports import Part, RunContext
from .namespace import Seen

#: ``kernel__run`` calls kept per session for undo
UNDO_KEEP = 5
#: sessions whose calls are kept (the least recently run one is dropped first)
UNDO_SESSIONS = 16
#: the ids of dropped calls remembered, to say why one cannot be undone
_DROPPED_KEPT = 1000

#: the tool call running now (set by ``UndoCalls`` around each call of a run's executor)
current_call: contextvars.ContextVar[str | None] = contextvars.ContextVar("chaz_current_call", default=None)

Kind = Literal["created", "rebound", "deleted", "in_place"]


@dataclass
class Change:
    """One variable a call changed; ``before`` is the object it replaced or deleted."""

    name: str
    kind: Kind
    before_seen: Seen | None
    after_seen: Seen | None
    before: Any = None


@dataclass
class UndoRecord:
    """One ``kernel__run`` call's changes, as undo needs them."""

    tool_call_id: str
    session_id: int
    run_id: int | None
    agent: str
    changes: list[Change]
    #: what it did that no undo takes back (``a file written (out.csv)``)
    effects: list[str]
    #: ``time.monotonic()`` when it ran: later records changed what it left
    ran_at: float = field(default_factory=time.monotonic)
    #: the seq of the Ack that undid it
    undone_seq: int | None = None


def make_record(tool_call_id: str, session_id: int, run_id: int | None, agent: str,
                before: Mapping[str, Seen], after: Mapping[str, Seen], refs: Mapping[str, Any],
                effects: Iterable[str]) -> UndoRecord:
    """The record of a call from the snapshots around it; ``refs`` (every variable's object
    before the run) is read for the names it rebound or deleted only, and not kept."""
    changes: list[Change] = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None:
            changes.append(Change(name, "created", None, new))
        elif new is None:
            changes.append(Change(name, "deleted", old, None, refs.get(name)))
        elif old.ident != new.ident:
            changes.append(Change(name, "rebound", old, new, refs.get(name)))
        else:
            changes.append(Change(name, "in_place", old, new))
    return UndoRecord(tool_call_id, session_id, run_id, agent, changes, list(effects))


class UndoBook:
    """The records of one kernel's ``kernel__run`` calls (see the module docstring)."""

    def __init__(self, keep: int = UNDO_KEEP, sessions: int = UNDO_SESSIONS) -> None:
        self.keep_per_session = keep
        self.max_sessions = sessions
        #: when this book (this kernel's tools) started, as a UTC timestamp
        self.started = time.time()
        self._by_call: dict[str, UndoRecord] = {}
        self._sessions: OrderedDict[int, deque[str]] = OrderedDict()
        self._dropped: OrderedDict[str, str] = OrderedDict()

    def keep(self, record: UndoRecord) -> None:
        calls = self._sessions.pop(record.session_id, deque())
        self._sessions[record.session_id] = calls  # the most recently run last
        calls.append(record.tool_call_id)
        self._by_call[record.tool_call_id] = record
        while len(calls) > self.keep_per_session:
            self._drop(calls.popleft(), f"undo keeps the last {self.keep_per_session} kernel__run calls of a session")
        while len(self._sessions) > self.max_sessions:
            _sid, old = self._sessions.popitem(last=False)
            for call in old:
                self._drop(call, f"undo keeps the calls of the last {self.max_sessions} sessions that ran code")

    def get(self, tool_call_id: str) -> UndoRecord | None:
        return self._by_call.get(tool_call_id)

    def dropped(self, tool_call_id: str) -> str | None:
        """Why a call's record was dropped (None: it never was here)."""
        return self._dropped.get(tool_call_id)

    def records(self, session_id: int | None = None) -> list[UndoRecord]:
        """The records kept, oldest first (of one session when given)."""
        found = [r for r in self._by_call.values() if session_id is None or r.session_id == session_id]
        return sorted(found, key=lambda r: r.ran_at)

    def later(self, record: UndoRecord, name: str) -> UndoRecord | None:
        """The latest call after ``record``, not undone, that changed ``name``."""
        found = [r for r in self._by_call.values() if r.ran_at > record.ran_at and r.undone_seq is None
                 and any(c.name == name for c in r.changes)]
        return max(found, key=lambda r: r.ran_at, default=None)

    def release(self, session_id: int | None = None) -> int:
        """Free the records of a session (None: all); returns how many were freed."""
        sessions = list(self._sessions) if session_id is None else [session_id]
        freed = 0
        for sid in sessions:
            for call in self._sessions.pop(sid, ()):
                self._drop(call, "its before-state was released")
                freed += 1
        return freed

    def forget(self, tool_call_id: str, why: str) -> None:
        """Drop one call's record (an undone call's: its references are let go)."""
        record = self._by_call.get(tool_call_id)
        if record is not None:
            calls = self._sessions.get(record.session_id)
            if calls is not None and tool_call_id in calls:
                calls.remove(tool_call_id)
        self._drop(tool_call_id, why)

    def _drop(self, tool_call_id: str, why: str) -> None:
        self._by_call.pop(tool_call_id, None)
        self._dropped[tool_call_id] = why
        while len(self._dropped) > _DROPPED_KEPT:
            self._dropped.popitem(last=False)

    def __len__(self) -> int:
        return len(self._by_call)


class _CallIdExecutor:
    """A run's executor that makes each call's id known to the tool it runs (``current_call``)."""

    def __init__(self, inner: ToolExecutor) -> None:
        self.inner = inner

    def schemas(self) -> list[dict[str, Any]]:
        return self.inner.schemas()

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        token = current_call.set(call_id)
        try:
            return await self.inner.call(call_id, name, arguments)
        finally:
            current_call.reset(token)


class UndoCalls(Part):
    """The part that tells ``kernel__run`` its tool call's id, and frees every undo record
    when the server stops."""

    name = "undo"

    def __init__(self) -> None:
        self.books: list[UndoBook] = []

    def wrap_executor(self, ctx: RunContext, executor: ToolExecutor) -> ToolExecutor:
        return _CallIdExecutor(executor)

    async def stop(self) -> None:
        for book in self.books:
            book.release()
