"""Agent-owned schedules: triggers, the ``schedules`` tables, the scheduler task, the tools.

A schedule belongs to an agent and wakes it with a prompt: on a cron line (5 fields, or 6 with
seconds first; UTC), on an interval (``every 30s``), or once (``at 2026-12-01T09:00``,
``in 10m``). A fire runs the agent on the reference's standalone path
(``Server.fire_agent_schedule``): the wake prompt is input to that one run and is never
written as a Directive; the Ack (with ``trigger_type="schedule"`` and the ``schedule_id``),
tool entries and reply land in the schedule's session, pinned or fresh per fire.

The scheduler is one task on the server's loop that sleeps until the next due schedule and
wakes early when schedules change. A fire whose session is busy is skipped and recorded;
missed cron and interval ticks are not back-filled; a one-shot that came due while the
kernel was down fires when the scheduler starts, and is removed after it fires.

Schedule state lives in its own tables, not in the session log, so a store ``on_write``
callback does not see a fire being counted or a schedule being disabled or removed (those
happen after the run's last entry). ``Schedules.subscribe`` is that hook: callbacks get the
schedule id after each change of a schedule or of one of its fire records.
"""

from __future__ import annotations

import asyncio
import calendar
import logging
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable

from .agents import current_run
from .ceiling import Ceiling
from ..core.entries import EntryType
from .invocation import Invocation
from ..core.store import utcnow
from ..engine.tools import ToolError, ToolRegistry, tool
from ..engine.tree_budget import TreeBudgetExceeded
from ..errors import ScheduleError, TriggerError
from .ports import Part

if TYPE_CHECKING:  # pragma: no cover
    from .ports import ServerPort

log = logging.getLogger(__name__)

DEFAULT_MAX_FAILURES = 3
ONE_SHOT_RETRY = 5.0  # seconds before a one-shot whose session was busy tries again
TRIGGER_FORMS = (
    'expected a cron line like "*/5 * * * *" (minute hour day month weekday, or 6 fields '
    'with seconds first, UTC), "every 30s|5m|1h|1d", "at 2026-12-01T09:00" or "in 10m"'
)


# ================================================================== triggers
_FIELDS = (  # name, low, high
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day", 1, 31),
    ("month", 1, 12),
    ("weekday", 0, 7),
)
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
_DAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
_UNITS = {
    "ms": 0.001, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")
MIN_INTERVAL = 0.05  # seconds


@dataclass(frozen=True)
class CronSpec:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_any: bool
    weekday_any: bool

    def _day_ok(self, t: datetime) -> bool:
        dom = t.day in self.days
        dow = (t.weekday() + 1) % 7 in self.weekdays
        if self.day_any or self.weekday_any:  # classic cron: both restricted means either
            return dom and dow
        return dom or dow

    def next_after(self, t: datetime) -> datetime | None:
        """The first matching second strictly after ``t`` (naive UTC), or None within 5 years."""
        t = t.replace(microsecond=0) + timedelta(seconds=1)
        limit = t.year + 5
        while t.year <= limit:
            if t.month not in self.months:
                y, m = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
                t = datetime(y, m, 1)
            elif not self._day_ok(t):
                t = datetime(t.year, t.month, t.day) + timedelta(days=1)
            elif t.hour not in self.hours:
                t = datetime(t.year, t.month, t.day, t.hour) + timedelta(hours=1)
            elif t.minute not in self.minutes:
                t = datetime(t.year, t.month, t.day, t.hour, t.minute) + timedelta(minutes=1)
            elif t.second not in self.seconds:
                t += timedelta(seconds=1)
            else:
                return t
        return None


def _bad(text: str, what: str) -> TriggerError:
    return TriggerError(f"bad schedule trigger {text!r}: {what}; {TRIGGER_FORMS}")


def _value(token: str, field_name: str, text: str) -> int:
    names = _MONTHS if field_name == "month" else _DAYS if field_name == "weekday" else {}
    if token.lower() in names:
        return names[token.lower()]
    if not token.isdigit():
        raise _bad(text, f"{field_name} field has {token!r}, not a number")
    return int(token)


def _parse_field(part: str, index: int, text: str) -> tuple[frozenset[int], bool]:
    name, low, high = _FIELDS[index]
    values: set[int] = set()
    for item in part.split(","):
        base, _, step_text = item.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise _bad(text, f"{name} field step {step_text!r} must be a positive number")
            step = int(step_text)
        if base in ("*", "?"):
            lo, hi = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            lo, hi = _value(a, name, text), _value(b, name, text)
        else:
            lo = _value(base, name, text)
            hi = high if step_text else lo
        for v in (lo, hi):
            if not low <= v <= high:
                raise _bad(text, f"{name} {v} is out of range {low}-{high}")
        if lo > hi:
            raise _bad(text, f"{name} range {base!r} runs backwards")
        values.update(range(lo, hi + 1, step))
    if name == "weekday" and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values), part in ("*", "?")


def parse_cron(text: str) -> CronSpec:
    line = _MACROS.get(text.strip().lower(), text)
    parts = line.split()
    if len(parts) == 5:
        parts = ["0", *parts]
    elif len(parts) != 6:
        raise _bad(
            text,
            f"a cron line has 5 fields (minute hour day month weekday) or 6 with seconds first, "
            f"got {len(parts)}",
        )
    parsed = [_parse_field(p, i, text) for i, p in enumerate(parts)]
    spec = CronSpec(
        seconds=parsed[0][0], minutes=parsed[1][0], hours=parsed[2][0], days=parsed[3][0],
        months=parsed[4][0], weekdays=parsed[5][0], day_any=parsed[3][1], weekday_any=parsed[5][1],
    )
    if spec.next_after(utcnow()) is None:
        raise _bad(text, "it never fires (no such day)")
    return spec


def parse_duration(text: str) -> float:
    """``30s``, ``5m``, ``1h``, ``1.5d``, ``500ms`` -> seconds (ValueError when not one)."""
    m = _DURATION.match(text.lower())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m, 1h or 1d")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _to_utc_naive(value: datetime) -> datetime:
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


@dataclass(frozen=True)
class Trigger:
    kind: str  # "cron" | "interval" | "once"
    text: str  # the canonical text stored in the database
    cron: CronSpec | None = None
    interval: float | None = None
    at: datetime | None = None

    def first_fire(self, now: datetime) -> datetime:
        if self.kind == "once":
            return self.at  # type: ignore[return-value]
        return self.next_fire(now, now)  # type: ignore[return-value]

    def next_fire(self, due: datetime, now: datetime) -> datetime | None:
        """The fire after the one due at ``due``; never a time at or before ``now``."""
        if self.kind == "once":
            return None
        if self.kind == "interval":
            step = timedelta(seconds=self.interval or 0)
            nxt = due + step
            return nxt if nxt > now else now + step
        return self.cron.next_after(max(due, now))  # type: ignore[union-attr]

    def describe(self) -> str:
        return self.text


def parse_trigger(text: str | datetime, now: datetime | None = None) -> Trigger:
    """Parse a trigger text; a one-line TriggerError (a ValueError) says what is expected."""
    now = now or utcnow()
    if isinstance(text, datetime):
        at = _to_utc_naive(text)
        return Trigger("once", f"at {at.isoformat()}", at=at)
    if not isinstance(text, str) or not text.strip():
        raise _bad(str(text), "it is empty")
    raw = " ".join(text.split())
    word, _, rest = raw.partition(" ")
    lower = word.lower()
    if lower == "every":
        try:
            seconds = parse_duration(rest)
        except ValueError as exc:
            raise _bad(raw, str(exc)) from None
        if seconds < MIN_INTERVAL:
            raise _bad(raw, f"the interval must be at least {MIN_INTERVAL:g}s")
        return Trigger("interval", f"every {rest.replace(' ', '')}", interval=seconds)
    if lower == "in":
        try:
            at = now + timedelta(seconds=parse_duration(rest))
        except ValueError as exc:
            raise _bad(raw, str(exc)) from None
        return Trigger("once", f"at {at.isoformat()}", at=at)
    if lower == "at":
        try:
            at = _to_utc_naive(datetime.fromisoformat(rest.replace("Z", "+00:00")))
        except ValueError:
            raise _bad(raw, f"{rest!r} is not an ISO date-time like 2026-12-01T09:00 (UTC)") from None
        return Trigger("once", f"at {at.isoformat()}", at=at)
    return Trigger("cron", raw, cron=parse_cron(raw))


# ================================================================= schedules
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


class Schedules(Part):
    """The server's schedules: Python API (for magics), persistence, scheduler task, fires."""

    name = "schedules"

    def __init__(self, port: "ServerPort") -> None:
        self.port = port
        self.store = port.store
        self._cache: dict[int, Schedule] | None = None
        self._task: asyncio.Task | None = None
        self._waker: asyncio.Future | None = None
        self._fires: set[asyncio.Task] = set()
        self._inflight: dict[int, int] = {}
        # A read-only file of an older schema has no ceiling column.
        self._columns = _COLUMNS + (", ceiling" if self.store.has_column("schedules", "ceiling") else "")
        self._listeners: list[Callable[[int], None]] = []
        install(port.tools)
        if not self.store.read_only:  # fires a previous process left running never finished
            self.store.execute(
                "UPDATE schedule_fires SET status = 'error', reason = 'interrupted: kernel stopped', "
                "finished_at = ? WHERE status = 'running'",
                [utcnow()],
            )

    # ------------------------------------------------------------ storage
    def _all(self) -> dict[int, Schedule]:
        if self._cache is None:
            rows = self.store.execute(f"SELECT {self._columns} FROM schedules ORDER BY id")
            self._cache = {row[0]: Schedule(*row) for row in rows}
        return self._cache

    def _save(self, s: Schedule) -> None:
        values = [getattr(s, c.strip()) for c in self._columns.split(",")]
        self.store.execute(f"INSERT OR REPLACE INTO schedules ({self._columns}) VALUES ({', '.join('?' * len(values))})", values)
        self._all()[s.id] = s
        self._poke()
        self._changed(s.id)

    def _delete(self, schedule_id: int) -> None:
        self.store.execute("DELETE FROM schedules WHERE id = ?", [schedule_id])
        self._all().pop(schedule_id, None)
        self._poke()
        self._changed(schedule_id)

    def subscribe(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(schedule_id)`` after each change of a schedule or its fires; returns the unsubscribe."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            try:
                self._listeners.remove(callback)
            except ValueError:
                pass

        return unsubscribe

    def _changed(self, schedule_id: int) -> None:
        for callback in list(self._listeners):
            try:
                callback(schedule_id)
            except Exception:
                log.exception("schedule listener %r failed for schedule %s", callback, schedule_id)

    def _next_id(self, table: str) -> int:
        return int(self.store.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {table}")[0][0])

    # ---------------------------------------------------------------- API
    def add(
        self,
        agent: str,
        trigger: str | datetime,
        prompt: str,
        session: int | str | None = None,
        *,
        max_failures: int = DEFAULT_MAX_FAILURES,
        expires_at: datetime | str | None = None,
        max_fires: int | None = None,
        created_by: str = "user",
        ceiling: str | None = None,
    ) -> Schedule:
        """Create a schedule for ``agent``.

        ``session``: None -> a session of its own, created now, that every fire uses;
        ``"fresh"`` -> a new session per fire; an id -> that (pinned) session.
        """
        self.port.agent(agent)  # unknown agent: ServerError listing the known ones
        if not isinstance(prompt, str) or not prompt.strip():
            raise ScheduleError("a schedule needs a wake prompt (the text the agent is woken with)")
        now = utcnow()
        parsed = parse_trigger(trigger, now)
        if max_failures < 1:
            raise ScheduleError("max_failures must be at least 1")
        if max_fires is not None and max_fires < 1:
            raise ScheduleError("max_fires must be at least 1 (or None for no limit)")
        if isinstance(expires_at, str):
            try:
                expires_at = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
            except ValueError:
                raise ScheduleError(f"expires_at {expires_at!r} is not an ISO date-time") from None
        expires = _to_utc_naive(expires_at) if expires_at is not None else None
        schedule_id = self._next_id("schedules")
        if session is None:
            session_id: int | None = self.store.create_session(
                agent, "schedule", title=f"schedule #{schedule_id}", metadata={"schedule_id": schedule_id}
            )
        elif session == "fresh":
            session_id = None
        else:
            try:
                session_id = int(session)
            except (TypeError, ValueError):
                raise ScheduleError(
                    f"session must be None (its own session), 'fresh' or a session id, not {session!r}"
                ) from None
            info = self.store.session(session_id)
            if info.kind == "room":
                raise ScheduleError(
                    f"session {session_id} is a room; a schedule targets a chat session or 'fresh'"
                )
        s = Schedule(
            id=schedule_id, agent=agent, trigger=parsed.text, kind=parsed.kind, prompt=prompt,
            session_id=session_id, max_failures=max_failures, expires_at=expires,
            max_fires=max_fires, next_fire_at=parsed.first_fire(now), created_by=created_by,
            created_at=now, ceiling=ceiling,
        )
        self._save(s)
        self._autostart()
        return replace(s)

    def list(self, agent: str | None = None) -> list[Schedule]:
        return [replace(s) for s in self._all().values() if agent is None or s.agent == agent]

    def get(self, schedule_id: int) -> Schedule:
        """A copy of the schedule (ScheduleError naming the known ids when there is none)."""
        return replace(self._get(schedule_id))

    def _get(self, schedule_id: int) -> Schedule:
        s = self._all().get(int(schedule_id))
        if s is None:
            known = ", ".join(f"#{i}" for i in self._all()) or "none"
            raise ScheduleError(f"no schedule #{schedule_id}; schedules: {known}")
        return s

    def pause(self, schedule_id: int, reason: str = "paused") -> Schedule:
        s = self._get(schedule_id)
        s.enabled, s.disabled_reason = False, reason
        self._save(s)
        return replace(s)

    def resume(self, schedule_id: int) -> Schedule:
        s = self._get(schedule_id)
        now = utcnow()
        s.enabled, s.disabled_reason, s.consecutive_failures = True, None, 0
        trig = parse_trigger(s.trigger, now)
        if trig.kind != "once":
            s.next_fire_at = trig.first_fire(now)
        if s.max_fires is not None and s.fire_count >= s.max_fires:
            s.max_fires = None  # resuming a finished schedule lifts its limit
        self._save(s)
        self._autostart()
        return replace(s)

    def remove(self, schedule_id: int) -> None:
        self._get(schedule_id)
        self._delete(int(schedule_id))

    def fires(self, schedule_id: int | None = None) -> list[tuple]:
        """Rows of ``schedule_fires`` (all, or of one schedule), oldest first."""
        where, params = ("WHERE schedule_id = ?", [schedule_id]) if schedule_id is not None else ("", [])
        return self.store.execute(
            "SELECT id, schedule_id, session_id, run_id, status, reason, prompt_tokens, "
            f"completion_tokens, cost_usd, scheduled_for, started_at, finished_at FROM schedule_fires {where} ORDER BY id",
            params,
        )

    # ----------------------------------------------------------- scheduler
    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the scheduler task on the server's loop (needs a running or attached loop)."""
        if self.running:
            return
        loop = self.port.loop()
        now = utcnow()
        for s in self._all().values():  # no back-fill: recurring schedules skip missed ticks
            if s.enabled and s.kind != "once" and s.next_fire_at is not None and s.next_fire_at < now:
                s.next_fire_at = parse_trigger(s.trigger, now).first_fire(now)
                self._save(s)
        self._task = loop.create_task(self._run(), name="chaz-scheduler")

    async def stop(self) -> None:
        """Stop the scheduler; fires in flight finish (or are cancelled with the server's runs)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._fires:
            await asyncio.gather(*list(self._fires), return_exceptions=True)

    def _autostart(self) -> None:
        if self.running or self.port.stopped:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the extension (or the caller) calls start()
        self.start()

    def _poke(self) -> None:
        if self._waker is not None and not self._waker.done():
            self._waker.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._waker = loop.create_future()
            now = utcnow()
            for s in list(self._all().values()):
                if s.enabled and s.next_fire_at is not None and s.next_fire_at <= now:
                    self._dispatch(s, now)
            upcoming = [s.next_fire_at for s in self._all().values() if s.enabled and s.next_fire_at]
            timeout = None
            if upcoming:
                timeout = max(0.0, (min(upcoming) - utcnow()).total_seconds())
            # asyncio.wait, not wait_for: on 3.11 wait_for can swallow a cancellation
            await asyncio.wait({self._waker}, timeout=timeout)

    def _dispatch(self, s: Schedule, now: datetime) -> None:
        if s.expires_at is not None and now >= s.expires_at:
            s.enabled, s.disabled_reason = False, "expired"
            self._save(s)
            return
        due = s.next_fire_at or now
        s.next_fire_at = parse_trigger(s.trigger, now).next_fire(due, now)
        inflight = self._inflight.get(s.id, 0)
        if s.max_fires is not None and s.fire_count + inflight >= s.max_fires:
            if not inflight:  # the fires in flight disable it when they finish
                s.enabled, s.disabled_reason = False, "max_fires reached"
            self._save(s)
            return
        self._save(s)
        self._inflight[s.id] = inflight + 1
        task = self.port.loop().create_task(self._fire_task(replace(s), due), name=f"chaz-fire-{s.id}")
        self._fires.add(task)
        task.add_done_callback(self._fires.discard)

    async def _fire_task(self, s: Schedule, due: datetime) -> None:
        try:
            await self.fire(s, scheduled_for=due)
        except Exception:
            log.exception("schedule #%s: fire failed", s.id)
        finally:
            self._inflight[s.id] -= 1

    # ---------------------------------------------------------------- fire
    async def fire(self, schedule: Schedule | int, *, scheduled_for: datetime | None = None) -> Fire:
        """Run the schedule's agent once (the reference's ``fire_agent_schedule``)."""
        s = replace(self._get(schedule if isinstance(schedule, int) else schedule.id))
        started = utcnow()
        fire_id = self._next_id("schedule_fires")
        self.store.execute(
            "INSERT INTO schedule_fires (id, schedule_id, status, scheduled_for, started_at) VALUES (?, ?, 'running', ?, ?)",
            [fire_id, s.id, scheduled_for, started],
        )
        if s.agent not in self.port.agents:
            # Not a failure: after a restart the notebook defines its agents in later cells.
            # Skipped (a one-shot retries soon), so a kept schedule is not disabled or removed.
            reason = f"agent {s.agent!r} is not defined in this kernel (yet)"
            return self._finish(s, Fire(fire_id, s.id, "skipped", reason=reason), count=False)
        session_id = s.session_id
        if session_id is not None and self.port.is_busy(session_id):
            fire = Fire(fire_id, s.id, "skipped", session_id, reason=f"session {session_id} is busy")
            return self._finish(s, fire, count=False)
        if session_id is None:
            session_id = self.store.create_session(
                s.agent, "schedule", title=f"schedule #{s.id} fire {fire_id}",
                metadata={"schedule_id": s.id, "fire_id": fire_id}, ceiling=s.ceiling,
            )
        invocation = Invocation(
            ceiling=Ceiling.from_json(s.ceiling),
            agent=s.agent,
            input=s.prompt,
            ack={"trigger_type": "schedule", "schedule_id": s.id, "fire_id": fire_id, "wake_prompt": s.prompt},
            unattended=True,
        )
        future = self.port.start_run(session_id, invocation)
        if future is None:
            fire = Fire(fire_id, s.id, "skipped", session_id, reason=f"session {session_id} is busy")
            return self._finish(s, fire, count=False)
        try:
            outcome = await asyncio.shield(future)
        except asyncio.CancelledError:
            outcome = None
            interrupted = True
        else:
            interrupted = False
        run_id = _run_id_of(self.store, session_id, fire_id)
        if interrupted or (outcome is None and self.port.stopped):
            fire = Fire(fire_id, s.id, "error", session_id, run_id, "interrupted", outcome)
            return self._finish(s, fire, count=False)
        if outcome is not None and outcome.entry_type is EntryType.ERROR:
            fire = Fire(fire_id, s.id, "error", session_id, run_id, outcome.content, outcome)
        else:
            fire = Fire(fire_id, s.id, "ok", session_id, run_id, None, outcome)
        return self._finish(s, fire, count=True)

    def _finish(self, s: Schedule, fire: Fire, *, count: bool) -> Fire:
        usage = fire.reply.payload if fire.reply is not None else {}
        self.store.execute(
            "UPDATE schedule_fires SET session_id = ?, run_id = ?, status = ?, reason = ?, prompt_tokens = ?, "
            "completion_tokens = ?, cost_usd = ?, finished_at = ? WHERE id = ?",
            [fire.session_id, fire.run_id, fire.status, fire.reason, usage.get("prompt_tokens"),
             usage.get("completion_tokens"), usage.get("cost_usd"), utcnow(), fire.id],
        )
        self._changed(s.id)  # a removed or skipped schedule is not saved again below
        current = self._all().get(s.id)
        if current is None:
            return fire  # removed while it ran
        if fire.status == "skipped":
            if current.kind == "once":
                current.next_fire_at = utcnow() + timedelta(seconds=ONE_SHOT_RETRY)
                self._save(current)
            return fire
        if count:
            current.fire_count += 1
            current.last_fired_at = utcnow()
            if fire.status == "ok":
                current.consecutive_failures = 0
            else:
                current.consecutive_failures += 1
                if current.enabled and current.consecutive_failures >= current.max_failures:
                    current.enabled = False
                    current.disabled_reason = f"{current.consecutive_failures} failures in a row: {fire.reason}"
        if current.kind == "once":
            self._delete(current.id)
            return fire
        if current.max_fires is not None and current.fire_count >= current.max_fires:
            current.enabled, current.disabled_reason = False, "max_fires reached"
        self._save(current)
        return fire


def _run_id_of(store: Any, session_id: int, fire_id: int) -> int | None:
    for entry in reversed(store.entries(session_id, types=[EntryType.ACK])):
        if entry.payload.get("fire_id") == fire_id:
            return entry.id
    return None


# ===================================================================== tools
def install(registry: ToolRegistry) -> None:
    """Register schedule_create, schedule_list and schedule_cancel (scoped to the calling agent)."""

    @tool  # async: these run on the kernel loop, beside the scheduler
    async def schedule_create(trigger: str, prompt: str, session: str = "this", max_fires: int | None = None) -> str:
        """Schedule yourself to be woken later with a prompt.

        Args:
            trigger: cron line (UTC, e.g. "0 9 * * 1-5"), "every 30m", "at 2026-12-01T09:00" or "in 10m"
            prompt: what you will be told when the schedule fires
            session: "this" to wake up in this session, "fresh" for a new session each time
            max_fires: stop after this many fires (default: no limit)
        """
        ctx = _ctx("schedule_create")
        if session not in ("this", "fresh"):
            raise ToolError('session must be "this" or "fresh"')
        target: int | str = "fresh" if session == "fresh" else ctx.session_id
        # A capped run (a spawned child, a run another run triggered) cannot schedule itself
        # out of its cap: every fire runs under the ceiling it had. A schedule is also a run
        # the tree starts later, so it counts as a spawn of the tree.
        capped = ctx.ceiling is not None and ctx.ceiling != Ceiling()
        if ctx.tree is not None:
            try:
                ctx.tree.take_spawn()
            except TreeBudgetExceeded as exc:
                raise ToolError(str(exc)) from None
        try:
            s = ctx.port.part("schedules").add(ctx.agent.name, trigger, prompt, target, max_fires=max_fires,
                                         created_by=ctx.agent.name,
                                         ceiling=ctx.ceiling.to_json() if capped else None)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        return f"created {s.one_line()}"

    @tool
    async def schedule_list() -> str:
        """List your schedules."""
        ctx = _ctx("schedule_list")
        mine = ctx.port.part("schedules").list(ctx.agent.name)
        return "\n".join(s.one_line() for s in mine) if mine else "you have no schedules"

    @tool
    async def schedule_cancel(schedule_id: int) -> str:
        """Cancel (delete) one of your schedules.

        Args:
            schedule_id: the number shown by schedule_list
        """
        ctx = _ctx("schedule_cancel")
        schedules = ctx.port.part("schedules")
        s = schedules._all().get(schedule_id)
        if s is None or s.agent != ctx.agent.name:
            raise ToolError(f"you have no schedule #{schedule_id}; schedule_list shows yours")
        schedules.remove(schedule_id)
        return f"cancelled schedule #{schedule_id}"

    for t in (schedule_create, schedule_list, schedule_cancel):
        if t.name not in registry:
            registry.register(t)


def _ctx(tool_name: str):
    ctx = current_run.get()
    if ctx is None:
        raise ToolError(f"{tool_name} can only be called by an agent during a run")
    return ctx
