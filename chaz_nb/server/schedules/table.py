"""The ``schedules`` and ``schedule_fires`` tables: rows, the cache, change listeners.

Schedule state lives in its own tables, not in the session log, so a store ``on_write``
callback does not see a fire being counted or a schedule being disabled or removed (those
happen after the run's last entry). ``subscribe`` is that hook: callbacks get the schedule id
after each change of a schedule or of one of its fire records.

On a shared store (PostgreSQL, several kernels) the table is not cached: every read is the
store's, so each kernel lists and fires every kernel's schedules; each change is a notice
(``NOTIFY chaz_schedules``) that wakes the other kernels' fire loops and listeners. Ids come from sequences
(``next_id``), a due tick is taken by one kernel only (``advance``: a compare-and-set of
``next_fire_at``), and a finished fire changes only the columns it owns (``count_fire``,
``update``), so it never writes back a ``next_fire_at`` another kernel has moved on.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from collections.abc import Callable

from ...core.redaction import redact_json_text
from ...core.entries import Entry
from ...core.store import (Row, SharedSessions, Store, bool_value, int_or_none, int_value, served_elsewhere,
                           str_or_none, str_value, time_or_none, utcnow)
from ...errors import ScheduleError

log = logging.getLogger(__name__)

DEFAULT_MAX_FAILURES = 3
NOTICE_CHANNEL = "chaz_schedules"  # pgstore.NOTICE_CHANNELS


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
    #: the run-tree budget of the run that made it (budgets.py); None: a person's schedule,
    #: each of whose fires opens a budget of its own
    budget: str | None = None

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
    reply: Entry | None = None  # the reply or Error entry


_COLUMNS = (
    "id, agent, trigger, kind, prompt, session_id, enabled, consecutive_failures, max_failures, "
    "expires_at, max_fires, fire_count, next_fire_at, last_fired_at, disabled_reason, created_by, "
    "created_at"
)


def schedule_from_row(row: Row) -> Schedule:
    """The schedule of a row of ``_COLUMNS``, then ``ceiling`` and ``budget`` where the schema
    has them (a read-only file of an older schema may not)."""
    return Schedule(
        id=int_value(row[0], "schedules.id"),
        agent=str_value(row[1], "schedules.agent"),
        trigger=str_value(row[2], "schedules.trigger"),
        kind=str_value(row[3], "schedules.kind"),
        prompt=str_value(row[4], "schedules.prompt"),
        session_id=int_or_none(row[5], "schedules.session_id"),
        enabled=bool_value(row[6], "schedules.enabled"),
        consecutive_failures=int_value(row[7], "schedules.consecutive_failures"),
        max_failures=int_value(row[8], "schedules.max_failures"),
        expires_at=time_or_none(row[9], "schedules.expires_at"),
        max_fires=int_or_none(row[10], "schedules.max_fires"),
        fire_count=int_value(row[11], "schedules.fire_count"),
        next_fire_at=time_or_none(row[12], "schedules.next_fire_at"),
        last_fired_at=time_or_none(row[13], "schedules.last_fired_at"),
        disabled_reason=str_or_none(row[14], "schedules.disabled_reason"),
        created_by=str_value(row[15], "schedules.created_by"),
        created_at=time_or_none(row[16], "schedules.created_at"),
        ceiling=str_or_none(row[17], "schedules.ceiling") if len(row) > 17 else None,
        budget=str_or_none(row[18], "schedules.budget") if len(row) > 18 else None,
    )




class ScheduleTable:
    """The schedules of one store, cached; every change is told to the listeners and ``wake``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: several kernels write the store (PostgreSQL): read it each time, cache nothing
        self.shared = isinstance(store, SharedSessions)
        self._cache: dict[int, Schedule] | None = None
        # A read-only file of an older schema has no ceiling column.
        self._columns = _COLUMNS + "".join(
            f", {column}" for column in ("ceiling", "budget") if self.store.has_column("schedules", column)
        )
        self._listeners: list[Callable[[int], None]] = []
        #: called after each change (the fire loop sets it: a change may move the next fire)
        self.wake: Callable[[], None] = lambda: None
        #: on a shared store, each change is announced to the other kernels (their fire loops
        #: wake, their listeners hear of it); this kernel knows its own notices by this token
        self._token = uuid.uuid4().hex[:12]
        if isinstance(store, SharedSessions):
            store.on_notice(NOTICE_CHANNEL, self._heard)
        if not self.store.read_only:  # fires a previous process left running never finished
            now = utcnow()
            for fire_id, session_id in self.store.execute(
                "SELECT id, session_id FROM schedule_fires WHERE status = 'running'"
            ):
                # on a shared store a fire in a session a live kernel serves is that kernel's
                if session_id is not None and served_elsewhere(self.store, int_value(session_id)):
                    continue
                self.store.execute(
                    "UPDATE schedule_fires SET status = 'error', reason = 'interrupted: kernel stopped', "
                    "finished_at = ? WHERE id = ? AND status = 'running'",
                    [now, fire_id],
                )

    def all(self) -> dict[int, Schedule]:
        if self._cache is None or self.shared:
            rows = self.store.execute(f"SELECT {self._columns} FROM schedules ORDER BY id")
            self._cache = {s.id: s for s in map(schedule_from_row, rows)}
        return self._cache

    def save(self, s: Schedule) -> None:
        # The wake prompt is user text like a Message, so a key pasted into it is masked before
        # it is stored, as the entries it becomes are (in memory too: the fires use this copy).
        s.prompt = self.store.redact(s.prompt)
        if s.disabled_reason:
            s.disabled_reason = self.store.redact(s.disabled_reason)
        if s.ceiling:  # the capped run's tool patterns: a key in them is masked, as in sessions.ceiling
            s.ceiling = redact_json_text(s.ceiling, self.store.redact)
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

    def _heard(self, payload: str) -> None:
        """Another kernel changed a schedule (or one of its fires)."""
        token, _, schedule_id = payload.partition(":")
        if token == self._token or not schedule_id.isdigit():
            return
        self.wake()
        self._tell(int(schedule_id))

    def changed(self, schedule_id: int) -> None:
        store = self.store
        if isinstance(store, SharedSessions) and not store.closed:
            store.notify(NOTICE_CHANNEL, f"{self._token}:{schedule_id}")
        self._tell(schedule_id)

    def _tell(self, schedule_id: int) -> None:
        for callback in list(self._listeners):
            try:
                callback(schedule_id)
            except Exception:  # one listener's failure must not keep the others from hearing it
                log.exception("schedule listener %r failed for schedule %s", callback, schedule_id)

    def next_id(self, table: str) -> int:
        """A new id for ``schedules`` or ``schedule_fires``: max + 1 in the one writing process
        of a DuckDB file, a sequence on a shared store (kernels create them at once)."""
        if self.shared:
            return int_value(self.store.execute(f"SELECT nextval('{table}_id_seq')")[0][0])
        return int_value(self.store.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {table}")[0][0])

    def running_fires(self, schedule_id: int) -> int:
        """Fires of the schedule in flight in any kernel (their rows say ``running``)."""
        return int_value(self.store.execute(
            "SELECT count(*) FROM schedule_fires WHERE schedule_id = ? AND status = 'running'", [schedule_id]
        )[0][0])

    def advance(self, s: Schedule, due: datetime | None, next_at: datetime | None) -> bool:
        """Move ``next_fire_at`` from ``due`` to ``next_at`` if no one has: True for the one
        caller (of every kernel on the store) that takes this tick."""
        rows = self.store.execute(
            "UPDATE schedules SET next_fire_at = ? WHERE id = ? AND enabled AND next_fire_at "
            + ("IS NULL" if due is None else "= ?") + " RETURNING id",
            [next_at, s.id] + ([] if due is None else [due]),
        )
        if not rows:
            return False
        s.next_fire_at = next_at
        if self._cache is not None and s.id in self._cache:
            self._cache[s.id].next_fire_at = next_at
        self.wake()
        self.changed(s.id)
        return True

    def update(self, schedule_id: int, **values: Any) -> None:
        """Set only these columns (a finished fire must not write back what another kernel changed)."""
        if "disabled_reason" in values and values["disabled_reason"]:
            values["disabled_reason"] = self.store.redact(values["disabled_reason"])
        sets = ", ".join(f"{name} = ?" for name in values)
        self.store.execute(f"UPDATE schedules SET {sets} WHERE id = ?", [*values.values(), schedule_id])
        cached = (self._cache or {}).get(schedule_id)
        if cached is not None:
            for name, value in values.items():
                setattr(cached, name, value)
        self.wake()
        self.changed(schedule_id)

    def count_fire(self, schedule_id: int, ok: bool, at: datetime) -> Schedule | None:
        """Count one finished fire in the row itself (fire_count + 1: fires of two kernels both
        count); the schedule as it is now, or None when it was removed."""
        self.store.execute(
            "UPDATE schedules SET fire_count = fire_count + 1, last_fired_at = ?, consecutive_failures = "
            "CASE WHEN ? THEN 0 ELSE consecutive_failures + 1 END WHERE id = ?",
            [at, ok, schedule_id],
        )
        if self._cache is not None and schedule_id in self._cache:
            cached = self._cache[schedule_id]
            cached.fire_count += 1
            cached.last_fired_at = at
            cached.consecutive_failures = 0 if ok else cached.consecutive_failures + 1
        current = self.all().get(schedule_id)
        self.wake()
        self.changed(schedule_id)
        return current


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
