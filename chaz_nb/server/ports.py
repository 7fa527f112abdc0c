"""What the server's parts may use of it (``ServerPort``), what a part is (``Part``), and what
a run's tools see (``RunContext``, ``SpawnContext``, ``current_run``).

The run engine (runs.py) implements ``ServerPort``; every part (approvals, rooms, schedules,
compaction, spawn) gets the port in its constructor and uses nothing else of the server, so no
part imports the façade or touches another module's private state.

Adding a part (MCP servers are next) needs one line in ``Server.__init__`` (facade.py)::

    self.mcp = self.add_part(McpServers(self._engine))

Registration order is the order of the hooks: approvals first, because a decision must be
booked before anything reacts to the same write. A part implements only the hooks it needs;
``Part`` supplies the do-nothing defaults.
"""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from collections.abc import Awaitable, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from ..core.entries import Entry, EntryType
    from ..core.store import Store
    from ..engine.backends import ModelBackend
    from ..engine.runtime import ToolExecutor
    from ..engine.tools import ToolRegistry
    from ..engine.runtime import IterationBudget
    from ..engine.tools import ScopedTools
    from ..engine.tree_budget import TreeBudget
    from .egress import ContextData
    from .agents import Agent
    from .ceiling import Ceiling
    from .handle import RunHandle
    from .invocation import Invocation
    from .serving import Serving


class ServerPort(Protocol):
    """The narrow interface between the run engine and the parts registered on it."""

    # read-only to the parts (properties, so the engine's own mutable attributes satisfy them)
    @property
    def store(self) -> Store: ...

    @property
    def serving(self) -> Serving:
        """Who serves each session (serving.py): here, or the kernel that holds its lease."""

    @property
    def tools(self) -> ToolRegistry: ...

    @property
    def backend(self) -> ModelBackend: ...

    @property
    def agents(self) -> Mapping[str, Agent]:
        """The defined agents by name (the Server's own dict: a definition is seen at once)."""

    @property
    def stopped(self) -> bool:
        """True once the server stopped: parts start nothing new."""

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop runs go on (the kernel's); a ServerError when there is none."""

    def limiter(self) -> asyncio.Semaphore:
        """The model-call limiter every model call of this server goes through."""

    def agent(self, name: str) -> Agent:
        """The defined agent ``name``; a ServerError naming the known ones otherwise."""

    def part(self, name: str) -> Any:
        """The part registered under ``name`` (tools reach their server's part this way)."""

    def is_busy(self, session_id: int) -> bool:
        """A run (or a part's loop) is in flight in the session."""

    def park(self, session_id: int) -> None:
        """One more open approval request in the session's run (status ``parked``)."""

    def unpark(self, session_id: int) -> None:
        """One approval request of the session's run was answered."""

    def start_run(self, session_id: int, invocation: Invocation) -> asyncio.Future[Entry | None] | None:
        """A run with no trigger entry (a schedule fire); None when busy or stopped."""

    def hold_session(self, session_id: int, body: Callable[[], Awaitable[None]], name: str) -> bool:
        """Run ``body`` as the session's loop (a room's turns); False if the session is busy."""

    async def run_turn(
        self,
        session_id: int,
        trigger: Entry | None,
        invocation: Invocation | None = None,
        answers: list[Entry] | None = None,
    ) -> Entry | None:
        """One run in the session, inside a loop the caller holds (``hold_session``)."""

    async def wait_session(self, session_id: int) -> None:
        """Wait until the session has no run or loop in flight."""

    def track(self, trigger: Entry, future: asyncio.Future[Entry | None]) -> RunHandle:
        """Make ``future`` the run handle ``post``/``send`` return for ``trigger``."""

    def post(
        self,
        session_id: int,
        entry_type: EntryType | str,
        content: str,
        sender: str = "user",
        payload: dict[str, Any] | None = None,
    ) -> RunHandle | None:
        """Write an entry; the handle of the run it triggers, if any."""

    async def send(
        self,
        session_id: int,
        entry_type: EntryType | str,
        content: str,
        sender: str = "user",
        payload: dict[str, Any] | None = None,
    ) -> RunHandle | None:
        """``post`` through the group commit."""

    def register_child_session(
        self, agent_name: str, kind: str, spawn: SpawnContext
    ) -> tuple[int, asyncio.Future[None]]:
        """A child session for a spawn, and the future done when its runs end."""


class Part(Protocol):
    """A piece of the server registered on the run engine. Every hook is optional.

    Subclass it explicitly (``class Rooms(Part)``) to inherit the do-nothing defaults.
    """

    #: the name ``ServerPort.part`` finds it by
    name: str = ""

    def on_write(self, entry: Entry) -> None:
        """Every committed entry, before the engine decides whether it starts a run."""
        return

    def route(self, entry: Entry) -> bool:
        """True when this part runs ``entry``'s session itself (the engine then does not)."""
        return False

    def recover(self) -> dict[str, int]:
        """At start-up: close what a previous process left open; counts for ``recovered``."""
        return {}

    def recover_session(self, session_id: int) -> dict[str, int]:
        """A shared store's session this server has just taken over from a kernel that served
        it: close what that kernel left open there (as ``recover`` does at start-up)."""
        return {}

    def wrap_executor(self, ctx: RunContext, executor: ToolExecutor) -> ToolExecutor:
        """The tool executor of a run, wrapped (approvals put their proxy here)."""
        return executor

    async def run_messages(
        self, session_id: int, agent: Agent, invocation: Invocation | None
    ) -> list[dict[str, Any]] | None:
        """The messages a run starts with; the part added last that returns a list builds them
        (so a part added with ``Server.add_part`` comes before the built-in Compaction)."""
        return None

    async def after_run(self, session_id: int, agent: Agent) -> Any:
        """After a run wrote its reply (automatic compaction); what it returns is ignored."""
        return None

    async def stop(self) -> None:
        """The server stops: end the part's own tasks."""
        return


@dataclass
class SpawnContext:
    """Spawn metadata of a child session (what a spawn passes to the child's runs)."""

    call_depth: int
    max_call_depth: int
    parent_tools: ScopedTools
    completion: asyncio.Future[None] | None = None
    #: set for spawn_worker: the parent's own iteration budget, shared
    budget: IterationBudget | None = None
    parent_session: int | None = None
    parent_run: int | None = None
    #: auto-approve patterns of every ancestor (a child can only be stricter)
    auto_approve: tuple[frozenset[str], ...] = ()
    #: the spawning run's tree budget: the child's runs draw on it too
    tree: TreeBudget | None = None


@dataclass
class RunContext:
    """The run a tool call belongs to (read by spawn_agent and other built-in tools)."""

    #: what the run's tools may use of the server (ports.py); never the Server itself
    port: ServerPort
    session_id: int
    agent: Agent
    run_id: int
    call_depth: int
    max_call_depth: int
    scope: ScopedTools
    budget: IterationBudget
    unattended: bool = False  # no person to ask (a schedule fire)
    #: auto-approve patterns of this agent and of each ancestor; a tool is auto-approved
    #: only when every level allows it
    auto_approve: tuple[frozenset[str], ...] = ()
    #: spawns and model calls left to the whole run tree this run belongs to
    tree: TreeBudget | None = None
    #: the cap above this run (before its agent's own tools and auto-approve list)
    ceiling: Ceiling | None = None
    #: its reply is a trigger (a room's members it mentions): it carries the run's authority
    reply_triggers: bool = False
    #: the notebook's data the session's context carries (egress.py), read once for the run's
    #: Ack and its context
    context_data: ContextData | None = None


current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "chaz_current_run", default=None
)
