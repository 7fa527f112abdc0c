"""Recovery and stops of the run engine, mixed into ``RunEngine`` (runs.py): close what a
previous process (or a kernel that served a session before) left open, and stop runs here or,
on a shared store, ask the kernel that serves them (stopping.py, stop_relay.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.entries import Entry, EntryType
from ..core.store import Store, int_value, str_value
from ..errors import ServerError
from .ports import Part
from .serving import Serving, open_run
from .stop_relay import REMOTE_STOP_TIMEOUT
from .stopping import StoppedRun

if TYPE_CHECKING:  # pragma: no cover
    from .session_state import SessionState


class RunStops:
    """Recovery and stops, mixed into ``RunEngine`` (runs.py), whose state they read."""

    store: Store
    parts: list[Part]
    serving: Serving
    _states: dict[int, SessionState]
    _stopped: bool

    if TYPE_CHECKING:  # RunEngine's (a stub here would shadow it)
        def _resolve(self, futures: list[asyncio.Future], outcome: Entry | None) -> None: ...

    def recover(self) -> dict[str, int]:
        """Close what a previous process left open: each part's, then runs with no end."""
        if self.store.read_only:
            return {"runs": 0, "approvals": 0}
        counts: dict[str, int] = {}
        for part in self.parts:
            counts.update(part.recover())
        return {"runs": self._close_open_runs(), **counts}

    def take_over(self, session_id: int) -> dict[str, int]:
        """This server has just taken the session's lease (shared store): close what a kernel
        that served it before left open, as start-up recovery does (a dead holder's run and
        approval requests). A session that is new, or was closed cleanly, has nothing open."""
        counts: dict[str, int] = {}
        for part in self.parts:
            counts.update(part.recover_session(session_id))
        counts["runs"] = self._close_open_runs(session_id)
        return counts

    def _close_open_runs(self, session_id: int | None = None) -> int:
        """Close with an Error every run that has an Ack and no end (of one session or all),
        except in sessions a live kernel serves."""
        where = "" if session_id is None else " AND a.session_id = ?"
        open_runs = self.store.execute(
            f"""
            SELECT a.id, a.session_id, a.sender FROM entries a
            WHERE a.entry_type = 'Ack' AND a.run_id = a.id{where}
              AND NOT EXISTS (
                SELECT 1 FROM entries e
                WHERE e.run_id = a.id AND e.id <> a.id AND e.entry_type IN ('Message', 'Error', 'Ack'))
            ORDER BY a.id
            """,
            [] if session_id is None else [session_id],
        )
        if session_id is None:
            open_runs = [row for row in open_runs if not self.serving.elsewhere(int_value(row[1]))]
        for run_id, sid, sender in open_runs:
            self.store.append(
                int_value(sid), EntryType.ERROR, str_value(sender), "interrupted: kernel stopped",
                payload={"run_id": run_id, "interrupted": True},
            )
        return len(open_runs)

    def request_stop(self, session_id: int | None = None, by: str = "user") -> list[StoppedRun]:
        """Cancel the run of ``session_id`` and of the sessions spawned from it (None: every
        session's run in this server); return what was stopped, [] when nothing was running.
        See stopping.py.

        The cancels are requested here; each run writes its closing Ack as it unwinds
        (``stop_runs`` waits for that). On a shared store, a session another kernel serves is
        that kernel's to stop: it is asked to (stop_relay.py), and the run it is asked about is
        returned with ``elsewhere`` set; a run left open by a kernel that is gone is a ServerError.
        """
        stopped = self._stop_here(session_id, by)
        if session_id is None or any(run.session_id == session_id for run in stopped):
            return stopped
        remote = self.serving.run_elsewhere(session_id)
        if remote is None:
            return stopped
        self.serving.send_stop(session_id, by)
        return [*stopped, remote]

    def _stop_here(self, session_id: int | None, by: str) -> list[StoppedRun]:
        """``request_stop`` of the runs in this server only."""
        targets: dict[int, int | None]  # session -> the stopped ancestor that reaches it
        if session_id is None:
            targets = dict.fromkeys(self._states)
        else:
            self.store.session(session_id)  # a StoreError naming an unknown session
            targets = {session_id: None, **{sid: session_id for sid in self._states
                                            if sid != session_id and self._descends(sid, session_id)}}
        stopped: list[StoppedRun] = []
        for sid in sorted(targets):
            state = self._states.get(sid)
            if state is None or state.task is None or state.task.done() or state.stop_by is not None:
                continue
            was = "parked" if state.parked else "running"
            state.stop_by = by
            # the queued follow-up is dropped: it would answer a request the person withdrew
            state.dropped = [e.id for e in state.queued_triggers]
            self._resolve(state.queued_futures, None)
            state.queued, state.queued_futures, state.queued_triggers = None, [], []
            state.task.cancel()
            stopped.append(StoppedRun(sid, self.store.session(sid).agent, state.run_id, was,
                                      via=targets[sid], dropped=len(state.dropped)))
        return stopped

    def _descends(self, session_id: int, ancestor: int) -> bool:
        parent = self.store.session(session_id).parent_id
        while parent is not None:
            if parent == ancestor:
                return True
            parent = self.store.session(parent).parent_id
        return False

    async def stop_runs(self, session_id: int | None = None, by: str = "user") -> list[StoppedRun]:
        """``request_stop``, then wait until each stopped run has written its closing Ack.

        A session another kernel serves (shared store): that kernel stops it and answers with
        what it stopped (stop_relay.py); no answer within ``REMOTE_STOP_TIMEOUT`` s is a
        ServerError, unless the log shows the run closed meanwhile."""
        stopped = await self._stop_here_and_wait(session_id, by)
        if session_id is None or any(run.session_id == session_id for run in stopped):
            return stopped
        remote = self.serving.run_elsewhere(session_id)
        if remote is None:
            return stopped
        answer = await self.serving.ask_stop(session_id, by, REMOTE_STOP_TIMEOUT)
        if answer is None:
            if remote.run_id is None or open_run(self.store, session_id) == remote.run_id:
                raise ServerError(
                    f"asked the kernel that serves session {session_id} to stop its run; no answer in "
                    f"{REMOTE_STOP_TIMEOUT:g} s (is a cell running there?); %chaz log {session_id} shows when it ends"
                )
            answer = [remote]  # the answer was lost (a listener reconnecting), the run is closed
        return [*stopped, *answer]

    async def _stop_here_and_wait(self, session_id: int | None, by: str) -> list[StoppedRun]:
        """Stop the runs of this server (``_stop_here``) and wait until they have ended."""
        states = dict(self._states)  # the states go as runs end
        stopped = self._stop_here(session_id, by)
        waits = [t for s in stopped if (t := states[s.session_id].task) is not None]
        await asyncio.gather(*waits, return_exceptions=True)
        # a run stopped while its Ack was still in its commit window (the Ack commits once the
        # model request has left) has its id now: the stop hurried the Ack before the run closed
        return [run if run.run_id is not None else replace(run, run_id=states[run.session_id].run_id)
                for run in stopped]

    def _serves(self, session_id: int) -> bool:
        """Whether a stop request for the session is this server's to carry out: it runs the
        session (or serves it, and so would answer that nothing runs)."""
        if self._stopped:
            return False
        return session_id in self._states or self.serving.holds(session_id)
