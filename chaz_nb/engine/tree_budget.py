"""The budget of one run tree: spawns and model calls of everything one trigger set off.

A run that a person, a schedule or a room turn starts is the root of a tree; every run it
causes belongs to the same tree and draws on the same budget: children and grandchildren of
``spawn_agent`` / ``spawn_worker`` (async ones too, after the root has finished), and runs
started by a Message or Directive that a run of the tree wrote (``send_message``). The depth
limit bounds how deep a tree goes, not how wide: without this budget a self-spawning agent
made 2,018 sessions from one message.

The root's agent sets the limits (``Agent.max_spawns``, ``Agent.max_model_calls``). The first
spawn or model call past a limit exhausts the tree: the spawn call gets a tool error, and
every run still going in the tree ends at its next model call with an Error entry that names
the limit and how to raise it, so the whole tree stops, not only the branch that hit it.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

from .backends import ModelBackend, ModelReply
from ..errors import TreeBudgetExceeded

DEFAULT_MAX_SPAWNS = 50
DEFAULT_MAX_MODEL_CALLS = 500


class TreeBudget:
    """Spawns and model calls left to one run tree (shared by every run in it)."""

    def __init__(self, root_agent: str, max_spawns: int, max_model_calls: int) -> None:
        self.root_agent = root_agent
        self.max_spawns = max_spawns
        self.max_model_calls = max_model_calls
        self.spawns = 0
        self.model_calls = 0
        #: why the tree stopped (the first limit reached); None while it may go on
        self.exhausted: str | None = None

    @classmethod
    def for_agent(cls, agent: Any) -> TreeBudget:
        return cls(agent.name, agent.max_spawns, agent.max_model_calls)

    def _exhaust(self, what: str, limit: int, field: str) -> str:
        if self.exhausted is None:
            self.exhausted = (
                f"run tree budget reached: {limit} {what}{'' if limit == 1 else 's'} "
                f"(max_{field} of agent {self.root_agent!r}, "
                f"which started the tree); raise it with Agent(..., max_{field}=N) or "
                f"`max_{field} = N` in %%chaz agent {self.root_agent}"
            )
        return self.exhausted

    def take_spawn(self) -> None:
        """Count one spawn; TreeBudgetExceeded once the tree has none left (or has stopped)."""
        if self.exhausted is None and self.spawns >= self.max_spawns:
            self._exhaust("spawn", self.max_spawns, "spawns")
        if self.exhausted is not None:
            raise TreeBudgetExceeded(self.exhausted)
        self.spawns += 1

    def take_model_call(self) -> None:
        """Count one model call; TreeBudgetExceeded once the tree has none left (or has stopped)."""
        if self.exhausted is None and self.model_calls >= self.max_model_calls:
            self._exhaust("model call", self.max_model_calls, "model_calls")
        if self.exhausted is not None:
            raise TreeBudgetExceeded(self.exhausted)
        self.model_calls += 1

    async def charge_model_call(self) -> None:
        """``take_model_call`` for a caller on the loop (a stored budget batches its statements)."""
        self.take_model_call()

    def to_json(self) -> dict[str, Any]:
        """The tree's figures for an Error entry's payload."""
        return {
            "root_agent": self.root_agent,
            "spawns": self.spawns,
            "max_spawns": self.max_spawns,
            "model_calls": self.model_calls,
            "max_model_calls": self.max_model_calls,
        }

    def __repr__(self) -> str:
        return (
            f"<TreeBudget {self.root_agent}: spawns {self.spawns}/{self.max_spawns}, "
            f"model calls {self.model_calls}/{self.max_model_calls}>"
        )


class BudgetedBackend:
    """A model backend that charges every call (the forced final answer too) to a tree."""

    def __init__(self, backend: ModelBackend, tree: TreeBudget) -> None:
        self.backend = backend
        self.tree = tree

    @property
    def streams(self) -> bool:
        """Streams when the backend it wraps does (see ``ModelBackend``)."""
        return bool(getattr(self.backend, "streams", False))

    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        script: list[Any] | None = None,
        options: dict[str, Any] | None = None,
        **stream: Any,
    ) -> ModelReply:
        await self.tree.charge_model_call()  # counted (in the store, for a stored budget) before the call
        # ``stream`` is ``on_delta`` when the runtime streams (only if ``streams`` is true)
        return await self.backend.complete(model, messages, tools, script=script, options=options, **stream)
