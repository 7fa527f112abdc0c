"""The run engine: per-session state and scheduling (the session loop), status, stops.

It implements ``ServerPort`` (ports.py), the one interface the server's parts use.

Every invocation is a write: a Message from a non-agent sender or any Directive starts the
session's agent; everything else is ignored, so the server never re-triggers on its own
replies. One run at a time per session; a trigger that arrives during a run queues one
follow-up run on the updated context, and every trigger that arrives before that run starts
joins it. So a burst of Messages gets fewer replies than Messages; to keep that visible, each
run's Ack lists the triggers it answers: ``answers`` (their entry ids, in seq order) and
``answers_count``. Every trigger is in exactly one Ack's ``answers``.

Every Ack that opens a run gets a closing entry (the reply, an Error, or a silent-turn Ack),
also when the run is cancelled (``stop``) at any point after the Ack: even while the Ack is
still committing, the interruption is written once it lands.

One run, from its Ack to its closing entry, is run.py (``RunSteps``, mixed in here), and
recovery and stops are run_stops.py (``RunStops``, mixed in too); this module keeps the
registries, the per-session scheduling and park/status.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import contextmanager
from typing import Any
from collections.abc import Awaitable, Callable, Iterator

from ..core.entries import Entry, EntryType
from ..core.store import Store
from ..engine.backends import ModelBackend
from ..engine.tools import ToolRegistry
from ..errors import ServerError
from .agents import Agent
from .budgets import Budgets
from .agent_trust import Held
from .ceiling import Authority, Ceiling
from .repost import carried
from .invocation import Invocation
from .handle import RunHandle
from .ports import Part, SpawnContext, current_run
from .streams import StreamHub
from .run import RunSteps
from .run_stops import RunStops
from .session_state import SessionState
from .serving import serving_for
from .stop_relay import StopRelay

log = logging.getLogger(__name__)

#: what the engine made of a committed entry: the handle of the run it starts here (None: none
#: here), and whether another kernel serves its session (a shared store)
Decision = tuple[RunHandle | None, bool]

#: entries of a run that supersede the reply text streamed so far (a tool call: that step's text)
_ENDS_STREAM = frozenset({EntryType.MESSAGE, EntryType.ERROR, EntryType.ACK, EntryType.TOOL_CALL})


class RunEngine(RunStops, RunSteps):
    """Starts and runs agents for the entries written to a store (implements ``ServerPort``)."""

    def __init__(
        self,
        store: Store,
        agents: dict[str, Agent],
        tools: ToolRegistry,
        backend: ModelBackend,
        *,
        max_concurrent_calls: int,
        tool_timeout: float,
    ) -> None:
        self.store = store
        self.agents = agents  # the façade's dict: a definition there is seen here
        #: agents another kernel changed, held to this kernel's confirmed definition (the
        #: roster's dict, agent_trust.py): their runs meet ``Held.ceiling``
        self.held: dict[str, Held] = {}
        self.tools = tools
        self.backend = backend
        self.tool_timeout = tool_timeout
        self.max_concurrent_calls = max_concurrent_calls
        self.parts: list[Part] = []
        self._limiter: asyncio.Semaphore | None = None
        self._states: dict[int, SessionState] = {}
        self._handles: dict[int, RunHandle] = {}  # trigger entry id -> handle, while in flight
        # the decisions each write of this engine in flight hears of (``_deciding``), and the
        # entries whose writer decided before their on_write callback came (``_run_for``)
        self._listening: list[dict[int, Decision]] = []
        self._early: set[int] = set()
        self._spawn: dict[int, SpawnContext] = {}
        self._completions: dict[int, asyncio.Future] = {}
        #: run-tree budgets, counted in the store (budgets.py)
        self.budgets = Budgets(store)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False
        #: reply text while it is written (transient, not entries; see streams.py)
        self.streams = StreamHub()
        #: who serves each session: here, or (shared store) the kernel that holds its lease
        self.serving = serving_for(store, agents, self.take_over, self._serves, self._stop_here_and_wait)

    @property
    def relay(self) -> StopRelay | None:
        """Stop requests to and from the other kernels of a shared store (stop_relay.py)."""
        return self.serving.relay

    # ------------------------------------------------------------ parts
    def register(self, part: Part) -> None:
        self.parts.append(part)

    def part(self, name: str) -> Any:
        for p in self.parts:
            if p.name == name:
                return p
        raise ServerError(f"this server has no {name!r} part")

    # ----------------------------------------------------------- agents
    def agent(self, name: str) -> Agent:
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(sorted(self.agents)) or "none"
            raise ServerError(f"unknown agent {name!r}; known agents: {known}") from None

    # ----------------------------------------------------- loop, limiter
    @property
    def stopped(self) -> bool:
        return self._stopped

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                raise ServerError(
                    "the chaz_nb server needs a running asyncio event loop; "
                    "call it from async code or attach_loop() first"
                ) from None
        return self._loop

    def limiter(self) -> asyncio.Semaphore:
        if self._limiter is None:
            self._limiter = asyncio.Semaphore(self.max_concurrent_calls)
        return self._limiter

    # ----------------------------------------------------------- writes
    def post(
        self,
        session_id: int,
        entry_type: EntryType | str,
        content: str,
        sender: str = "user",
        payload: dict[str, Any] | None = None,
    ) -> RunHandle | None:
        """Write an entry in a commit of its own; the handle of the run it triggers, if any."""
        payload = self._before_write(session_id, entry_type, sender, payload)
        with self._deciding() as decisions:
            entry = self.store.append(session_id, entry_type, sender, content, payload=payload)
        return self._run_for(entry, decisions)

    async def send(
        self,
        session_id: int,
        entry_type: EntryType | str,
        content: str,
        sender: str = "user",
        payload: dict[str, Any] | None = None,
    ) -> RunHandle | None:
        """``post`` through the group commit (the tick's other writes share its transaction)."""
        payload = self._before_write(session_id, entry_type, sender, payload)
        with self._deciding() as decisions:
            entry = await self.store.write_one(session_id, entry_type, sender, content, payload=payload)
        return self._run_for(entry, decisions)

    def _before_write(
        self, session_id: int, entry_type: EntryType | str, sender: str, payload: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        if EntryType(entry_type) not in (EntryType.MESSAGE, EntryType.DIRECTIVE):
            return payload
        self.loop()  # refuse before writing rather than write a trigger nobody runs
        self.serve_here(session_id)
        return self._with_authority(sender, payload)

    @contextmanager
    def _deciding(self) -> Iterator[dict[int, Decision]]:
        """While a write of this engine is in flight: what ``_decide`` makes of each entry
        delivered meanwhile, by entry id (the writer picks its own entry's out)."""
        decisions: dict[int, Decision] = {}
        self._listening.append(decisions)
        try:
            yield decisions
        finally:
            self._listening.remove(decisions)

    def _run_for(self, entry: Entry, decisions: dict[int, Decision]) -> RunHandle | None:
        """The run an entry this engine has just written starts: the decision made from the
        committed entry when its on_write callbacks ran (at the commit), or, when they are still
        queued behind the callback that wrote it (a part's on_write writing a trigger), made now;
        its callback then passes it by. Never a lookup that assumes which came first."""
        if entry.id in decisions:
            handle, elsewhere = decisions[entry.id]
        elif self.store.undelivered(entry):
            self._early.add(entry.id)
            handle, elsewhere = self._decide(entry)
        else:
            return None  # delivered with no decision: the engine does not listen (stopped)
        if elsewhere:  # a shared store: the kernel that serves the session runs it (remote.py)
            return self.serving.remote_handle(entry, self.loop())
        return handle

    def _with_authority(self, sender: str, payload: dict[str, Any] | None) -> dict[str, Any] | None:
        """A trigger written by one of this server's runs (``send_message``) carries the run's
        authority in the entry, for whichever kernel serves it (ceiling.py)."""
        run = current_run.get()
        if run is None or run.port is not self or sender != run.agent.name:
            return payload
        return carried(payload, Authority.of_run(run))

    def serve_here(self, session_id: int) -> None:
        """Before this server writes a trigger: take the session when nobody serves it and this
        server defines its agent (serving.py), so that the kernel that writes serves it."""
        self.serving.serve_here(session_id)

    def handle(self, trigger_id: int) -> RunHandle | None:
        """The handle of the run a trigger entry started, while it is in flight."""
        return self._handles.get(trigger_id)

    def track(self, trigger: Entry, future: asyncio.Future[Entry | None]) -> RunHandle:
        handle = self._handles[trigger.id] = RunHandle(trigger, future)
        key = trigger.id
        future.add_done_callback(lambda _f: self._handles.pop(key, None))
        return handle

    def register_child_session(
        self, agent_name: str, kind: str, spawn: SpawnContext
    ) -> tuple[int, asyncio.Future[None]]:
        """Create a child session for a spawn; return its id and the completion future.

        The session keeps the spawning run's ceiling (its scope, its auto-approve chain, its
        depth limit) for every later run there, across restarts (see ceiling.py).
        """
        self.agent(agent_name)
        ceiling = Ceiling(spawn.parent_tools.rules, spawn.auto_approve, spawn.call_depth, spawn.max_call_depth)
        session_id = self.store.create_session(
            agent_name, kind, parent_id=spawn.parent_session, depth=spawn.call_depth,
            ceiling=ceiling.to_json(),
        )
        completion = self.loop().create_future()
        spawn.completion = completion
        self.serve_here(session_id)  # the child runs here, where its completion is awaited
        self._spawn[session_id] = spawn
        self._completions[session_id] = completion
        return session_id, completion

    # -------------------------------------------------- process_session
    def triggers_run(self, entry: Entry) -> bool:
        """Act on a Directive, or on a Message from a non-agent (docs/design.md, "Triggers")."""
        if entry.payload.get("copied_from") is not None:
            return False  # a fork's copy of an entry: its run happened in the source (fork.py)
        if entry.entry_type is EntryType.DIRECTIVE:
            return True
        return entry.entry_type is EntryType.MESSAGE and entry.sender not in self.agents

    def process_session(self, entry: Entry) -> None:
        """on_write callback: start (or queue) the session's agent when the entry calls for it."""
        if entry.run_id is not None and entry.entry_type in _ENDS_STREAM:
            self.streams.clear(entry.session_id, entry.run_id)  # the entry replaces the partial text
        if entry.id in self._early:
            self._early.discard(entry.id)  # its writer decided already (``_run_for``)
            return
        decision = self._decide(entry)
        for decisions in self._listening:
            decisions[entry.id] = decision

    def _decide(self, entry: Entry) -> Decision:
        """Start (or queue) the run a committed entry calls for: (its handle, whether another
        kernel serves it). A room's part routes its own entries (mention-gated turns, rooms.py)."""
        if self._stopped:
            return None, False
        if any(p.route(entry) for p in self.parts):  # (also an agent's Message: a mention wakes a member)
            return self._handles.get(entry.id), False  # (the part tracks the run it starts)
        if not self.triggers_run(entry):
            return None, False
        # a shared store: one server per session, the one that holds its lease (serving.py)
        if not self.serving.claim(entry.session_id):
            return None, True  # another kernel serves this session (the write woke it), or will
        loop = self.loop()
        future: asyncio.Future = loop.create_future()
        handle = self._handles[entry.id] = RunHandle(entry, future)
        state = self._states.get(entry.session_id)
        if state is not None:
            # Busy: one more run after this one, on the updated context, answers it.
            state.queued = entry
            state.queued_futures.append(future)
            state.queued_triggers.append(entry)
            return handle, False
        state = SessionState(futures=[future])
        self._states[entry.session_id] = state
        state.task = loop.create_task(
            self._session_loop(entry.session_id, entry), name=f"chaz-session-{entry.session_id}"
        )
        return handle, False

    def start_run(self, session_id: int, invocation: Invocation) -> asyncio.Future[Entry | None] | None:
        """Run with no trigger entry (a schedule fire); None when the session is busy or stopped."""
        if self._stopped or session_id in self._states:
            return None
        if not self.serving.claim(session_id):
            return None  # another kernel serves the session (shared store): busy for this fire
        loop = self.loop()
        future: asyncio.Future = loop.create_future()
        state = SessionState(futures=[future])
        self._states[session_id] = state
        state.task = loop.create_task(
            self._session_loop(session_id, None, invocation), name=f"chaz-session-{session_id}"
        )
        return future

    def hold_session(self, session_id: int, body: Callable[[], Awaitable[None]], name: str) -> bool:
        """Run ``body`` as the session's loop (a room's queue of turns)."""
        if session_id in self._states:
            return False
        state = SessionState()
        self._states[session_id] = state

        async def _held() -> None:
            try:
                await body()
            finally:
                if self._states.get(session_id) is state:
                    del self._states[session_id]
                    self.streams.ended(session_id)

        state.task = self.loop().create_task(_held(), name=name)
        return True

    async def run_turn(
        self,
        session_id: int,
        trigger: Entry | None,
        invocation: Invocation | None = None,
        answers: list[Entry] | None = None,
    ) -> Entry | None:
        state = self._states.get(session_id)
        if state is not None:
            state.run_id = None
        return await self._run_once(session_id, trigger, invocation, answers=answers)

    async def _session_loop(
        self, session_id: int, trigger: Entry | None, invocation: Invocation | None = None
    ) -> None:
        state = self._states[session_id]
        answers = [trigger] if trigger is not None else []
        try:
            while True:
                if invocation is None and state.queued is not None:
                    # Triggers written before this run starts are in the context it reads:
                    # they join it rather than wait for a follow-up that would answer again.
                    trigger, state.queued = state.queued, None
                    answers += state.queued_triggers
                    state.futures += state.queued_futures
                    state.queued_futures, state.queued_triggers = [], []
                try:
                    outcome = await self._run_once(
                        session_id, trigger, invocation, answers=sorted(answers, key=lambda e: e.seq)
                    )
                    invocation = None  # queued follow-ups are plain runs
                except asyncio.CancelledError:
                    outcome = None
                    # after a person's stop, what is queued arrived after it: it runs (finally)
                    self._resolve(state.futures + ([] if state.stop_by else state.queued_futures), None)
                    raise
                except Exception:  # noqa: BLE001 - not even an Error could be written: release the waiters
                    log.exception("run in session %s ended with no closing entry", session_id)
                    outcome = None
                self._resolve(state.futures, outcome)
                if state.queued is None:
                    break
                trigger, state.queued = state.queued, None
                state.futures, state.queued_futures = state.queued_futures, []
                answers, state.queued_triggers = state.queued_triggers, []
                state.run_id = None
        finally:
            self.streams.clear(session_id)  # whatever ended the loop, no partial text outlives it
            restart = state.stop_by is not None and state.queued is not None
            self._forget_handles(state.futures + ([] if restart else state.queued_futures))
            self._states.pop(session_id, None)
            self.streams.ended(session_id)  # idle now: no write says so, followers hear it here
            if not restart:
                self._spawn.pop(session_id, None)
            completion = self._completions.pop(session_id, None)
            if completion is not None and not completion.done():
                completion.set_result(None)
            if restart and not self._stopped:
                self._restart_queued(session_id, state)

    def _restart_queued(self, session_id: int, stopped: SessionState) -> None:
        """Messages written after a stop (while the cancel was landing) get their run."""
        state = SessionState(queued=stopped.queued, queued_futures=stopped.queued_futures,
                             queued_triggers=stopped.queued_triggers)
        self._states[session_id] = state
        state.task = self.loop().create_task(
            self._session_loop(session_id, None), name=f"chaz-session-{session_id}"
        )

    def _resolve(self, futures: list[asyncio.Future], outcome: Entry | None) -> None:
        for f in futures:
            if not f.done():
                f.set_result(outcome)
        self._forget_handles(futures)

    def _forget_handles(self, futures: list[asyncio.Future]) -> None:
        for trigger_id in [k for k, h in self._handles.items() if h.future in futures]:
            del self._handles[trigger_id]

    # -------------------------------------------------------------- run
    # ----------------------------------------------------- park / status
    def park(self, session_id: int) -> None:
        state = self._states.get(session_id)
        if state is not None:
            state.parked += 1

    def unpark(self, session_id: int) -> None:
        state = self._states.get(session_id)
        if state is not None:
            state.parked = max(0, state.parked - 1)

    def parked_sessions(self) -> list[int]:
        return sorted(sid for sid, st in self._states.items() if st.parked)

    def is_busy(self, session_id: int) -> bool:
        return session_id in self._states

    def session_status(self, session_id: int) -> str:
        """``idle``, ``running`` or ``parked``: this server's run, or on a shared store the run
        of the kernel that serves the session, read from the log (its open run and requests)."""
        state = self._states.get(session_id)
        if state is not None:
            return "parked" if state.parked else "running"
        return self.serving.status(session_id)

    def running_sessions(self) -> list[int]:
        return sorted(self._states)

    async def wait_session(self, session_id: int) -> None:
        while session_id in self._states:
            task = self._states[session_id].task
            if task is None:
                await asyncio.sleep(0.01)
            else:
                await asyncio.wait({task})

    async def wait_idle(self) -> None:
        while self._states:
            tasks = [s.task for s in self._states.values() if s.task is not None]
            await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        """Cancel every run (each records an Error entry), then stop the parts."""
        self._stopped = True
        self.serving.close()
        tasks = [s.task for s in self._states.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for part in self.parts:
            await part.stop()
