"""The ``schedules`` and ``schedule_fires`` tables: rows, the cache, change listeners.

Schedule state lives in its own tables, not in the session log, so a store ``on_write``
callback does not see a fire being counted or a schedule being disabled or removed (those
happen after the run's last entry). ``subscribe`` is that hook: callbacks get the schedule id
after each change of a schedule or of one of its fire records.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from collections.abc import Callable

from ...core.store import SessionStore, utcnow
from ...errors import ScheduleError

log = logging.getLogger(__name__)

DEFAULT_MAX_FAILURES = 3


@dataclass
class Schedule:
    """One row of the ``schedules`` table."""

    id: int
    agent: str
    trigger: str
    kind: str
    prompt: str
    session_id: int | None  # None: a fresh session per fire
    enabled: bool = True
    consecutive_failures: int = 0
    max_failures: int = DEFAULT_MAX_FAILURES
    expires_at: datetime | None = None
    max_fires: int | None = None
    fire_count: int = 0
    next_fire_at: datetime | None = None
    last_fired_at: datetime | None = None
    disabled_reason: str | None = None
    created_by: str = "user"
    created_at: datetime | None = None
    #: JSON ceiling of the capped run that created it (ceiling.py); every fire stays under it
    ceiling: str | None = None

    @property
    def target(self) -> str:
        return "fresh session per fire" if self.session_id is None else f"session {self.session_id}"

    def one_line(self) -> str:
        state = "enabled" if self.enabled else f"paused ({self.disabled_reason or 'paused'})"
        nxt = f", next {self.next_fire_at.isoformat(timespec='seconds')}Z" if self.enabled and self.next_fire_at else ""
        limit = f"/{self.max_fires}" if self.max_fires else ""
        prompt = " ".join(self.prompt.split())
        prompt = prompt if len(prompt) <= 50 else prompt[:49] + "…"
        return (
            f"#{self.id} @{self.agent} {self.trigger!r} -> {self.target}: {prompt!r} "
            f"[{state}, fired {self.fire_count}{limit}{nxt}]"
        )

    def __str__(self) -> str:
        return self.one_line()


@dataclass
class Fire:
    """One fire: a row of ``schedule_fires``."""

    id: int
    schedule_id: int
    status: str  # running | ok | error | skipped
    session_id: int | None = None
    run_id: int | None = None
    reason: str | None = None
    reply: Any = None  # the reply or Error entry


_COLUMNS = (
    "id, agent, trigger, kind, prompt, session_id, enabled, consecutive_failures, max_failures, "
    "expires_at, max_fires, fire_count, next_fire_at, last_fired_at, disabled_reason, created_by, "
    "created_at"
)




class ScheduleTable:
    """The schedules of one store, cached; every change is told to the listeners and ``wake``."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._cache: dict[int, Schedule] | None = None
        # A read-only file of an older schema has no ceiling column.
        self._columns = _COLUMNS + (", ceiling" if self.store.has_column("schedules", "ceiling") else "")
        self._listeners: list[Callable[[int], None]] = []
        #: called after each change (the fire loop sets it: a change may move the next fire)
        self.wake: Callable[[], None] = lambda: None
        if not self.store.read_only:  # fires a previous process left running never finished
            self.store.execute(
                "UPDATE schedule_fires SET status = 'error', reason = 'interrupted: kernel stopped', "
                "finished_at = ? WHERE status = 'running'",
                [utcnow()],
            )

    def all(self) -> dict[int, Schedule]:
        if self._cache is None:
            rows = self.store.execute(f"SELECT {self._columns} FROM schedules ORDER BY id")
            self._cache = {row[0]: Schedule(*row) for row in rows}
        return self._cache

    def save(self, s: Schedule) -> None:
        # The wake prompt is user text like a Message, so a key pasted into it is masked before
        # it is stored, as the entries it becomes are (in memory too: the fires use this copy).
        s.prompt = self.store.redact(s.prompt)
        if s.disabled_reason:
            s.disabled_reason = self.store.redact(s.disabled_reason)
        values = [getattr(s, c.strip()) for c in self._columns.split(",")]
        marks = ", ".join("?" * len(values))
        self.store.execute(f"INSERT OR REPLACE INTO schedules ({self._columns}) VALUES ({marks})", values)
        self.all()[s.id] = s
        self.wake()
        self.changed(s.id)

    def delete(self, schedule_id: int) -> None:
        self.store.execute("DELETE FROM schedules WHERE id = ?", [schedule_id])
        self.all().pop(schedule_id, None)
        self.wake()
        self.changed(schedule_id)

    def subscribe(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(schedule_id)`` after each change of a schedule or its fires; returns the unsubscribe."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return unsubscribe

    def changed(self, schedule_id: int) -> None:
        for callback in list(self._listeners):
            try:
                callback(schedule_id)
            except Exception:
                log.exception("schedule listener %r failed for schedule %s", callback, schedule_id)

    def next_id(self, table: str) -> int:
        return int(self.store.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {table}")[0][0])


    def live(self, schedule_id: int) -> Schedule:
        """The cached schedule itself (ScheduleError naming the known ids when there is none)."""
        s = self.all().get(int(schedule_id))
        if s is None:
            known = ", ".join(f"#{i}" for i in self.all()) or "none"
            raise ScheduleError(f"no schedule #{schedule_id}; schedules: {known}")
        return s

    def fires(self, schedule_id: int | None = None) -> list[tuple]:
        """Rows of ``schedule_fires`` (all, or of one schedule), oldest first."""
        where, params = ("WHERE schedule_id = ?", [schedule_id]) if schedule_id is not None else ("", [])
        return self.store.execute(
            "SELECT id, schedule_id, session_id, run_id, status, reason, prompt_tokens, "
            "completion_tokens, cost_usd, scheduled_for, started_at, finished_at "
            f"FROM schedule_fires {where} ORDER BY id",
            params,
        )
