"""``%chaz schedule``, ``%chaz room``, ``%chaz compact``: schedules, shared sessions, summaries.

Schedules (an agent woken by a trigger; see ``chaz_nb/server/schedules/``)::

    %chaz schedule add @NAME "*/5 * * * *" prompt...   [--fresh | --session ID] [--max-fires N]
    %chaz schedule add @NAME every 30s prompt...        (every/in/at triggers need no quotes)
    %chaz schedule list | pause ID | resume ID | remove ID

Rooms (a session shared by several agents; see ``chaz_nb/server/rooms.py``)::

    %chaz room NAME @a @b [--host a] [--budget N]   create a room; it becomes the current room
    %chaz room NAME                                  enter an existing room (the newest of that name)
    %chaz room                                       list the rooms
    %chaz room --leave                               leave the current room

While a room is current, ``%chaz @NAME text`` (and ``%%chaz @NAME``, ``%chaz directive
@NAME``) speaks in the room: NAME (a member) takes the turn, and the magic waits for the whole
exchange, the turns of the agents it @mentions included, until the room is quiet (or parks on
an approval). ``%chaz room --leave`` goes back to one session per agent.

Compaction::

    %chaz compact [SESSION]     summarize the context since the last Summary (at least 3 entries)
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from .args import CommandParser, HelpShown, split_words, table
from .host import MagicsHost

if TYPE_CHECKING:  # pragma: no cover
    from ...server import Room

SCHEDULE_USAGE = (
    'usage: %chaz schedule add @NAME "CRON|every 30s|at ISO|in 10m" prompt... '
    "[--fresh|--session ID] [--max-fires N] | schedule list | schedule pause ID | "
    "schedule resume ID | schedule remove ID"
)
ROOM_USAGE = "usage: %chaz room NAME @a @b ... [--host a] [--budget N] | room NAME | room | room --leave"
COMPACT_USAGE = "usage: %chaz compact [SESSION]  (SESSION: an id or @NAME; default: the last one)"

_AGENT = re.compile(r"@?([A-Za-z][A-Za-z0-9_-]*)")
#: a trigger that needs no quotes: every 30s | in 10m | at 2026-12-01T09:00 | @daily
_BARE_TRIGGER = re.compile(r"(?:(?:every|in|at)\s+\S+|@[a-z]+)(?=\s|$)", re.IGNORECASE)
_QUOTED = re.compile(r"""(?:"([^"]*)"|'([^']*)')(?=\s|$)""")
_TRAILING_OPT = re.compile(r"(?:^|\s+)(--fresh|--session\s+\S+|--max-fires\s+\S+)\s*$")
_LEADING_OPT = re.compile(r"(--fresh|--session\s+\S+|--max-fires\s+\S+)(?:\s+|$)")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _schedule_id(text: str, what: str) -> int:
    m = re.fullmatch(r"#?(\d+)", text.strip())
    if m is None:
        raise UsageError(
            f"%chaz schedule {what}: ID is a schedule number (see %chaz schedule list), not {text.strip()!r}"
        )
    return int(m.group(1))


def parse_schedule_add(line: str) -> dict[str, Any]:
    """``@NAME TRIGGER prompt... [--fresh|--session ID] [--max-fires N]`` -> fields.

    The trigger is quoted (``"*/5 * * * *"``) or one of the bare forms ``every 30s``,
    ``in 10m``, ``at ISO``, ``@daily``; the prompt is kept verbatim. Options go before the
    trigger or at the end of the line.
    """
    where = "%chaz schedule add"
    rest = line.strip()
    options: list[str] = []
    name = None
    while rest:  # leading: options and @NAME
        m = _LEADING_OPT.match(rest)
        if m:
            options.append(m.group(1))
            rest = rest[m.end():]
            continue
        if name is None and rest.startswith("@"):
            token, _, after = rest.partition(" ")
            nm = re.fullmatch(r"@([A-Za-z][A-Za-z0-9_-]*)", token)
            if nm is None:
                raise UsageError(f"{where}: {token} is not an agent name (@ then letters, digits, _ or -)")
            name, rest = nm.group(1), after.lstrip()
            continue
        if rest.startswith("--"):
            token = rest.split()[0]
            raise UsageError(
                f"{where}: unknown or incomplete option {token}; options: --fresh, --session ID, --max-fires N"
            )
        break
    if name is None:
        raise UsageError(
            f"{where}: say which agent, e.g. {where} @assistant \"every 1h\" check the news; {SCHEDULE_USAGE}"
        )
    m = _QUOTED.match(rest)
    if m:
        trigger = m.group(1) if m.group(1) is not None else m.group(2)
    else:
        m = _BARE_TRIGGER.match(rest)
        if m is None:
            first = rest.split()[0] if rest.split() else ""
            raise UsageError(
                f"{where}: put the trigger after @{name}, quoted if it has spaces "
                f"(\"*/5 * * * *\", \"every 30s\"), got {first!r}; {SCHEDULE_USAGE}"
            )
        trigger = m.group(0)
    prompt = rest[m.end():].strip()
    while True:  # trailing options
        t = _TRAILING_OPT.search(prompt)
        if t is None:
            break
        options.insert(0, t.group(1))
        prompt = prompt[: t.start()].rstrip()
    session: int | str | None = None
    max_fires: int | None = None
    for opt in options:
        key, _, value = opt.partition(" ")
        value = value.strip()
        if key == "--fresh":
            if session is not None:
                raise UsageError(f"{where}: give one of --fresh and --session ID, not both")
            session = "fresh"
        elif key == "--session":
            if session is not None:
                raise UsageError(f"{where}: give one of --fresh and --session ID, not both")
            if not value.isdigit():
                raise UsageError(f"{where}: --session takes a session id (see %chaz sessions), not {value!r}")
            session = int(value)
        else:
            if not value.isdigit() or int(value) < 1:
                raise UsageError(f"{where}: --max-fires takes a positive number, not {value!r}")
            max_fires = int(value)
    if not prompt:
        raise UsageError(f"{where}: write the wake prompt after the trigger (what @{name} is told when it fires)")
    return {"agent": name, "trigger": trigger, "prompt": prompt, "session": session, "max_fires": max_fires}


def _room_parser() -> CommandParser:
    p = CommandParser(prog="room", usage=ROOM_USAGE[len("usage: "):])
    p.add_argument("name", nargs="?")
    p.add_argument("members", nargs="*")
    p.add_argument("--host")
    p.add_argument("--budget", type=int)
    p.add_argument("--leave", action="store_true")
    return p


def _schedule_table(schedules: list[Any]) -> str:
    rows = [("id", "agent", "trigger", "target", "state", "fired", "next fire (UTC)", "prompt")]
    for s in schedules:
        state = "enabled" if s.enabled else f"paused: {s.disabled_reason or 'paused'}"
        nxt = s.next_fire_at.isoformat(timespec="seconds") if s.enabled and s.next_fire_at else "-"
        fired = f"{s.fire_count}/{s.max_fires}" if s.max_fires else str(s.fire_count)
        target = "fresh" if s.session_id is None else f"session {s.session_id}"
        prompt = " ".join(s.prompt.split())
        prompt = prompt if len(prompt) <= 40 else prompt[:39] + "…"
        rows.append((f"#{s.id}", s.agent, s.trigger, target, state, fired, nxt, prompt))
    return table(rows)


class MultiAgentCommands(MagicsHost):
    """Mixin of ChazMagics: ``_cmd_schedule``, ``_cmd_room``, ``_cmd_compact``."""

    # ------------------------------------------------------------ schedules
    def _cmd_schedule(self, rest: str) -> None:
        action, _, args = rest.strip().partition(" ")
        args = args.strip()
        if action == "add":
            return self._schedule_add(args)
        if action in ("list", "ls", ""):
            if args:
                raise UsageError("%chaz schedule list takes no arguments")
            schedules = self.state.server.schedules.list()
            if not schedules:
                print('no schedules; add one: %chaz schedule add @assistant "every 1h" check the news')
                return None
            print(_schedule_table(schedules))
            return None
        if action in ("pause", "resume", "remove"):
            if not args or len(args.split()) != 1:
                raise UsageError(f"usage: %chaz schedule {action} ID  (see %chaz schedule list)")
            sid = _schedule_id(args, action)
            schedules = self.state.server.schedules
            try:
                if action == "remove":
                    schedules.remove(sid)
                    print(f"removed schedule #{sid}")
                else:
                    s = getattr(schedules, action)(sid)
                    what = f"schedule #{s.id} (@{s.agent} {s.trigger!r})"
                    if action == "pause":
                        print(f"paused {what}; %chaz schedule resume {s.id} resumes it")
                    else:
                        nxt = s.next_fire_at.isoformat(timespec="seconds") + "Z" if s.next_fire_at else "-"
                        print(f"resumed {what}; next fire {nxt}")
            except ValueError as exc:
                raise UsageError(f"%chaz schedule {action}: {_one_line(exc)}") from None
            return None
        raise UsageError(f"unknown %chaz schedule action {action!r}; {SCHEDULE_USAGE}")

    def _schedule_add(self, args: str) -> None:
        from ...errors import ServerError, StoreError
        from .turns import check_agent

        spec = parse_schedule_add(args)
        server = self.state.server
        check_agent(server, spec["agent"])
        try:
            s = server.schedules.add(
                spec["agent"], spec["trigger"], spec["prompt"], session=spec["session"], max_fires=spec["max_fires"]
            )
        except (ValueError, ServerError, StoreError) as exc:
            raise UsageError(f"%chaz schedule add: {_one_line(exc)}") from None
        print(f"added schedule {s.one_line()}")
        return

    # ---------------------------------------------------------------- rooms
    def _cmd_room(self, rest: str) -> None:
        from ...errors import ServerError

        state = self.state
        server = state.server
        try:
            args = _room_parser().parse_args(split_words(rest))
        except HelpShown:
            print(ROOM_USAGE)
            return None
        if args.leave:
            if args.name or args.members or args.host or args.budget is not None:
                raise UsageError("%chaz room --leave takes nothing else")
            room_id = getattr(state, "room", None)
            if room_id is None:
                print("not in a room; %chaz @NAME talks to NAME's own session")
                return None
            state.room = None
            room = server.rooms.room(room_id)
            print(f"left room {room.name if room else room_id!r}; %chaz @NAME talks to NAME's own session again")
            return None
        if args.name is None:
            if args.host or args.budget is not None:
                raise UsageError(f"%chaz room: --host and --budget need a room NAME and its agents; {ROOM_USAGE}")
            return self._room_list()
        if not args.members:
            if args.host or args.budget is not None:
                raise UsageError(f"%chaz room {args.name}: name the agents of the new room (@a @b); {ROOM_USAGE}")
            room = server.rooms.by_name(args.name)
            if room is None:
                raise UsageError(f"%chaz room: no room {args.name!r}; create it with %chaz room {args.name} @a @b")
            return self._enter_room(room)
        members = []
        for token in args.members:
            m = _AGENT.fullmatch(token)
            if m is None:
                raise UsageError(
                    f"%chaz room {args.name}: {token} is not an agent name (@ then letters, digits, _ or -)"
                )
            members.append(m.group(1))
        host = None
        if args.host is not None:
            m = _AGENT.fullmatch(args.host)
            if m is None:
                raise UsageError(f"%chaz room {args.name}: --host {args.host} is not an agent name")
            host = m.group(1)
        budget = 6 if args.budget is None else args.budget
        if budget < 1:
            raise UsageError(f"%chaz room {args.name}: --budget must be a positive number (agent messages in a row)")
        try:
            room_id = server.create_room(args.name, members, host=host, burst_budget=budget)
        except ServerError as exc:
            raise UsageError(f"%chaz room {args.name}: {_one_line(exc)}") from None
        return self._enter_room(server.rooms.get(room_id), created=True)

    def _enter_room(self, room: Room, created: bool = False) -> None:
        state = self.state
        state.room = room.id
        state.last_session = room.id
        verb = "created" if created else "entered"
        budget = f", burst budget {room.burst_budget}"
        print(
            f"{verb} {room}{budget}. %chaz @NAME text now speaks in this room "
            f"(%chaz room --leave to leave it)"
        )
        return

    def _room_list(self) -> None:
        state = self.state
        rooms = state.server.rooms.list()
        if not rooms:
            print("no rooms yet; create one: %chaz room NAME @a @b")
            return
        current = getattr(state, "room", None)
        rows = [("session", "room", "members", "host", "budget", "")]
        for r in rooms:
            rows.append((
                str(r.id), r.name, " ".join("@" + m for m in r.members),
                "@" + r.host if r.host else "-", str(r.burst_budget), "← current" if r.id == current else "",
            ))
        print(table(rows))
        if current is not None:
            print("%chaz @NAME text speaks in the current room; %chaz room --leave leaves it")
        return

    def _room_turn(self, name: str, text: str, *, wait: bool, directive: bool) -> bool:
        """Speak in the current room, if there is one (called by ChazMagics._turn).

        Returns False when no room is current (the caller then talks to NAME's own session).
        """
        from ...errors import ServerError
        from ..controller import origin
        from .turns import check_agent, open_view, wait_session

        state = self.state
        room_id = getattr(state, "room", None)
        if room_id is None:
            return False
        server = state.server
        room = server.rooms.room(room_id)
        if room is None:  # the database changed under us (config db=...)
            state.room = None
            return False
        check_agent(server, name)
        if not text.strip():
            raise UsageError(f"%chaz: nothing to say to @{name} in room {room.name!r}")
        try:
            speaker = server.room_speaker(room_id, text, explicit=name)
        except ServerError as exc:
            raise UsageError(f"{_one_line(exc)} (%chaz room --leave to talk to @{name} alone)") from None
        latest = server.store.latest(room_id)
        view = open_view(state, room_id, after_seq=latest.seq if latest else 0, follow=True,
                         title=f"room {room.name}")
        # the room's one order (rooms.Rooms.answerers): @NAME answers; the origin is which cell wrote it
        server.rooms.say(room_id, text, explicit=speaker, directive=directive,
                         payload={"origin": origin(state.shell)})
        state.last_session = room_id
        view.flush()
        view.display()
        if wait:
            # the whole exchange: the turns of the agents the replies @mention included
            wait_session(state, room_id, None, view)
        return True

    # ----------------------------------------------------------- compaction
    def _cmd_compact(self, rest: str) -> None:
        from ...errors import CompactionError, WaitInterrupted
        from ..kernel_loop import wait_run
        from .turns import parse_session

        state = self.state
        server = state.server
        if len(rest.split()) > 1:
            raise UsageError(COMPACT_USAGE)
        session = parse_session(server, rest, state.last_session, "compact")
        if server.is_busy(session):
            raise UsageError(
                f"%chaz compact: session {session} is {server.session_status(session)}; "
                f"compact it once the run is over (%chaz wait {session})"
            )
        loop = state.loop
        task = loop.create_task(server.compact(session, by="user"), name=f"chaz-compact-{session}")
        try:
            outcome = wait_run(is_done=task.done, is_parked=lambda: False, future=task, loop=loop)
        except CompactionError as exc:
            raise UsageError(f"%chaz compact: {_one_line(exc)}") from None
        if outcome.state == "interrupted":
            raise WaitInterrupted(
                f"stopped waiting: the compaction of session {session} goes on; "
                f"%chaz log {session} shows its Summary when it is written"
            )
        summary = outcome.result
        if summary is None:
            raise UsageError(f"%chaz compact: the compaction of session {session} was cancelled")
        p = summary.payload or {}
        print(
            f"session {session}: {p.get('entries', '?')} messages "
            f"(entries #{p.get('from_seq', '?')}–#{p.get('to_seq', '?')}) "
            f"summarized in entry #{summary.seq}; later runs start from this Summary "
            f"(older entries stay in the log)"
        )
        print(summary.content)
        return
