"""A run's handle: what ``Server.post`` / ``Server.send`` return for a trigger."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..core.entries import Entry

log = logging.getLogger(__name__)


class RunHandle:
    """A triggered run: ``await handle.wait()`` gives its reply or Error entry (None if silent)."""

    def __init__(self, trigger: Entry, future: asyncio.Future[Entry | None]) -> None:
        self.trigger = trigger
        self.future = future
        self._on_sent: list[Callable[[], None]] | None = []  # None once the request has left

    def when_request_sent(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the loop once the run's first model request is handed to its
        HTTP client (at once if it has been); never for a run that sends none (an offline
        ``chaz/*`` model, a run that fails before): a caller has its own deadline. A turn's view
        opens then (notebook/magics/turns.py)."""
        if self._on_sent is None:
            callback()
        else:
            self._on_sent.append(callback)

    def request_sent(self) -> None:
        """The run's model request has left (run.py, on the loop): tell who asked."""
        callbacks, self._on_sent = self._on_sent, None
        for callback in callbacks or ():
            try:
                callback()
            except Exception:
                log.exception("request-sent callback %r failed", callback)

    @property
    def session_id(self) -> int:
        return self.trigger.session_id

    def done(self) -> bool:
        return self.future.done()

    async def wait(self) -> Entry | None:
        return await asyncio.shield(self.future)

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<RunHandle session={self.session_id} trigger={self.trigger.id} {state}>"
