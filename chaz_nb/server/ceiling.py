"""The authority ceiling of a run: the most it may do, whoever started it.

A run's tools are its agent's tools within the ceiling's ``tools``: levels of name patterns
(each the ``tools`` of one run above it), evaluated over the live registry like every scope
(engine/tools.py ``ScopedTools``), so a tool that joins later (an MCP server that became
ready) is within a ceiling exactly when every level above admits it; its auto-approve chain is
the ceiling's chain plus its agent's own list (a tool is auto-approved only when every level
allows it); its spawn depth starts at the ceiling's ``call_depth`` and may not pass its
``max_call_depth``.

Three things give a run a ceiling, and a run gets the narrowest of them (``meet``):

* the session it runs in. A session created by ``spawn_agent`` / ``spawn_worker`` keeps the
  ceiling of the run that spawned it (its scope, its auto-approve chain, its depth limit) in
  ``sessions.ceiling``, for every later run there: one the parent triggers with
  ``send_message``, a person's ``%chaz`` message, a schedule fire, after a restart, after the
  child agent is redefined with more tools. Without it a finished child was a way out of its
  parent's scope.
* the run that wrote the trigger. Every trigger a run writes (``send_message``, a spawn's
  Directive, its reply in a room, which wakes the members it mentions) carries the writer's
  authority in the entry itself, ``payload["authority"]`` (``Authority``: the ceiling and the
  id of the run-tree budget it draws on), so whichever kernel reads the entry applies it: a
  narrowed child can neither write to its agent's chat session and run there with the agent's
  full tools, nor wake a room peer (or its own agent, woken back in the room) with more.
  Authority is never kept in memory between runs: it is read back from the entry.
* the schedule that fires it. ``schedule_create`` in a capped run stores the run's ceiling
  with the schedule (``schedules.ceiling``); every fire, in this session or a fresh one,
  runs under it.

A ceiling with ``tools=None`` caps nothing (a session a person created). The budget a run
draws on (server/budgets.py) follows the same path: a person's own Message opens a fresh one;
everything it sets off, along every path, draws on that one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from collections.abc import Iterable, Sequence
from ..errors import CeilingError

if TYPE_CHECKING:  # pragma: no cover
    from ..engine.tools import ScopedTools, ToolRegistry

Chain = tuple[frozenset[str], ...]


class RunFacts(Protocol):
    """What ``Ceiling.of_run`` reads of a run (a ``RunContext`` has it)."""

    scope: ScopedTools
    auto_approve: Chain
    call_depth: int
    max_call_depth: int
    tree: Any  # the run's TreeBudget (a StoredBudget has the ``id`` its triggers name)


@dataclass(frozen=True)
class Ceiling:
    #: pattern levels the run's tools must all match (one set of names counts as one level);
    #: ``None`` = no cap
    tools: Chain | frozenset[str] | None = None
    #: auto-approve patterns of every level above the run
    auto_approve: Chain = ()
    #: the spawn depth the run stands at
    call_depth: int = 0
    #: the deepest spawn the run may make; ``None`` = its agent's own limit
    max_call_depth: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.tools, (frozenset, set)):  # a set of names: one level
            object.__setattr__(self, "tools", (frozenset(self.tools),))
        elif self.tools is not None:  # no level at all caps nothing: None, as it is stored
            levels = _join(tuple(frozenset(level) for level in self.tools), ())
            object.__setattr__(self, "tools", levels or None)

    @property
    def levels(self) -> Chain | None:
        """``tools`` as pattern levels (``None``: no cap)."""
        tools = self.tools
        # __post_init__ has made a set of names its one level already; reading it so is the same
        return (tools,) if isinstance(tools, frozenset) else tools

    @classmethod
    def of_run(cls, ctx: RunFacts) -> Ceiling:
        """What a run may do: the cap it puts on the runs it triggers or spawns."""
        return cls(ctx.scope.rules, tuple(ctx.auto_approve), ctx.call_depth, ctx.max_call_depth)

    def meet(self, other: Ceiling | None) -> Ceiling:
        """The narrower of two ceilings: tool levels and chains joined, depth the deeper."""
        if other is None:
            return self
        if self.levels is None:
            tools = other.levels
        elif other.levels is None:
            tools = self.levels
        else:
            tools = _join(self.levels, other.levels)
        limits = [d for d in (self.max_call_depth, other.max_call_depth) if d is not None]
        return Ceiling(
            tools,
            _join(self.auto_approve, other.auto_approve),
            max(self.call_depth, other.call_depth),
            min(limits) if limits else None,
        )

    def scope(self, registry: ToolRegistry, patterns: Iterable[str] | None) -> ScopedTools:
        """An agent's tools (``patterns``) within this ceiling."""
        from ..engine.tools import ScopedTools

        return registry.scope(patterns, ScopedTools(registry, self.levels or ()))

    def chain(self, own: Iterable[str]) -> Chain:
        """The run's auto-approve chain: every level above it, then its agent's own list."""
        return _join(self.auto_approve, (frozenset(own),))

    def depth_limit(self, agent_limit: int) -> int:
        return agent_limit if self.max_call_depth is None else min(agent_limit, self.max_call_depth)

    # ------------------------------------------------------------ storage
    def to_dict(self) -> dict[str, Any]:
        return {
            "tools": None if self.levels is None else [sorted(level) for level in self.levels],
            "auto_approve": [sorted(level) for level in self.auto_approve],
            "call_depth": self.call_depth,
            "max_call_depth": self.max_call_depth,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, raw: str | dict[str, Any] | None) -> Ceiling | None:
        """A stored ceiling (``None`` when the session has none); CeilingError when unreadable."""
        if raw is None or raw == "":
            return None
        try:
            data = json.loads(raw) if isinstance(raw, str) else raw
            tools, chain = data["tools"], data["auto_approve"]
            if not (tools is None or isinstance(tools, list)) or not (
                isinstance(chain, list) and all(isinstance(level, list) for level in chain)
            ):
                raise TypeError("tools must be a list or null, auto_approve a list of lists")
            if tools is not None and all(isinstance(t, str) for t in tools):
                levels: Chain | None = (frozenset(tools),)  # stored by older versions: one list of names
            elif tools is not None and all(isinstance(level, list) for level in tools):
                levels = tuple(frozenset(str(p) for p in level) for level in tools)
            elif tools is not None:
                raise TypeError("tools must be a list of names or a list of lists of patterns")
            else:
                levels = None
            return cls(
                levels,
                tuple(frozenset(str(p) for p in level) for level in chain),
                int(data["call_depth"]),
                None if data["max_call_depth"] is None else int(data["max_call_depth"]),
            )
        except (TypeError, ValueError, KeyError) as exc:
            raise CeilingError(f"the session's stored ceiling is unreadable ({exc})") from None


def _join(a: Sequence[frozenset[str]], b: Sequence[frozenset[str]]) -> Chain:
    # Every level must allow a tool, so a repeated level adds nothing: keep each once, in order.
    out: list[frozenset[str]] = []
    for level in (*a, *b):
        if level not in out:
            out.append(level)
    return tuple(out)


#: the payload key of a trigger a run wrote: its writer's authority (``Authority.to_payload``)
AUTHORITY_KEY = "authority"


@dataclass(frozen=True)
class Authority:
    """What a run hands on with every trigger it writes: its ceiling and the budget it draws on.

    It is written in the entry itself (``payload["authority"]``), so whichever kernel reads
    the entry, and whenever, caps the run it starts by it; the budget is a row of
    ``run_budgets`` (budgets.py), counted in the store.
    """

    ceiling: Ceiling
    #: the id of the run-tree budget (``run_budgets.id``); None: the run starts a fresh one
    budget: str | None = None

    @classmethod
    def of_run(cls, ctx: RunFacts) -> Authority:
        """What a run hands on: its own ceiling and its tree's budget."""
        return cls(Ceiling.of_run(ctx), getattr(ctx.tree, "id", None))

    def to_payload(self) -> dict[str, Any]:
        return {AUTHORITY_KEY: {"ceiling": self.ceiling.to_dict(), "budget": self.budget}}

    def meet(self, other: Authority | None) -> Authority:
        """The narrower ceiling of both; the budget of the first that names one."""
        if other is None:
            return self
        return Authority(self.ceiling.meet(other.ceiling), self.budget or other.budget)

    @classmethod
    def of_entry(cls, payload: dict[str, Any]) -> Authority | None:
        """The authority a trigger was written with (None: a person's entry); CeilingError
        when it is unreadable (the run must not run open)."""
        raw = payload.get(AUTHORITY_KEY)
        if raw is None:
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("ceiling"), dict):
            raise CeilingError("the trigger's authority is unreadable (no ceiling)")
        ceiling = Ceiling.from_json(raw["ceiling"]) or Ceiling()
        budget = raw.get("budget")
        return cls(ceiling, None if budget is None else str(budget))

    @classmethod
    def of_entries(cls, payloads: Iterable[dict[str, Any]]) -> Authority | None:
        """The meet of the authorities of every trigger a run answers (None: none has one)."""
        found: Authority | None = None
        for payload in payloads:
            one = cls.of_entry(payload)
            if one is not None:
                found = one if found is None else found.meet(one)
        return found


def written_by_run(payload: dict[str, Any]) -> bool:
    """Whether an entry was written by a run (it carries its writer's authority)."""
    return AUTHORITY_KEY in payload
