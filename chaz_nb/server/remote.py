"""Runs served by another kernel: a handle that resolves from that kernel's entries.

On a shared store (PostgreSQL, ``core/store/postgres.py``) the kernel that holds a session's lease
runs it; a Message written to that session from any other kernel wakes the holder and starts
no run here. The writer still wants what ``post``/``send`` give for a local run: a handle whose
``wait()`` returns the reply. ``RemoteRun`` follows the session's entries as they arrive
through the store's cross-process on_write:

1. the serving kernel's Ack whose ``answers`` lists the trigger opens the run (its id is the
   ``run_id`` of the run's entries);
2. the run's closing entry resolves the handle: its reply Message, its Error, or a closing Ack
   (silent turn, or stopped: None);
3. a stopped run's cancelled Ack that lists the trigger as ``dropped`` resolves it with None,
   and an Error with no run written before any Ack (an unknown agent, a refused ceiling) with
   that Error.

Nothing is polled: the entries are read when the store says they were committed. The handle
unsubscribes once it is resolved.

A cell that waits on such a run (``%chaz @NAME`` in a session served elsewhere, ``%chaz wait``)
follows the session's status, read from the log up to the entries the listener has handed out
(``session_status``), so that it also ends when the serving kernel dies before it answers.
That status changes only when an entry of the session is dispatched here, or when the serving
kernel's lease frees, which no entry announces. So the wait re-reads it at each entry of the
session (``session_writes``, a wake source) and otherwise every ``REMOTE_POLL_INTERVAL``
seconds, for a dead serving kernel, rather than every 0.05 s (each read is a few queries).
(Should this kernel take the session over during the wait, the end of its own run is seen
at the next look, within that interval: its run ends after its last entry is dispatched.)
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from collections.abc import Callable

from ..core.entries import Entry, EntryType
from .handle import RunHandle

if TYPE_CHECKING:  # pragma: no cover
    from ..core.store import Store

_CLOSING = (EntryType.MESSAGE, EntryType.ERROR, EntryType.ACK)

#: how often a wait on a run served elsewhere re-reads the session's status when no entry came:
#: how late it notices that the serving kernel died (its lease freed) at most
REMOTE_POLL_INTERVAL = 1.0


def session_writes(store: Store, session_id: int) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """A wake source for a wait on ``session_id``: ``wake(callback)`` calls ``callback()`` after
    each entry of the session the store hands its subscribers (another kernel's through the
    listener) and returns the function that stops it."""

    def wake(callback: Callable[[], None]) -> Callable[[], None]:
        def on_write(entry: Entry) -> None:
            if entry.session_id == session_id:
                callback()

        return store.subscribe(on_write)

    return wake


class RemoteRun(RunHandle):
    """The handle of a trigger written here for a session another kernel serves."""

    def __init__(self, store: Store, trigger: Entry, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(trigger, loop.create_future())
        self.run_id: int | None = None
        unsubscribe = store.subscribe(self._on_write)
        self.future.add_done_callback(lambda _f: unsubscribe())
        # what the serving kernel committed before the subscription (entries come in id order)
        for entry in store.entries(trigger.session_id, after_seq=trigger.seq):
            self._on_write(entry)

    def _on_write(self, entry: Entry) -> None:
        if self.future.done() or entry.session_id != self.trigger.session_id or entry.id <= self.trigger.id:
            return
        payload = entry.payload or {}
        if self.run_id is None:
            answers, dropped = payload.get("answers"), payload.get("dropped")
            if entry.entry_type is EntryType.ACK and isinstance(answers, list) and self.trigger.id in answers:
                self.run_id = entry.id
            elif entry.entry_type is EntryType.ACK and isinstance(dropped, list) and self.trigger.id in dropped:
                self.future.set_result(None)  # a person stopped the run before it answered this
            elif (entry.entry_type is EntryType.ERROR and entry.run_id is None
                  and "request_id" not in payload and "ignored_entry" not in payload):
                self.future.set_result(entry)  # the session does not run (unknown agent, ceiling)
            return
        if entry.run_id == self.run_id and entry.id != self.run_id and entry.entry_type in _CLOSING:
            # the reply or an Error; a closing Ack (silent, stopped) has no reply
            self.future.set_result(None if entry.entry_type is EntryType.ACK else entry)

    def __repr__(self) -> str:
        state = "done" if self.done() else "served elsewhere"
        return f"<RemoteRun session={self.session_id} trigger={self.trigger.id} {state}>"
