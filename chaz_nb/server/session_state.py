"""What the run engine knows of a session with a run (or a part's loop) in flight: one
``SessionState`` a session, kept by ``RunEngine`` (runs.py) and read by the run's steps
(run.py) and by recovery and stops (run_stops.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..core.entries import Entry


@dataclass
class SessionState:
    """What the engine knows of a session with a run (or a part's loop) in flight."""

    task: asyncio.Task | None = None
    run_id: int | None = None
    futures: list[asyncio.Future] = field(default_factory=list)
    queued: Entry | None = None  # the newest trigger waiting for the follow-up run
    queued_futures: list[asyncio.Future] = field(default_factory=list)
    queued_triggers: list[Entry] = field(default_factory=list)  # every trigger it will answer
    parked: int = 0  # open approval requests of the current run
    stop_by: str | None = None  # who stopped the run (stopping.py); None while not stopped
    dropped: list[int] = field(default_factory=list)  # queued trigger ids a stop dropped
