"""Agent-owned schedules (a part): the Python API, the tools; cron.py, table.py, loop.py do the rest.

A schedule belongs to an agent and wakes it with a prompt: on a cron line (5 fields, or 6 with
seconds first; UTC), on an interval (``every 30s``), or once (``at 2026-12-01T09:00``,
``in 10m``). A fire runs the agent on the standalone path (docs/design.md, "Schedules")
(``Server.fire_agent_schedule``): the wake prompt is input to that one run and is never
written as a Directive; the Ack (with ``trigger_type="schedule"`` and the ``schedule_id``),
tool entries and reply land in the schedule's session, pinned or fresh per fire.

The scheduler is one task on the server's loop that sleeps until the next due schedule and
wakes early when schedules change. A fire whose session is busy is skipped and recorded;
missed cron and interval ticks are not back-filled; a one-shot that came due while the
kernel was down fires when the scheduler starts, and is removed after it fires.

A schedule an agent makes (``schedule_create``) keeps the authority of the run that made it:
its ceiling and its run-tree budget, which every fire draws on. Such schedules are limited:
at most ``max_per_origin`` live ones per run tree (per person's trigger they descend from),
none firing more often than every ``min_interval`` seconds; a capped run cancels only the
schedules its own tree made.

Schedule state lives in its own tables, not in the session log, so a store ``on_write``
callback does not see a fire being counted or a schedule being disabled or removed (those
happen after the run's last entry). ``Schedules.subscribe`` is that hook: callbacks get the
schedule id after each change of a schedule or of one of its fire records.
"""

from __future__ import annotations

import builtins
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from ...core.store import utcnow
from ...engine.tools import ToolError, ToolRegistry, tool
from ...engine.tree_budget import TreeBudgetExceeded
from ...errors import ScheduleError, TriggerError
from ..budgets import take_schedule
from ..ceiling import Authority, Ceiling
from ..ports import Part, current_run
from .loop import ONE_SHOT_RETRY, Scheduler
from .table import DEFAULT_MAX_FAILURES, Fire, Schedule, ScheduleTable

if TYPE_CHECKING:  # pragma: no cover
    from ..ports import ServerPort
    from .cron import (  # noqa: F401 - re-exported (at run time by __getattr__)
        TRIGGER_FORMS, CronSpec, Trigger, parse_cron, parse_duration, parse_trigger, to_utc_naive,
    )

__all__ = [
    "CronSpec", "DEFAULT_MAX_FAILURES", "Fire", "ONE_SHOT_RETRY", "Schedule", "ScheduleError", "Schedules",
    "TRIGGER_FORMS", "Trigger", "TriggerError", "install", "parse_cron", "parse_duration", "parse_trigger",
]


#: live schedules one run tree (one person's trigger) may have made
DEFAULT_MAX_PER_ORIGIN = 10
#: seconds: the most often an agent's schedule may fire (a one-shot: the least delay)
DEFAULT_MIN_INTERVAL = 60.0


#: the trigger parser's names, re-exported; cron.py is imported at their first use (a kernel
#: with no schedule never loads it: issue 32, a lean kernel)
_CRON_NAMES = frozenset({"TRIGGER_FORMS", "CronSpec", "Trigger", "parse_cron", "parse_duration", "parse_trigger",
                         "to_utc_naive"})


def __getattr__(name: str) -> Any:
    if name in _CRON_NAMES:
        from . import cron

        return getattr(cron, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Schedules(Part):
    """The server's schedules: Python API (for magics), the table, the fire loop."""

    name = "schedules"

    def __init__(
        self, port: ServerPort, *, max_per_origin: int = DEFAULT_MAX_PER_ORIGIN,
        min_interval: float = DEFAULT_MIN_INTERVAL,
    ) -> None:
        #: limits on the schedules agents make (a person's own are not limited)
        self.max_per_origin = max_per_origin
        self.min_interval = min_interval
        self.port = port
        self.store = port.store
        self.table = ScheduleTable(port.store)
        self.scheduler = Scheduler(port, self.table)
        install(port.tools)

    def subscribe(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(schedule_id)`` after each change of a schedule or its fires; returns the unsubscribe."""
        return self.table.subscribe(callback)

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
        budget: str | None = None,
    ) -> Schedule:
        """Create a schedule for ``agent``.

        ``session``: None -> a session of its own, created now, that every fire uses;
        ``"fresh"`` -> a new session per fire; an id -> that (pinned) session.
        """
        self.port.agent(agent)  # unknown agent: ServerError listing the known ones
        if not isinstance(prompt, str) or not prompt.strip():
            raise ScheduleError("a schedule needs a wake prompt (the text the agent is woken with)")
        now = utcnow()
        from .cron import parse_trigger, to_utc_naive  # the parser loads with the first schedule

        parsed = parse_trigger(trigger, now)
        if budget is not None:  # made by a run: the limits on agents' schedules
            self._check_agent_schedule(parsed, budget, now)
        if max_failures < 1:
            raise ScheduleError("max_failures must be at least 1")
        if max_fires is not None and max_fires < 1:
            raise ScheduleError("max_fires must be at least 1 (or None for no limit)")
        if isinstance(expires_at, str):
            try:
                expires_at = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
            except ValueError:
                raise ScheduleError(f"expires_at {expires_at!r} is not an ISO date-time") from None
        expires = to_utc_naive(expires_at) if expires_at is not None else None
        schedule_id = self.table.next_id("schedules")
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
            created_at=now, ceiling=ceiling, budget=budget,
        )
        self.table.save(s)
        self.scheduler.autostart()
        return replace(s)

    def _check_agent_schedule(self, trigger: Trigger, budget: str, now: datetime) -> None:
        """A ScheduleError past the limits on the schedules a run tree makes (else it counts)."""
        first = trigger.first_fire(now)
        gaps = [first - now] if trigger.kind == "once" else []
        due = first
        for _ in range(4 if trigger.kind != "once" else 0):  # a cron line's gaps may differ
            nxt = trigger.next_fire(due, due)
            if nxt is None:
                break
            gaps.append(nxt - due)
            due = nxt
        if gaps and min(gaps) < timedelta(seconds=self.min_interval):
            raise ScheduleError(
                f"an agent's schedule may fire at most every {self.min_interval:g} s ({trigger.text!r} is more "
                "often); use a longer interval, or a person raises server.schedules.min_interval"
            )
        if not take_schedule(self.store, budget, self.max_per_origin):
            raise ScheduleError(
                f"this run tree already made {self.max_per_origin} schedules (the most one person's trigger "
                "may lead to); a person raises server.schedules.max_per_origin"
            )

    def list(self, agent: str | None = None) -> list[Schedule]:
        return [replace(s) for s in self.table.all().values() if agent is None or s.agent == agent]

    def get(self, schedule_id: int) -> Schedule:
        """A copy of the schedule (ScheduleError naming the known ids when there is none)."""
        return replace(self.table.live(schedule_id))

    def pause(self, schedule_id: int, reason: str = "paused") -> Schedule:
        s = self.table.live(schedule_id)
        s.enabled, s.disabled_reason = False, reason
        self.table.save(s)
        return replace(s)

    def resume(self, schedule_id: int) -> Schedule:
        s = self.table.live(schedule_id)
        now = utcnow()
        s.enabled, s.disabled_reason, s.consecutive_failures = True, None, 0
        from .cron import parse_trigger

        trig = parse_trigger(s.trigger, now)
        if trig.kind != "once":
            s.next_fire_at = trig.first_fire(now)
        if s.max_fires is not None and s.fire_count >= s.max_fires:
            s.max_fires = None  # resuming a finished schedule lifts its limit
        self.table.save(s)
        self.scheduler.autostart()
        return replace(s)

    def remove(self, schedule_id: int) -> None:
        self.table.live(schedule_id)
        self.table.delete(int(schedule_id))


    def fires(self, schedule_id: int | None = None) -> builtins.list[tuple]:
        """Rows of ``schedule_fires`` (all, or of one schedule), oldest first."""
        return self.table.fires(schedule_id)

    # ------------------------------------------------------- the fire loop
    @property
    def running(self) -> bool:
        return self.scheduler.running

    def start(self) -> None:
        """Start the fire loop on the server's loop (needs a running or attached loop)."""
        self.scheduler.start()

    async def stop(self) -> None:
        """Stop the fire loop; fires in flight finish (or are cancelled with the server's runs)."""
        await self.scheduler.stop()

    async def fire(self, schedule: Schedule | int, *, scheduled_for: datetime | None = None) -> Fire:
        """Run the schedule's agent once, now (``Server.fire_agent_schedule``)."""
        return await self.scheduler.fire(schedule, scheduled_for=scheduled_for)


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
        # A schedule keeps the authority of the run that made it (ceiling.py): every fire runs
        # under the ceiling it had and draws on its tree's budget. A schedule is also a run
        # the tree starts later, so it counts as a spawn of the tree.
        authority = Authority.of_run(ctx)
        if ctx.tree is not None:
            try:
                ctx.tree.take_spawn()
            except TreeBudgetExceeded as exc:
                raise ToolError(str(exc)) from None
        try:
            s = ctx.port.part("schedules").add(ctx.agent.name, trigger, prompt, target, max_fires=max_fires,
                                               created_by=ctx.agent.name,
                                               ceiling=_ceiling_of(ctx, authority),
                                               budget=authority.budget or f"run:{ctx.run_id}")
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
        s = schedules.table.all().get(schedule_id)
        if s is None or s.agent != ctx.agent.name:
            raise ToolError(f"you have no schedule #{schedule_id}; schedule_list shows yours")
        if _capped(ctx) and (s.budget is None or s.budget != getattr(ctx.tree, "id", None)):
            raise ToolError(f"a capped run cancels only the schedules its own run tree made; schedule "
                            f"#{schedule_id} was not (a person can cancel it)")
        schedules.remove(schedule_id)
        return f"cancelled schedule #{schedule_id}"

    for t in (schedule_create, schedule_list, schedule_cancel):
        if t.name not in registry:
            registry.register(t)


def _capped(ctx) -> bool:
    """A run under a ceiling (a spawned child, a run another run or a run's schedule triggered)."""
    return ctx.ceiling is not None and ctx.ceiling != Ceiling()


def _ceiling_of(ctx, authority: Authority) -> str | None:
    """What a schedule stores of its maker's ceiling: the whole of it for a capped run; for a
    person's own run nothing, as before (its fires keep its agent's own tools)."""
    return authority.ceiling.to_json() if _capped(ctx) else None


def _ctx(tool_name: str):
    ctx = current_run.get()
    if ctx is None:
        raise ToolError(f"{tool_name} can only be called by an agent during a run")
    return ctx
