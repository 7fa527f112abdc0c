"""A run's handle: what ``Server.post`` / ``Server.send`` return for a trigger."""

from __future__ import annotations

import asyncio

from ..core.entries import Entry


class RunHandle:
    """A triggered run: ``await handle.wait()`` gives its reply or Error entry (None if silent)."""

    def __init__(self, trigger: Entry, future: asyncio.Future[Entry | None]) -> None:
        self.trigger = trigger
        self.future = future

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
