"""Who this kernel is, and sharing a session with another person (a team's PostgreSQL store).

The database decides: a kernel acts as the PostgreSQL role it logged in as, and the store's
row-level security (``core/store/pgteam.py``) confines a team's person to the sessions they own
or that are shared with them. These functions only say it in a notebook's words; a DuckDB file
is one person's and has no roles.
"""

from __future__ import annotations

from ..core.store import Store, TeamAccess
from ..errors import ServerError, StoreError

#: what each share level lets the other person do (each includes the ones before it)
LEVEL_WORDS = {"read": "read it", "write": "read it, post to it and stop its runs",
               "approve": "read it, post to it, stop its runs and decide its approvals"}


def role_of(store: Store) -> str | None:
    """The role this kernel acts as; None on a store without roles (DuckDB)."""
    return store.role if isinstance(store, TeamAccess) else None


def whoami(store: Store) -> str:
    """One line: who this kernel acts as, and what the database lets it see."""
    if not isinstance(store, TeamAccess):
        return f"this notebook's person: {store.path} is one person's DuckDB file (no roles to act as)"
    role = store.role
    if store.confined:
        return (f"you are {role} on {store.path}: you see and write your own sessions, agents and schedules "
                "and the sessions shared with you (%chaz share SESSION @ROLE shares yours)")
    return (f"you are {role} on {store.path}: no role is confined on this store, every kernel on it "
            "sees every session (a team: docs, PostgreSQL, a team on one store)")


def share(store: Store, session_id: int, grantees: list[str], level: str) -> str:
    """Share the session with each of ``grantees`` at ``level``; the line to show."""
    if not isinstance(store, TeamAccess):
        raise ServerError("sharing needs a PostgreSQL store (CHAZ_DB=postgresql://...): a DuckDB file is one person's")
    for grantee in grantees:
        try:
            store.share(session_id, grantee, level)
        except StoreError as exc:
            raise ServerError(str(exc)) from None
    names = ", ".join("@" + g for g in grantees)
    note = "" if store.confined else " (nobody is confined on this store yet: see the team docs)"
    return f"shared session {session_id} with {names}: they may {LEVEL_WORDS[level]}{note}"


def unshare(store: Store, session_id: int, grantees: list[str]) -> str:
    """Take the session's shares with ``grantees`` back; the line to show."""
    if not isinstance(store, TeamAccess):
        raise ServerError("sharing needs a PostgreSQL store (CHAZ_DB=postgresql://...): a DuckDB file is one person's")
    gone: list[str] = []
    kept: list[str] = []
    for grantee in grantees:
        try:
            (gone if store.unshare(session_id, grantee) else kept).append("@" + grantee)
        except StoreError as exc:
            raise ServerError(str(exc)) from None
    line = f"session {session_id} is no longer shared with {', '.join(gone)}" if gone else ""
    if kept:
        line += ("; " if line else "") + f"session {session_id} was not shared with {', '.join(kept)}"
    return line


def shares(store: Store, session_id: int) -> list[tuple[str, str]]:
    """``(role, level)`` of the session's shares this kernel may see."""
    return store.shares(session_id) if isinstance(store, TeamAccess) else []
