"""Shared sessions (rooms): several agents in one session, mention-gated turns.

A room is a session of kind ``room`` whose metadata lists its member agents, an optional host
and a burst budget. Every Message or Directive written to a room is routed here instead of to
the session's single agent:

- a person's Message (or any Directive) is answered in one agreed order, held by
  ``Rooms.answerers`` and used by every path (``%chaz @NAME`` in a room, ``Server.post`` /
  ``Server.send`` to a room session, ``Rooms.say``): the explicit names (the magic's
  ``@NAME``, the payload's ``to``), else every member it @mentions (first mention first, one
  turn each, as in a group chat), else the room's host, else the first member, else the
  default agent (the room session's own agent; ``default=`` overrides it). So a person's
  Message is always answered while the room has an agent to answer it;
- an agent's Message starts a turn for each other member it @mentions (``@name``,
  case-insensitive, attached agents only, never the sender), and for nobody when it
  mentions nobody (replies do not fall back to the host: that would loop);
- loop guard: every agent turn of a burst counts toward the room's burst budget, one per
  woken member, so a reply that mentions N members uses N of it. A person's Message or a
  Directive starts a new burst (counting the turns already queued after it). When the budget
  is used up, agent-to-agent wakes stop and an Error entry from ``system`` names who was not
  woken; the count lives in memory and, after a restart, starts from the trailing agent
  Messages of the log;
- a mention (or an explicit ``to``) of a name that is not a member is shown as an Error
  entry, not dropped silently;
- the room's Summary is every member's context boundary, so only a person compacts a room
  (``%chaz compact``): a member's ``compact`` tool is refused, unless the room was made with
  ``host_compacts=True`` and the member is its host.

On a shared store (PostgreSQL, several kernels) a room is served like any session: the
kernel that holds its lease (``store.claim``) routes its entries and runs its turns; the others
leave them alone, so every woken member takes one turn across kernels.

Turns in a room run one at a time, in order (one run per room, like turns in a chat room):
an agent's turn reads the transcript as it is when the turn starts, so a later turn sees the
replies of the earlier ones; a wake of an agent whose turn is still queued joins that turn
(its Ack's ``answers`` lists every entry it answers). Each agent's context is the room
transcript with the other agents' messages as user-role messages labelled ``[@name]``; with
two or more members, its system prompt gets a note naming the others and the @mention
convention.

``send_message`` (a tool) lets an agent write a Message or Directive to another session it
has access to: sessions it owns, their child sessions, and rooms it is a member of.
"""

from __future__ import annotations

import asyncio
import builtins
import re
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from collections.abc import Iterable

from .agents import Agent
from ..core.entries import Entry, EntryType, json_str
from .invocation import Invocation
from ..core.store import SharedSessions, StoreError
from ..engine.tools import ToolError, ToolRegistry, tool
from ..errors import ServerError
from .ceiling import written_by_run
from .ports import Part, current_run

if TYPE_CHECKING:  # pragma: no cover
    from .ports import ServerPort
    from .handle import RunHandle

ROOM_KIND = "room"
DEFAULT_BURST_BUDGET = 6
_MENTION = re.compile(r"(?<![\w@.])@([A-Za-z][A-Za-z0-9_-]{0,63})")


def mentions(text: str) -> list[str]:
    """The ``@names`` in ``text``, in order, each once (emails like a@b.c are not mentions)."""
    seen: list[str] = []
    for m in _MENTION.finditer(text or ""):
        name = m.group(1).rstrip("-_")
        if name and name.lower() not in (s.lower() for s in seen):
            seen.append(name)
    return seen


@dataclass
class Room:
    id: int
    name: str
    members: list[str]
    host: str | None = None
    burst_budget: int = DEFAULT_BURST_BUDGET
    #: whether the host's ``compact`` tool may write the room's Summary (no other member's may)
    host_compacts: bool = False

    def member(self, name: str) -> str | None:
        """The member called ``name`` (case-insensitive), or None."""
        for m in self.members:
            if m.lower() == name.lower():
                return m
        return None

    def metadata(self) -> dict[str, Any]:
        return {"room": self.name, "members": self.members, "host": self.host, "burst_budget": self.burst_budget,
                "host_compacts": self.host_compacts}

    def may_compact(self, agent: str) -> bool:
        """Whether member ``agent``'s ``compact`` tool may write the room's Summary."""
        return self.host_compacts and self.host is not None and agent == self.host

    def __str__(self) -> str:
        host = f", host @{self.host}" if self.host else ""
        return f"room {self.name!r} (session {self.id}): {' '.join('@' + m for m in self.members)}{host}"


@dataclass
class _Turn:
    agent: str
    trigger: Entry  # the newest entry the turn answers
    futures: list[asyncio.Future] = field(default_factory=list)
    answers: list[Entry] = field(default_factory=list)  # every entry it answers, in seq order


class Rooms(Part):
    """The rooms of a server: creation, routing of room entries to turns, the turn loop (a part)."""

    name = "rooms"

    def __init__(self, port: ServerPort) -> None:
        self.port = port
        self._cache: dict[int, Room | None] = {}
        self._turns: dict[int, deque[_Turn]] = {}
        self._loops: dict[int, asyncio.Task] = {}
        self._burst_turns: dict[int, int] = {}  # agent turns in the current burst, per room
        install(port.tools)

    # ------------------------------------------------------------- rooms
    def create(
        self, name: str, agents: Iterable[str], host: str | None = None, burst_budget: int = DEFAULT_BURST_BUDGET,
        host_compacts: bool = False,
    ) -> int:
        """Create a room session shared by ``agents``; return its session id."""
        if not isinstance(name, str) or not name.strip():
            raise ServerError("a room needs a name")
        members: list[str] = []
        for a in agents:
            agent = self._agent(str(a).lstrip("@"))
            if agent.name not in members:
                members.append(agent.name)
        if not members:
            raise ServerError(f"room {name!r} needs at least one agent")
        if host is not None:
            host = self._agent(host.lstrip("@")).name
            if host not in members:
                members.insert(0, host)
        if not isinstance(burst_budget, int) or burst_budget < 1:
            raise ServerError("burst_budget must be a positive integer")
        if host_compacts and host is None:
            raise ServerError("host_compacts needs a host: create_room(name, agents, host=NAME, host_compacts=True)")
        room = Room(0, name.strip(), members, host, burst_budget, bool(host_compacts))
        room.id = self.port.store.create_session(
            host or members[0], ROOM_KIND, title=room.name, metadata=room.metadata()
        )
        self._cache[room.id] = room
        return room.id

    def _agent(self, name: str) -> Agent:
        for defined in self.port.agents.values():
            if defined.name.lower() == name.lower():
                return defined
        return self.port.agent(name)  # ServerError naming the known agents

    def room(self, session_id: int) -> Room | None:
        """The room of a session, or None when it is not a room."""
        shared = isinstance(self.port.store, SharedSessions)
        if session_id not in self._cache or (shared and self._cache[session_id] is not None):
            # (on a shared store another kernel may attach or detach members: read them again)
            try:
                info = self.port.store.session(session_id)
            except StoreError:
                return None
            room = None
            if info.kind == ROOM_KIND:
                meta = info.metadata or {}
                members = meta.get("members")
                budget = meta.get("burst_budget")
                room = Room(
                    info.id, json_str(meta.get("room")) or info.title or f"room {info.id}",
                    [m for m in members if isinstance(m, str)] if isinstance(members, list) else [],
                    json_str(meta.get("host")),
                    int(budget) if isinstance(budget, (int, float, str)) and budget else DEFAULT_BURST_BUDGET,
                    meta.get("host_compacts") is True,
                )
            self._cache[session_id] = room
        return self._cache[session_id]

    def get(self, room_id: int) -> Room:
        room = self.room(room_id)
        if room is None:
            raise ServerError(f"session {room_id} is not a room; create one with create_room(name, agents)")
        return room

    def members(self, session_id: int) -> list[str]:
        room = self.room(session_id)
        return list(room.members) if room else []

    def list(self) -> list[Room]:
        return [r for r in (self.room(s.id) for s in self.port.store.sessions() if s.kind == ROOM_KIND) if r]

    def by_name(self, name: str) -> Room | None:
        """The newest room called ``name``."""
        found = [r for r in self.list() if r.name == name]
        return found[-1] if found else None

    def _save(self, room: Room) -> None:
        self.port.store.update_session_metadata(room.id, room.metadata())
        self._cache[room.id] = room

    def attach(self, room_id: int, agent: str) -> Room:
        room = self.get(room_id)
        name = self._agent(agent.lstrip("@")).name
        if name not in room.members:
            room.members.append(name)
            self._save(room)
        return room

    def detach(self, room_id: int, agent: str) -> Room:
        room = self.get(room_id)
        name = room.member(agent.lstrip("@"))
        if name is not None:
            room.members.remove(name)
            if room.host == name:
                room.host = None
            self._save(room)
        return room

    def set_host(self, room_id: int, agent: str | None) -> Room:
        room = self.get(room_id)
        room.host = self.attach(room_id, agent).member(agent.lstrip("@")) if agent else None
        self._save(room)
        return room

    # ---------------------------------------------------------- speaking
    def answerers(
        self,
        room: Room,
        text: str,
        explicit: Iterable[str] = (),
        sender: str | None = None,
        default: str | None = None,
    ) -> tuple[builtins.list[str], builtins.list[str]]:
        """Who answers a person's Message or a Directive, in turn order; and the unknown names.

        The one place of the agreed order: the explicit names that are members; else every
        member mentioned in ``text`` (first mention first); else the host; else the first
        member; else ``default`` (by default the room session's own agent, if defined). The
        sender never answers itself. The second list has the explicit and mentioned names
        that are not members, for the caller to report.
        """
        unknown: list[str] = []

        def pick(names: Iterable[str]) -> list[str]:
            found: list[str] = []
            for raw in names:
                name = room.member(str(raw).lstrip("@"))
                if name is None:
                    if str(raw).lstrip("@").lower() not in (u.lower() for u in unknown):
                        unknown.append(str(raw).lstrip("@"))
                elif name != sender and name not in found:
                    found.append(name)
            return found

        chosen = pick(explicit)
        mentioned = pick(mentions(text))
        if not chosen:
            chosen = mentioned
        if not chosen and room.host and room.host != sender:
            chosen = [room.host]
        if not chosen:
            chosen = [m for m in room.members if m != sender][:1]
        if not chosen:
            fallback = default if default is not None else self._default_agent(room)
            if fallback and fallback != sender:
                chosen = [fallback]
        return chosen, unknown

    def _default_agent(self, room: Room) -> str | None:
        """The room session's own agent (a room made with no host records its first member)."""
        try:
            agent = self.port.store.session(room.id).agent
        except StoreError:
            return None
        return agent if agent in self.port.agents else None

    def speaker(self, room_id: int, text: str, explicit: str | None = None, default: str | None = None) -> str | None:
        """Who answers a person's message first (see ``answerers``); an explicit non-member is an error."""
        room = self.get(room_id)
        if explicit and room.member(explicit.lstrip("@")) is None:
            raise ServerError(
                f"@{explicit.lstrip('@')} is not in room {room.name!r}; members: "
                + ", ".join("@" + m for m in room.members)
            )
        names, _ = self.answerers(room, text, [explicit] if explicit else (), default=default)
        return names[0] if names else None

    def say(
        self,
        room_id: int,
        text: str,
        explicit: str | None = None,
        sender: str = "user",
        default: str | None = None,
        *,
        directive: bool = False,
        payload: dict[str, Any] | None = None,
    ) -> RunHandle | None:
        """Write a person's Message (or a Directive) to the room; the handle of its turns.

        ``explicit`` (a member) takes the turn alone; with no explicit name the room's order
        decides (see ``answerers``). ``payload`` is merged into the entry's payload.
        """
        name = self.speaker(room_id, text, explicit=explicit, default=default)  # refuses before writing
        extra = dict(payload or {})
        if explicit:
            extra["to"] = [name]
        if default is not None:
            extra["default"] = default  # routing applies the same order to the written entry
        kind = EntryType.DIRECTIVE if directive else EntryType.MESSAGE
        return self.port.post(room_id, kind, text, sender, extra or None)

    async def wait(self, room_id: int, timeout: float | None = None) -> None:
        """Wait until the room has no turn running or queued (the whole burst)."""

        await asyncio.wait_for(self.port.wait_session(room_id), timeout)

    # ----------------------------------------------------------- routing
    def route(self, entry: Entry) -> bool:
        """Part hook (the engine asks before it starts a run): True when ``entry`` is a room's."""
        if entry.entry_type not in (EntryType.MESSAGE, EntryType.DIRECTIVE):
            return False
        room = self.room(entry.session_id)
        if room is None:
            return False
        if not self.port.serving.lease(room.id):  # one server per room (serving.py)
            return True  # another kernel serves this room; the write woke it
        self._route(room, entry)
        return True

    def _route(self, room: Room, entry: Entry) -> None:
        from_agent = entry.entry_type is EntryType.MESSAGE and entry.sender in self.port.agents
        if from_agent:
            named = mentions(entry.content)
            unknown = [n for n in named if room.member(n) is None]
            targets = [m for m in dict.fromkeys(room.member(n) for n in named) if m is not None and m != entry.sender]
        else:
            to = entry.payload.get("to")
            listed = to if isinstance(to, list) else []
            explicit = [to] if isinstance(to, str) else [t for t in listed if isinstance(t, str)]
            default = entry.payload.get("default")
            targets, unknown = self.answerers(
                room, entry.content, explicit, sender=entry.sender,
                default=default if isinstance(default, str) and default in self.port.agents else None,
            )
        if unknown:
            self._note(
                room,
                f"{', '.join('@' + n for n in unknown)} {'is' if len(unknown) == 1 else 'are'} not in this room "
                f"(members: {', '.join('@' + m for m in room.members)}); nobody was woken for "
                f"{'it' if len(unknown) == 1 else 'them'}",
                {"note": "unknown_mention", "names": unknown, "entry_id": entry.id},
            )
        # an agent's Directive (send_message) is an agent's wake too: it counts, it resets nothing
        by_agent = from_agent or written_by_run(entry.payload)
        if by_agent and targets:
            targets = self._within_budget(room, entry, targets)
        if not targets:
            return
        loop = self.port.loop()
        futures = [self._enqueue(room, name, entry, loop) for name in targets]
        if not by_agent:
            # a person's Message or Directive starts a new burst: the turns queued after it
            self._burst_turns[room.id] = len(self._turns.get(room.id, ()))
        combined = futures[0] if len(futures) == 1 else _all_done(loop, futures)
        self.port.track(entry, combined)

    def _within_budget(self, room: Room, entry: Entry, targets: builtins.list[str]) -> builtins.list[str]:
        """The targets an agent's Message may wake: each new turn counts toward the budget.

        A member whose turn is still queued joins that turn and costs nothing; every other
        woken member is one turn of the burst. The members beyond the budget are named in
        an Error entry from ``system``.
        """
        queued = {t.agent for t in self._turns.get(room.id, ())}
        used = self._burst_turns.get(room.id)
        if used is None:  # first agent wake seen by this process: count from the log
            used = self._burst(room.id)
        left = max(0, room.burst_budget - used)
        woken: list[str] = []
        held: list[str] = []
        for name in targets:
            if name in queued:
                woken.append(name)
            elif left > 0:
                woken.append(name)
                left -= 1
                used += 1
            else:
                held.append(name)
        self._burst_turns[room.id] = used
        if held:
            not_woken = ", ".join("@" + t for t in held)
            if len(woken) == 0:
                text = (
                    f"loop guard: {used} agent messages in a row reached this room's burst budget "
                    f"({room.burst_budget}); {not_woken} not woken. A message from a person resets it."
                )
            else:
                text = (
                    f"loop guard: @{entry.sender} mentions {len(targets)} members but this room's burst "
                    f"budget ({room.burst_budget}) had {len(woken)} agent turn{'s' if len(woken) != 1 else ''} "
                    f"left; {not_woken} not woken. A message from a person resets it."
                )
            self._note(
                room, text,
                {"note": "loop_guard", "burst": used, "budget": room.burst_budget,
                 "woken": woken, "not_woken": held, "entry_id": entry.id},
            )
        return woken

    def _burst(self, room_id: int) -> int:
        """Trailing agent Messages and Directives in the log (a person's entry ends the count)."""
        count = 0
        for e in reversed(self.port.store.entries(room_id, types=(EntryType.MESSAGE, EntryType.DIRECTIVE))):
            by_agent = written_by_run(e.payload) or (e.entry_type is EntryType.MESSAGE and e.sender in self.port.agents)
            if not by_agent:
                break
            count += 1
        return count

    def _note(self, room: Room, text: str, payload: dict[str, Any]) -> None:
        self.port.store.append(room.id, EntryType.ERROR, "system", text, payload=payload)

    def _enqueue(self, room: Room, agent: str, entry: Entry, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        future: asyncio.Future = loop.create_future()
        queue = self._turns.setdefault(room.id, deque())
        for turn in queue:  # a waiting turn reads the log when it starts: it answers this too
            if turn.agent == agent:
                turn.trigger = entry
                turn.futures.append(future)
                turn.answers.append(entry)
                return future
        queue.append(_Turn(agent, entry, [future], [entry]))
        if not self.port.is_busy(room.id):
            room_id = room.id
            self.port.hold_session(room_id, lambda: self._room_loop(room_id), f"chaz-room-{room_id}")
        return future

    async def _room_loop(self, room_id: int) -> None:
        queue = self._turns[room_id]
        turn: _Turn | None = None
        try:
            while queue:
                turn = queue.popleft()
                invocation = Invocation(agent=turn.agent, ack={"room": room_id, "turn": turn.agent})
                answers = sorted(turn.answers, key=lambda e: e.seq)
                outcome = await self.port.run_turn(room_id, turn.trigger, invocation, answers=answers)
                _resolve(turn.futures, outcome)
                turn = None
        except asyncio.CancelledError:
            _resolve((turn.futures if turn else []) + [f for t in queue for f in t.futures], None)
            queue.clear()
            raise

    # ----------------------------------------------------------- context
    def context_for(self, session_id: int, agent: Agent) -> tuple[str, frozenset[str]]:
        """The system prompt and the senders to label for ``agent``'s run in ``session_id``."""
        room = self.room(session_id)
        if room is None:
            return agent.system, frozenset()
        labels = (frozenset(self.port.agents) | frozenset(room.members)) - {agent.name}
        others = [m for m in room.members if m != agent.name]
        if not others:
            return agent.system, labels
        note = (
            f"You are @{agent.name} in the shared room {room.name!r} with "
            f"{', '.join('@' + o for o in others)}. Messages from the other agents start with "
            "[@name]. To ask another agent something, mention them as @name in your reply: only "
            "a mentioned agent takes a turn, so mention someone only when you want an answer."
        )
        return (f"{agent.system}\n\n{note}" if agent.system else note), labels


def _resolve(futures: list[asyncio.Future], outcome: Entry | None) -> None:
    for f in futures:
        if not f.done():
            f.set_result(outcome)


def _all_done(loop: asyncio.AbstractEventLoop, futures: list[asyncio.Future]) -> asyncio.Future:
    """A future resolved with the last outcome once every one of ``futures`` is done."""
    combined: asyncio.Future = loop.create_future()

    def check(_: Any) -> None:
        if not combined.done() and all(f.done() for f in futures):
            combined.set_result(futures[-1].result())

    for f in futures:
        f.add_done_callback(check)
    return combined


# ===================================================================== tools
def has_access(port: ServerPort, agent: str, session_id: int) -> bool:
    """Sessions an agent may write to: its own, their children, rooms it is a member of."""
    info = port.store.session(session_id)
    if info.kind == ROOM_KIND:
        room = port.part("rooms").room(session_id)
        return room is not None and agent in room.members
    if info.agent == agent:
        return True
    if info.parent_id is not None:
        try:
            parent = port.store.session(info.parent_id)
        except StoreError:
            return False
        if parent.agent == agent or (parent.kind == ROOM_KIND and agent in port.part("rooms").members(parent.id)):
            return True
    return False


def install(registry: ToolRegistry) -> None:
    """Register ``send_message``."""

    @tool  # async: it writes to the store, which stays on the kernel loop
    async def send_message(session_id: int, text: str, kind: str = "message") -> str:
        """Write a message (or a directive: a task to do) into another session you have access to.

        Args:
            session_id: the session: one of yours, a child session of yours, or a room you are in
            text: what to write; in a room, @mention the agents who should answer
            kind: "message" or "directive"
        """
        ctx = current_run.get()
        if ctx is None:
            raise ToolError("send_message can only be called by an agent during a run")
        if kind not in ("message", "directive"):
            raise ToolError('kind must be "message" or "directive"')
        if not text.strip():
            raise ToolError("send_message needs a non-empty text")
        port = ctx.port
        if session_id == ctx.session_id:
            raise ToolError(f"session {session_id} is this session; say it in your reply instead")
        try:
            allowed = has_access(port, ctx.agent.name, session_id)
        except StoreError:
            raise ToolError(f"there is no session {session_id}") from None
        if not allowed:
            raise ToolError(
                f"no access to session {session_id}: you may write to your own sessions, their "
                "child sessions and rooms you are a member of"
            )
        etype = EntryType.DIRECTIVE if kind == "directive" else EntryType.MESSAGE
        handle = port.post(
            session_id, etype, text, ctx.agent.name, {"from_session": ctx.session_id, "from_run": ctx.run_id}
        )
        started = "; it started a run" if handle is not None else "; it started no run"
        return f"sent a {kind} to session {session_id}{started}"

    if send_message.name not in registry:
        registry.register(send_message)
