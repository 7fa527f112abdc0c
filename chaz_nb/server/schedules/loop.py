"""The fire loop: one task on the server's loop that sleeps until the next due schedule.

It wakes early when schedules change. A fire runs the agent with no trigger entry (the
standalone path, ``ServerPort.start_run``): the wake prompt is input to that one run and is
never written as a Directive; the Ack (with ``trigger_type="schedule"`` and the
``schedule_id``), tool entries and reply land in the schedule's session, pinned or fresh per
fire. A fire whose session is busy is skipped and recorded; missed cron and interval ticks are
not back-filled; a one-shot that came due while the kernel was down fires when the loop
starts, and is removed after it fires.

Several kernels on one shared store (PostgreSQL) each run this loop over the store's
schedules. A kernel fires only what it can serve: schedules of agents it defines whose pinned
session no other live kernel holds (it takes that session's lease, as ``process_session``
does). A due tick is taken by one kernel (``ScheduleTable.advance``, a compare-and-set of
``next_fire_at``), so it fires once across kernels. A schedule another kernel adds or
changes wakes the loop (a notice, ``ScheduleTable.changed``); a lost notice is made good
within ``SHARED_POLL`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ...core.entries import EntryType
from ...core.store import Store, utcnow
from ..ceiling import Ceiling
from ..invocation import Invocation
from .table import Fire, Schedule, ScheduleTable

if TYPE_CHECKING:  # pragma: no cover
    from ..ports import ServerPort

log = logging.getLogger(__name__)

ONE_SHOT_RETRY = 5.0  # seconds before a one-shot whose session was busy tries again
SHARED_POLL = 5.0  # on a shared store, a look at the table this often besides the notices


class Scheduler:
    """Fires due schedules on the server's loop."""

    def __init__(self, port: ServerPort, table: ScheduleTable) -> None:
        self.port = port
        self.table = table
        self.store = table.store
        self._task: asyncio.Task | None = None
        self._waker: asyncio.Future | None = None
        self._fires: set[asyncio.Task] = set()
        self._inflight: dict[int, int] = {}
        table.wake = self.poke

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the scheduler task on the server's loop (needs a running or attached loop)."""
        if self.running:
            return
        loop = self.port.loop()
        now = utcnow()
        # On a shared store a tick due a moment ago is a live kernel's to fire, not a missed one.
        missed = now - timedelta(seconds=2 * SHARED_POLL) if self.table.shared else now
        for s in self.table.all().values():  # no back-fill: recurring schedules skip missed ticks
            if s.enabled and s.kind != "once" and s.next_fire_at is not None and s.next_fire_at < missed:
                from .cron import parse_trigger  # a schedule exists: the parser is needed now

                self.table.advance(s, s.next_fire_at, parse_trigger(s.trigger, now).first_fire(now))
        self._task = loop.create_task(self._run(), name="chaz-scheduler")

    async def stop(self) -> None:
        """Stop the scheduler; fires in flight finish (or are cancelled with the server's runs)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._fires:
            await asyncio.gather(*list(self._fires), return_exceptions=True)

    def autostart(self) -> None:
        if self.running or self.port.stopped:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the extension (or the caller) calls start()
        self.start()

    def poke(self) -> None:
        if self._waker is not None and not self._waker.done():
            self._waker.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._waker = loop.create_future()
            now = utcnow()
            mine = [s for s in self.table.all().values() if s.enabled and s.next_fire_at and self._serves(s)]
            for s in mine:
                if s.next_fire_at is not None and s.next_fire_at <= now:
                    self._dispatch(s, now)
            upcoming = [s.next_fire_at for s in mine if s.enabled and s.next_fire_at]
            timeout = None
            if upcoming:
                timeout = max(0.0, (min(upcoming) - utcnow()).total_seconds())
            if self.table.shared:  # other kernels add, move and take schedules
                timeout = SHARED_POLL if timeout is None else min(timeout, SHARED_POLL)
            # asyncio.wait, not wait_for: on 3.11 wait_for can swallow a cancellation
            await asyncio.wait({self._waker}, timeout=timeout)

    def _serves(self, s: Schedule) -> bool:
        """Whether this kernel fires ``s``: always on an embedded store; on a shared one only
        a schedule of an agent it defines whose pinned session it may serve (its lease)."""
        if not self.table.shared:
            return True
        if s.agent not in self.port.agents:
            return False  # a kernel that defines it fires it
        return s.session_id is None or self.port.serving.lease(s.session_id)

    def _dispatch(self, s: Schedule, now: datetime) -> None:
        if s.expires_at is not None and now >= s.expires_at:
            self.table.update(s.id, enabled=False, disabled_reason="expired")
            return
        due = s.next_fire_at or now
        from .cron import parse_trigger

        next_at = parse_trigger(s.trigger, now).next_fire(due, now)
        local = inflight = self._inflight.get(s.id, 0)
        if self.table.shared and s.max_fires is not None:  # other kernels' fires in flight count too
            inflight = max(inflight, self.table.running_fires(s.id))
        if s.max_fires is not None and s.fire_count + inflight >= s.max_fires:
            if not self.table.advance(s, s.next_fire_at, next_at):
                return
            if not inflight:  # the fires in flight disable it when they finish
                self.table.update(s.id, enabled=False, disabled_reason="max_fires reached")
            return
        if not self.table.advance(s, s.next_fire_at, next_at):
            return  # another kernel took this tick
        self._inflight[s.id] = local + 1
        task = self.port.loop().create_task(self._fire_task(replace(s), due), name=f"chaz-fire-{s.id}")
        self._fires.add(task)
        task.add_done_callback(self._fires.discard)

    async def _fire_task(self, s: Schedule, due: datetime) -> None:
        try:
            await self.fire(s, scheduled_for=due)
        except Exception:  # a fire is a task of its own: its failure is logged here, not lost unretrieved
            log.exception("schedule #%s: fire failed", s.id)
        finally:
            self._inflight[s.id] -= 1

    async def fire(self, schedule: Schedule | int, *, scheduled_for: datetime | None = None) -> Fire:
        """Run the schedule's agent once (``Server.fire_agent_schedule``; docs/design.md, "Schedules")."""
        s = replace(self.table.live(schedule if isinstance(schedule, int) else schedule.id))
        started = utcnow()
        fire_id = self.table.next_id("schedule_fires")
        self.store.execute(
            "INSERT INTO schedule_fires (id, schedule_id, status, scheduled_for, started_at) "
            "VALUES (?, ?, 'running', ?, ?)",
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
        serving = self.port.serving  # on a shared store one server per session: the lease holder
        if session_id is not None and not serving.lease(session_id):
            reason = f"session {session_id} is served by another kernel"
            fire = Fire(fire_id, s.id, "skipped", session_id, reason=reason)
            return self._finish(s, fire, count=False)
        if session_id is None:
            session_id = self.store.create_session(
                s.agent, "schedule", title=f"schedule #{s.id} fire {fire_id}",
                metadata={"schedule_id": s.id, "fire_id": fire_id}, ceiling=s.ceiling,
            )
            serving.lease(session_id)
        # the fire's session is known while it runs: a kernel starting meanwhile leaves it alone
        self.store.execute("UPDATE schedule_fires SET session_id = ? WHERE id = ?", [session_id, fire_id])
        invocation = Invocation(
            ceiling=Ceiling.from_json(s.ceiling),
            budget=s.budget,  # a schedule a run made: its fires draw on that run's tree budget
            agent=s.agent,
            input=s.prompt,
            ack={"trigger_type": "schedule", "schedule_id": s.id, "fire_id": fire_id, "wake_prompt": s.prompt},
            unattended=True,
        )
        last = self.store.latest(session_id)  # the fire's Ack comes after it
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
        run_id = _run_id_of(self.store, session_id, fire_id, last.seq if last else 0)
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
        self.table.changed(s.id)  # a removed or skipped schedule is not saved again below
        # Only the columns a fire owns are written: next_fire_at is the loop's (another
        # kernel may have moved it on while this fire ran).
        current = self.table.all().get(s.id)
        if current is None:
            return fire  # removed while it ran
        if fire.status == "skipped":
            if current.kind == "once":
                self.table.update(current.id, next_fire_at=utcnow() + timedelta(seconds=ONE_SHOT_RETRY))
            return fire
        if count:
            current = self.table.count_fire(s.id, fire.status == "ok", utcnow())
            if current is None:
                return fire
            if current.enabled and current.consecutive_failures >= current.max_failures:
                reason = f"{current.consecutive_failures} failures in a row: {fire.reason}"
                self.table.update(current.id, enabled=False, disabled_reason=reason)
                current = self.table.all().get(s.id) or current
        if current.kind == "once":
            self.table.delete(current.id)
            return fire
        if current.enabled and current.max_fires is not None and current.fire_count >= current.max_fires:
            self.table.update(current.id, enabled=False, disabled_reason="max_fires reached")
        return fire


def _run_id_of(store: Store, session_id: int, fire_id: int, after_seq: int = 0) -> int | None:
    # only the Acks written since the fire started: a long session is not read whole
    for entry in reversed(store.entries(session_id, after_seq=after_seq, types=[EntryType.ACK])):
        if entry.payload.get("fire_id") == fire_id:
            return entry.id
    return None


