"""Who serves a session: the one place that answers it, for the run engine and its parts.

- ``LocalServing`` (an embedded DuckDB file, or any store one process writes): every session
  is served here; nothing runs elsewhere, nothing is relayed.
- ``SharedServing`` (a ``SharedSessions`` store: PostgreSQL): the kernel that holds a
  session's lease serves it. This kernel takes the lease when it writes or reads a trigger of
  an agent it defines and nobody holds it, and then closes what the previous holder left open
  (``take_over``); a trigger written where the session is served elsewhere gets a
  ``RemoteRun`` (remote.py); the session's status there is read from the log up to the last
  entry the listener handed out; a stop of it is a request to that kernel (stop_relay.py).

``serving_for(store, ...)`` picks one; the engine asks it and never what kind of store it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

from ..core.entries import Entry
from ..core.store import SharedSessions, Store, int_or_none
from ..errors import ServerError
from .handle import RunHandle
from .remote import RemoteRun
from .stop_relay import Serves, StopHere, StopRelay
from .stopping import StoppedRun

#: a session's open runs and open approval requests, from the log (``status`` elsewhere)
_REMOTE_STATUS = """
SELECT
  (SELECT count(*) FROM entries a
   WHERE a.session_id = ? AND a.id <= ? AND a.entry_type = 'Ack' AND a.run_id = a.id
     AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.run_id = a.id AND e.id <> a.id AND e.id <= ?
                     AND e.entry_type IN ('Message', 'Error', 'Ack'))),
  (SELECT count(*) FROM entries r
   WHERE r.session_id = ? AND r.id <= ? AND r.entry_type = 'ApprovalRequest'
     AND NOT EXISTS (SELECT 1 FROM entries d WHERE d.session_id = r.session_id AND d.id <= ?
                     AND d.entry_type = 'ApprovalDecision'
                     AND json_extract_string(d.payload, '$.request_id')
                         = json_extract_string(r.payload, '$.request_id')))
"""

#: the newest run of a session with an Ack and no closing entry (in the whole table)
_OPEN_RUN = """
SELECT max(a.id) FROM entries a
WHERE a.session_id = ? AND a.entry_type = 'Ack' AND a.run_id = a.id
  AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.run_id = a.id AND e.id <> a.id
                  AND e.entry_type IN ('Message', 'Error', 'Ack'))
"""

#: the Messages and Directives written since a session's last Ack (triggers not yet answered),
#: but those of senders that write the session's Acks (its agents)
_UNANSWERED = """
SELECT entry_type, sender FROM entries
WHERE session_id = ? AND id <= ? AND entry_type IN ('Message', 'Directive')
  AND id > coalesce((SELECT max(id) FROM entries WHERE session_id = ? AND id <= ? AND entry_type = 'Ack'
                     AND run_id IS NOT NULL), 0)
  AND sender NOT IN (SELECT sender FROM entries WHERE session_id = ? AND entry_type = 'Ack' AND run_id IS NOT NULL)
"""

#: the newest opening Ack (not a fork's copy, whose answers name the parent's entries) up to an id
_LAST_RUN_ACK = """
SELECT id, payload FROM entries
WHERE session_id = ? AND id <= ? AND entry_type = 'Ack' AND run_id = id AND copied_from IS NULL
ORDER BY id DESC LIMIT 1
"""

#: the Messages and Directives between two ids, but those of the session's agents (as above)
_TRIGGERS_BETWEEN = """
SELECT id, entry_type, sender FROM entries
WHERE session_id = ? AND id > ? AND id < ? AND entry_type IN ('Message', 'Directive')
  AND sender NOT IN (SELECT sender FROM entries WHERE session_id = ? AND entry_type = 'Ack' AND run_id IS NOT NULL)
"""

#: the payloads of the Acks in an id range (a stopped run's closing Ack lists what it dropped)
_ACKS_BETWEEN = "SELECT payload FROM entries WHERE session_id = ? AND id > ? AND id <= ? AND entry_type = 'Ack'"


def _ids(value: object) -> set[int]:
    return {i for i in value if isinstance(i, int) and not isinstance(i, bool)} if isinstance(value, list) else set()


def _payload(value: object) -> dict[str, object]:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    return value if isinstance(value, dict) else {}


def open_run(store: Store, session_id: int) -> int | None:
    """The session's newest run with no closing entry in the log, or None."""
    rows = store.execute(_OPEN_RUN, [session_id])
    return int_or_none(rows[0][0]) if rows else None


class Serving(ABC):
    """Where a session's runs happen: here, or in the kernel that serves it."""

    #: stop requests to and from the other kernels (None: there are none to ask)
    relay: StopRelay | None = None

    @abstractmethod
    def claim(self, session_id: int) -> bool:
        """Whether this server serves the session now (taking it over when it may); a False
        means another kernel does, or will at its next trigger."""

    @abstractmethod
    def serve_here(self, session_id: int) -> None:
        """Before this server writes a trigger: take the session when nobody serves it and this
        server defines its agent, so that the kernel that writes serves it."""

    @abstractmethod
    def lease(self, session_id: int) -> bool:
        """For a part that serves a session itself (a room's turns, a schedule's fire): hold the
        session now, with no take-over; False while another kernel serves it."""

    @abstractmethod
    def holds(self, session_id: int) -> bool:
        """Whether this server serves the session (its runs and requests are its own)."""

    @abstractmethod
    def elsewhere(self, session_id: int) -> bool:
        """Whether another live kernel serves the session (what is open there is its own)."""

    def remote_handle(self, entry: Entry, loop: asyncio.AbstractEventLoop) -> RunHandle | None:
        """The handle of the run another kernel serves for the trigger ``entry``, if one does."""
        return None

    def status(self, session_id: int) -> str:
        """``idle``/``running``/``parked`` of a session this server runs nothing in."""
        return "idle"

    def run_elsewhere(self, session_id: int) -> StoppedRun | None:
        """The run another kernel serves in the session (what a stop from here would stop)."""
        return None

    def send_stop(self, session_id: int, by: str) -> None:
        """Ask the kernel that serves the session to stop its run."""
        raise ServerError(f"session {session_id} is served here; no other kernel to ask")

    async def ask_stop(self, session_id: int, by: str, timeout: float) -> list[StoppedRun] | None:
        """``send_stop`` and wait for the answer: what was stopped, or None after ``timeout`` s."""
        raise ServerError(f"session {session_id} is served here; no other kernel to ask")

    @abstractmethod
    def close(self) -> None:
        """Stop hearing other kernels' requests."""


class LocalServing(Serving):
    """A store one process writes: every session is served here."""

    def claim(self, session_id: int) -> bool:
        return True

    def serve_here(self, session_id: int) -> None:
        pass

    def lease(self, session_id: int) -> bool:
        return True

    def holds(self, session_id: int) -> bool:
        return True

    def elsewhere(self, session_id: int) -> bool:
        return False

    def close(self) -> None:
        pass


class SharedServing(Serving):
    """A ``SharedSessions`` store: the lease holder serves each session (module docstring)."""

    def __init__(
        self,
        store: SharedSessions,
        agents: Mapping[str, object],
        take_over: Callable[[int], object],
        serves: Serves,
        stop_here: StopHere,
    ) -> None:
        self.store = store
        self._agents = agents  # the server's agents by name (its own dict: a definition is seen at once)
        self._take_over = take_over
        self.relay: StopRelay = StopRelay(store, serves, stop_here)

    def claim(self, session_id: int) -> bool:
        # a server that does not define the session's agent never takes it (one that does takes
        # it at its next trigger); one that takes it closes what the previous holder left open
        store = self.store
        if store.holds(session_id):
            return True
        if store.session(session_id).agent not in self._agents or not store.claim(session_id):
            return False
        self._take_over(session_id)
        return True

    def serve_here(self, session_id: int) -> None:
        if self.store.holds(session_id):
            return
        info = self.store.session(session_id)
        if info.kind != "room" and info.agent in self._agents:  # (rooms route their own turns, rooms.py)
            self.claim(session_id)

    def lease(self, session_id: int) -> bool:
        return self.store.claim(session_id)

    def holds(self, session_id: int) -> bool:
        return self.store.holds(session_id)

    def elsewhere(self, session_id: int) -> bool:
        return self.store.held_elsewhere(session_id)

    def remote_handle(self, entry: Entry, loop: asyncio.AbstractEventLoop) -> RunHandle | None:
        if not self.elsewhere(entry.session_id):
            return None
        return RemoteRun(self.store, entry, loop)

    def status(self, session_id: int) -> str:
        # only the entries this server's subscribers were handed (the views, the handles): a run
        # that closed in the table but whose end the listener has not brought yet is running here
        store = self.store
        seen = store.dispatched_id
        rows = store.execute(_REMOTE_STATUS, [session_id, seen, seen, session_id, seen, seen])
        open_runs, open_requests = rows[0] if rows else (0, 0)
        if not open_runs:
            # a trigger written since the last Ack: the serving kernel is about to start its run
            # (an agent's reply is no trigger, also where that agent is not defined: it wrote Acks)
            waiting = store.execute(_UNANSWERED, [session_id, seen, session_id, seen, session_id])
            open_runs = (any(t == "Directive" or sender not in self._agents for t, sender in waiting)
                         or self._queued_before_ack(session_id, seen))
        if not open_runs or not self.elsewhere(session_id):
            return "idle"  # (a run left open by a dead kernel is closed at the next trigger)
        return "parked" if open_requests else "running"

    def _queued_before_ack(self, session_id: int, seen: int) -> bool:
        """Whether a trigger written before the newest run's Ack is not among the triggers it
        answers (nor dropped by a stop): it came while that Ack was committing (the Ack commits
        once the model request has left), so the next run answers it. Runs answer triggers in
        order, so only those between the Ack's last answer and the Ack itself are looked at."""
        store = self.store
        rows = store.execute(_LAST_RUN_ACK, [session_id, seen])
        if not rows:
            return False
        ack_id, payload = int_or_none(rows[0][0]) or 0, _payload(rows[0][1])
        answers = _ids(payload.get("answers"))
        if not answers or max(answers) >= ack_id - 1:
            return False  # nothing was written between its last answer and the Ack
        handled = set(answers)
        for (later,) in store.execute(_ACKS_BETWEEN, [session_id, ack_id, seen]):
            handled |= _ids(_payload(later).get("dropped"))
        waiting = store.execute(_TRIGGERS_BETWEEN, [session_id, max(answers), ack_id, session_id])
        return any(entry_id not in handled and (t == "Directive" or sender not in self._agents)
                   for entry_id, t, sender in waiting)

    def run_elsewhere(self, session_id: int) -> StoppedRun | None:
        """None also when nothing runs there; a run open in the log whose kernel is gone (nobody
        holds the lease) is a ServerError saying how it gets closed."""
        if not self.relay.enabled or self.holds(session_id):
            return None
        if not self.elsewhere(session_id):
            if open_run(self.store, session_id) is None:
                return None
            agent = self.store.session(session_id).agent
            raise ServerError(
                f"no kernel serves session {session_id}: the kernel that ran it is gone and left its run open; "
                f"a message to it from a kernel that defines {agent} closes that run and answers"
            )
        status = self.status(session_id)
        if status == "idle":
            return None
        agent = self.store.session(session_id).agent
        return StoppedRun(session_id, agent, open_run(self.store, session_id), status, elsewhere=True)

    def send_stop(self, session_id: int, by: str) -> None:
        self.relay.send(session_id, by)

    async def ask_stop(self, session_id: int, by: str, timeout: float) -> list[StoppedRun] | None:
        return await self.relay.ask(session_id, by, timeout)

    def close(self) -> None:
        self.relay.close()


def serving_for(
    store: Store, agents: Mapping[str, object], take_over: Callable[[int], object], serves: Serves,
    stop_here: StopHere,
) -> Serving:
    """The serving strategy of ``store``: shared (leases) when it is a ``SharedSessions`` store."""
    if isinstance(store, SharedSessions):
        return SharedServing(store, agents, take_over, serves, stop_here)
    return LocalServing()
