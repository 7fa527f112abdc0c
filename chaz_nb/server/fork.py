"""Forks: a new session that starts with another's log up to an entry, and goes on its own way.

``Forks.fork`` (``Server.fork``, ``%chaz fork``) copies the source's entries up to a seq into a
new session in one transaction (``store.fork_session``, core/forksql.py): each copy keeps its
seq and names the entry it copies, the session records ``forked_from``/``forked_at_seq``, and
what was open at that point (a run, an approval request) is closed in the branch as ``forked``.
Then, in the branch:

- its agent is the source's, another one (``agent``), or a new definition made from it with
  another ``model``, ``system`` prompt and/or model server (``api_base``: a local model's URL),
  named after it (``analyst@gpt-4o``); the source
  agent's replies stay the new agent's own in its context (``run_messages``);
- ``say`` writes a new Message after the fork point (ask differently); ``rerun`` writes again
  the last trigger at or before the point, in the place it had (the copy stops before it), so
  the run it started happens again;
- ``replay="recorded"`` (the default) answers the branch's tool calls from the source's
  recorded ones without running any tool (replay.py); ``"live"`` runs them.

``Forks.replay`` (``Server.replay``, ``%chaz replay``) is a fork at 0 that writes each of the
source's triggers in turn and waits for its run: the whole conversation again, on another
model, with recorded tools. A forked child keeps its parent and ceiling, a forked room its
members (the session row's kind, metadata and ceiling are copied).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.entries import Entry, EntryType, build_context
from ..core.store import SessionInfo
from ..errors import AgentError, CeilingError, ServerError
from .agents import Agent
from .handle import RunHandle
from .egress import as_allowed
from .ports import Part, current_run
from .replay import META_KEY, REPLAY_MODES, RecordedTools
from .repost import answered_index, repost_payload
from .rooms import ROOM_KIND

if TYPE_CHECKING:  # pragma: no cover
    from .compaction import Compaction
    from .invocation import Invocation
    from .ports import ServerPort


@dataclass(frozen=True)
class ForkResult:
    """A fork: the branch's session, where it comes from, and the run it started (if any)."""

    session_id: int
    source_id: int
    at_seq: int
    agent: str
    copied: int
    closed: int
    replay: str
    handle: RunHandle | None = None
    #: the source's trigger the branch writes again (``rerun``)
    rerun_of: Entry | None = None
    #: a new agent definition the fork made (another model or prompt)
    defined: bool = False

    def describe(self) -> str:
        """The confirmation line: ``session 7: forked from session 3 at #12 ...``."""
        line = f"session {self.session_id}: {forked_label(self.source_id, self.at_seq)}"
        line += f" ({self.copied} entr{'y' if self.copied == 1 else 'ies'} copied"
        if self.closed:
            line += f"; {self.closed} open run(s)/request(s) closed there as forked"
        line += f"), agent @{self.agent}" + (" (a new definition)" if self.defined else "")
        line += "; tools replayed from the recording" if self.replay == "recorded" else "; tools run live"
        if self.rerun_of is not None:
            line += f"; re-running #{self.rerun_of.seq}"
        return line


def forked_label(source_id: int | None, at_seq: int | None) -> str:
    """``forked from session 3 at #12`` (what the views, the log and the sessions list say)."""
    return f"forked from session {source_id} at #{at_seq}"


def variant_name(base: str, model: str | None, system: str | None) -> str:
    """``analyst@gpt-4o``, ``analyst@prompt-1a2b3c``: the name of a changed definition."""
    parts = []
    if model:
        parts.append(re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-") or "model")
    if system is not None:
        parts.append("prompt-" + hashlib.sha1(system.encode()).hexdigest()[:6])
    return f"{base.split('@', 1)[0]}@{'-'.join(parts)[:64]}"


def _host_of(api_base: str) -> str:
    """``127.0.0.1:8080`` of ``http://127.0.0.1:8080/v1`` (the URL itself if it has none)."""
    parts = urllib.parse.urlsplit(api_base)
    return (parts.hostname or api_base) + (f":{parts.port}" if parts.port else "")


def is_trigger(entry: Entry, agents: Any) -> bool:
    """A Directive, or a Message from a sender that is not a defined agent (runs.py's rule)."""
    return entry.entry_type is EntryType.DIRECTIVE or (
        entry.entry_type is EntryType.MESSAGE and entry.sender not in agents)


class Forks(Part):
    """``fork`` and ``replay`` of one server (a part: it also builds a branch's context)."""

    name = "forks"

    def __init__(self, port: ServerPort, compaction: Compaction, recorded: RecordedTools,
                 define: Callable[[Agent], Agent], make_current: Callable[[str, int], None]) -> None:
        self.port = port
        self.compaction = compaction
        self.recorded = recorded
        self._define = define
        self._make_current = make_current

    # ------------------------------------------------------------------ fork
    def fork(
        self,
        session_id: int,
        at_seq: int | None = None,
        *,
        agent: str | None = None,
        model: str | None = None,
        system: str | None = None,
        say: str | None = None,
        rerun: bool = False,
        replay: str = "recorded",
        into: int | None = None,
        api_base: str | None = None,
    ) -> ForkResult:
        """Fork ``session_id`` at ``at_seq`` (None: its end); see the module docstring."""
        store = self.port.store
        if replay not in REPLAY_MODES:
            raise ServerError(f"replay must be recorded or live, not {replay!r}")
        if say is not None and rerun:
            raise ServerError("a fork either says something new (say) or re-runs the last trigger (rerun), not both")
        if say is not None and not say.strip():
            raise ServerError("say: nothing to say; give the new message's text")
        source = store.session(session_id)  # a StoreError naming an unknown session
        end = self._end(source.id)
        trigger = self._rerun_trigger(source, end if at_seq is None else at_seq, end) if rerun else None
        if source.kind == ROOM_KIND and (agent or model or system is not None or api_base):
            raise ServerError(f"session {source.id} is a room: a fork keeps its members; fork it without "
                              "--agent, --model, --system or --api-base")
        # what the re-posted trigger carries, read before anything is written (an unreadable
        # authority is refused here, not after the copy)
        again = self._repost(trigger, {"rerun_of": trigger.id}) if trigger is not None else None
        branch_agent, defined = self._agent_for(source, agent, model, system, needed=say is not None or rerun,
                                                api_base=api_base)
        point = trigger.seq - 1 if trigger is not None else end if at_seq is None else at_seq
        # the recording: the source's calls after the point (a re-run's: after its trigger)
        spec = {"mode": replay, "source": source.id, "after": trigger.seq if trigger is not None else point,
                "upto": end}
        copy = store.fork_session(source.id, point, agent=branch_agent, into=into,
                                  metadata={META_KEY: spec})  # a bad point: StoreError, nothing written
        self.recorded.start(copy.session_id, spec)
        if source.kind != ROOM_KIND:
            self._make_current(branch_agent, copy.session_id)
        handle = None
        if say is not None:
            handle = self.port.post(copy.session_id, EntryType.MESSAGE, say, "user", {"fork_say": True})
        elif trigger is not None:
            handle = self.port.post(copy.session_id, trigger.entry_type, trigger.content, trigger.sender,
                                    again)
        return ForkResult(copy.session_id, source.id, copy.at_seq, branch_agent, copy.copied, len(copy.closing),
                          replay, handle, trigger, defined)

    def _repost(self, trigger: Entry, marker: dict[str, Any],
                index: dict[int, list[int]] | None = None) -> dict[str, Any]:
        """The payload of ``trigger`` written again: the authority of the run it re-starts
        (repost.py); a ServerError when that authority is unreadable."""
        try:
            return repost_payload(self.port.store, trigger, marker, index)
        except CeilingError as exc:
            raise ServerError(f"cannot write #{trigger.seq} of session {trigger.session_id} again: {exc}") from None

    def _end(self, session_id: int) -> int:
        latest = self.port.store.latest(session_id)
        return latest.seq if latest is not None else 0

    def _rerun_trigger(self, source: SessionInfo, at_seq: Any, end: int) -> Entry:
        """The last trigger at or before ``at_seq`` in the source (a ServerError if none)."""
        if isinstance(at_seq, bool) or not isinstance(at_seq, int) or not 0 <= at_seq <= end:
            raise ServerError(f"cannot fork session {source.id} at {at_seq!r}: its entries are #1-#{end}")
        triggers = [e for e in self.port.store.entries(source.id, types=(EntryType.MESSAGE, EntryType.DIRECTIVE))
                    if e.seq <= at_seq and is_trigger(e, self.port.agents)]
        if not triggers:
            raise ServerError(f"session {source.id} has no Message or Directive at or before #{at_seq} to re-run")
        return triggers[-1]

    def _agent_for(self, source: SessionInfo, agent: str | None, model: str | None, system: str | None,
                   needed: bool, api_base: str | None = None) -> tuple[str, bool]:
        """The branch's agent's name, and whether the fork defined it (another model/prompt/server)."""
        name = agent or source.agent
        if model is None and system is None and not api_base:
            if (agent is not None or needed) and name not in self.port.agents:
                self.port.agent(name)  # a ServerError naming the known agents
            return name, False
        base = self.port.agent(name)
        changes: dict[str, Any] = {}
        if model is not None:
            changes["model"] = model
        if system is not None:
            changes["system"] = system
        if api_base:
            changes["api_base"] = api_base
        # another server alone is named after its host (analyst@127.0.0.1-8080)
        wanted = variant_name(base.name, model or (_host_of(api_base) if api_base and system is None else None),
                              system)
        candidate, n = wanted, 1
        while candidate in self.port.agents:
            existing = self.port.agents[candidate]
            if all(getattr(existing, k) == v for k, v in changes.items()):
                return candidate, False  # the same change made before: the same definition
            n += 1
            candidate = f"{wanted}-{n}"
        try:
            variant = dataclasses.replace(base, name=candidate, **changes)
        except AgentError as exc:
            raise ServerError(f"cannot make {candidate}: {exc}") from None
        self._define(variant)
        return candidate, True

    # ---------------------------------------------------------------- replay
    async def replay(self, session_id: int, *, agent: str | None = None, model: str | None = None,
                     replay: str = "recorded", system: str | None = None, api_base: str | None = None) -> int:
        """A branch from ``session_id``'s start that writes each of its triggers in turn, each
        once the run before it has ended; returns the branch's id when the last run has ended."""
        store = self.port.store
        source = store.session(session_id)
        triggers = [e for e in store.entries(source.id, types=(EntryType.MESSAGE, EntryType.DIRECTIVE))
                    if is_trigger(e, self.port.agents)]
        if not triggers:
            raise ServerError(f"session {source.id} has no Message or Directive to replay")
        index = answered_index(store, source.id)
        payloads = [self._repost(trigger, {"replays": trigger.id}, index) for trigger in triggers]
        branch = self.fork(source.id, 0, agent=agent or source.agent, model=model, replay=replay, system=system,
                           api_base=api_base)
        for trigger, payload in zip(triggers, payloads, strict=True):
            handle = self.port.post(branch.session_id, trigger.entry_type, trigger.content, trigger.sender, payload)
            if handle is not None:
                await handle.wait()
            await self.port.wait_session(branch.session_id)
        return branch.session_id

    # -------------------------------------------------------------- context
    async def run_messages(
        self, session_id: int, agent: Agent, invocation: Invocation | None
    ) -> list[dict[str, Any]] | None:
        """A branch whose agent is not its source's: the source agents' Messages are this
        agent's own (assistant role), as if it had said them; any other session: None."""
        own = self._earlier_agents(session_id) - {agent.name}
        if not own:
            return None
        budget = self.compaction.budget(agent)
        # what the agent's data policy and the egress gate keep out (egress.py), as in any run
        ctx = current_run.get()
        data = ctx.context_data if ctx is not None and ctx.session_id == session_id else None
        window = as_allowed(self.port.store, session_id, list(self.port.store.context_window(session_id, budget)),
                            agent, data)
        entries = [dataclasses.replace(e, sender=agent.name) if e.sender in own and e.entry_type is EntryType.MESSAGE
                   else e for e in window]
        messages = build_context(entries, agent.name, agent.system, context_tokens=budget)
        if invocation is not None and invocation.input:
            messages.append({"role": "user", "content": invocation.input})
        return messages

    def _earlier_agents(self, session_id: int) -> set[str]:
        """The agents of the sessions a chat branch was forked from, back to the first."""
        store = self.port.store
        info = store.session(session_id)
        names: set[str] = set()
        seen = {info.id}
        while info.forked_from is not None and info.kind != ROOM_KIND and info.forked_from not in seen:
            info = store.session(info.forked_from)
            seen.add(info.id)
            names.add(info.agent)
        return names
