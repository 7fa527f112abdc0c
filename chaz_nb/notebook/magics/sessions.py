"""``%chaz sessions``, ``log``, ``new``, ``use`` and ``wait``: the sessions of the database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from .args import split_words, table
from .fork import forked_note
from .host import MagicsHost
from .turns import check_agent, open_view, parse_session, wait_session
from .address import AGENT_NAME
from .usage import DEFAULT_LOG_LIMIT, USE_USAGE, log_parser

if TYPE_CHECKING:  # pragma: no cover
    from ...server import Server


def _positive(value: str | None, flag: str, usage: str | None) -> int | None:
    """``--limit N`` / ``--before SEQ``: a whole number >= 1, else one UsageError line."""
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"%chaz log: {flag} takes a whole number of 1 or more, not {value!r}; usage: {usage}")
    return n



class SessionCommands(MagicsHost):
    """Mixin of ChazMagics: the sub-commands on sessions."""

    def _cmd_sessions(self, rest: str) -> None:
        if rest:
            raise UsageError("%chaz sessions takes no arguments")
        server = self.state.server
        counts = dict(server.store.execute("SELECT session_id, count(*) FROM entries GROUP BY session_id"))
        sessions = server.store.sessions()
        forks = any(s.forked_from is not None for s in sessions)
        rows = [("id", "agent", "kind", "parent", "depth", "entries", "status") + (("forked",) if forks else ())]
        for s, level in fork_tree(sessions):
            rows.append(
                (
                    "  " * level + ("└ " if level else "") + str(s.id),
                    s.agent,
                    s.kind,
                    "-" if s.parent_id is None else str(s.parent_id),
                    str(s.depth),
                    str(counts.get(s.id, 0)),
                    server.session_status(s.id),
                ) + ((forked_note(s) or "-",) if forks else ())
            )
        if len(rows) == 1:
            print("no sessions yet; talk to an agent: %chaz @assistant hello")
            return
        print(table(rows))

    def _cmd_log(self, rest: str) -> None:
        parser = log_parser()
        args = parser.parse_args(split_words(rest, parser.usage))
        limit = _positive(args.limit, "--limit", parser.usage)
        before = _positive(args.before, "--before", parser.usage)
        if args.all and (limit is not None or before is not None):
            raise UsageError(f"%chaz log: --all shows the whole log, so it takes no --limit or --before; "
                             f"usage: {parser.usage}")
        state = self.state
        session = parse_session(state.server, args.session, state.last_session, "log")
        page = None if args.all else (limit or DEFAULT_LOG_LIMIT)
        # a window that ends before the newest entry is history: it does not follow new writes
        follow = False if before is not None else None
        open_view(state, session, page=page, before_seq=before, follow=follow).display()

    def _cmd_new(self, rest: str) -> None:
        state = self.state
        m = AGENT_NAME.fullmatch(rest.strip())
        if m is None:
            raise UsageError("usage: %chaz new @NAME")
        check_agent(state.server, m.group(1))
        session = state.server.new_session(m.group(1))
        state.last_session = session
        print(f"session {session}: a fresh session with @{m.group(1)}")

    def _cmd_use(self, rest: str) -> None:
        """``%chaz use SESSION``: the session becomes its agent's current one in this kernel, so
        ``%chaz @NAME`` writes there (on PostgreSQL: wakes the kernel that serves it)."""
        from ...errors import ServerError, StoreError

        state = self.state
        words = split_words(rest, USE_USAGE)
        if len(words) != 1:
            raise UsageError(f"%chaz use: say which session; {USE_USAGE}")
        try:
            sid = int(words[0])
        except ValueError:
            raise UsageError(f"%chaz use: SESSION is a session id, not {words[0]!r}; {USE_USAGE}") from None
        try:
            info = state.server.use_session(sid)
        except StoreError:
            raise UsageError(f"%chaz use: there is no session {sid}; see %chaz sessions") from None
        except ServerError as exc:
            raise UsageError(f"%chaz use: {exc}") from None
        state.last_session = sid
        served = state.server.session_status(sid)
        where = "" if info.agent in state.server.agents else f" (@{info.agent} is not defined in this kernel)"
        print(f"session {sid} is @{info.agent}'s current session here ({served}): "
              f"%chaz @{info.agent} TEXT writes there{where}")

    def _cmd_wait(self, rest: str) -> None:

        state = self.state
        server = state.server
        session = parse_session(server, rest, state.last_session, "wait")
        status = server.session_status(session)  # (a run another kernel serves counts too)
        if status == "idle":
            print(f"session {session} is {status}")
            return
        view = open_view(state, session, after_seq=_last_trigger_seq(server, session), follow=True)
        view.display()
        wait_session(state, session, None, view)



def fork_tree(sessions: list[Any]) -> list[tuple[Any, int]]:
    """Sessions in id order, each fork right under the session it was forked from (indented)."""
    ids = {s.id for s in sessions}
    children: dict[int | None, list[Any]] = {}
    for s in sessions:
        source = s.forked_from if s.forked_from in ids else None
        children.setdefault(source, []).append(s)
    out: list[tuple[Any, int]] = []
    stack = [(s, 0) for s in reversed(children.get(None, []))]
    while stack:
        s, level = stack.pop()
        out.append((s, level))
        stack.extend((c, level + 1) for c in reversed(children.get(s.id, [])))
    return out


def _last_trigger_seq(server: Server, session: int) -> int:
    """The seq just before the session's latest user Message or Directive (0 if none)."""
    return server.last_trigger_seq(session)
