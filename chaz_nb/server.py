"""The Server: reacts to entry writes and runs agents (the reference's process_session).

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
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from . import spawn as spawn_tools
from .approvals import DEFAULT_TIMEOUT, ApprovalBook, ApprovalProxy, mask_arguments
from .agents import Agent, AgentError, RunContext, SpawnContext, current_run
from .backends import LiteLLMBackend, ModelBackend
from .ceiling import Ceiling, CeilingError
from .entries import Entry, EntryType
from . import compaction, rooms, schedules
from .invocation import Invocation
from .runtime import (
    IterationBudget,
    ModelCallError,
    RunResult,
    ScopedToolExecutor,
    ToolCallEvent,
    ToolExecutor,
    ToolResultEvent,
    execute,
    one_line_reason,
)
from .store import NewEntry, SessionStore
from .tools import ToolRegistry, ToolsLike, as_registry
from .tree_budget import BudgetedBackend, TreeBudget, TreeBudgetExceeded

log = logging.getLogger(__name__)

DISPLAY_LIMIT = 500  # characters of a tool result shown in a ToolResult entry's content
EVENT_COMMIT_WINDOW = 0.005  # seconds the event writer gathers tool events before a commit


class ServerError(Exception):
    """A server request that cannot be served; the message says what to do."""


class RunHandle:
    """A triggered run: ``await handle.wait()`` gives its reply or Error entry (None if silent)."""

    def __init__(self, trigger: Entry, future: "asyncio.Future[Entry | None]") -> None:
        self.trigger = trigger
        self.future = future

    @property
    def session_id(self) -> int:
        return self.trigger.session_id

    def done(self) -> bool:
        return self.future.done()

    async def wait(self) -> Entry | None:
        return await asyncio.shield(self.future)

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<RunHandle session={self.session_id} trigger={self.trigger.id} {state}>"


@dataclass
class _SessionState:
    """What the server knows of a session with a run in flight."""

    task: asyncio.Task | None = None
    run_id: int | None = None
    futures: list[asyncio.Future] = field(default_factory=list)
    queued: Entry | None = None  # the newest trigger waiting for the follow-up run
    queued_futures: list[asyncio.Future] = field(default_factory=list)
    queued_triggers: list[Entry] = field(default_factory=list)  # every trigger it will answer
    parked: int = 0  # open approval requests of the current run


@dataclass(frozen=True)
class _Origin:
    """The run that wrote a trigger: its authority caps the run the trigger starts."""

    ceiling: Ceiling
    tree: TreeBudget | None

    def merge(self, other: "_Origin | None") -> "_Origin":
        # One follow-up run answers several queued triggers: it gets the narrowest authority.
        if other is None:
            return self
        return _Origin(self.ceiling.meet(other.ceiling), self.tree or other.tree)


class Server:
    """Runs agents in response to entries written to a SessionStore."""

    def __init__(
        self,
        store: SessionStore,
        agents: Iterable[Agent] | Mapping[str, Agent] = (),
        tools: ToolsLike = None,
        *,
        backend: ModelBackend | None = None,
        max_concurrent_calls: int = 10,
        tool_timeout: float = 60.0,
        approval_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        # A list of tools or plain functions is as good as a registry (most agent
        # libraries take a list); anything else is one TypeError here.
        self.tools = as_registry(tools)
        self.store = store
        handle = getattr(self.tools, "spawn_handle", None) or spawn_tools.install(self.tools)
        handle.set(self)
        self.backend: ModelBackend = backend or LiteLLMBackend()
        self.agents: dict[str, Agent] = {}
        for agent in agents.values() if isinstance(agents, Mapping) else agents:
            self.define_agent(agent)
        self.tool_timeout = tool_timeout
        self.max_concurrent_calls = max_concurrent_calls
        self._limiter: asyncio.Semaphore | None = None
        self._states: dict[int, _SessionState] = {}
        self._handles: dict[int, RunHandle] = {}  # trigger entry id -> handle, while in flight
        self._spawn: dict[int, SpawnContext] = {}
        self._completions: dict[int, asyncio.Future] = {}
        self._origins: dict[int, _Origin] = {}  # trigger entry id -> the run that wrote it
        self._current: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False
        self.approvals = ApprovalBook(self, approval_timeout)
        self.recovered = self._recover()
        # Approvals first: a decision must be booked before anything reacts to it.
        self._unsubscribers = [store.subscribe(self.approvals.on_write), store.subscribe(self.process_session)]
        # schedules, rooms, compaction: own modules (they register their tools here)
        self.schedules = schedules.Schedules(self)
        self.rooms = rooms.Rooms(self)
        self.compaction = compaction.Compaction(self)

    # ------------------------------------------------------------ agents
    def define_agent(self, agent: Agent) -> Agent:
        """Define or redefine an agent (a redefinition applies from its next run)."""
        if not isinstance(agent, Agent):
            raise AgentError("define_agent takes a chaz_nb.Agent")
        self.agents[agent.name] = agent
        return agent

    def agent(self, name: str) -> Agent:
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(sorted(self.agents)) or "none"
            raise ServerError(f"unknown agent {name!r}; known agents: {known}") from None

    # ---------------------------------------------------------- sessions
    def new_session(self, agent_name: str) -> int:
        """Start a fresh chat session with an agent and make it the agent's current one."""
        self.agent(agent_name)
        session_id = self.store.create_session(agent_name, "chat")
        self._current[agent_name] = session_id
        return session_id

    def current_session_id(self, agent_name: str) -> int | None:
        """The agent's current chat session, or None when it has none yet (creates nothing)."""
        return self._current.get(agent_name)

    def current_session(self, agent_name: str) -> int:
        """The agent's current chat session (created on first use)."""
        self.agent(agent_name)
        if agent_name not in self._current:
            return self.new_session(agent_name)
        return self._current[agent_name]

    def register_child_session(
        self, agent_name: str, kind: str, spawn: SpawnContext
    ) -> tuple[int, "asyncio.Future[None]"]:
        """Create a child session for a spawn; return its id and the completion future.

        The session keeps the spawning run's ceiling (its scope, its auto-approve chain, its
        depth limit) for every later run there, across restarts (see ceiling.py).
        """
        self.agent(agent_name)
        ceiling = Ceiling(spawn.parent_tools.names, spawn.auto_approve, spawn.call_depth, spawn.max_call_depth)
        session_id = self.store.create_session(
            agent_name, kind, parent_id=spawn.parent_session, depth=spawn.call_depth,
            ceiling=ceiling.to_json(),
        )
        completion = self._get_loop().create_future()
        spawn.completion = completion
        self._spawn[session_id] = spawn
        self._completions[session_id] = completion
        return session_id, completion

    # ------------------------------------------------------------ writes
    def post(
        self,
        session_id: int,
        entry_type: EntryType | str,
        content: str,
        sender: str = "user",
        payload: dict[str, Any] | None = None,
    ) -> RunHandle | None:
        """Write an entry; return the handle of the run it triggers, if it triggers one."""
        if EntryType(entry_type) in (EntryType.MESSAGE, EntryType.DIRECTIVE):
            self._get_loop()  # refuse before writing rather than write a trigger nobody runs
        entry = self.store.append(session_id, entry_type, sender, content, payload=payload)
        return self._handles.get(entry.id)

    async def send(
        self,
        session_id: int,
        content: str,
        sender: str = "user",
        payload: dict[str, Any] | None = None,
    ) -> RunHandle:
        """Write a Message (group-committed with the tick's other writes); return its run."""
        if sender in self.agents:
            raise ServerError(
                f"a Message from {sender!r} starts no run (agents do not trigger themselves)"
            )
        entry = await self.store.write_one(session_id, EntryType.MESSAGE, sender, content, payload=payload)
        handle = self._handles.get(entry.id)
        if handle is None:
            raise ServerError(
                f"a Message from {sender!r} starts no run (agents do not trigger themselves)"
            )
        return handle

    # ---------------------------------------------------- process_session
    def triggers_run(self, entry: Entry) -> bool:
        """The reference's decision: act on a Directive, or a Message from a non-agent."""
        if entry.entry_type is EntryType.DIRECTIVE:
            return True
        return entry.entry_type is EntryType.MESSAGE and entry.sender not in self.agents

    def process_session(self, entry: Entry) -> None:
        """on_write callback: start (or queue) the session's agent when the entry calls for it."""
        if self._stopped or self.rooms.route(entry) or not self.triggers_run(entry):
            return  # (a room routes its own entries: mention-gated turns, see rooms.py)
        loop = self._get_loop()
        future: asyncio.Future = loop.create_future()
        self._handles[entry.id] = RunHandle(entry, future)
        origin = self._origin_of(entry)
        if origin is not None:
            self._origins[entry.id] = origin
        state = self._states.get(entry.session_id)
        if state is not None:
            # Busy: one more run after this one, on the updated context, answers it.
            if state.queued is not None and state.queued.id in self._origins:
                self._origins[entry.id] = self._origins.pop(state.queued.id).merge(origin)
            state.queued = entry
            state.queued_futures.append(future)
            state.queued_triggers.append(entry)
            return
        state = _SessionState(futures=[future])
        self._states[entry.session_id] = state
        state.task = loop.create_task(
            self._session_loop(entry.session_id, entry), name=f"chaz-session-{entry.session_id}"
        )

    def _origin_of(self, entry: Entry) -> _Origin | None:
        """The run of this server that wrote ``entry``, if a run did.

        Agents write triggers (a spawn's Directive, ``send_message``) with a synchronous
        append from inside their run, so on_write sees the writer's context. The sender check
        keeps a person's entry that shares a group commit with a run's write from being
        taken for the run's.
        """
        run = current_run.get()
        if run is None or run.server is not self or entry.sender != run.agent.name:
            return None
        return _Origin(Ceiling.of_run(run), run.tree)

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
                    self._resolve(state.futures + state.queued_futures, None)
                    raise
                self._resolve(state.futures, outcome)
                if state.queued is None:
                    break
                trigger, state.queued = state.queued, None
                state.futures, state.queued_futures = state.queued_futures, []
                answers, state.queued_triggers = state.queued_triggers, []
                state.run_id = None
        finally:
            self._forget_handles(state.futures + state.queued_futures)
            self._states.pop(session_id, None)
            self._spawn.pop(session_id, None)
            completion = self._completions.pop(session_id, None)
            if completion is not None and not completion.done():
                completion.set_result(None)

    def _resolve(self, futures: list[asyncio.Future], outcome: Entry | None) -> None:
        for f in futures:
            if not f.done():
                f.set_result(outcome)
        self._forget_handles(futures)

    def _forget_handles(self, futures: list[asyncio.Future]) -> None:
        for trigger_id in [k for k, h in self._handles.items() if h.future in futures]:
            del self._handles[trigger_id]

    # --------------------------------------------------------------- run
    async def _run_once(
        self,
        session_id: int,
        trigger: Entry | None,
        invocation: Invocation | None = None,
        answers: list[Entry] | None = None,
    ) -> Entry | None:
        """One run; ``answers`` are the triggers it answers (default: ``trigger`` alone)."""
        if answers is None:
            answers = [trigger] if trigger is not None else []
        session = self.store.session(session_id)
        agent_name = invocation.agent if invocation and invocation.agent else session.agent
        agent = self.agents.get(agent_name)
        if agent is None:
            return self.store.append(
                session_id,
                EntryType.ERROR,
                "system",
                f"unknown agent {agent_name!r}; define it before writing to its session",
            )
        spawn = self._spawn.get(session_id)
        origin = self._origins.pop(trigger.id, None) if trigger is not None else None
        try:
            # The session's own ceiling (kept since its spawn) and the writer's, if a run wrote
            # the trigger: whoever triggers the run, it can do no more than both allow.
            ceiling = (Ceiling.from_json(session.ceiling) or Ceiling()).meet(origin.ceiling if origin else None)
            ceiling = ceiling.meet(invocation.ceiling if invocation else None)
        except CeilingError as exc:
            return self.store.append(
                session_id, EntryType.ERROR, "system", f"{exc}; the session does not run (start a new one)"
            )
        tree = (origin.tree if origin else None) or (spawn.tree if spawn else None) or TreeBudget.for_agent(agent)
        ack_write = asyncio.ensure_future(self.store.write_one(
            session_id,
            EntryType.ACK,
            agent.name,
            f"{agent.name} is working",
            payload={"trigger_id": trigger.id if trigger else None,
                     "trigger_type": trigger.entry_type.value if trigger else None, "model": agent.model,
                     "parent_run": spawn.parent_run if spawn else None,
                     "answers": [e.id for e in answers], "answers_count": len(answers),
                     **(invocation.ack if invocation else {})},
        ))
        try:
            # shielded: a cancel while the Ack commits must not lose track of the run it opens
            ack = await asyncio.shield(ack_write)
        except asyncio.CancelledError:
            ack_write.add_done_callback(lambda f: self._close_cancelled(session_id, agent, f))
            raise
        run_id = ack.id
        self._states[session_id].run_id = run_id
        # spawn_worker shares its parent's iteration budget (first run only)
        budget = (spawn.budget if spawn else None) or IterationBudget(agent.max_iterations)
        ctx = RunContext(
            server=self,
            session_id=session_id,
            agent=agent,
            run_id=run_id,
            call_depth=ceiling.call_depth,
            max_call_depth=ceiling.depth_limit(agent.call_depth_limit),
            scope=ceiling.scope(self.tools, agent.tools),
            budget=budget,
            auto_approve=ceiling.chain(agent.auto_approve),
            unattended=bool(invocation and invocation.unattended),
            tree=tree,
            ceiling=ceiling,
        )
        token = current_run.set(ctx)
        try:
            try:
                # room labels/notes, Summary boundary, token budget, auto-compaction (compaction.py)
                messages = await self.compaction.run_messages(session_id, agent, invocation)
            except asyncio.CancelledError:
                self._write_interrupted(session_id, agent, run_id)
                raise
            outcome = await self._execute_and_record(ctx, messages)
            await self.compaction.after_run(session_id, agent)  # optional automatic compaction
            return outcome
        finally:
            current_run.reset(token)

    async def _execute_and_record(self, ctx: RunContext, messages: list[dict[str, Any]]) -> Entry | None:
        agent, session_id, run_id = ctx.agent, ctx.session_id, ctx.run_id
        events: asyncio.Queue = asyncio.Queue()
        writer = asyncio.get_running_loop().create_task(
            self._write_events(session_id, agent.name, run_id, events)
        )
        base = {"run_id": run_id, "model": agent.model}
        ctx.flush_events = events.join  # the approval proxy lets ToolCall land before its request
        try:
            result: RunResult = await execute(
                model=agent.model,
                messages=messages,
                backend=BudgetedBackend(self.backend, ctx.tree) if ctx.tree else self.backend,
                tools=self.make_executor(ctx),
                events=events,
                budget=ctx.budget,
                script=agent.script,
                options=agent.call_options(),
                limiter=self._get_limiter(),
            )
        except asyncio.CancelledError:
            await self._drain(events, writer)
            self._write_interrupted(session_id, agent, run_id)
            raise
        except ModelCallError as exc:
            await self._drain(events, writer)
            payload = {**base, **exc.usage.to_json(), "steps": exc.steps, **exc.details}
            reason = f"model call failed: {exc.reason}"
            if isinstance(exc.__cause__, TreeBudgetExceeded) and ctx.tree is not None:
                reason, payload["tree_budget"] = str(exc.__cause__), ctx.tree.to_json()
            return await self.store.write_one(session_id, EntryType.ERROR, agent.name, reason, payload=payload)
        except Exception as exc:  # a bug must not lose the run's trail: record it
            log.exception("run %s in session %s failed", run_id, session_id)
            await self._drain(events, writer)
            return await self.store.write_one(
                session_id, EntryType.ERROR, agent.name, one_line_reason(exc), payload=base
            )
        await self._drain(events, writer)
        finished = {**base, **result.usage.to_json(), "steps": result.steps, "stop_reason": result.stop_reason}
        if not result.content.strip():
            # A silent turn writes no Message; this status entry closes the run for the audit.
            await self.store.write_one(
                session_id, EntryType.ACK, agent.name, f"{agent.name} finished without a reply",
                payload={**finished, "status": "silent"},
            )
            return None
        return await self.store.write_one(
            session_id,
            EntryType.MESSAGE,
            agent.name,
            result.content,
            payload=finished,
        )

    def _write_interrupted(self, session_id: int, agent: Agent, run_id: int) -> None:
        """Close a cancelled run: every Ack that opens a run gets a closing entry."""
        self.store.append(
            session_id, EntryType.ERROR, agent.name, "interrupted: run cancelled",
            payload={"run_id": run_id, "model": agent.model},
        )

    def _close_cancelled(self, session_id: int, agent: Agent, ack_write: asyncio.Future) -> None:
        """A run cancelled while its Ack was committing: close it once the Ack has landed."""
        if ack_write.cancelled() or ack_write.exception() is not None or self.store.closed:
            return
        self._write_interrupted(session_id, agent, ack_write.result().id)

    def make_executor(self, ctx: RunContext) -> ToolExecutor:
        """The tool executor for a run: the scope's tools behind the approval proxy."""
        return ApprovalProxy(self.approvals, ctx, ScopedToolExecutor(ctx.scope, self.tool_timeout))

    # --------------------------------------------------------- approvals
    def pending_approvals(self) -> list[dict[str, Any]]:
        """Open approval requests, oldest first (what a person must decide)."""
        return self.approvals.pending()

    def decide(
        self, request_id: str, decision: str, reason: str | None = None, decided_by: str = "user"
    ) -> tuple[bool, str]:
        """A person's decision on a request (``approve``, ``deny`` or ``approve_all``)."""
        return self.approvals.decide(request_id, decision, reason, decided_by)

    def _set_parked(self, session_id: int, delta: int) -> None:
        state = self._states.get(session_id)
        if state is not None:
            state.parked = max(0, state.parked + delta)

    def parked_sessions(self) -> list[int]:
        return sorted(sid for sid, st in self._states.items() if st.parked)

    # ---------------------------------------------------------- recovery
    def _recover(self) -> dict[str, int]:
        """Close what a previous process left open: runs with no end, undecided requests."""
        if self.store.read_only:
            return {"runs": 0, "approvals": 0}
        approvals = self.approvals.close_orphans()
        open_runs = self.store.execute(
            """
            SELECT a.id, a.session_id, a.sender FROM entries a
            WHERE a.entry_type = 'Ack' AND a.run_id = a.id
              AND NOT EXISTS (
                SELECT 1 FROM entries e
                WHERE e.run_id = a.id AND e.id <> a.id AND e.entry_type IN ('Message', 'Error', 'Ack'))
            ORDER BY a.id
            """
        )
        for run_id, session_id, sender in open_runs:
            self.store.append(
                session_id, EntryType.ERROR, sender, "interrupted: kernel stopped",
                payload={"run_id": run_id, "interrupted": True},
            )
        return {"runs": len(open_runs), "approvals": approvals}

    async def _drain(self, events: asyncio.Queue, writer: asyncio.Task) -> None:
        await events.put(None)
        try:
            await asyncio.shield(writer)
        except Exception:
            log.exception("event writer failed")

    async def _write_events(self, session_id: int, sender: str, run_id: int, events: asyncio.Queue) -> None:
        """Turn runtime events into ToolCall/ToolResult entries, batching what is queued."""
        done = False
        while not done:
            batch = [await events.get()]
            if batch[0] is not None:
                # Group-commit window: a fast tool's ToolResult joins its ToolCall in one
                # commit, and the commit tends to fall inside the next model call's wait.
                await asyncio.sleep(EVENT_COMMIT_WINDOW)
            while not events.empty():
                batch.append(events.get_nowait())
            items = []
            for event in batch:
                if event is None:
                    done = True
                    continue
                items.append(self._event_entry(session_id, sender, run_id, self._masked(event)))
            if items:
                try:
                    await self.store.write(items)
                except Exception:
                    log.exception("could not write tool events of run %s", run_id)
            for _ in batch:
                events.task_done()

    def _masked(self, event: Any) -> Any:
        """A ToolCall event with the tool's ``sensitive_params`` masked for the log.

        The tool itself got the real values; the session log, the transcript and the audit
        views only ever see the mask (as the person asked for approval does).
        """
        if not isinstance(event, ToolCallEvent) or not isinstance(event.arguments, dict):
            return event
        t = self.tools.get(event.name)
        if t is None or not t.sensitive_params:
            return event
        return ToolCallEvent(event.id, event.name, mask_arguments(t, event.arguments))

    @staticmethod
    def _event_entry(session_id: int, sender: str, run_id: int, event: Any) -> NewEntry:
        if isinstance(event, ToolCallEvent):
            args = event.arguments
            shown = json.dumps(args, ensure_ascii=False, default=str) if not isinstance(args, str) else args
            return NewEntry(
                session_id,
                EntryType.TOOL_CALL,
                sender,
                f"{event.name}({shown})",
                tool_call_id=event.id,
                tool_name=event.name,
                payload={"run_id": run_id, "arguments": args},
            )
        assert isinstance(event, ToolResultEvent)
        output = event.output
        shown = output if len(output) <= DISPLAY_LIMIT else output[: DISPLAY_LIMIT - 1] + "…"
        return NewEntry(
            session_id,
            EntryType.TOOL_RESULT,
            sender,
            f"{event.name}: {shown}",
            tool_call_id=event.id,
            tool_name=event.name,
            payload={
                **event.extra,  # approval facts from the proxy; the fields below always win
                "run_id": run_id,
                "output": output,
                "is_error": event.is_error,
                "duration_ms": round(event.duration_ms, 3),
            },
        )

    # ------------------------------------------------------------ status
    def is_busy(self, session_id: int) -> bool:
        return session_id in self._states

    def session_status(self, session_id: int) -> str:
        """``idle``, ``running`` or ``parked`` (waiting for a person)."""
        state = self._states.get(session_id)
        if state is None:
            return "idle"
        return "parked" if state.parked else "running"

    def running_sessions(self) -> list[int]:
        return sorted(self._states)

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Wait until no session has a run in flight (tests, unload)."""
        async def _wait() -> None:
            while self._states:
                tasks = [s.task for s in self._states.values() if s.task is not None]
                await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.wait_for(_wait(), timeout)

    # ---------------------------------------------------------- lifecycle
    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run agents on ``loop`` (the kernel's); by default the loop running at first use."""
        self._loop = loop

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                raise ServerError(
                    "the chaz_nb server needs a running asyncio event loop; "
                    "call it from async code or attach_loop() first"
                ) from None
        return self._loop

    def _get_limiter(self) -> asyncio.Semaphore:
        if self._limiter is None:
            self._limiter = asyncio.Semaphore(self.max_concurrent_calls)
        return self._limiter

    async def stop(self) -> None:
        """Stop reacting to writes and cancel every run (each records an Error entry)."""
        self._stopped = True
        for unsubscribe in self._unsubscribers:
            unsubscribe()
        tasks = [s.task for s in self._states.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._origins.clear()
        await self.schedules.stop()

    # ------------------------------- schedules, rooms, compaction (see their own modules)
    def start_run(self, session_id: int, invocation: Invocation) -> "asyncio.Future[Entry | None] | None":
        """Run with no trigger entry (a schedule fire); None when the session is busy or stopped."""
        if self._stopped or session_id in self._states:
            return None
        loop = self._get_loop()
        future: asyncio.Future = loop.create_future()
        state = _SessionState(futures=[future])
        self._states[session_id] = state
        state.task = loop.create_task(
            self._session_loop(session_id, None, invocation), name=f"chaz-session-{session_id}"
        )
        return future

    async def fire_agent_schedule(self, schedule: "schedules.Schedule | int") -> "schedules.Fire":
        """Fire a schedule now on the standalone path (its wake prompt is not written)."""
        return await self.schedules.fire(schedule)

    def create_room(self, name: str, agents: Iterable[str], host: str | None = None, burst_budget: int = 6) -> int:
        """A session shared by several agents; see rooms.py."""
        return self.rooms.create(name, agents, host=host, burst_budget=burst_budget)

    def room_speaker(self, room_id: int, text: str, explicit: str | None = None, default: str | None = None) -> str | None:
        """Which agent answers a person's message in a room (explicit, mention, host, first, default)."""
        return self.rooms.speaker(room_id, text, explicit=explicit, default=default)

    async def compact(self, session_id: int, by: str = "system") -> Entry:
        """Summarize the context since the last Summary into a new Summary entry."""
        return await self.compaction.compact(session_id, by=by)
