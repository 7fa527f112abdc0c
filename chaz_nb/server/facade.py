"""The Server: the small façade a notebook (or any asyncio program) talks to.

It defines agents, hands out sessions, writes entries (``post``/``send``) and decisions
(``decide``), and starts/stops. The work is done by the run engine (runs.py: it reacts to
writes and runs agents, see docs/design.md) and by the parts registered on it (approvals,
schedules, rooms, compaction; spawn's tools), each of which sees only the engine's
``ServerPort`` (ports.py). Adding a part is one ``self.add_part(...)`` line below; code
outside the package adds its own the same way: ``server.add_part(MyPart(server.port))``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar
from collections.abc import Callable, Iterable, Mapping

from ..core.entries import Entry, EntryType
from ..core.paging import newest_first
from ..core.store import SessionInfo, Store, served_elsewhere
from ..engine.backends import LiteLLMBackend, ModelBackend
from ..engine.tools import ToolsLike, as_registry
from ..errors import ServerError, UndoRefused
from . import remote
from . import spawn as spawn_tools
from .agent_book import AgentBook, Roster
from .agents import Agent
from .approvals import DEFAULT_TIMEOUT, ApprovalBook
from .cells import AgentCells, ApprovedCode, approved_code, session_record
from .compaction import Compaction
from .egress_gate import EgressGate
from .compare import Comparison
from .compare import compare as compare_branches
from .fork import ForkResult, Forks
from .invocation import Invocation
from .mcp import McpServer, McpServers
from .replay import RecordedTools
from .handle import RunHandle
from .ports import Part, ServerPort, SpawnContext
from .rooms import ROOM_KIND, Rooms
from .runs import RunEngine
from .schedules import Fire, Schedule, Schedules
from .streams import StreamEvent, StreamListener
from .tool_notes import MissingTools
from .tool_support import ToolSupport
from .stopping import StoppedRun

if TYPE_CHECKING:  # pragma: no cover
    from .kernel.undo import UndoOutcome
    from .kernel.undo_book import UndoCalls

__all__ = ["RunHandle", "Server", "ServerError", "StoppedRun"]

P = TypeVar("P", bound=Part)


class Server:
    """Runs agents in response to entries written to a SessionStore."""

    def __init__(
        self,
        store: Store,
        agents: Iterable[Agent] | Mapping[str, Agent] = (),
        tools: ToolsLike = None,
        *,
        backend: ModelBackend | None = None,
        max_concurrent_calls: int = 10,
        tool_timeout: float = 60.0,
        approval_timeout: float = DEFAULT_TIMEOUT,
        keep_agents: bool = False,
    ) -> None:
        # A list of tools or plain functions is as good as a registry (most agent
        # libraries take a list); anything else is one TypeError here.
        self.tools = as_registry(tools)
        self.store = store
        self.backend: ModelBackend = backend or LiteLLMBackend()
        self.agents: dict[str, Agent] = {}
        self._engine = RunEngine(
            store, self.agents, self.tools, self.backend,
            max_concurrent_calls=max_concurrent_calls, tool_timeout=tool_timeout,
        )
        handle = spawn_tools.install(self.tools)  # one handle a registry (spawn.py)
        handle.set(self._engine)
        self._current: dict[str, int] = {}
        # keep_agents: definitions and current sessions kept in the store (agent_book.py);
        # the constructor's agents are this code's own, never kept
        self.roster = Roster(self.agents, self._current, AgentBook(store) if keep_agents else None,
                             held=self._engine.held)
        for agent in agents.values() if isinstance(agents, Mapping) else agents:
            self.roster.define_built_in(agent)
        #: the agents read back from the store at start (keep_agents)
        self.agents_loaded = self.roster.load()
        #: the kernel tool server (``add_kernel``); None until one is added
        self.kernel: Any = None
        self._undo: UndoCalls | None = None
        # Parts, in hook order. Approvals first: a decision must be booked before anything
        # reacts to it.
        # (the parts' on_write hooks subscribe after recovery: what recover() writes is not
        # news to them)
        self._unsubscribers: list[Callable[[], None]] | None = None
        # A branch's recorded tools come first, outside the approval proxy: a call answered
        # from the recording runs nothing, so asks nobody (replay.py).
        # first: the outermost wrapper of every run's tools, so what a replay sends again is gated too
        self.egress_gate = self.add_part(EgressGate(self._engine))
        self.recorded = self.add_part(RecordedTools(self._engine))
        self.approvals = self.add_part(ApprovalBook(self._engine, approval_timeout))
        self.schedules = self.add_part(Schedules(self._engine))
        self.rooms = self.add_part(Rooms(self._engine))
        self.compaction = self.add_part(Compaction(self._engine, self.rooms))
        self.mcp = self.add_part(McpServers(self._engine))
        # a kept agent's named tool the notebook has not defined again says so in its run
        self.add_part(MissingTools(self._engine, self.mcp.names_tool))
        # a model that cannot take tools (litellm's model info) says so once in its session
        self.add_part(ToolSupport(self._engine))
        # approved kernel__run code, told to the notebook as cells (cells.py)
        self.cells = self.add_part(AgentCells(self._engine))
        # last: asked first for a run's messages (a branch's context, fork.py)
        # a fork's variant (analyst@gpt-4o) is defined for its branch, not kept
        self.forks = self.add_part(Forks(self._engine, self.compaction, self.recorded,
                                         lambda agent: self.define_agent(agent, keep=False), self._make_current))
        self.recovered = self._engine.recover()
        self._unsubscribers = [
            *(store.subscribe(p.on_write) for p in self._engine.parts if type(p).on_write is not Part.on_write),
            store.subscribe(self._engine.process_session),
        ]

    @property
    def port(self) -> ServerPort:
        """What a part may use of this server: pass it to a part's constructor."""
        return self._engine

    def add_part(self, part: P) -> P:
        """Register ``part`` (a ``Part`` built on ``self.port``) and return it.

        Its hooks run after those of the parts registered before it. Its ``on_write`` sees every
        committed entry; a part added after the Server was built sees a write after the engine
        has reacted to it, and its ``recover()`` is not called (start-up recovery has run).
        """
        self._engine.register(part)
        if self._unsubscribers is not None and type(part).on_write is not Part.on_write:
            self._unsubscribers.append(self.store.subscribe(part.on_write))
        return part

    @property
    def tool_timeout(self) -> float:
        return self._engine.tool_timeout

    @property
    def max_concurrent_calls(self) -> int:
        return self._engine.max_concurrent_calls

    # ------------------------------------------------------------ agents
    def define_agent(self, agent: Agent, *, keep: bool | None = None) -> Agent:
        """Define or redefine an agent (a redefinition applies from its next run).

        A Server built with ``keep_agents=True`` (the notebook's) keeps the definition in the
        store (no keys, tools by name: agent_book.py), so it is back after a restart;
        ``keep=False`` defines it for this process only."""
        return self.roster.define(agent, keep)

    def forget_agent(self, name: str) -> str:
        """Remove a kept agent from the store and this server (its sessions stay); a built-in
        one falls back to its built-in definition. Unknown: AgentError. Says what it did."""
        return self.roster.forget(name)

    def accept_agent(self, name: str) -> Agent:
        """Take the definition another kernel stored for ``name`` as this kernel's own: until
        then its runs here keep this kernel's tools, auto-approve list and endpoints
        (agent_trust.py). Nothing to take: AgentError."""
        self.roster.refresh(name)
        return self.roster.accept(name)

    def held_agents(self) -> dict[str, str]:
        """The agents another kernel changed, held here to this kernel's definition: the line
        that says so, by name."""
        return {name: held.line(name) for name, held in sorted(self.roster.held.items())}
    def subscribe_agents(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` after an agent is defined, redefined or forgotten (here, or heard
        from another kernel on a shared store). Returns the function that unsubscribes."""
        return self.roster.subscribe(callback)

    def refresh_agents(self, name: str | None = None) -> None:
        """On a shared store: the agents (or ``name``) as the store defines them now (a
        notice may be lost, or still on its way); nothing on a store of one process."""
        self.roster.refresh(name)

    def agent(self, name: str) -> Agent:
        return self._engine.agent(name)

    # ---------------------------------------------------------- sessions
    def new_session(self, agent_name: str) -> int:
        """Start a fresh chat session with an agent and make it the agent's current one."""
        self.agent(agent_name)
        session_id = self.store.create_session(agent_name, "chat")
        self._make_current(agent_name, session_id)
        return session_id

    def current_session_id(self, agent_name: str) -> int | None:
        """The agent's current chat session, or None when it has none yet (creates nothing)."""
        return self._current.get(agent_name)

    def current_session(self, agent_name: str) -> int:
        """The agent's current chat session (created on first use).

        A session chosen with ``use_session`` is current even where the agent is not defined
        (another kernel serves it); a new one needs the agent defined here."""
        if agent_name not in self._current:
            self.agent(agent_name)
            return self.new_session(agent_name)
        return self._current[agent_name]

    def _make_current(self, agent_name: str, session_id: int) -> None:
        self.roster.make_current(agent_name, session_id)

    # ------------------------------------------------------------ forks
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
        api_base: str | None = None,
    ) -> int:
        """A new session that starts with ``session_id``'s log up to seq ``at_seq`` (None: its
        end), copied in one transaction; returns its id (fork.py). ``agent``/``model``/``system``
        change its agent (a changed model or prompt is a new definition, ``analyst@gpt-4o``);
        ``api_base``: the new definition's model server (a local model's URL);
        ``say`` writes a new Message there, ``rerun`` writes the last trigger at or before the
        point again (both start a run: ``await server.wait_idle()`` waits for it). With
        ``replay="recorded"`` its tool calls get the source's recorded outputs; no tool runs.
        A bad seq or an unknown session is a one-line error, and nothing is written."""
        return self.forks.fork(session_id, at_seq, agent=agent, model=model, system=system, say=say,
                               rerun=rerun, replay=replay, api_base=api_base).session_id

    def fork_session(self, session_id: int, at_seq: int | None = None, **options: Any) -> ForkResult:
        """``fork`` that returns the whole ``ForkResult`` (its run's handle, its line)."""
        return self.forks.fork(session_id, at_seq, **options)

    async def replay(self, session_id: int, *, agent: str | None = None, model: str | None = None,
                     replay: str = "recorded", system: str | None = None, api_base: str | None = None) -> int:
        """Replay every trigger of ``session_id`` in order in a new branch from its start (on
        another ``model`` or ``agent``, ``system`` prompt or model server ``api_base``, tools
        from the recording); the branch's id once every replayed turn has finished."""
        return await self.forks.replay(session_id, agent=agent, model=model, replay=replay, system=system,
                                       api_base=api_base)

    def compare(self, a: int, b: int) -> Comparison:
        """Sessions ``a`` and ``b`` side by side from their fork point (compare.py)."""
        return compare_branches(self.store, a, b)

    def use_session(self, session_id: int) -> SessionInfo:
        """Make an existing chat session its agent's current one here (e.g. a session another
        kernel on a shared store serves: ``post``/``send`` then wake that kernel). Unknown
        session: StoreError; a room: ServerError (rooms are entered by name, see rooms.py)."""
        info = self.store.session(session_id)
        if info.kind == ROOM_KIND:
            raise ServerError(f"session {session_id} is a room; enter it with %chaz room NAME")
        self._make_current(info.agent, info.id)
        return info

    def register_child_session(
        self, agent_name: str, kind: str, spawn: SpawnContext
    ) -> tuple[int, asyncio.Future[None]]:
        """Create a child session for a spawn; return its id and the completion future."""
        return self._engine.register_child_session(agent_name, kind, spawn)

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
        return self._engine.post(session_id, entry_type, content, sender, payload)

    async def send(
        self,
        session_id: int,
        content: str,
        sender: str = "user",
        payload: dict[str, Any] | None = None,
        *,
        directive: bool = False,
    ) -> RunHandle:
        """Write a Message (``directive``: a Directive) through the group commit, in one
        transaction with the tick's other writes (the run's entries among them); return its
        run. The entry is committed before its run calls the model."""
        if sender in self.agents and not directive:
            raise ServerError(
                f"a Message from {sender!r} starts no run (agents do not trigger themselves)"
            )
        kind = EntryType.DIRECTIVE if directive else EntryType.MESSAGE
        handle = await self._engine.send(session_id, kind, content, sender, payload)
        if handle is None:
            raise ServerError(f"a {kind.value} from {sender!r} in session {session_id} starts no run here")
        return handle

    def triggers_run(self, entry: Entry) -> bool:
        """Act on a Directive, or on a Message from a non-agent (docs/design.md)."""
        return self._engine.triggers_run(entry)

    # --------------------------------------------------------- approvals
    def pending_approvals(self) -> list[dict[str, Any]]:
        """Open approval requests, oldest first (what a person must decide)."""
        return self.approvals.pending()

    def decide(
        self, request_id: str, decision: str, reason: str | None = None, decided_by: str = "user",
        arguments: dict[str, Any] | str | None = None,
    ) -> tuple[bool, str]:
        """A person's decision on a request (``approve``, ``deny`` or ``approve_all``);
        ``arguments``: approve with edited arguments (checked against the tool's schema)."""
        return self.approvals.decide(request_id, decision, reason, decided_by, arguments)

    def parked_sessions(self) -> list[int]:
        return self._engine.parked_sessions()

    # ------------------------------------------------------------ status
    def is_busy(self, session_id: int) -> bool:
        return self._engine.is_busy(session_id)

    def model_library_loading(self) -> bool:
        """Whether a model call would wait for litellm's import now (seconds after
        ``%load_ext``): the views say "loading the model library…" meanwhile."""
        loading = getattr(self.backend, "loading", None)  # (LiteLLMBackend's, WorkerBackend's)
        return bool(loading()) if callable(loading) else False

    def session_status(self, session_id: int) -> str:
        """``idle``, ``running`` or ``parked`` (waiting for a person)."""
        return self._engine.session_status(session_id)

    def running_sessions(self) -> list[int]:
        return self._engine.running_sessions()

    def served_elsewhere(self, session_id: int) -> bool:
        """Whether another live process serves the session (only a shared store can say yes)."""
        return served_elsewhere(self.store, session_id)

    def session_writes(self, session_id: int) -> Callable[[Callable[[], None]], Callable[[], None]]:
        """Subscribe to the session's writes, whichever process writes them (remote.py): call the
        result with a wake-up function; it returns the function that unsubscribes."""
        return remote.session_writes(self.store, session_id)

    def last_trigger_seq(self, session_id: int) -> int:
        """The seq just before the session's latest user Message or Directive (0 if none)."""
        # newest first, a page at a time: the trigger is near the end of the log
        for e in newest_first(self.store, session_id, types=(EntryType.MESSAGE, EntryType.DIRECTIVE)):
            if e.entry_type is EntryType.DIRECTIVE or e.sender not in self.agents:
                return e.seq - 1
        return 0

    # ------------------------------------------------------------ streams
    def subscribe_stream(self, session_id: int | None, callback: StreamListener) -> Callable[[], None]:
        """Follow the reply text of ``session_id``'s runs as the model writes it (``None``:
        every session): ``callback(StreamEvent)`` per delta with the text so far, then one
        ``done`` event when the reply's entry is written. Not entries (streams.py).
        Returns the function that unsubscribes."""
        return self._engine.streams.subscribe(session_id, callback)

    def subscribe_run_end(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(session_id)`` when a session's run loop is over (its status is idle
        now; no entry is written then). Returns the function that unsubscribes."""
        return self._engine.streams.subscribe_ended(callback)

    def subscribe_cells(self, callback: Callable[[ApprovedCode], None]) -> Callable[[], None]:
        """Call ``callback(cell)`` when approved ``kernel__run`` code ran (cells.py), unless the
        kernel's switch (``cells_enabled``) or the agent's (``Agent.cells``) is off.
        Returns the function that unsubscribes."""
        return self.cells.subscribe(callback)

    @property
    def cells_enabled(self) -> bool:
        """Approved code becomes notebook cells (``%chaz cells off|on``)."""
        return self.cells.enabled

    @cells_enabled.setter
    def cells_enabled(self, on: bool) -> None:
        self.cells.enabled = bool(on)

    def approved_code(self, session_id: int) -> list[ApprovedCode]:
        """The session's approved ``kernel__run`` code that ran, in log order; an unknown
        session is a StoreError."""
        return approved_code(self.store, session_id)

    def session_record(self, session_id: int) -> list[Entry | ApprovedCode]:
        """The session's Messages and approved code, in log order (``%chaz export``)."""
        return session_record(self.store, session_id)

    def current_stream(self, session_id: int) -> StreamEvent | None:
        """The reply being written in ``session_id`` now, if a run is streaming one."""
        return self._engine.streams.current(session_id)

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Wait until no session has a run in flight (tests, unload)."""
        await asyncio.wait_for(self._engine.wait_idle(), timeout)

    # ---------------------------------------------------------- lifecycle
    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run agents on ``loop`` (the kernel's); by default the loop running at first use."""
        self._engine.attach_loop(loop)

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        return self._engine.loop()

    def request_stop(self, session_id: int | None = None, by: str = "user") -> list[StoppedRun]:
        """Cancel a session's run and its spawned children's (None: every run); don't wait.

        For callers that cannot await (a button's click handler). See stopping.py for what a
        stop does; ``[]`` means nothing was running; an unknown session is a StoreError.
        """
        return self._engine.request_stop(session_id, by)

    async def stop_runs(self, session_id: int | None = None, by: str = "user") -> list[StoppedRun]:
        """Stop a session's run (None: every run) and wait until each wrote its closing Ack.

        The server keeps running (``stop`` is the shutdown): the session takes the next
        Message as usual.
        """
        return await self._engine.stop_runs(session_id, by)

    async def stop(self) -> None:
        """Shut down: stop reacting to writes and cancel every run (each records an Error entry)."""
        for unsubscribe in self._unsubscribers or ():
            unsubscribe()
        if self.roster.book is not None:
            self.roster.book.close()
        await self._engine.stop()

    # ------------------------------- schedules, rooms, compaction (see their own modules)
    def start_run(self, session_id: int, invocation: Invocation) -> asyncio.Future[Entry | None] | None:
        """Run with no trigger entry (a schedule fire); None when the session is busy or stopped."""
        return self._engine.start_run(session_id, invocation)

    async def fire_agent_schedule(self, schedule: Schedule | int) -> Fire:
        """Fire a schedule now on the standalone path (its wake prompt is not written)."""
        return await self.schedules.fire(schedule)

    def create_room(
        self, name: str, agents: Iterable[str], host: str | None = None, burst_budget: int = 6,
        host_compacts: bool = False,
    ) -> int:
        """A session shared by several agents; see rooms.py (``host_compacts``: the host's
        ``compact`` tool may write the room's Summary; else only a person compacts a room)."""
        return self.rooms.create(name, agents, host=host, burst_budget=burst_budget, host_compacts=host_compacts)

    def room_speaker(
        self, room_id: int, text: str, explicit: str | None = None, default: str | None = None
    ) -> str | None:
        """Which agent answers a person's message in a room (explicit, mention, host, first, default)."""
        return self.rooms.speaker(room_id, text, explicit=explicit, default=default)

    async def compact(self, session_id: int, by: str = "system") -> Entry:
        """Summarize the context since the last Summary into a new Summary entry."""
        return await self.compaction.compact(session_id, by=by)

    # --------------------------------------------- the kernel's tools (see kernel/)
    def add_kernel(self, namespace: Any) -> Any:
        """Offer a namespace to agents as the ``kernel`` tool server (``kernel__variables``,
        ``kernel__describe``, ``kernel__query``, ``kernel__cells``, ``kernel__run``).

        ``namespace``: a dict (``globals()``: code runs on the loop's thread), or a
        ``CodeHost`` (``%load_ext chaz_nb`` passes the notebook's). Returns the ``KernelTools``;
        a second call replaces the first's tools."""
        from .kernel import KernelTools, PlainHost

        host = namespace if hasattr(namespace, "execute") and hasattr(namespace, "namespace") else PlainHost(namespace)
        if self.kernel is not None:
            self.kernel.uninstall(self.tools)
            self.kernel.undo_book.release()
        self.kernel = KernelTools(host)
        self.kernel.produced = self.cells.produced
        self.kernel.install(self.tools)
        if self._undo is None:  # with the first kernel: only kernel__run reads the call's id
            from .kernel.undo_book import UndoCalls

            self._undo = self.add_part(UndoCalls())
        self._undo.books.append(self.kernel.undo_book)
        return self.kernel

    def undo(self, session_id: int | None, tool_call_id: str | None = None, *, partial: bool = False,
             force: bool = False, by: str = "user", cell: str = "mark") -> UndoOutcome:
        """Undo a ``kernel__run`` call (None: the session's last one that ran): put back the
        variables it created, rebound or deleted, and write the undo into the session (an Ack
        the ``variable_changes`` view reads). ``UndoRefused`` (one line, nothing changed) says
        why not; ``partial`` goes on past what cannot be undone, ``force`` puts back variables
        changed since; ``cell`` (``mark`` or ``remove``) says what becomes of the notebook cell made
        for the call. Runs on the kernel's thread (a magic), as the code it undoes did."""
        from .kernel.undo import undo_call

        if self.kernel is None:
            raise UndoRefused("no kernel tools here: nothing kernel__run changed can be undone")
        return undo_call(self.kernel, self.store, session_id, tool_call_id, partial=partial, force=force, by=by,
                         cell=cell)

    def release_undo(self, session_id: int | None = None) -> int:
        """Free the before-state undo keeps for a session's calls (None: every session's);
        returns how many calls can no longer be undone."""
        return self.kernel.undo_book.release(session_id) if self.kernel is not None else 0

    def undone_calls(self, session_id: int) -> dict[str, Entry]:
        """The session's undone ``kernel__run`` calls: tool call id -> the undo's Ack (the
        entry the views and a notebook cell of that call read)."""
        from .kernel.undo import undone_calls

        return undone_calls(self.store, session_id)

    # ------------------------------------------------------ MCP servers (see mcp.py)
    def add_mcp_server(self, name: str, command: list[str] | None = None, url: str | None = None,
                       **options: Any) -> McpServer:
        """Connect to an MCP server in the background (``command=[...]`` stdio, or ``url=``).

        Options: ``env``, ``headers`` (a URL server's, e.g. Authorization; values never
        shown), ``risk``, ``approval``, ``tool_approval``, ``timeout``, ``start_timeout``,
        ``sensitive_params``, ``cwd``. Its tools join as ``NAME__TOOL``
        when it is ready; ``await server.mcp.wait_settled(NAME)`` waits for that.
        """
        return self.mcp.add(name, command, url, **options)

    async def remove_mcp_server(self, name: str) -> None:
        """Stop an MCP server: its tools leave the registry, its process ends."""
        task = self.mcp.remove(name)
        if task is not None:
            await asyncio.wait([task], timeout=15)

    def mcp_servers(self) -> list[dict[str, Any]]:
        """Each MCP server's name, state (starting/ready/failed/stopped), reason and tools."""
        return self.mcp.status()
