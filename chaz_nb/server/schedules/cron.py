"""Schedule triggers as pure functions: cron lines, intervals, one-shots (UTC, naive datetimes).

``parse_trigger`` reads what a person or an agent writes (``*/5 * * * *``, ``every 30m``,
``at 2026-12-01T09:00``, ``in 10m``) into a ``Trigger`` that says when it fires first and
next; nothing here touches the store or the loop.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from ...core.store import utcnow
from ...errors import TriggerError

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


def to_utc_naive(value: datetime) -> datetime:
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
        """The first fire: a once trigger's time, else the first tick after ``now``."""
        first = self.at if self.kind == "once" else self.next_fire(now, now)
        if first is None:  # parse_trigger makes none such: a once has its time, a cron line fires
            raise _bad(self.text, "it never fires")
        return first

    def next_fire(self, due: datetime, now: datetime) -> datetime | None:
        """The fire after the one due at ``due``; never a time at or before ``now``."""
        if self.kind == "once":
            return None
        if self.kind == "interval":
            step = timedelta(seconds=self.interval or 0)
            nxt = due + step
            return nxt if nxt > now else now + step
        if self.cron is None:  # parse_trigger gives every cron trigger its parsed line
            raise _bad(self.text, "a cron trigger needs its parsed line")
        return self.cron.next_after(max(due, now))

    def describe(self) -> str:
        return self.text


def parse_trigger(text: str | datetime, now: datetime | None = None) -> Trigger:
    """Parse a trigger text; a one-line TriggerError (a ValueError) says what is expected."""
    now = now or utcnow()
    if isinstance(text, datetime):
        at = to_utc_naive(text)
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
            at = to_utc_naive(datetime.fromisoformat(rest.replace("Z", "+00:00")))
        except ValueError:
            raise _bad(raw, f"{rest!r} is not an ISO date-time like 2026-12-01T09:00 (UTC)") from None
        return Trigger("once", f"at {at.isoformat()}", at=at)
    return Trigger("cron", raw, cron=parse_cron(raw))


