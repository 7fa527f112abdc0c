"""One run, from its Ack to its closing entry: the Ack (written behind), the context, the model
and tool loop (``engine.runtime.execute``), the reply or the Error, and the closing entry of a
cancelled run. The per-session scheduling that decides when a run starts is ``runs.py``
(``RunEngine``, which mixes ``RunSteps`` in).

The run does not wait for its Ack's commit (issue 14: it is one DuckDB commit, ~1-3 ms, on
every turn's critical path otherwise): the context is read and the model called while the Ack
commits. The Ack is written behind (``write_behind``, core/writer.py) and committed once the
model request has left (``REQUEST_LEAVING``, then ``flush_when_idle``: the loop idle, the
request on the wire), at the latest after ``ACK_WINDOW``; the run's budget row is written in
the Ack's transaction (budgets.py). So the trigger's commit is the only one in front of the model call (issue 32).
What names the run waits for the Ack, and hurries it: each tool call (``AfterAck``), the event
writer and the closing entry. So they all land after the Ack, in commit order.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast
from collections.abc import Awaitable, Callable

from ..core.entries import Entry, EntryType, build_context
from ..core.window import DEFAULT_CONTEXT_TOKENS
from ..core.store import NewEntry, Store
from ..engine.backends import REQUEST_LEAVING, ModelBackend
from ..engine.runtime import (
    DEFAULT_MAX_TOOL_OUTPUT,
    IterationBudget,
    ModelCallError,
    RunResult,
    ScopedToolExecutor,
    ToolCallsNotRecorded,
    ToolExecutor,
    ToolOutcome,
    execute,
    one_line_reason,
)
from ..engine.tools import ToolRegistry
from ..engine.tree_budget import BudgetedBackend, TreeBudgetExceeded
from ..errors import CeilingError
from . import events as event_writer
from .agents import Agent
from .budgets import Budgets, StoredBudget
from .agent_trust import Held
from .egress import ContextData, as_allowed, context_data, context_egress
from .egress_gate import ALLOWED, EgressGate, denied_record
from .ceiling import Authority, Ceiling
from .invocation import Invocation
from .ports import Part, RunContext, ServerPort, SpawnContext, current_run
from .streams import StreamHub
from .stopping import CANCELLED

if TYPE_CHECKING:  # pragma: no cover
    from .handle import RunHandle
    from .session_state import SessionState

log = logging.getLogger(__name__)

#: ``RunContext.run_id`` until the run's Ack has landed (entry ids start at 1); no tool runs before
PENDING_RUN = 0

#: the longest a run's Ack waits for its commit. It is committed as soon as the loop is idle after
#: the model request leaves (``REQUEST_LEAVING``: the request is on the wire then), or sooner with
#: another write or when something waits on it (a tool, the closing entry); at this window with a
#: backend that does not say when its request leaves
ACK_WINDOW = 0.05


async def _only(write: Awaitable[list[Entry]]) -> Entry:
    """The one entry of a one-entry write."""
    return (await write)[0]


class AfterAck:
    """A run's tool executor whose calls start once the run's Ack has landed.

    The model call does not wait for the Ack's commit; a tool does (it may write entries of
    its own that name the run: approval requests, spawned sessions' Directives).
    """

    def __init__(
        self, executor: ToolExecutor, ctx: RunContext, ack_write: asyncio.Future[Entry], hurry: Callable[[], None]
    ) -> None:
        self.executor = executor
        self.ctx = ctx
        self.ack_write = ack_write
        self.hurry = hurry

    def schemas(self) -> list[dict[str, Any]]:
        return self.executor.schemas()

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        if not self.ack_write.done():
            self.hurry()  # the Ack is written behind: a tool waits on it now
        self.ctx.run_id = (await asyncio.shield(self.ack_write)).id
        return await self.executor.call(call_id, name, arguments)


class RunSteps:
    """One run's steps, mixed into ``RunEngine`` (runs.py), whose state they read: the
    session's spawn context and stop state, the parts, the budgets, the reply streams."""

    store: Store
    agents: dict[str, Agent]
    tools: ToolRegistry
    backend: ModelBackend
    tool_timeout: float
    parts: list[Part]
    budgets: Budgets
    streams: StreamHub
    _states: dict[int, SessionState]
    _spawn: dict[int, SpawnContext]
    _handles: dict[int, RunHandle]
    held: dict[str, Held]

    def limiter(self) -> asyncio.Semaphore:
        raise NotImplementedError  # RunEngine's

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
        try:
            # The session's own ceiling (kept since its spawn), the schedule's, and the
            # authority each trigger a run wrote carries (in the entry, so also a trigger another
            # kernel wrote): whoever triggers the run, it can do no more than all of them allow.
            origin = Authority.of_entries(e.payload for e in answers)
            ceiling = (Ceiling.from_json(session.ceiling) or Ceiling()).meet(origin.ceiling if origin else None)
            ceiling = ceiling.meet(invocation.ceiling if invocation else None)
            # an agent another kernel changed: within this kernel's confirmed definition
            ceiling = ceiling.meet(self._held_back(session_id, agent.name))
        except CeilingError as exc:
            return self.store.append(
                session_id, EntryType.ERROR, "system", f"{exc}; the session does not run (start a new one)"
            )
        tree = self._budget_of(agent, trigger, origin, invocation)
        # the notebook's data this run's context sends where it was never recorded as sent
        # (another room member's replies, a model redefined, a fork's copies): the Ack says so
        data = context_data(self.store, session_id)
        egress = _context_egress(self.store, session_id, agent, data)
        # the egress gate (egress_gate.py): the agent's rule settles it now, or a person is
        # asked once the Ack has landed (the request's record is then an entry of the gate's)
        asked = self._gate_context(session_id, agent, egress, data)
        ack_write = asyncio.ensure_future(_only(self.store.write_behind([NewEntry(
            session_id,
            EntryType.ACK,
            agent.name,
            f"{agent.name} is working",
            payload={"trigger_id": trigger.id if trigger else None,
                     "trigger_type": trigger.entry_type.value if trigger else None, "model": agent.model,
                     "budget": tree.id,
                     "parent_run": spawn.parent_run if spawn else None,
                     "answers": [e.id for e in answers], "answers_count": len(answers),
                     **egress,
                     **(invocation.ack if invocation else {})},
        )], ACK_WINDOW)))
        # a root's budget row, its first call counted, rides in the Ack's commit (budgets.py)
        tree.write_with_next_commit()
        # The Ack commits while the context is read and the model called: the run does not
        # wait on it, and it is written behind, so its commit tends to fall while the model
        # request is on the wire. Whatever needs the run id waits for it: a tool call (the
        # gate below), the event writer (so every ToolCall lands after the Ack) and the closing
        # entry (so the reply waits for its own commit and for everything before it).
        # spawn_worker shares its parent's iteration budget (first run only)
        budget = (spawn.budget if spawn else None) or IterationBudget(agent.max_iterations)
        ctx = RunContext(
            port=cast(ServerPort, self),  # the RunEngine this is mixed into is the port
            session_id=session_id,
            agent=agent,
            run_id=PENDING_RUN,
            call_depth=ceiling.call_depth,
            max_call_depth=ceiling.depth_limit(agent.call_depth_limit),
            scope=ceiling.scope(self.tools, agent.tools),
            budget=budget,
            auto_approve=ceiling.chain(agent.auto_approve),
            unattended=bool(invocation and invocation.unattended),
            tree=tree,
            ceiling=ceiling,
            reply_triggers=session.kind == "room",
            context_data=data,
        )
        ack_write.add_done_callback(lambda f: self._ack_landed(session_id, ctx, f))
        token = current_run.set(ctx)
        try:
            try:
                if asked is not None:
                    await self._ask_context(ctx, asked, data, ack_write)
                # room labels/notes, Summary boundary, token budget (compaction.py)
                messages = await self._run_messages(session_id, agent, invocation)
                if egress:  # write-ahead: the ledger has the send before the request leaves
                    await asyncio.wait([ack_write])
            except asyncio.CancelledError:
                self._interrupt(session_id, agent, ack_write)
                raise
            outcome = await self._execute_and_record(ctx, messages, ack_write, answers)
            for part in self.parts:
                await part.after_run(session_id, agent)  # optional automatic compaction
            return outcome
        finally:
            current_run.reset(token)

    def _gate_context(self, session_id: int, agent: Agent, egress: dict[str, Any],
                      data: ContextData) -> dict[str, Any] | None:
        """The gate's rule on what the run's context sends (``egress``, the Ack's, settled
        in place: its decision, or a deny's withheld record, ``data.denied``); the send a person
        must be asked about (taken out of the Ack), or None."""
        sent = egress.get("egress")
        gate = next((p for p in self.parts if isinstance(p, EgressGate)), None)
        if sent is None or gate is None:
            return None
        verdict = gate.verdict(session_id, agent)
        fields = {"decision": verdict.decision, "decided_by": verdict.why}
        if verdict.decision == "ask":
            return dict(egress.pop("egress"))
        if verdict.decision in ALLOWED:
            sent.update(fields)
        else:
            egress["egress"] = denied_record(sent, fields)
            data.denied.update(k for k in sent.get("entries") or [] if isinstance(k, int))
        return None

    async def _ask_context(self, ctx: RunContext, egress: dict[str, Any], data: ContextData,
                           ack_write: asyncio.Future[Entry]) -> None:
        """Ask a person whether the context's data may go (the card names the run: its Ack
        lands first), and record the decision before the request leaves."""
        if not ack_write.done():
            self.store.hurry()
        ctx.run_id = (await asyncio.shield(ack_write)).id
        gate = next(p for p in self.parts if isinstance(p, EgressGate))
        preview = "\n\n".join(e.content for e in (self.store.entry(k) for k in egress.get("entries") or [])
                               if e is not None)
        what = "attached variables" if egress.get("via") == "attachment" else "the conversation so far"
        fields = await gate.decide(ctx, egress, preview, None, what)
        gate.record_asked(ctx, egress, fields)
        if fields["decision"] not in ALLOWED:
            data.denied.update(k for k in egress.get("entries") or [] if isinstance(k, int))

    def _held_back(self, session_id: int, name: str) -> Ceiling | None:
        """The cap of an agent another kernel changed (agent_trust.py), its one line written
        in the session the first time it runs there; None: the agent runs as defined."""
        held = self.held.get(name)
        if held is None:
            return None
        if session_id not in held.noted:
            held.noted.add(session_id)
            self.store.append(session_id, EntryType.ERROR, "system", held.line(name),
                              payload={"note": "agent_held", "agent": name, "widened": list(held.widened)})
        return held.ceiling

    def _budget_of(
        self, agent: Agent, trigger: Entry | None, origin: Authority | None, invocation: Invocation | None
    ) -> StoredBudget:
        """The run-tree budget a run draws on: the one its trigger's writer drew on (or the
        schedule's maker), else a fresh one for the person's trigger or schedule fire."""
        inherited = (origin.budget if origin else None) or (invocation.budget if invocation else None)
        if inherited is not None:
            return self.budgets.open(inherited, agent)
        fire = invocation.ack.get("fire_id") if invocation else None
        root = f"entry:{trigger.id}" if trigger is not None else f"fire:{fire}" if fire is not None else None
        return self.budgets.open(root, agent, first_call=True)

    def _ack_landed(self, session_id: int, ctx: RunContext, ack_write: asyncio.Future) -> None:
        """The run's Ack is committed: its id is the run id (the first callback of the Ack)."""
        if ack_write.cancelled() or ack_write.exception() is not None:
            return
        ctx.run_id = ack_write.result().id
        state = self._states.get(session_id)
        if state is not None and state.run_id is None:
            state.run_id = ctx.run_id
        if isinstance(ctx.tree, StoredBudget) and not self.store.closed:
            # a root's budget row, its first call counted, landed with the Ack, in its commit:
            # while that call is on the wire, not in front of it (budgets.py); before any tool or
            # second call. Written now only if that statement failed.
            try:
                ctx.tree.write()
            except Exception:  # noqa: BLE001 - a callback must not raise; the next charge writes it again
                log.exception("the budget row of run %s could not be written", ctx.run_id)

    def _interrupt(self, session_id: int, agent: Agent, ack_write: asyncio.Future) -> None:
        """Close a cancelled run, now if its Ack has landed, else as soon as it lands."""
        stopping = self._states.get(session_id)
        by, dropped = (stopping.stop_by, list(stopping.dropped)) if stopping else (None, [])
        if not ack_write.done() and not self.store.closed:
            self.store.hurry()  # the run closes as soon as its Ack has landed
        if ack_write.done():
            self._close_cancelled(session_id, agent, ack_write, by, dropped)
        else:
            # shielded from the cancel: the Ack still lands, and the run it opens is closed then
            ack_write.add_done_callback(lambda f: self._close_cancelled(session_id, agent, f, by, dropped))

    async def _run_messages(
        self, session_id: int, agent: Agent, invocation: Invocation | None
    ) -> list[dict[str, Any]]:
        # the part added last first: the built-in Compaction always builds a context, so a part
        # added from outside (Server.add_part) comes before it or would never be asked
        for part in reversed(self.parts):
            messages = await part.run_messages(session_id, agent, invocation)
            if messages is not None:
                return messages
        # No part builds the context: an engine without the Compaction part (a Server always
        # has it, so there the budget is the agent's, else server.compaction.context_tokens).
        # The agent's own system prompt and budget, else the default one.
        budget = agent.context_tokens if agent.context_tokens is not None else DEFAULT_CONTEXT_TOKENS
        ctx = current_run.get()
        data = ctx.context_data if ctx is not None and ctx.session_id == session_id else None
        entries = as_allowed(self.store, session_id, list(self.store.context_window(session_id, budget)), agent, data)
        messages = build_context(entries, agent.name, agent.system, context_tokens=budget)
        if invocation is not None and invocation.input:
            messages.append({"role": "user", "content": invocation.input})
        return messages

    async def _execute_and_record(
        self, ctx: RunContext, messages: list[dict[str, Any]], ack_write: asyncio.Future[Entry],
        answers: list[Entry] | None = None,
    ) -> Entry | None:
        agent, session_id = ctx.agent, ctx.session_id
        sink = event_writer.EventWriter()
        writer = asyncio.get_running_loop().create_task(self._write_events(ctx, ack_write, sink))
        streams = self.streams
        early: list[str] = []  # reply text streamed before the Ack landed (shown once it has)

        loop = asyncio.get_running_loop()

        def on_delta(text: str) -> None:
            if ctx.run_id == PENDING_RUN:
                if not early:  # the text waits for the run's id: the Ack is waited on now
                    loop.call_soon_threadsafe(self.store.hurry)
                early.append(text)
            else:
                streams.delta(session_id, ctx.run_id, text)

        def show_early(_f: asyncio.Future) -> None:
            if ctx.run_id != PENDING_RUN:
                for text in early:  # replayed piece by piece, as they came
                    streams.delta(session_id, ctx.run_id, text)
            early.clear()

        async def record_calls() -> None:
            # write-ahead: a step's tools wait for its ToolCalls, which wait for the Ack
            # (written behind): hurry it rather than wait out its window
            if not ack_write.done():
                self.store.hurry()
            await sink.calls_recorded()

        ack_write.add_done_callback(show_early)
        # as the request leaves (litellm's pre-call hook, maybe on a worker thread): what is
        # written behind (the Ack) commits once the loop is idle, the request on the wire; the
        # handles of the triggers it answers say so (a turn's view opens then)
        handles = [h for h in (self._handles.get(e.id) for e in answers or ()) if h is not None]

        def request_sent() -> None:
            self.store.flush_when_idle()
            for handle in handles:
                handle.request_sent()

        def on_leaving() -> None:
            loop.call_soon_threadsafe(request_sent)

        leaving = REQUEST_LEAVING.set(on_leaving)
        try:
            try:
                result: RunResult = await execute(
                    model=agent.model,
                    messages=messages,
                    backend=BudgetedBackend(self.backend, ctx.tree) if ctx.tree else self.backend,
                    tools=AfterAck(self.make_executor(ctx), ctx, ack_write, self.store.hurry),
                    events=sink.queue,
                    budget=ctx.budget,
                    script=agent.script,
                    options=agent.call_options(),
                    limiter=self.limiter(),
                    on_delta=on_delta if agent.stream else None,
                    max_tool_output=agent.max_tool_output or DEFAULT_MAX_TOOL_OUTPUT,
                    record_calls=record_calls,
                )
            finally:
                REQUEST_LEAVING.reset(leaving)
        except asyncio.CancelledError:
            await self._drain(sink, writer, ack_write)
            self._interrupt(session_id, agent, ack_write)
            raise
        except ModelCallError as exc:
            await self._drain(sink, writer, ack_write)
            base = {"run_id": await self._run_id(session_id, agent, ack_write), "model": agent.model}
            payload = {**base, **exc.usage.to_json(), "steps": exc.steps, **exc.details}
            reason = f"model call failed: {exc.reason}"
            if isinstance(exc.__cause__, TreeBudgetExceeded) and ctx.tree is not None:
                reason, payload["tree_budget"] = str(exc.__cause__), ctx.tree.to_json()
            return await self.store.write_one(session_id, EntryType.ERROR, agent.name, reason, payload=payload)
        except ToolCallsNotRecorded as exc:
            # the log could not record what the agent was about to do: it does not do it (the
            # model is not told and asked on: its reply would rest on steps the log lacks)
            await self._drain(sink, writer, ack_write)
            base = {"run_id": await self._run_id(session_id, agent, ack_write), "model": agent.model}
            payload = {**base, **exc.usage.to_json(), "steps": exc.steps,
                       "tool_call_ids": [call_id for call_id, _ in exc.calls]}
            return await self.store.write_one(session_id, EntryType.ERROR, agent.name, str(exc), payload=payload)
        except Exception as exc:  # a bug must not lose the run's trail: record it
            log.exception("run in session %s failed", session_id)
            await self._drain(sink, writer, ack_write)
            base = {"run_id": await self._run_id(session_id, agent, ack_write), "model": agent.model}
            return await self.store.write_one(
                session_id, EntryType.ERROR, agent.name, one_line_reason(exc), payload=base
            )
        await self._drain(sink, writer, ack_write)
        # the closing entry waits for the Ack (and so lands after it and after every tool event)
        base = {"run_id": await self._run_id(session_id, agent, ack_write), "model": agent.model}
        finished = {**base, **result.usage.to_json(), "steps": result.steps, "stop_reason": result.stop_reason}
        if not result.content.strip():
            # A silent turn writes no Message; this status entry closes the run for the audit.
            await self.store.write_one(
                session_id, EntryType.ACK, agent.name, f"{agent.name} finished without a reply",
                payload={**finished, "status": "silent"},
            )
            return None
        if ctx.reply_triggers:  # a reply in a room wakes the members it mentions: it hands on the run's authority
            finished.update(Authority.of_run(ctx).to_payload())
        try:
            return await self.store.write_one(session_id, EntryType.MESSAGE, agent.name, result.content,
                                              payload=finished)
        except Exception as exc:  # noqa: BLE001 - the run must still close, with the reason
            log.exception("the reply of run %s could not be written", base["run_id"])
            reason = f"could not write the reply ({len(result.content):,} characters): {one_line_reason(exc)}"
            return await self.store.write_one(session_id, EntryType.ERROR, agent.name, reason, payload=finished)

    async def _drain(self, sink: event_writer.EventWriter, writer: asyncio.Task,
                     ack_write: asyncio.Future[Entry]) -> None:
        """The run's event writer's last entries written: it waits for the Ack, so hurry that."""
        if not ack_write.done() and not self.store.closed:
            self.store.hurry()
        await sink.drain(writer)

    async def _run_id(self, session_id: int, agent: Agent, ack_write: asyncio.Future[Entry]) -> int:
        """The run id, once the run's Ack has landed (a cancel meanwhile still closes the run)."""
        if not ack_write.done():
            self.store.hurry()
        try:
            return (await asyncio.shield(ack_write)).id
        except asyncio.CancelledError:
            self._interrupt(session_id, agent, ack_write)
            raise

    async def _write_events(self, ctx: RunContext, ack_write: asyncio.Future[Entry],
                            sink: event_writer.EventWriter) -> None:
        """The run's event writer, from the moment its Ack has landed (its entries name the run)."""
        try:
            ack = await asyncio.shield(ack_write)
        except Exception as exc:  # noqa: BLE001 - no Ack, no run to file them under: no tool runs
            await sink.abandon(exc)
            return
        await sink.write(self.store, self.tools, ctx.session_id, ctx.agent.name, ack.id)

    def _write_interrupted(
        self, session_id: int, agent: Agent, run_id: int,
        stopped: tuple[str | None, list[int]] | None = None,
    ) -> None:
        """Close a cancelled run: every Ack that opens a run gets a closing entry.

        A run a person stopped closes with an Ack of status ``cancelled`` (stopping.py); any
        other cancel (the server shutting down) with an Error. Either keeps the reply text the
        run had streamed so far in its payload (``partial_text``).
        """
        if stopped is None:
            state = self._states.get(session_id)
            stopped = (state.stop_by, list(state.dropped)) if state else (None, [])
        by, dropped = stopped
        # the reply text streamed so far is no entry: the closing entry keeps what the user saw
        streaming = self.streams.current(session_id)
        partial = {"partial_text": streaming.text} if streaming and streaming.run_id == run_id else {}
        if by is None:
            self.store.append(
                session_id, EntryType.ERROR, agent.name, "interrupted: run cancelled",
                payload={"run_id": run_id, "model": agent.model, **partial},
            )
            return
        self.store.append(
            session_id, EntryType.ACK, agent.name, f"{agent.name} was stopped by {by}",
            payload={"run_id": run_id, "model": agent.model, "status": CANCELLED, "stopped_by": by,
                     "dropped": dropped, **partial},
        )

    def _close_cancelled(
        self, session_id: int, agent: Agent, ack_write: asyncio.Future, by: str | None, dropped: list[int]
    ) -> None:
        """A run cancelled while its Ack was committing: close it once the Ack has landed."""
        if ack_write.cancelled() or ack_write.exception() is not None or self.store.closed:
            return
        self._write_interrupted(session_id, agent, ack_write.result().id, (by, dropped))

    def make_executor(self, ctx: RunContext) -> ToolExecutor:
        """The tool executor for a run: the scope's tools, wrapped by the parts (approvals)."""
        executor: ToolExecutor = ScopedToolExecutor(ctx.scope, self.tool_timeout)
        for part in reversed(self.parts):  # the first part registered is the outermost wrapper
            executor = part.wrap_executor(ctx, executor)
        return executor


def _context_egress(store: Store, session_id: int, agent: Agent, data: ContextData) -> dict[str, Any]:
    """``{"egress": ...}`` for a run whose context sends the notebook's data to a model or host
    it was never recorded as sent to (egress.py); ``{}`` otherwise."""
    egress = context_egress(store, session_id, agent, data=data)
    return {"egress": egress} if egress is not None else {}
