"""The reader side of a PostgreSQL store: where ``%chaz sql`` and ``store.read`` run SQL.

What the database itself enforces, whatever the statement check (``pgsqlcheck``) let through:

- **One statement per protocol message.** A statement goes out as Parse/Bind/Execute (the
  extended protocol: psycopg's ``stream``, or ``execute`` with parameters), and PostgreSQL
  refuses a Parse of several statements; the simple query protocol, which runs every
  statement of a string, is used for this module's own fixed ``SET``\\ s only.
- **A READ ONLY transaction** for each statement, rolled back when it is done.
- **Settings that cannot leak.** Before each statement the connection is set afresh
  (``standard_conforming_strings = on``, as the check parses strings; a statement timeout;
  read-only transactions; the reader role), and after it ``DISCARD ALL`` resets whatever the
  statement changed (settings, prepared statements, ``LISTEN``\\ s, session advisory locks).
- **A role that can only read.** With ``CHAZ_DB_READER`` (a URL) the statements run as that
  URL's role. Without it the store creates, where its role may (``CREATEROLE`` or superuser),
  the role ``chaz_nb_reader`` (``NOLOGIN``, ``SELECT`` on the store's tables and views, nothing
  else granted) and runs each statement after ``SET ROLE chaz_nb_reader``. Either way
  ``ReadRun.can_write`` says whether the role the statements ran as may write ``entries``:
  ``%chaz sql`` says so in its first line.

What no role can take away: functions PostgreSQL grants to ``PUBLIC`` (``pg_notify``,
advisory locks, ``pg_sleep``, ``set_config``) stay callable by every role unless an
administrator revokes them from ``PUBLIC`` (docs/guide/postgresql.md); the statement check refuses them.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from ..errors import SQLRefused

log = logging.getLogger(__name__)

#: the role the store creates (where it may) for ``%chaz sql`` when no CHAZ_DB_READER is set
READER_ROLE = "chaz_nb_reader"
#: how long one statement of ``%chaz sql`` may run (milliseconds)
STATEMENT_TIMEOUT_MS = 30_000
#: advisory lock key of the role set-up (kernels opening one database take turns)
_SETUP_LOCK = (7261, 3)
#: rows fetched per round trip when a statement's rows are streamed
_CHUNK = 1000


@dataclass
class ReadRun:
    """``(columns, rows, total)`` per statement, and who ran them."""

    results: list[tuple[list[str], list[tuple], int]]
    role: str
    can_write: bool


def connect(url: str) -> psycopg.Connection:
    """An autocommit connection that reads json as text, as DuckDB gives it (stored text kept)."""
    con = psycopg.connect(url, autocommit=True)
    con.adapters.register_loader("json", TextLoader)
    con.prepare_threshold = None  # no server-side prepared statements (DISCARD ALL drops them)
    return con


def ensure_reader_role(url: str, create: bool = True) -> str | None:
    """``READER_ROLE``, set up on the store at ``url``: created and granted SELECT on the
    current schema's tables and views (``create``), this role made a member of it. None where
    this role may not (no ``CREATEROLE``, tables owned by another role): the caller warns."""
    try:
        with connect(url) as con:
            for attempt in range(3):  # concurrent GRANTs on shared catalogs can collide
                try:
                    with con.transaction():
                        _set_up(con, create)
                    break
                except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedObject):
                    return None
                except psycopg.Error as exc:
                    if attempt == 2:
                        log.info("cannot set up the reader role %s: %s", READER_ROLE, exc)
                        return None
            usable = con.execute(
                "SELECT pg_has_role(current_user, %s, 'MEMBER')"
                " AND has_table_privilege(%s, to_regclass('entries'), 'SELECT')",
                [READER_ROLE, READER_ROLE],
            ).fetchone()
            return READER_ROLE if usable and usable[0] else None
    except psycopg.Error as exc:
        log.info("cannot set up the reader role %s: %s", READER_ROLE, exc)
        return None


def _set_up(con: psycopg.Connection, create: bool) -> None:
    con.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(_SETUP_LOCK))
    role = sql.Identifier(READER_ROLE)
    exists = con.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [READER_ROLE]).fetchone()
    if not create:
        if not exists:
            raise psycopg.errors.UndefinedObject(f"no role {READER_ROLE}")
        return
    if not exists:
        con.execute(sql.SQL("CREATE ROLE {} NOLOGIN NOINHERIT").format(role))
    row = con.execute("SELECT current_schema()").fetchone()
    schema = sql.Identifier(row[0] if row and row[0] else "public")
    con.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role))
    con.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(schema, role))
    # tables and views a later migration of this role creates are readable too
    con.execute(sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA {} GRANT SELECT ON TABLES TO {}").format(schema, role))
    member = con.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", [READER_ROLE]).fetchone()
    if not (member and member[0]):
        con.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(role))


def _prime(con: psycopg.Connection, role: str | None, timeout_ms: int) -> None:
    """Set the session up for one statement (our own fixed SQL: one simple-protocol message)."""
    steps = [
        sql.SQL("SET standard_conforming_strings = on"),
        sql.SQL("SET default_transaction_read_only = on"),
        sql.SQL("SET statement_timeout = {}").format(sql.Literal(int(timeout_ms))),
        sql.SQL("SET idle_in_transaction_session_timeout = {}").format(sql.Literal(int(timeout_ms))),
    ]
    if role is not None:
        steps.append(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    con.execute(sql.SQL("; ").join(steps))


def _run_one(con: psycopg.Connection, statement: str, params: Sequence[object]) -> tuple[list[str], list[tuple]]:
    cur = con.cursor()
    if params:  # Parse/Bind/Execute with the values bound
        cur.execute(statement, list(params))
        rows = cur.fetchall() if cur.description else []
    else:  # no parameters: stream() still sends Parse/Bind/Execute (execute() would not)
        rows = list(cur.stream(statement, size=_CHUNK if psycopg.capabilities.has_stream_chunked() else 1))
    return [d.name for d in cur.description or []], rows


def _refuse_shadowed(con: psycopg.Connection, names: Collection[str]) -> None:
    row = con.execute(
        "SELECT n.nspname::text, p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE p.proname = ANY(%s) AND n.nspname <> 'pg_catalog' AND n.nspname = ANY(current_schemas(false))"
        " ORDER BY 2 LIMIT 1", [sorted(names)]).fetchone()
    if row:
        what = f"{row[0]}.{row[1]}()"
        exc = SQLRefused(f"%chaz sql is read-only: {what} is refused (the schema defines its own {row[1]}, which "
                         f"PostgreSQL may call instead of its own); write pg_catalog.{row[1]}(...)")
        exc.what = what
        raise exc


def run_read_only(
    url: str,
    statements: Sequence[str],
    params: Sequence[object] | None = None,
    *,
    role: str | None = None,
    max_rows: int | None = None,
    timeout_ms: int | None = None,
    unqualified: Collection[str] = (),
) -> ReadRun:
    """Each statement on its own: primed session, READ ONLY transaction, DISCARD ALL after.

    ``params`` go with the last statement (already in psycopg's ``%s`` style). ``unqualified``:
    functions the statements call by bare name; SQLRefused when a schema on the search path
    other than ``pg_catalog`` has one of that name (its overload could be called instead)."""
    results: list[tuple[list[str], list[tuple], int]] = []
    who, can_write = "", False
    timeout_ms = STATEMENT_TIMEOUT_MS if timeout_ms is None else timeout_ms
    with connect(url) as con:
        for i, statement in enumerate(statements):
            _prime(con, role, timeout_ms)
            if i == 0:
                row = con.execute(
                    "SELECT current_user::text, coalesce(has_table_privilege(to_regclass('entries'),"
                    " 'INSERT, UPDATE, DELETE, TRUNCATE'), false)").fetchone()
                who, can_write = (str(row[0]), bool(row[1])) if row else ("", False)
                if unqualified:
                    _refuse_shadowed(con, unqualified)
            args = list(params or []) if i == len(statements) - 1 else []
            with con.transaction(force_rollback=True):
                con.execute("SET TRANSACTION READ ONLY")
                columns, rows = _run_one(con, statement, args)
            con.execute("DISCARD ALL")  # whatever the statement changed in the session is gone
            total = len(rows)
            results.append((columns, rows[:max_rows] if max_rows is not None else rows, total))
    return ReadRun(results, who, can_write)
