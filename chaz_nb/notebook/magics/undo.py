"""``%chaz undo [TOOL_CALL]``: undo an agent's ``kernel__run`` step (``Server.undo``).

The variables the call created, rebound or deleted are put back as they were before it ran
(the very objects: undo keeps references, never copies), and the undo is written into the
call's session, where ``variable_changes`` lists it. Every refusal is one line and changes
nothing: what cannot be undone (``--partial`` goes on without it), variables changed since
(``--force`` puts them back anyway, ``--partial`` leaves them), a call already undone, unknown,
not a ``kernel__run``, or whose before-state is gone (a kernel restart, an older call).
"""

from __future__ import annotations

from IPython.core.error import UsageError

from ...errors import ServerError, StoreError
from .args import CommandParser, HelpShown, split_words, usage_of
from .host import MagicsHost
from .turns import parse_session


def _undo_parser() -> CommandParser:
    p = CommandParser(prog="undo")
    p.add_argument("tool_call", nargs="?", default=None, metavar="TOOL_CALL",
                   help="the kernel__run call's id (default: the last one that ran in the session)")
    p.add_argument("--session", metavar="SESSION", default="",
                   help="the session (an id or @NAME; default: the last one here)")
    p.add_argument("--partial", action="store_true",
                   help="put back what can be; leave what cannot (changed in place, files, network, imports)")
    p.add_argument("--force", action="store_true",
                   help="put back variables changed since the call too (their later values are dropped)")
    p.add_argument("--release", action="store_true",
                   help="free the before-state kept for the session's calls (they can no longer be undone)")
    p.usage = "%chaz " + usage_of(p)
    return p


UNDO_USAGE = "usage: %chaz " + usage_of(_undo_parser())


class UndoCommands(MagicsHost):
    """Mixin of ChazMagics: ``_cmd_undo``."""

    def _cmd_undo(self, rest: str) -> None:
        state = self.state
        server = state.server
        parser = _undo_parser()
        try:
            args = parser.parse_args(split_words(rest, parser.usage))
        except HelpShown:
            return
        if args.release:
            if args.tool_call or args.partial or args.force:
                raise UsageError(f"%chaz undo --release takes only --session; {UNDO_USAGE}")
            released = parse_session(server, args.session, state.last_session, "undo")
            freed = server.release_undo(released)
            print(f"session {released}: released the before-state of {freed} kernel__run call(s)")
            return
        session: int | None = None
        if args.session or args.tool_call is None:
            session = parse_session(server, args.session, state.last_session, "undo")
        elif state.last_session is not None:
            session = state.last_session  # preferred when the call id is in several sessions
        try:
            outcome = server.undo(session, args.tool_call, partial=args.partial, force=args.force, by="user")
        except (StoreError, ServerError) as exc:  # UndoRefused: one line, nothing was changed
            raise UsageError(f"%chaz undo: {exc}") from None
        print(outcome.describe())
