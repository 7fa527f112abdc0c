"""spawn_agent and spawn_worker: child agents through the same entry-write path.

The tools are registered before the Server exists and reach its run engine (the
``ServerPort``, ports.py) through a ``LateBound`` handle the Server sets exactly once.

A child never gets more than the run that spawned it, during the spawn and after it:

* Ceiling. The child session keeps the spawning run's scope, auto-approve chain and depth
  limit (``sessions.ceiling``, see ceiling.py). Every later run there (the parent's
  ``send_message``, a person, a schedule, after a restart or a redefinition of the child
  agent with more tools) runs with ``tools ∩ ceiling`` and the ceiling's auto-approve chain
  plus its own list. Grandchildren are capped by the child's capped run, so the cap is
  transitive; ``spawn_worker``'s ``tools`` can only narrow.
* Budget. Every spawn and every model call of the tree one trigger set off counts against
  the root agent's ``max_spawns`` (default 50) and ``max_model_calls`` (default 500), see
  tree_budget.py. The spawn past the limit is a tool error for the caller; then each run
  still going in the tree ends with an Error entry that names the limit and how to raise it.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Generic, TypeVar

from .ceiling import Authority
from .ports import SpawnContext, current_run
from .stopping import CANCELLED
from ..core.entries import EntryType
from ..engine.tools import ToolError, ToolRegistry, tool
from ..engine.tree_budget import TreeBudgetExceeded
from ..errors import LateBoundError

if TYPE_CHECKING:  # pragma: no cover
    from .ports import ServerPort

T = TypeVar("T")

NO_RESPONSE = "No response"


class LateBound(Generic[T]):
    """A value set exactly once, after the objects that hold it were built."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._value: T | None = None

    def set(self, value: T) -> None:
        if self._value is not None:
            raise LateBoundError(
                f"{self._what} is already bound to another server; "
                "give each Server its own ToolRegistry"
            )
        self._value = value

    def get(self) -> T:
        if self._value is None:
            raise LateBoundError(f"{self._what} is used before a Server was built with this registry")
        return self._value

    @property
    def is_set(self) -> bool:
        return self._value is not None


#: each registry's handle (kept here, not on the registry: the engine's ToolRegistry knows no
#: server); weak, so a registry no Server uses any more goes with its handle
_HANDLES: weakref.WeakKeyDictionary[ToolRegistry, LateBound[ServerPort]] = weakref.WeakKeyDictionary()


def install(registry: ToolRegistry) -> LateBound[ServerPort]:
    """Register spawn_agent and spawn_worker in ``registry``; return the handle to bind. A
    registry has one handle: installing again returns it (a second Server on the registry
    then fails to bind it, see ``LateBound.set``)."""
    installed = _HANDLES.get(registry)
    if installed is not None:
        return installed
    handle: LateBound[ServerPort] = LateBound("the spawn_agent tool's server handle")

    @tool
    async def spawn_agent(agent: str, task: str, context: str | None = None, async_: bool = False) -> str:
        """Start another agent on a task in a child session and return its reply.

        Args:
            agent: name of the agent to run
            task: what the agent should do
            context: background the agent needs (added after the task)
            async_: when true, return at once and let the child run in the background
        """
        ctx = _run_context("spawn_agent")
        server = handle.get()
        if agent not in server.agents:
            raise ToolError(f"unknown agent {agent!r}; known agents: {', '.join(sorted(server.agents))}")
        child = server.agents[agent]
        spawn = _child_spawn_context(ctx, max_depth=child.call_depth_limit, parent_tools=ctx.scope)
        _take_spawn(ctx)
        directive = task if not context else f"{task}\n\nContext:\n{context}"
        return await _run_child(server, ctx, agent, "child", spawn, directive, async_)

    @tool
    async def spawn_worker(task: str, tools: list[str] | None = None) -> str:
        """Run a helper copy of yourself on a sub-task, with fewer tools, sharing your step budget.

        Args:
            task: what the helper should do
            tools: tool names (or globs) the helper may use, within your own; default all of yours
        """
        ctx = _run_context("spawn_worker")
        server = handle.get()
        spawn = _child_spawn_context(
            ctx, max_depth=ctx.max_call_depth, parent_tools=ctx.scope.narrow(tools)
        )
        _take_spawn(ctx)
        spawn.budget = ctx.budget
        return await _run_child(server, ctx, ctx.agent.name, "worker", spawn, task, False)

    registry.register(spawn_agent)
    registry.register(spawn_worker)
    _HANDLES[registry] = handle
    return handle


def _run_context(tool_name: str):
    ctx = current_run.get()
    if ctx is None:
        raise ToolError(f"{tool_name} can only be called by an agent during a run")
    return ctx


def _take_spawn(ctx) -> None:
    """Count the spawn against the run tree's budget; a ToolError once none is left."""
    if ctx.tree is None:
        return
    try:
        ctx.tree.take_spawn()
    except TreeBudgetExceeded as exc:
        raise ToolError(str(exc)) from None


def _child_spawn_context(ctx, *, max_depth: int, parent_tools) -> SpawnContext:
    depth = ctx.call_depth + 1
    limit = min(ctx.max_call_depth, max_depth)
    if depth > ctx.max_call_depth:
        raise ToolError(
            f"spawn depth limit reached: this run is at depth {ctx.call_depth} and "
            f"max_call_depth is {ctx.max_call_depth}; do the task yourself"
        )
    return SpawnContext(
        call_depth=depth,
        max_call_depth=limit,
        parent_tools=parent_tools,
        parent_session=ctx.session_id,
        parent_run=ctx.run_id,
        auto_approve=ctx.auto_approve,
        tree=ctx.tree,
    )


async def _run_child(server, ctx, agent: str, kind: str, spawn: SpawnContext, directive: str, async_: bool) -> str:
    session_id, completion = server.register_child_session(agent, kind, spawn)
    server.store.append(
        session_id,
        EntryType.DIRECTIVE,
        ctx.agent.name,
        directive,
        # the run's authority travels with the Directive (ceiling.py): its budget, its cap
        payload={"parent_session": ctx.session_id, "parent_run": ctx.run_id, **Authority.of_run(ctx).to_payload()},
    )
    if async_:
        return f"started {agent} in session {session_id}; it runs in the background"
    await completion
    latest = server.store.latest(session_id)
    if latest is not None and latest.entry_type is EntryType.ACK and latest.payload.get("status") == CANCELLED:
        raise ToolError(f"{agent} (session {session_id}) was stopped by {latest.payload.get('stopped_by', 'a person')}")
    if latest is None or latest.entry_type not in (EntryType.MESSAGE, EntryType.ERROR):
        return NO_RESPONSE
    if latest.entry_type is EntryType.ERROR:
        raise ToolError(f"{agent} (session {session_id}) failed: {latest.content}")
    return latest.content
