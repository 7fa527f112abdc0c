"""/compact: Summary boundaries, and the context a run is given.

``Compaction.compact`` asks the model, in a call of its own, for a summary of the context
since the latest Summary and writes it as a Summary entry (sender ``system``). Agents get a
``compact`` tool that writes the summary they give (sender = the agent). Nothing is deleted:
older entries stay in the store for audit; the context of later runs simply starts at the
latest Summary (``entries.context_slice``).

``Compaction.run_messages`` builds the messages of one run: the room's labels and system note
(rooms.py), the Summary boundary, the token budget filled newest-first (the agent's
``context_tokens``, else the server's, 32k by default) and a schedule fire's invocation-scoped
wake prompt. The store reads only that window (``store.context_window``), so a turn costs
the same in a session of 1,000 or 50,000 entries. ``after_run``
compacts automatically once a run leaves a context larger than ``auto_compact_tokens``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .agents import Agent
from ..engine.offline_models import TASK_KEY
from ..core.entries import (
    ChatMessage, Entry, EntryType, approx_tokens, build_context, context_slice, fit_to_budget,
)
from ..core.window import DEFAULT_CONTEXT_TOKENS, budget_for_window
from .egress import ContextData, as_allowed, context_data, context_egress, egress_target, withhold
from .egress_gate import ALLOWED, EgressGate, denied_record
from .invocation import Invocation
from ..engine.runtime import one_line_reason
from ..engine.tools import ToolError, ToolRegistry, tool
from ..errors import CompactionError, ServerError
from .ports import Part, current_run

if TYPE_CHECKING:  # pragma: no cover
    from .ports import ServerPort
    from .rooms import Rooms

log = logging.getLogger(__name__)

MIN_ENTRIES = 3
SUMMARIZE_PROMPT = (
    "Summarize the conversation below for your own later use: the goals, the facts learned, "
    "decisions made, open questions and what was promised. Be concise; write only the summary."
)


class Compaction(Part):
    """Compaction and context building for one server (a part: it builds every run's messages)."""

    name = "compaction"

    def __init__(self, port: ServerPort, rooms: Rooms) -> None:
        self.port = port
        self.rooms = rooms  # room labels and system notes go into the context
        #: token budget of a run's context (approx. chars/4) for agents that set none;
        #: None = everything since the latest Summary (a read that grows with the session)
        self.context_tokens: int | None = DEFAULT_CONTEXT_TOKENS
        #: compact automatically after a run that leaves a context over this many tokens
        self.auto_compact_tokens: int | None = None
        #: model windows learned from context-window refusals (Error entries), per agent setting
        self._windows: dict[tuple[str, str, str | None, int | None], int] = {}
        install(port.tools)

    # ------------------------------------------------------------ context
    def budget(self, agent: Agent) -> int | None:
        """The token budget of ``agent``'s runs: its own, else the server's, and within the
        model's window once a refusal has told it (``learned_budget``)."""
        own = agent.context_tokens if agent.context_tokens is not None else self.context_tokens
        learned = self.learned_budget(agent)
        return own if learned is None else learned if own is None else min(own, learned)

    def learned_budget(self, agent: Agent) -> int | None:
        """The budget that fits the window the model's server refused a context for, if it did."""
        window = self._windows.get(_window_key(agent))
        if window is None:
            return None
        max_tokens = agent.model_options.get("max_tokens")
        return budget_for_window(window, max_tokens if isinstance(max_tokens, int) else None)

    def on_write(self, entry: Entry) -> None:
        """A context-window refusal (an Error with ``context_window``): the agent's next
        contexts are kept within that window, so the session is not stuck on the message that
        made it too long. Keyed by the agent's model, address and own budget: an agent defined
        anew (another ``--context-tokens``, another server) starts from its own setting."""
        payload = entry.payload or {}
        if entry.entry_type is not EntryType.ERROR or payload.get("error_kind") != "context_window":
            return
        window = payload.get("context_window")
        agent = self.port.agents.get(entry.sender)
        if agent is not None and isinstance(window, int) and window > 0:
            self._windows[_window_key(agent)] = window

    def _context_entries(self, session_id: int, max_tokens: int | None = None) -> list[Entry]:
        """The context entries since the latest Summary, newest first within ``max_tokens``."""
        return self.port.store.context_window(session_id, max_tokens)

    async def run_messages(
        self, session_id: int, agent: Agent, invocation: Invocation | None = None
    ) -> list[dict[str, Any]]:
        """The messages a run of ``agent`` in ``session_id`` starts with."""
        budget = self.budget(agent)
        # what the agent's data policy keeps out (another member's rows for a schema agent)
        ctx = current_run.get()  # the run's read of the data its context carries (run.py)
        data = ctx.context_data if ctx is not None and ctx.session_id == session_id else None
        entries = as_allowed(self.port.store, session_id, list(self._context_entries(session_id, budget)), agent, data)
        system, labels = self.rooms.context_for(session_id, agent)
        messages = build_context(entries, agent.name, system, labels, context_tokens=budget)
        if invocation is not None and invocation.input:
            messages.append({"role": "user", "content": invocation.input})
        return messages

    async def after_run(self, session_id: int, agent: Agent) -> Entry | None:
        """Automatic compaction: once a run is done, compact when the context passed the budget.

        Done after the run (not before the next one) so that the Summary covers the whole
        exchange and the next run's new message comes after it.
        """
        if self.auto_compact_tokens is None:
            return None
        system, labels = self.rooms.context_for(session_id, agent)
        # read no further than the threshold: a window cut by it is over it
        window = self.port.store.context_window(session_id, self.auto_compact_tokens)
        full = build_context(window, agent.name, system, labels)
        if window.complete and sum(approx_tokens(str(m["content"] or "")) for m in full) <= self.auto_compact_tokens:
            return None
        try:
            return await self.compact(session_id, by="auto")
        except CompactionError as exc:
            log.info("no automatic compaction of session %s: %s", session_id, exc)
        except Exception:  # automatic compaction is a nicety: its failure is logged, the run goes on
            log.exception("automatic compaction of session %s failed", session_id)
        return None

    # ------------------------------------------------------------ compact
    def _gated(self, session_id: int, agent: Agent, egress: dict[str, Any], data: ContextData,
               since: list[Entry]) -> tuple[dict[str, Any], list[Entry]]:
        """The egress gate on a summary request (egress_gate.py): the agent's rule lets the
        data go, or it is withheld from the request. A compaction is no run, so it has no card
        to show: what the rule would ask a person about stays in the kernel."""
        gate = _gate_of(self.port)
        if gate is None:
            return egress, since
        verdict = gate.verdict(session_id, agent)
        if verdict.decision in ALLOWED:
            return {**egress, "decision": verdict.decision, "decided_by": verdict.why}, since
        why = verdict.why or "no person to ask (a compaction is no run)"
        data.denied.update(k for k in egress.get("entries") or [] if isinstance(k, int))
        return denied_record(egress, {"decision": "deny", "decided_by": why}), withhold(since, data, agent)

    def _summarizer(self, session_id: int) -> Agent:
        session = self.port.store.session(session_id)
        candidates = [session.agent, *self.rooms.members(session_id)]
        for name in candidates:
            if name in self.port.agents:
                return self.port.agents[name]
        raise CompactionError(
            f"cannot compact session {session_id}: its agent {session.agent!r} is not defined"
        )

    async def compact(self, session_id: int, by: str = "system") -> Entry:
        """Write a Summary of the context since the latest Summary (a model call of its own)."""
        store = self.port.store
        entries = self._context_entries(session_id)
        since = context_slice(entries)
        new = [e for e in since if e.entry_type is not EntryType.SUMMARY]
        if len(new) < MIN_ENTRIES:
            raise CompactionError(
                f"nothing to compact in session {session_id}: {len(new)} message(s) since the last "
                f"Summary; compaction needs at least {MIN_ENTRIES}"
            )
        agent = self._summarizer(session_id)
        data = context_data(store, session_id)  # read once: what is withheld and what is sent
        since = as_allowed(store, session_id, list(since), agent, data)
        # the notebook's data the summary request sends where it never went: its row is written
        # ahead of the request (an Ack of the compaction, not of a run), so a request that fails
        # or a kernel that dies on the wire still leaves it in the ledger
        egress = context_egress(store, session_id, agent, via="compaction", entries=since, data=data)
        if egress is not None:
            egress, since = self._gated(session_id, agent, egress, data, since)
        if egress is not None:
            store.append(session_id, EntryType.ACK, "system",
                         f"compaction of session {session_id} sends its context to {agent.model}",
                         payload={"compaction": True, "egress": egress})
        labels = frozenset(self.rooms.members(session_id)) - {agent.name}
        messages: list[ChatMessage] = [
            {"role": "system", "content": SUMMARIZE_PROMPT}, *build_context(since, agent.name, "", labels)]
        learned = self.learned_budget(agent)
        if learned is not None:  # a model that refused a context this long: summarize what fits
            messages = fit_to_budget(messages, learned)
        options = agent.call_options()
        options["metadata"] = {**(options.get("metadata") or {}), TASK_KEY: "summarize"}
        try:
            async with self.port.limiter():
                reply = await self.port.backend.complete(
                    agent.model, messages, None, script=agent.script, options=options
                )
        except Exception as exc:  # noqa: BLE001 - any backend failure becomes one CompactionError
            raise CompactionError(f"compaction of session {session_id} failed: {one_line_reason(exc)}") from None
        summary = reply.content.strip()
        if not summary:
            raise CompactionError(f"compaction of session {session_id} failed: the model returned no summary")
        return store.append(
            session_id,
            EntryType.SUMMARY,
            "system",
            summary,
            payload={
                "by": by,
                "model": agent.model,
                "from_seq": new[0].seq,
                "to_seq": new[-1].seq,
                "entries": len(new),
                **reply.usage.to_json(),
                # the model that read what it summarizes (egress.py: where the Summary's content went)
                "summarized_by": {"model": egress_target(agent)["model"], "host": egress_target(agent)["host"]},
            },
        )


def _gate_of(port: ServerPort) -> EgressGate | None:
    try:
        part = port.part(EgressGate.name)
    except ServerError:  # an engine without the gate (a test's)
        return None
    return part if isinstance(part, EgressGate) else None


def _window_key(agent: Agent) -> tuple[str, str, str | None, int | None]:
    return agent.name, agent.model, agent.api_base, agent.context_tokens


def install(registry: ToolRegistry) -> None:
    """Register the agents' ``compact`` tool."""

    @tool  # async: it writes to the store, which stays on the kernel loop
    async def compact(summary: str) -> str:
        """Replace the conversation so far with your summary: later turns start from it.

        Args:
            summary: everything you need to remember (goals, facts, decisions, open items)
        """
        ctx = current_run.get()
        if ctx is None:
            raise ToolError("compact can only be called by an agent during a run")
        if not summary.strip():
            raise ToolError("compact needs a non-empty summary")
        room = ctx.port.part("rooms").room(ctx.session_id)
        if room is not None and not room.may_compact(ctx.agent.name):
            # the room's Summary is where every member's context starts: not one member's to write
            raise ToolError(
                f"compact is refused in room {room.name!r}: only a person compacts a room (%chaz compact)"
                + ("" if room.host is None else ", or its host when the room is made with host_compacts=True")
            )
        entry = ctx.port.store.append(
            ctx.session_id,
            EntryType.SUMMARY,
            ctx.agent.name,
            summary.strip(),
            payload={"by": ctx.agent.name, "run_id": ctx.run_id, "completion_tokens": approx_tokens(summary)},
        )
        return f"compacted: later turns start from this summary (entry #{entry.seq})"

    if compact.name not in registry:
        registry.register(compact)
