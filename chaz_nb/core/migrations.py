"""Forward-only schema migrations for the session store.

An append-only list of named functions; the table ``_chaz_migrations`` records which ran.
Each migration and its record are committed in one transaction, so a crash mid-upgrade
leaves the file at the previous version, never half-migrated. Never edit or reorder a
migration that has shipped: add a new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable, Sequence

import duckdb

MigrationFn = Callable[[duckdb.DuckDBPyConnection], None]


@dataclass(frozen=True)
class Migration:
    name: str
    apply: MigrationFn


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
    from .audit import create_audit_views

    # The run an entry belongs to, as a real column: the audit views join on it, and a
    # JSON extraction over a million rows costs ~40 ms a pass.
    con.execute("ALTER TABLE entries ADD COLUMN run_id BIGINT")
    con.execute(
        "UPDATE entries SET run_id = CASE WHEN entry_type = 'Ack' AND json_extract(payload, '$.trigger_id') IS NOT NULL"
        " THEN id ELSE TRY_CAST(json_extract_string(payload, '$.run_id') AS BIGINT) END"
    )
    # No index on entry_type: DuckDB's zone maps serve the views' type filters, and an ART
    # index on a nine-value column only slows every insert.
    create_audit_views(con)


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
    from .audit import create_audit_views

    # runs.answers: how many Messages/Directives a run answers (the Ack's answers_count)
    create_audit_views(con)


def _m007_runs_cancelled(con: duckdb.DuckDBPyConnection) -> None:
    from .audit import create_audit_views

    # runs.status 'cancelled': a run a person stopped ends with an Ack whose status says so
    create_audit_views(con)


def _m008_tool_calls_mcp_server(con: duckdb.DuckDBPyConnection) -> None:
    from .audit import create_audit_views

    # tool_calls.mcp_server: the MCP server of each call (the ToolCall payload's mcp_server)
    create_audit_views(con)


def _m009_context_window(con: duckdb.DuckDBPyConnection) -> None:
    # context_window (chaz_nb/core/window.py) needs nothing new here: its newest-first reads
    # are seq ranges of one session, and the store keeps each session's latest Summary in
    # memory. No (session_id, entry_type, seq) index as on PostgreSQL: an ART index on it
    # would slow every insert (see 003). The record keeps both back ends' migrations equal.
    del con


def _m011_schedule_id_sequences(con: duckdb.DuckDBPyConnection) -> None:
    # PostgreSQL takes schedule and fire ids from sequences (several kernels create them at
    # once; core/pgschema.py). A DuckDB file has one writing process: max(id) + 1 stays right,
    # so there is nothing to change here; the record keeps both stores' migration lists equal.
    del con


def _m_approvals_edited(con: duckdb.DuckDBPyConnection) -> None:
    from .audit import create_audit_views

    # approvals.edited / edited_arguments and tool_calls.edited / edited_arguments: a call a
    # person approved with edited arguments (server/approval_edits.py)
    create_audit_views(con)


def _m_fork_branches(con: duckdb.DuckDBPyConnection) -> None:
    from .audit import create_audit_views

    # A fork (server/fork.py) records where it came from; each copied entry, which entry it
    # copies (core/forksql.py). The runs and messages views gain forked_from; the branches view.
    con.execute("ALTER TABLE sessions ADD COLUMN forked_from BIGINT")
    con.execute("ALTER TABLE sessions ADD COLUMN forked_at_seq BIGINT")
    con.execute("ALTER TABLE entries ADD COLUMN copied_from BIGINT")
    create_audit_views(con)


def _m014_kernel_audit_views(con: duckdb.DuckDBPyConnection) -> None:
    from .audit import create_audit_views

    # data_egress and variable_changes: what the kernel's tools sent, what kernel__run changed
    create_audit_views(con)


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


MIGRATIONS: list[Migration] = [
    Migration("001_sessions_entries", _m001_sessions_entries),
    Migration("002_session_title_metadata", _m002_session_title_metadata),
    Migration("003_audit_views", _m003_audit_views),
    Migration("004_schedules", _m004_schedules),
    Migration("005_ceilings", _m005_ceilings),
    Migration("006_runs_answers", _m006_runs_answers),
    Migration("007_runs_cancelled", _m007_runs_cancelled),
    Migration("008_tool_calls_mcp_server", _m008_tool_calls_mcp_server),
    Migration("009_context_window", _m009_context_window),
    Migration("011_schedule_id_sequences", _m011_schedule_id_sequences),
    Migration("012_approvals_edited_arguments", _m_approvals_edited),
    Migration("013_fork_branches", _m_fork_branches),
    Migration("014_kernel_audit_views", _m014_kernel_audit_views),
    Migration("015_run_budgets", _m015_run_budgets),
]


def apply_migrations(con: duckdb.DuckDBPyConnection, migrations: Sequence[Migration]) -> int:
    """Apply the migrations not yet recorded; return the schema version (migrations applied)."""
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
    for migration in migrations:
        if migration.name in applied:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            migration.apply(con)
            con.execute(
                "INSERT INTO _chaz_migrations VALUES (?, current_timestamp::TIMESTAMP)",
                [migration.name],
            )
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    return len(migrations)
