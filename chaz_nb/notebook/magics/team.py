"""``%chaz whoami``, ``%chaz share`` and ``%chaz unshare``: a team on one PostgreSQL store.

Who a kernel is and what it may see is PostgreSQL's (its login role and the store's row-level
security: docs/guide/postgresql.md, "A team on one store"); these only ask the database and say
its answer, or its refusal, in one line.
"""

from __future__ import annotations

from IPython.core.error import UsageError

from ...errors import ServerError
from .host import MagicsHost
from .turns import parse_session

SHARE_USAGE = "usage: %chaz share SESSION @ROLE|@GROUP ... [--read|--write|--approve]"
UNSHARE_USAGE = "usage: %chaz unshare SESSION @ROLE|@GROUP ..."
_LEVELS = ("read", "write", "approve")


def _parse(rest: str, what: str, usage: str, levels: bool) -> tuple[str, list[str], str]:
    words = rest.split()
    flags = [w for w in words if w.startswith("--")]
    grantees = [w for w in words if w.startswith("@")]
    others = [w for w in words if not w.startswith(("--", "@"))]
    if len(others) != 1 or not grantees:
        raise UsageError(f"%chaz {what} takes one SESSION and one or more @ROLE; {usage}")
    bad = [f for f in flags if not levels or f[2:] not in _LEVELS]
    if bad or len(flags) > 1:
        raise UsageError(f"%chaz {what}: {bad[0] if bad else ' '.join(flags)} is not one level; {usage}")
    names = [g[1:] for g in grantees]
    if any(not n for n in names):
        raise UsageError(f"%chaz {what}: @ needs a role's name; {usage}")
    return others[0], names, flags[0][2:] if flags else "read"


class TeamCommands(MagicsHost):
    """Mixin of ChazMagics: ``_cmd_whoami``, ``_cmd_share``, ``_cmd_unshare``."""

    def _cmd_whoami(self, rest: str) -> None:
        from ...server import sharing

        if rest.strip():
            raise UsageError("%chaz whoami takes no arguments")
        print(sharing.whoami(self.state.server.store))

    def _cmd_share(self, rest: str) -> None:
        from ...server import sharing

        session, names, level = _parse(rest, "share", SHARE_USAGE, levels=True)
        server = self.state.server
        sid = parse_session(server, session, self.state.last_session, "share")
        try:
            print(sharing.share(server.store, sid, names, level))
        except ServerError as exc:
            raise UsageError(f"%chaz share: {exc}") from None

    def _cmd_unshare(self, rest: str) -> None:
        from ...server import sharing

        session, names, _ = _parse(rest, "unshare", UNSHARE_USAGE, levels=False)
        server = self.state.server
        sid = parse_session(server, session, self.state.last_session, "unshare")
        try:
            print(sharing.unshare(server.store, sid, names))
        except ServerError as exc:
            raise UsageError(f"%chaz unshare: {exc}") from None
