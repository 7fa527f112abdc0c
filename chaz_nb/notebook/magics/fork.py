"""``%chaz fork``, ``%chaz replay`` and ``%chaz compare``: branches of a session (server/fork.py).

``%chaz fork SESSION [--at SEQ] ...`` prints the confirmation line (where the branch comes
from, its agent, how its tools run) and, with ``--say`` or ``--rerun``, follows the branch's
run as a turn does. ``%chaz replay SESSION`` re-runs every trigger of a session in a new branch
and shows it; ``%chaz compare A B`` shows two branches side by side from their fork point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from ...errors import ServerError, StoreError
from .args import CommandParser, HelpShown, split_words, usage_of
from .host import MagicsHost
from .turns import open_view, parse_session, wait_session

if TYPE_CHECKING:  # pragma: no cover
    from ...server import SessionInfo


def _fork_parser() -> CommandParser:
    p = CommandParser(prog="fork")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--at", metavar="SEQ", help="copy the entries up to this seq (default: the end)")
    p.add_argument("--agent", metavar="NAME", help="the branch's agent (default: the session's)")
    p.add_argument("--model", metavar="M", help="another model: a new definition NAME@M")
    p.add_argument("--system", metavar="TEXT", help="another system prompt: a new definition")
    p.add_argument("--api-base", dest="api_base", metavar="URL",
                   help="another model server (a local model's URL): a new definition")
    p.add_argument("--say", metavar="TEXT", help="write a new Message after the fork point")
    p.add_argument("--rerun", action="store_true", help="run the last trigger at or before SEQ again")
    p.add_argument("--replay", metavar="recorded|live", default="recorded",
                   help="recorded: tool calls get the source's outputs, nothing runs (default); live: tools run")
    p.usage = "%chaz " + usage_of(p)
    return p


def _replay_parser() -> CommandParser:
    p = CommandParser(prog="replay")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--model", metavar="M", help="another model: a new definition NAME@M")
    p.add_argument("--agent", metavar="NAME", help="the agent that replays it (default: the session's)")
    p.add_argument("--system", metavar="TEXT", help="another system prompt: a new definition")
    p.add_argument("--api-base", dest="api_base", metavar="URL",
                   help="the model server (a local model's URL; default: the agent's, else the provider's)")
    p.add_argument("--replay", metavar="recorded|live", default="recorded")
    p.usage = "%chaz " + usage_of(p)
    return p


FORK_USAGE = "usage: %chaz " + usage_of(_fork_parser())
REPLAY_USAGE = "usage: %chaz " + usage_of(_replay_parser())
COMPARE_USAGE = "usage: %chaz compare A B"


def forked_note(info: SessionInfo) -> str:
    """``forked from session 3 at #12`` for a fork, else ''."""
    from ...server import forked_label

    return forked_label(info.forked_from, info.forked_at_seq) if info.forked_from is not None else ""


class ForkCommands(MagicsHost):
    """Mixin of ChazMagics: ``_cmd_fork``, ``_cmd_replay``, ``_cmd_compare``."""

    def _cmd_fork(self, rest: str) -> None:
        state = self.state
        server = state.server
        parser = _fork_parser()
        try:
            args = parser.parse_args(split_words(rest, parser.usage))
        except HelpShown:
            return
        session = parse_session(server, args.session, state.last_session, "fork")
        at = None
        if args.at is not None:
            try:
                at = int(args.at)
            except ValueError:
                raise UsageError(f"%chaz fork: --at takes a seq (a whole number), not {args.at!r}; "
                                 f"usage: {parser.usage}") from None
        try:
            result = server.fork_session(session, at, agent=args.agent, model=args.model, system=args.system,
                                         say=args.say, rerun=args.rerun, replay=args.replay, api_base=args.api_base)
        except (StoreError, ServerError) as exc:
            raise UsageError(f"%chaz fork: {exc}") from None
        state.last_session = result.session_id
        print(result.describe())
        if result.handle is not None:
            view = open_view(state, result.session_id, after_seq=result.at_seq, follow=True)
            view.display()
            wait_session(state, result.session_id, result.handle, view)

    def _cmd_replay(self, rest: str) -> None:
        from ..kernel_loop import run_sync

        state = self.state
        server = state.server
        parser = _replay_parser()
        try:
            args = parser.parse_args(split_words(rest, parser.usage))
        except HelpShown:
            return
        session = parse_session(server, args.session, state.last_session, "replay")
        if args.model is None and args.agent is None and args.system is None and args.api_base is None:
            raise UsageError(f"%chaz replay: say which model (--model M) or agent (--agent NAME) replays it; "
                             f"usage: {parser.usage}")
        try:
            branch = run_sync(server.replay(session, agent=args.agent, model=args.model, replay=args.replay,
                                            system=args.system, api_base=args.api_base))
        except (StoreError, ServerError) as exc:
            raise UsageError(f"%chaz replay: {exc}") from None
        state.last_session = branch
        info = server.store.session(branch)
        print(f"session {branch}: {forked_note(info)}, every trigger replayed by @{info.agent}; "
              + ("tools replayed from the recording" if args.replay == "recorded" else "tools run live"))
        open_view(state, branch).display()

    def _cmd_compare(self, rest: str) -> None:
        from ..views.compare import CompareView

        state = self.state
        server = state.server
        words = split_words(rest, COMPARE_USAGE)
        if len(words) != 2:
            raise UsageError(f"%chaz compare: give two sessions; {COMPARE_USAGE}")
        a, b = (parse_session(server, w, state.last_session, "compare") for w in words)
        CompareView(server.compare(a, b)).display()
