"""A team on one PostgreSQL store: each person's kernel acts as the role it connects as, and
PostgreSQL's row-level security keeps each person's sessions, agents and schedules their own.

Who is who is the database's: ``session_user``, the role a kernel logged in as (``SET ROLE``,
as ``%chaz sql`` does to run as the reader role, does not change it). Migration
``022_team_roles`` (``TEAM_SCHEMA``) adds:

- ``entries.author`` (default ``session_user``; a confined person cannot write another name),
  ``owner`` of ``sessions``, ``schedules``, ``agent_definitions`` and ``agent_sessions``
  (default ``session_user``; rows older than the migration: the role that ran it);
- ``session_shares``: a session shared with a role or a group role at a level, ``read`` <
  ``write`` (post, stop) < ``approve`` (decide its approvals too);
- row-level security policies on those tables. They confine only the members of the group
  role ``chaz_nb_team`` (``TEAM_ROLE``): where no such role exists (one person's store, the
  default) every role reads and writes as before; the tables' owner is never confined (owners
  pass row-level security), which is why in a team the tables belong to a role nobody logs in
  as (``OWNER_ROLE``, ``set_up_team``).

What a person reads goes through the policies wherever it is read: the store's own SQL, the
audit views (``security_invoker``), ``%chaz sql`` (the reader role, still ``session_user``)
and a raw ``psql``. Entry and session ids stay store-wide (``chaz_last_entry_id()``: a
confined role's ``max(id)`` would see only its rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from typing import TYPE_CHECKING

from ...errors import StoreError
from .base import Row
from .migrations import MIGRATIONS, Migration, apply_postgres
from .pgteamsql import LEVELS, OWNER_ROLE, READER_ROLE, TEAM_GRANTS_SQL, TEAM_ROLE, TEAM_ROLES_SQL
from .rows import Value

if TYPE_CHECKING:  # pragma: no cover - psycopg only where PostgreSQL is used
    from psycopg import sql

_VERBS = {"read": "read", "write": "write to", "approve": "decide approvals in"}


def not_shared(session_id: int, owner: str, role: str, level: str) -> str:
    """The one line of a refusal: whose the session is, and what to ask them."""
    return (f"session {session_id} is {owner}'s and {role} may not {_VERBS.get(level, level)} it (the "
            f"database refused); ask {owner} to `%chaz share {session_id} @{role} --{level}`")


class TeamAccess:
    """Mixin of ``PgSessionStore``: who this kernel is, and what it may do with a session.

    The checks here only word a refusal early; the database's policies are what refuse."""

    role: str
    _team: bool
    #: the backend that sent the notice being handed to the ``on_notice`` callbacks
    _notice_pid: int | None = None

    def _scalar(self, query: str, params: Sequence[object] | None = None) -> Value:  # pragma: no cover
        raise NotImplementedError

    def _rows(self, query: str, params: Sequence[object] | None = None) -> list[Row]:  # pragma: no cover
        raise NotImplementedError

    def _owner_of(self, session_id: int) -> str | None:  # pragma: no cover
        raise NotImplementedError

    @property
    def team_tables(self) -> bool:
        """Whether the store has migration 021's owners and shares (every PostgreSQL store
        opened writable by this version has)."""
        return self._team

    @property
    def confined(self) -> bool:
        """Whether the database confines this role to its own and shared sessions (a team's
        person); False on one person's store."""
        return self._team and bool(self._scalar("SELECT chaz_confined()"))

    def may(self, session_id: int, level: str) -> bool:
        """Whether this role may ``level`` (read, write, approve) the session."""
        if not self._team:
            return True
        return bool(self._scalar("SELECT chaz_may(?, ?)", [int(session_id), _rank(level)]))

    def check_may(self, session_id: int, level: str) -> None:
        """A StoreError in one line (whose session, what to ask) unless ``may``."""
        if not self.may(session_id, level):
            owner = self._owner_of(session_id)
            if owner is None:
                raise StoreError(f"no session {session_id} on this store; `%chaz sessions` lists them")
            raise StoreError(not_shared(int(session_id), owner, self.role, level))

    def notice_sender_may(self, session_id: int, level: str) -> bool:
        """Whether the role that sent the notice being handled may ``level`` the session: the
        database says who sent it (the backend's login), not the payload."""
        if not self._team:
            return True
        # no sender known (not from the listener; a backend gone already): allowed only where
        # nobody is confined (chaz_role_confined(NULL) is false only without a team role)
        pid = -1 if self._notice_pid is None else int(self._notice_pid)
        return bool(self._scalar(
            "SELECT chaz_role_may((SELECT usename::text FROM pg_stat_activity WHERE pid = ?), ?, ?)",
            [pid, int(session_id), _rank(level)]))

    def share(self, session_id: int, grantee: str, level: str) -> None:
        """Share the session with ``grantee`` (a role or a group role) at ``level``; replaces
        an earlier share with them. StoreError (one line) when the database refuses."""
        if level not in LEVELS:
            raise StoreError(f"no share level {level!r}; use one of --{', --'.join(LEVELS)}")
        self._check_team()
        if not self._scalar("SELECT count(*) FROM pg_roles WHERE rolname = ?", [grantee]):
            raise StoreError(f"no role {grantee} on this database; ask the administrator to create it "
                             "(docs: PostgreSQL, a team on one store)")
        self._as_owner(session_id, "share", lambda: self._rows(
            "INSERT INTO session_shares (session_id, grantee, level) VALUES (?, ?, ?) ON CONFLICT"
            " (session_id, grantee) DO UPDATE SET level = EXCLUDED.level, granted_by = EXCLUDED.granted_by,"
            " granted_at = EXCLUDED.granted_at", [int(session_id), grantee, level]))

    def unshare(self, session_id: int, grantee: str) -> bool:
        """Take the session's share with ``grantee`` back; whether there was one."""
        self._check_team()
        rows = self._as_owner(session_id, "unshare", lambda: self._rows(
            "DELETE FROM session_shares WHERE session_id = ? AND grantee = ? RETURNING grantee",
            [int(session_id), grantee]))
        return bool(rows)

    def shares(self, session_id: int) -> list[tuple[str, str]]:
        """``(grantee, level)`` of the session's shares this role may see."""
        if not self._team:
            return []
        rows = self._rows("SELECT grantee, level FROM session_shares WHERE session_id = ? ORDER BY grantee",
                          [int(session_id)])
        return [(str(g), str(level)) for g, level in rows]

    def _check_team(self) -> None:
        if not self._team:
            raise StoreError("sharing needs the store's team tables (migration 022_team_roles); reopen it")

    def _as_owner(self, session_id: int, what: str, act: Callable[[], list[Row]]) -> list[Row]:
        import psycopg

        owner = self._owner_of(session_id)
        if owner is None:
            raise StoreError(f"no session {session_id} on this store; `%chaz sessions` lists them")
        try:
            return act()
        except psycopg.errors.InsufficientPrivilege:
            raise StoreError(f"session {session_id} is {owner}'s: only {owner} may {what} it "
                             "(the database refused)") from None


def _rank(level: str) -> int:
    return LEVELS.index(level) + 1


def member_sql(role: str) -> sql.Composed:
    """Make ``role`` (a login) a person of the team: confined, and able to run ``%chaz sql``."""
    from psycopg import sql

    name = sql.Identifier(role)
    return sql.SQL("GRANT {}, {} TO {}").format(sql.Identifier(TEAM_ROLE), sql.Identifier(READER_ROLE), name)


def set_up_team(admin_url: str, members: Iterable[str] = (), migrations: list[Migration] | None = None) -> None:
    """Run ``TEAM_ROLES_SQL``, the store's migrations as ``OWNER_ROLE``, ``TEAM_GRANTS_SQL``,
    and make each of ``members`` (existing login roles) a person of the team.

    ``admin_url``: a superuser's (or a role that may create roles and is a member of the owner
    role). Run it again after upgrading chaz_nb: a kernel of a person cannot migrate tables
    it does not own."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as con:
        con.execute(TEAM_ROLES_SQL)
        member = con.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", [OWNER_ROLE]).fetchone()
        if not (member and member[0]):
            con.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(OWNER_ROLE)))
        con.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(OWNER_ROLE)))
        apply_postgres(con, MIGRATIONS if migrations is None else migrations)
        con.execute("RESET ROLE")
        con.execute(TEAM_GRANTS_SQL)
        for role in members:
            con.execute(member_sql(role))


def main(argv: list[str] | None = None) -> int:
    """``python -m chaz_nb.core.store.pgteam ADMIN_URL [ROLE ...]``: ``set_up_team``."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m chaz_nb.core.store.pgteam ADMIN_URL [ROLE ...]", file=sys.stderr)
        return 2
    set_up_team(args[0], args[1:])
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
