"""Forward-only schema migrations of the session store: one list, a body per SQL dialect.

Each ``Migration`` has a name and two bodies: ``duckdb`` (the DuckDB store) and ``postgres``
(the PostgreSQL one); both make the same tables, columns and audit views (``auditsql.py`` writes
the views once for both dialects). The table ``_chaz_migrations`` records by name which ran.
Each migration and its record are committed in one transaction, so a crash mid-upgrade
leaves the database at the previous version, never half-migrated. Never edit or reorder a
migration that has shipped: add a new one at the end, with both bodies.

On PostgreSQL, DuckDB's JSON functions that the server's own SQL uses (``json_extract_string(
payload, '$.key')``, ``json_extract``) exist as SQL functions of the same name (``FUNCTIONS``),
so that SQL runs on both stores unchanged, and ``%chaz sql`` queries written for one mostly run
on the other; the audit views use ``->>``, the ``chaz_try_*`` casts that yield NULL on bad
input and ``extract(epoch ...)`` there (``tests/test_pgstore.py`` checks they have DuckDB's
columns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from ..auditsql import POSTGRES

if TYPE_CHECKING:  # pragma: no cover - psycopg only where PostgreSQL is used
    import psycopg
    from psycopg.rows import TupleRow

    PgConnection = psycopg.Connection[TupleRow]


@dataclass(frozen=True)
class Migration:
    """One schema step: its recorded name, and its body on each database."""

    name: str
    duckdb: Callable[[duckdb.DuckDBPyConnection], None]
    postgres: Callable[[PgConnection], None]
    #: the step changes the audit views: on DuckDB ``apply_duckdb`` creates their newest form
    #: once, in the last such step it applies (a new store ran all seven before: ~20 ms each)
    views: bool = False


#: the agent book's tables (016), the same text on both databases
AGENT_TABLES = """
CREATE TABLE agent_definitions (
    name VARCHAR PRIMARY KEY,
    definition JSON NOT NULL,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
CREATE TABLE agent_sessions (
    agent VARCHAR PRIMARY KEY,
    session_id BIGINT NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
"""

# ------------------------------------------------------------------- DuckDB

def _m001_sessions_entries(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        """
        CREATE TABLE sessions (
            id BIGINT PRIMARY KEY,
            agent VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            parent_id BIGINT,
            depth INTEGER NOT NULL DEFAULT 0,
            created_at TIMESTAMP NOT NULL
        )
        """
    )
    con.execute(
        """
        CREATE TABLE entries (
            id BIGINT PRIMARY KEY,
            session_id BIGINT NOT NULL,
            seq BIGINT NOT NULL,
            entry_type VARCHAR NOT NULL,
            sender VARCHAR NOT NULL,
            content VARCHAR NOT NULL DEFAULT '',
            tool_call_id VARCHAR,
            tool_name VARCHAR,
            payload JSON,
            created_at TIMESTAMP NOT NULL
        )
        """
    )
    con.execute("CREATE UNIQUE INDEX entries_session_seq ON entries (session_id, seq)")


def _m002_session_title_metadata(con: duckdb.DuckDBPyConnection) -> None:
    # Rooms keep their members and schedules their owner in session metadata.
    con.execute("ALTER TABLE sessions ADD COLUMN title VARCHAR")
    con.execute("ALTER TABLE sessions ADD COLUMN metadata JSON")


def _m003_audit_views(con: duckdb.DuckDBPyConnection) -> None:
    # The run an entry belongs to, as a real column: the audit views join on it, and a
    # JSON extraction over a million rows costs ~40 ms a pass.
    con.execute("ALTER TABLE entries ADD COLUMN run_id BIGINT")
    con.execute(
        "UPDATE entries SET run_id = CASE WHEN entry_type = 'Ack' AND json_extract(payload, '$.trigger_id') IS NOT NULL"
        " THEN id ELSE TRY_CAST(json_extract_string(payload, '$.run_id') AS BIGINT) END"
    )
    # No index on entry_type: DuckDB's zone maps serve the views' type filters, and an ART
    # index on a nine-value column only slows every insert. The views: apply_duckdb (Migration.views).


def _m004_schedules(con: duckdb.DuckDBPyConnection) -> None:
    # Agent-owned schedules (chaz_nb/server/schedules/) and one row per fire.
    con.execute(
        """
        CREATE TABLE schedules (
            id BIGINT PRIMARY KEY,
            agent VARCHAR NOT NULL,
            trigger VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            prompt VARCHAR NOT NULL,
            session_id BIGINT,
            enabled BOOLEAN NOT NULL DEFAULT true,
            consecutive_failures INTEGER NOT NULL DEFAULT 0,
            max_failures INTEGER NOT NULL DEFAULT 3,
            expires_at TIMESTAMP,
            max_fires INTEGER,
            fire_count INTEGER NOT NULL DEFAULT 0,
            next_fire_at TIMESTAMP,
            last_fired_at TIMESTAMP,
            disabled_reason VARCHAR,
            created_by VARCHAR NOT NULL DEFAULT 'user',
            created_at TIMESTAMP NOT NULL
        )
        """
    )
    con.execute(
        """
        CREATE TABLE schedule_fires (
            id BIGINT PRIMARY KEY,
            schedule_id BIGINT NOT NULL,
            session_id BIGINT,
            run_id BIGINT,
            status VARCHAR NOT NULL,
            reason VARCHAR,
            prompt_tokens BIGINT,
            completion_tokens BIGINT,
            cost_usd DOUBLE,
            scheduled_for TIMESTAMP,
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP
        )
        """
    )


def _m005_ceilings(con: duckdb.DuckDBPyConnection) -> None:
    # A spawned session's authority ceiling (chaz_nb/ceiling.py), JSON. Its own column, not a
    # metadata key: metadata is rewritten whole by rooms and schedules, a ceiling never is.
    con.execute("ALTER TABLE sessions ADD COLUMN ceiling JSON")
    # The ceiling of the capped run that created a schedule: its fires stay under it.
    con.execute("ALTER TABLE schedules ADD COLUMN ceiling JSON")


def _m006_runs_answers(con: duckdb.DuckDBPyConnection) -> None:
    # runs.answers: how many Messages/Directives a run answers (the Ack's answers_count)
    del con  # the views: apply_duckdb (Migration.views)


def _m007_runs_cancelled(con: duckdb.DuckDBPyConnection) -> None:
    # runs.status 'cancelled': a run a person stopped ends with an Ack whose status says so
    del con  # the views: apply_duckdb (Migration.views)


def _m008_tool_calls_mcp_server(con: duckdb.DuckDBPyConnection) -> None:
    # tool_calls.mcp_server: the MCP server of each call (the ToolCall payload's mcp_server)
    del con  # the views: apply_duckdb (Migration.views)


def _m009_context_window(con: duckdb.DuckDBPyConnection) -> None:
    # context_window (chaz_nb/core/window.py) needs nothing new here: its newest-first reads
    # are seq ranges of one session, and the store keeps each session's latest Summary in
    # memory. No (session_id, entry_type, seq) index as on PostgreSQL: an ART index on it
    # would slow every insert (see 003).
    del con


def _m011_schedule_id_sequences(con: duckdb.DuckDBPyConnection) -> None:
    # PostgreSQL takes schedule and fire ids from sequences (several kernels create them at
    # once: _pg_m011). A DuckDB file has one writing process: max(id) + 1 stays right, so
    # there is nothing to change here.
    del con


def _m_approvals_edited(con: duckdb.DuckDBPyConnection) -> None:
    # approvals.edited / edited_arguments and tool_calls.edited / edited_arguments: a call a
    # person approved with edited arguments (server/approval_edits.py)
    del con  # the views: apply_duckdb (Migration.views)


def _m_fork_branches(con: duckdb.DuckDBPyConnection) -> None:
    # A fork (server/fork.py) records where it came from; each copied entry, which entry it
    # copies (core/forksql.py). The runs and messages views gain forked_from; the branches view.
    con.execute("ALTER TABLE sessions ADD COLUMN forked_from BIGINT")
    con.execute("ALTER TABLE sessions ADD COLUMN forked_at_seq BIGINT")
    con.execute("ALTER TABLE entries ADD COLUMN copied_from BIGINT")  # the views: Migration.views


def _m014_kernel_audit_views(con: duckdb.DuckDBPyConnection) -> None:
    # data_egress and variable_changes: what the kernel's tools sent, what kernel__run changed
    del con  # the views: apply_duckdb (Migration.views)


def _m015_run_budgets(con: duckdb.DuckDBPyConnection) -> None:
    # Run-tree budgets (chaz_nb/server/budgets.py): one row per budget a person's trigger (or
    # a person-made schedule's fire) opened; every run that descends from it, in any kernel,
    # charges its spawns and model calls here.
    con.execute(
        """
        CREATE TABLE run_budgets (
            id VARCHAR PRIMARY KEY,
            root_agent VARCHAR NOT NULL,
            max_spawns BIGINT NOT NULL,
            max_model_calls BIGINT NOT NULL,
            spawns BIGINT NOT NULL DEFAULT 0,
            model_calls BIGINT NOT NULL DEFAULT 0,
            schedules BIGINT NOT NULL DEFAULT 0,
            exhausted VARCHAR,
            created_at TIMESTAMP NOT NULL
        )
        """
    )
    # The budget of the run tree that made a schedule (None: a person's): its fires draw on it.
    con.execute("ALTER TABLE schedules ADD COLUMN budget VARCHAR")


def _m016_agent_definitions(con: duckdb.DuckDBPyConnection) -> None:
    # Agents defined in a notebook, kept with the sessions (server/agent_book.py): the
    # definition as JSON (no keys, no Python code: tools by name), and each agent's current
    # session, so both are back after a kernel restart.
    con.execute(AGENT_TABLES)


def _m_fork_views(con: duckdb.DuckDBPyConnection) -> None:
    # the audit views' newest form (apply_duckdb creates it): branches counts what a source did
    # after a mid-run fork point; a fork's copies are marked (copied_from) in every view
    del con  # the views: apply_duckdb (Migration.views)


# --------------------------------------------------------------- PostgreSQL

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


def _pg_m001(cur: PgConnection) -> None:
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


def _pg_m002(cur: PgConnection) -> None:
    cur.execute("ALTER TABLE sessions ADD COLUMN title VARCHAR; ALTER TABLE sessions ADD COLUMN metadata JSON")


def _pg_m003(cur: PgConnection) -> None:
    cur.execute("ALTER TABLE entries ADD COLUMN run_id BIGINT")
    cur.execute(
        "UPDATE entries SET run_id = CASE WHEN entry_type = 'Ack' AND payload->'trigger_id' IS NOT NULL"
        " THEN id ELSE chaz_try_bigint(payload->>'run_id') END"
    )
    # PostgreSQL has no zone maps: the views filter on the type and join on the run.
    cur.execute("CREATE INDEX entries_run ON entries (run_id); CREATE INDEX entries_type ON entries (entry_type)")
    create_pg_audit_views(cur)


def _pg_m004(cur: PgConnection) -> None:
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


def _pg_m005(cur: PgConnection) -> None:
    cur.execute("ALTER TABLE sessions ADD COLUMN ceiling JSON; ALTER TABLE schedules ADD COLUMN ceiling JSON")


def _pg_m006(cur: PgConnection) -> None:
    create_pg_audit_views(cur)


def _pg_m007(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # runs.status 'cancelled'


def _pg_m008(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # tool_calls.mcp_server


def _pg_m009(cur: PgConnection) -> None:
    # context_window (chaz_nb/core/window.py): a session's latest Summary is one index probe,
    # whatever the session's length (entries_session_seq serves the newest-first reads)
    cur.execute("CREATE INDEX entries_session_type_seq ON entries (session_id, entry_type, seq)")


def _pg_m011(cur: PgConnection) -> None:
    # Schedule and fire ids: several kernels create schedules and fires at once, so max(id) + 1
    # would hand two of them the same id (ScheduleTable.next_id takes nextval instead).
    for table in ("schedules", "schedule_fires"):
        cur.execute(f"CREATE SEQUENCE {table}_id_seq")
        cur.execute(f"SELECT setval('{table}_id_seq', coalesce((SELECT max(id) FROM {table}), 0) + 1, false)")


def _pg_m_approvals_edited(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # approvals/tool_calls .edited and .edited_arguments


def _pg_m_fork_branches(cur: PgConnection) -> None:
    cur.execute("ALTER TABLE sessions ADD COLUMN forked_from BIGINT")
    cur.execute("ALTER TABLE sessions ADD COLUMN forked_at_seq BIGINT")
    cur.execute("ALTER TABLE entries ADD COLUMN copied_from BIGINT")
    create_pg_audit_views(cur)  # runs/messages.forked_from, branches


def _pg_m014(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # data_egress, variable_changes (the kernel's tools)


def _m_data_egress_attachment_run(con: duckdb.DuckDBPyConnection) -> None:
    # data_egress.run_id of a --with attachment: the run that answered its Message
    del con  # the views: apply_duckdb (Migration.views)


def _pg_m_data_egress_attachment_run(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # data_egress.run_id of a --with attachment


def _m_data_egress_context(con: duckdb.DuckDBPyConnection) -> None:
    # data_egress: a run's or a compaction's context sending the notebook's data (via context,
    # compaction: server/egress.py)
    del con  # the views: apply_duckdb (Migration.views)


def _pg_m_data_egress_context(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # data_egress via context / compaction


def _m_variable_changes_undo(con: duckdb.DuckDBPyConnection) -> None:
    # variable_changes: an undo's changes (%chaz undo: an Ack with undo_of, server/kernel/undo.py)
    # and the undo_of column
    del con  # the views: apply_duckdb (Migration.views)


def _pg_m_variable_changes_undo(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # variable_changes: undo rows, undo_of


def _m_data_egress_decision(con: duckdb.DuckDBPyConnection) -> None:
    # data_egress.decision: the egress gate's decision on each send (server/egress_gate.py)
    del con  # the views: apply_duckdb (Migration.views)


def _pg_m_data_egress_decision(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # data_egress.decision


def _pg_m015(cur: PgConnection) -> None:
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


def _m_tool_calls_code_ran(con: duckdb.DuckDBPyConnection) -> None:
    # tool_calls.arguments: what the tool ran with (a person's edit); proposed_arguments: the
    # model's; code_sha256: the hash of the exact code a code call ran (core/codemask.py)
    del con  # the views: apply_duckdb (Migration.views)


def _pg_m_tool_calls_code_ran(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # tool_calls.arguments as ran, .proposed_arguments, .code_sha256


def _pg_m016(cur: PgConnection) -> None:
    # The same tables on a shared store: every kernel's agents are the store's.
    cur.execute(AGENT_TABLES)


def _pg_m_fork_views(cur: PgConnection) -> None:
    create_pg_audit_views(cur)  # branches after a mid-run fork; copies marked (copied_from)


def _m_team_roles(con: duckdb.DuckDBPyConnection) -> None:
    # who wrote an entry (runs/approvals/data_egress/messages .author): PostgreSQL's roles
    # (_pg_m_team_roles); a DuckDB file is one person's, its views say NULL
    del con  # the views: apply_duckdb (Migration.views)


def _pg_m_team_roles(cur: PgConnection) -> None:
    # A team on one store (docs/guide/postgresql.md#a-team-on-one-store, core/store/pgteam.py).
    from .pgteamsql import team_schema

    row = cur.execute("SELECT current_schema()").fetchone()
    cur.execute(team_schema(str(row[0]) if row and row[0] else "public"))
    create_pg_audit_views(cur)  # runs/data_egress/messages .author, approvals .decided_as


def _invoker_views(cur: PgConnection) -> bool:
    """Whether the server has views that read as their caller (``security_invoker``: 15 on)."""
    row = cur.execute("SELECT current_setting('server_version_num')::int >= 150000").fetchone()
    return bool(row and row[0])


def create_pg_audit_views(cur: PgConnection) -> None:
    """Create (or replace) the audit views. A changed view is dropped first: PostgreSQL's
    CREATE OR REPLACE VIEW cannot change a column's type or order. The views of the schema
    before the fork columns (``fork_branches``) are its older forms."""
    row = cur.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = 'sessions' AND column_name = 'forked_from'").fetchone()
    forks = bool(row and row[0])
    row = cur.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = 'entries' AND column_name = 'author'").fetchone()
    authors = bool(row and row[0])
    views = POSTGRES.views(forks, authors)
    # newest first: branches reads runs, and a view another depends on cannot be dropped
    for name, _ddl in reversed(POSTGRES.views()):
        cur.execute(f"DROP VIEW IF EXISTS {name}")
    for name, _ddl in views:
        cur.execute(_ddl)
        if authors and _invoker_views(cur):
            # a team's views read the tables as the person querying (their rows only: the
            # row-level security of team_roles), not as the views' owner, who sees every row
            cur.execute(f"ALTER VIEW {name} SET (security_invoker = true)")


MIGRATIONS: list[Migration] = [
    Migration("001_sessions_entries", _m001_sessions_entries, _pg_m001),
    Migration("002_session_title_metadata", _m002_session_title_metadata, _pg_m002),
    Migration("003_audit_views", _m003_audit_views, _pg_m003, views=True),
    Migration("004_schedules", _m004_schedules, _pg_m004),
    Migration("005_ceilings", _m005_ceilings, _pg_m005),
    Migration("006_runs_answers", _m006_runs_answers, _pg_m006, views=True),
    Migration("007_runs_cancelled", _m007_runs_cancelled, _pg_m007, views=True),
    Migration("008_tool_calls_mcp_server", _m008_tool_calls_mcp_server, _pg_m008, views=True),
    Migration("009_context_window", _m009_context_window, _pg_m009),
    Migration("011_schedule_id_sequences", _m011_schedule_id_sequences, _pg_m011),
    Migration("012_approvals_edited_arguments", _m_approvals_edited, _pg_m_approvals_edited, views=True),
    Migration("013_fork_branches", _m_fork_branches, _pg_m_fork_branches, views=True),
    Migration("014_kernel_audit_views", _m014_kernel_audit_views, _pg_m014, views=True),
    Migration("015_run_budgets", _m015_run_budgets, _pg_m015),
    Migration("016_agent_definitions", duckdb=_m016_agent_definitions, postgres=_pg_m016),
    Migration("017_fork_audit_views", _m_fork_views, _pg_m_fork_views, views=True),
    Migration("018_tool_calls_code_ran", _m_tool_calls_code_ran, _pg_m_tool_calls_code_ran, views=True),
    Migration("019_data_egress_attachment_run", _m_data_egress_attachment_run, _pg_m_data_egress_attachment_run,
              views=True),
    Migration("020_data_egress_context", _m_data_egress_context, _pg_m_data_egress_context, views=True),
    Migration("021_variable_changes_undo", _m_variable_changes_undo, _pg_m_variable_changes_undo, views=True),
    Migration("022_team_roles", _m_team_roles, _pg_m_team_roles, views=True),
    Migration("023_data_egress_decision", _m_data_egress_decision, _pg_m_data_egress_decision, views=True),
]


def apply_duckdb(con: duckdb.DuckDBPyConnection, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Apply the migrations not yet recorded; return the schema version (migrations applied).

    Each step commits with its record. The audit views are created (newest form) once, in the
    transaction of the last pending step that changes them (``Migration.views``): a step that
    is recorded always has its views, and a new store builds them once instead of seven times.
    """
    con.execute(
        "CREATE TABLE IF NOT EXISTS _chaz_migrations (name VARCHAR PRIMARY KEY, applied_at TIMESTAMP)"
    )
    applied = {row[0] for row in con.execute("SELECT name FROM _chaz_migrations").fetchall()}
    known = {m.name for m in migrations}
    unknown = sorted(applied - known)
    if unknown:
        raise RuntimeError(
            f"this session database was written by a newer chaz_nb (migration {unknown[-1]}); "
            "upgrade chaz_nb to open it"
        )
    pending = [m for m in migrations if m.name not in applied]
    views_in = max((i for i, m in enumerate(pending) if m.views), default=-1)
    for i, migration in enumerate(pending):
        con.execute("BEGIN TRANSACTION")
        try:
            migration.duckdb(con)
            if i == views_in:
                from ..audit import create_audit_views  # only when a step changes them

                create_audit_views(con)
            con.execute(
                "INSERT INTO _chaz_migrations VALUES (?, current_timestamp::TIMESTAMP)",
                [migration.name],
            )
            con.execute("COMMIT")
        except Exception:  # re-raised: only the migration's transaction is rolled back first
            con.execute("ROLLBACK")
            raise
    return len(migrations)


@contextmanager
def _owner_only(con: PgConnection, name: str) -> Iterator[None]:
    """A role that may not change the tables (a team's person) is told who may, in one line."""
    import psycopg

    try:
        yield
    except psycopg.errors.InsufficientPrivilege:
        from ...errors import StoreError

        raise StoreError(
            f"this store needs migration {name} and the role {con.info.user} may not make it (the tables "
            "are another role's); ask its administrator to run `python -m chaz_nb.core.store.pgteam ADMIN_URL`"
        ) from None


def apply_postgres(con: PgConnection, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Apply the migrations not yet recorded, each with its record in one transaction.

    A transaction-level advisory lock makes two kernels that open a fresh database at once
    migrate it one after the other (the second finds the records and does nothing).
    """
    with con.transaction():
        con.execute("SELECT pg_advisory_xact_lock(7261, 0)")
        row = con.execute("SELECT to_regclass('_chaz_migrations') IS NULL").fetchone()
        if row and row[0]:  # (a team's person may not create tables: the check comes first)
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
            with con.transaction(), _owner_only(con, migration.name):  # a savepoint: the record commits with it
                migration.postgres(con)
                con.execute(
                    "INSERT INTO _chaz_migrations VALUES (%s, (now() at time zone 'utc'))", [migration.name]
                )
    return len(migrations)
