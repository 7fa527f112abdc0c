"""The PostgreSQL form of the store's schema: the same migrations (same names, same
``_chaz_migrations`` record), tables and audit views (same columns) as the DuckDB ones.

DuckDB's JSON functions that the server's own SQL uses (``json_extract_string(payload,
'$.key')``, ``json_extract``) exist here as SQL functions of the same name, so that SQL runs on
both stores unchanged, and ``%chaz sql`` queries written for one mostly run on the other. The
audit views come from ``core/auditsql.py``, written once for both dialects (here: ``->>``, the
``chaz_try_*`` casts that yield NULL on bad input, ``extract(epoch ...)``);
``tests/test_pgstore.py`` checks they have DuckDB's columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .auditsql import POSTGRES

PgMigrationFn = Callable[[Any], None]

#: DuckDB functions the server's SQL uses, and TRY_CAST's behaviour (NULL, not an error)
FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION json_extract_string(j json, path text) RETURNS text
LANGUAGE sql IMMUTABLE AS $f$ SELECT j #>> string_to_array(regexp_replace(path, '^\$\.?', ''), '.') $f$;
CREATE OR REPLACE FUNCTION json_extract(j json, path text) RETURNS json
LANGUAGE sql IMMUTABLE AS $f$ SELECT j #> string_to_array(regexp_replace(path, '^\$\.?', ''), '.') $f$;
CREATE OR REPLACE FUNCTION chaz_try_bigint(t text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN RETURN t::numeric::bigint; EXCEPTION WHEN others THEN RETURN NULL; END $f$;
CREATE OR REPLACE FUNCTION chaz_try_double(t text) RETURNS double precision LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN RETURN t::double precision; EXCEPTION WHEN others THEN RETURN NULL; END $f$;
CREATE OR REPLACE FUNCTION chaz_try_bool(t text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN RETURN t::boolean; EXCEPTION WHEN others THEN RETURN NULL; END $f$;
"""


@dataclass(frozen=True)
class PgMigration:
    name: str
    apply: PgMigrationFn


def _m001(cur: Any) -> None:
    cur.execute(FUNCTIONS)
    cur.execute(
        """
        CREATE TABLE sessions (
            id BIGINT PRIMARY KEY, agent VARCHAR NOT NULL, kind VARCHAR NOT NULL,
            parent_id BIGINT, depth INTEGER NOT NULL DEFAULT 0, created_at TIMESTAMP NOT NULL
        );
        CREATE TABLE entries (
            id BIGINT PRIMARY KEY, session_id BIGINT NOT NULL, seq BIGINT NOT NULL,
            entry_type VARCHAR NOT NULL, sender VARCHAR NOT NULL, content VARCHAR NOT NULL DEFAULT '',
            tool_call_id VARCHAR, tool_name VARCHAR, payload JSON, created_at TIMESTAMP NOT NULL
        );
        CREATE UNIQUE INDEX entries_session_seq ON entries (session_id, seq);
        """
    )


def _m002(cur: Any) -> None:
    cur.execute("ALTER TABLE sessions ADD COLUMN title VARCHAR; ALTER TABLE sessions ADD COLUMN metadata JSON")


def _m003(cur: Any) -> None:
    cur.execute("ALTER TABLE entries ADD COLUMN run_id BIGINT")
    cur.execute(
        "UPDATE entries SET run_id = CASE WHEN entry_type = 'Ack' AND payload->'trigger_id' IS NOT NULL"
        " THEN id ELSE chaz_try_bigint(payload->>'run_id') END"
    )
    # PostgreSQL has no zone maps: the views filter on the type and join on the run.
    cur.execute("CREATE INDEX entries_run ON entries (run_id); CREATE INDEX entries_type ON entries (entry_type)")
    create_audit_views(cur)


def _m004(cur: Any) -> None:
    cur.execute(
        """
        CREATE TABLE schedules (
            id BIGINT PRIMARY KEY, agent VARCHAR NOT NULL, trigger VARCHAR NOT NULL, kind VARCHAR NOT NULL,
            prompt VARCHAR NOT NULL, session_id BIGINT, enabled BOOLEAN NOT NULL DEFAULT true,
            consecutive_failures INTEGER NOT NULL DEFAULT 0, max_failures INTEGER NOT NULL DEFAULT 3,
            expires_at TIMESTAMP, max_fires INTEGER, fire_count INTEGER NOT NULL DEFAULT 0,
            next_fire_at TIMESTAMP, last_fired_at TIMESTAMP, disabled_reason VARCHAR,
            created_by VARCHAR NOT NULL DEFAULT 'user', created_at TIMESTAMP NOT NULL
        );
        CREATE TABLE schedule_fires (
            id BIGINT PRIMARY KEY, schedule_id BIGINT NOT NULL, session_id BIGINT, run_id BIGINT,
            status VARCHAR NOT NULL, reason VARCHAR, prompt_tokens BIGINT, completion_tokens BIGINT,
            cost_usd DOUBLE PRECISION, scheduled_for TIMESTAMP, started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP
        );
        """
    )


def _m005(cur: Any) -> None:
    cur.execute("ALTER TABLE sessions ADD COLUMN ceiling JSON; ALTER TABLE schedules ADD COLUMN ceiling JSON")


def _m006(cur: Any) -> None:
    create_audit_views(cur)


def _m007(cur: Any) -> None:
    create_audit_views(cur)  # runs.status 'cancelled'


def _m008(cur: Any) -> None:
    create_audit_views(cur)  # tool_calls.mcp_server


def _m009(cur: Any) -> None:
    # context_window (chaz_nb/core/window.py): a session's latest Summary is one index probe,
    # whatever the session's length (entries_session_seq serves the newest-first reads)
    cur.execute("CREATE INDEX entries_session_type_seq ON entries (session_id, entry_type, seq)")


def _m011(cur: Any) -> None:
    # Schedule and fire ids: several kernels create schedules and fires at once, so max(id) + 1
    # would hand two of them the same id (ScheduleTable.next_id takes nextval instead).
    for table in ("schedules", "schedule_fires"):
        cur.execute(f"CREATE SEQUENCE {table}_id_seq")
        cur.execute(f"SELECT setval('{table}_id_seq', coalesce((SELECT max(id) FROM {table}), 0) + 1, false)")


def _m_approvals_edited(cur: Any) -> None:
    create_audit_views(cur)  # approvals/tool_calls .edited and .edited_arguments


def _m_fork_branches(cur: Any) -> None:
    cur.execute("ALTER TABLE sessions ADD COLUMN forked_from BIGINT")
    cur.execute("ALTER TABLE sessions ADD COLUMN forked_at_seq BIGINT")
    cur.execute("ALTER TABLE entries ADD COLUMN copied_from BIGINT")
    create_audit_views(cur)  # runs/messages.forked_from, branches


def _m014(cur: Any) -> None:
    create_audit_views(cur)  # data_egress, variable_changes (the kernel's tools)


def _m015(cur: Any) -> None:
    # Run-tree budgets (chaz_nb/server/budgets.py), charged by every kernel with a conditional
    # UPDATE; a schedule keeps the budget of the run tree that made it.
    cur.execute(
        """
        CREATE TABLE run_budgets (
            id VARCHAR PRIMARY KEY, root_agent VARCHAR NOT NULL, max_spawns BIGINT NOT NULL,
            max_model_calls BIGINT NOT NULL, spawns BIGINT NOT NULL DEFAULT 0,
            model_calls BIGINT NOT NULL DEFAULT 0, schedules BIGINT NOT NULL DEFAULT 0, exhausted VARCHAR,
            created_at TIMESTAMP NOT NULL
        );
        ALTER TABLE schedules ADD COLUMN budget VARCHAR;
        """
    )


#: the same names as chaz_nb.core.migrations.MIGRATIONS (tests check it)
PG_MIGRATIONS: list[PgMigration] = [
    PgMigration("001_sessions_entries", _m001),
    PgMigration("002_session_title_metadata", _m002),
    PgMigration("003_audit_views", _m003),
    PgMigration("004_schedules", _m004),
    PgMigration("005_ceilings", _m005),
    PgMigration("006_runs_answers", _m006),
    PgMigration("007_runs_cancelled", _m007),
    PgMigration("008_tool_calls_mcp_server", _m008),
    PgMigration("009_context_window", _m009),
    PgMigration("011_schedule_id_sequences", _m011),
    PgMigration("012_approvals_edited_arguments", _m_approvals_edited),
    PgMigration("013_fork_branches", _m_fork_branches),
    PgMigration("014_kernel_audit_views", _m014),
    PgMigration("015_run_budgets", _m015),
]

def create_audit_views(cur: Any) -> None:
    """Create (or replace) the audit views. A changed view is dropped first: PostgreSQL's
    CREATE OR REPLACE VIEW cannot change a column's type or order. The views of the schema
    before the fork columns (``fork_branches``) are its older forms."""
    forks = bool(cur.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = 'sessions' AND column_name = 'forked_from'").fetchone()[0])
    views = POSTGRES.views(forks)
    # newest first: branches reads runs, and a view another depends on cannot be dropped
    for name, _ddl in reversed(POSTGRES.views()):
        cur.execute(f"DROP VIEW IF EXISTS {name}")
    for _name, ddl in views:
        cur.execute(ddl)


def apply_pg_migrations(con: Any, migrations: list[PgMigration] = PG_MIGRATIONS) -> int:
    """Apply the migrations not yet recorded, each with its record in one transaction.

    A transaction-level advisory lock makes two kernels that open a fresh database at once
    migrate it one after the other (the second finds the records and does nothing).
    """
    with con.transaction():
        con.execute("SELECT pg_advisory_xact_lock(7261, 0)")
        con.execute(
            "CREATE TABLE IF NOT EXISTS _chaz_migrations (name VARCHAR PRIMARY KEY, applied_at TIMESTAMP)"
        )
        applied = {row[0] for row in con.execute("SELECT name FROM _chaz_migrations").fetchall()}
        unknown = sorted(applied - {m.name for m in migrations})
        if unknown:
            raise RuntimeError(
                f"this session database was written by a newer chaz_nb (migration {unknown[-1]}); "
                "upgrade chaz_nb to open it"
            )
        for migration in migrations:
            if migration.name in applied:
                continue
            with con.transaction():  # a savepoint: the record commits with the change
                migration.apply(con)
                con.execute(
                    "INSERT INTO _chaz_migrations VALUES (%s, (now() at time zone 'utc'))", [migration.name]
                )
    return len(migrations)
