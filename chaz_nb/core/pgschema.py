"""The PostgreSQL form of the store's schema: the same migrations (same names, same
``_chaz_migrations`` record), tables and audit views (same columns) as the DuckDB ones.

DuckDB's JSON functions that the server's own SQL uses (``json_extract_string(payload,
'$.key')``, ``json_extract``) exist here as SQL functions of the same name, so that SQL runs on
both stores unchanged, and ``%chaz sql`` queries written for one mostly run on the other. The
audit views are written in PostgreSQL's dialect (``->>``, casts that yield NULL on bad input,
``extract(epoch ...)``); ``tests/test_pgstore.py`` checks they have DuckDB's columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
]

_IGNORED = """
    SELECT chaz_try_bigint(payload->>'ignored_entry') AS id
    FROM entries WHERE entry_type = 'Error' AND payload->'ignored_entry' IS NOT NULL
"""

APPROVALS_VIEW = f"""
CREATE OR REPLACE VIEW approvals AS
WITH requests AS (
    SELECT e.id AS entry_id, e.session_id, e.seq, e.payload->>'request_id' AS request_id,
           coalesce(e.payload->>'agent', e.sender) AS agent, e.run_id, e.tool_call_id,
           e.payload->>'tool_name' AS tool_name, e.payload->>'risk_level' AS risk_level,
           e.payload->'arguments_display' AS arguments_display,
           chaz_try_double(e.payload->>'timeout_secs') AS timeout_secs, e.created_at AS requested_at
    FROM entries e WHERE e.entry_type = 'ApprovalRequest'
),
decisions AS (
    SELECT d.id, d.payload->>'request_id' AS request_id, d.payload->>'decision' AS decision,
           coalesce(d.payload->>'decided_by', d.sender) AS decided_by, d.payload->>'reason' AS reason,
           d.created_at AS decided_at
    FROM entries d
    WHERE d.entry_type = 'ApprovalDecision' AND d.id NOT IN (SELECT id FROM ({_IGNORED}) i WHERE id IS NOT NULL)
),
effective AS (
    SELECT * FROM (
        SELECT *, row_number() OVER (
            PARTITION BY request_id ORDER BY (decision = 'timed_out') DESC, id) AS rank
        FROM decisions) ranked
    WHERE rank = 1
)
SELECT r.request_id, r.session_id, r.agent, r.run_id, r.tool_call_id, r.tool_name, r.risk_level,
       r.arguments_display, r.timeout_secs, r.requested_at,
       coalesce(d.decision, 'pending') AS decision, d.decided_by, d.reason, d.decided_at,
       CASE WHEN d.decided_at IS NULL THEN NULL
            ELSE extract(epoch FROM (d.decided_at - r.requested_at))::double precision * 1000.0 END AS wait_ms,
       r.entry_id
FROM requests r LEFT JOIN effective d ON d.request_id = r.request_id
"""

TOOL_CALLS_VIEW = """
CREATE OR REPLACE VIEW tool_calls AS
WITH calls AS (
    SELECT id, session_id, sender AS agent, run_id, tool_call_id, tool_name, payload->'arguments' AS arguments,
           payload->>'mcp_server' AS mcp_server, created_at
    FROM entries WHERE entry_type = 'ToolCall'
),
results AS (
    SELECT id, session_id, run_id, tool_call_id, payload->>'output' AS output,
           coalesce(chaz_try_bool(payload->>'is_error'), false) AS is_error,
           chaz_try_double(payload->>'duration_ms') AS total_ms,
           coalesce(chaz_try_double(payload->>'approval_wait_ms'), 0) AS wait_ms,
           payload->>'approval' AS approval, payload->>'decided_by' AS decided_by, created_at
    FROM entries WHERE entry_type = 'ToolResult'
)
SELECT c.session_id, c.agent, c.run_id, c.tool_call_id, c.tool_name AS tool, c.arguments,
       r.output, r.is_error,
       c.created_at AS started_at, r.created_at AS finished_at,
       greatest(r.total_ms - r.wait_ms, 0) AS duration_ms,
       coalesce(r.approval, 'none') AS approval, r.decided_by,
       c.id AS call_entry_id, r.id AS result_entry_id,
       c.mcp_server  -- the MCP server of the tool; NULL for Python tools
FROM calls c
LEFT JOIN results r
  ON r.session_id = c.session_id AND r.run_id IS NOT DISTINCT FROM c.run_id AND r.tool_call_id = c.tool_call_id
"""

RUNS_VIEW = """
CREATE OR REPLACE VIEW runs AS
WITH acks AS (
    SELECT a.id AS run_id, a.session_id, a.sender AS agent, a.created_at AS started_at,
           chaz_try_bigint(a.payload->>'trigger_id') AS trigger_entry_id,
           a.payload->>'trigger_type' AS trigger_kind, a.payload->>'schedule_id' AS schedule_id,
           a.payload->>'model' AS model, chaz_try_bigint(a.payload->>'parent_run') AS parent_run,
           chaz_try_bigint(a.payload->>'answers_count')::integer AS answers
    FROM entries a
    WHERE a.entry_type = 'Ack' AND a.run_id = a.id
),
ends AS (
    SELECT * FROM (
        SELECT run_id, entry_type, created_at, payload,
               row_number() OVER (PARTITION BY run_id ORDER BY id) AS rank
        FROM entries
        WHERE entry_type IN ('Message', 'Error', 'Ack') AND run_id IS NOT NULL AND run_id <> id) ranked
    WHERE rank = 1
),
steps_seen AS (
    SELECT run_id, count(*) AS tool_calls FROM entries WHERE entry_type = 'ToolCall' GROUP BY 1
),
unfinished AS (
    SELECT a.run_id FROM acks a WHERE a.run_id NOT IN (SELECT run_id FROM ends)
),
open_requests AS (
    SELECT DISTINCT r.run_id FROM entries r
    WHERE r.entry_type = 'ApprovalRequest' AND r.run_id IN (SELECT run_id FROM unfinished)
      AND NOT EXISTS (
        SELECT 1 FROM entries d WHERE d.entry_type = 'ApprovalDecision'
          AND d.run_id = r.run_id AND d.tool_call_id = r.tool_call_id)
)
SELECT a.session_id, a.agent, a.run_id,
       a.trigger_entry_id,
       a.trigger_kind AS trigger_type,
       a.schedule_id,
       a.started_at, e.created_at AS finished_at,
       CASE WHEN e.run_id IS NULL AND o.run_id IS NOT NULL THEN 'parked'
            WHEN e.run_id IS NULL THEN 'running'
            WHEN e.entry_type = 'Error' AND e.payload->>'interrupted' = 'true' THEN 'interrupted'
            WHEN e.entry_type = 'Error' THEN 'error'
            -- stopped by a person (%chaz stop, a Stop button): a closing Ack, not an error
            WHEN e.entry_type = 'Ack' AND e.payload->>'status' = 'cancelled' THEN 'cancelled'
            ELSE 'ok' END AS status,
       chaz_try_bigint(e.payload->>'steps')::integer AS steps,
       coalesce(s.tool_calls, 0) AS tool_calls,
       chaz_try_bigint(e.payload->>'prompt_tokens') AS prompt_tokens,
       chaz_try_bigint(e.payload->>'completion_tokens') AS completion_tokens,
       chaz_try_double(e.payload->>'cost_usd') AS cost_usd,
       CASE WHEN e.created_at IS NULL THEN NULL
            ELSE extract(epoch FROM (e.created_at - a.started_at))::double precision * 1000.0 END AS latency_ms,
       a.model, a.parent_run,
       coalesce(a.answers, CASE WHEN a.trigger_entry_id IS NULL THEN 0 ELSE 1 END) AS answers
FROM acks a
LEFT JOIN ends e ON e.run_id = a.run_id
LEFT JOIN steps_seen s ON s.run_id = a.run_id
LEFT JOIN open_requests o ON o.run_id = a.run_id
"""

MESSAGES_VIEW = """
CREATE OR REPLACE VIEW messages AS
SELECT e.session_id, s.agent AS session_agent, s.kind AS session_kind, e.seq, e.entry_type,
       e.sender, e.content, e.created_at, e.id AS entry_id
FROM entries e JOIN sessions s ON s.id = e.session_id
WHERE e.entry_type IN ('Message', 'Directive', 'Summary')
"""


def create_audit_views(cur: Any) -> None:
    """Create (or replace) the audit views. A changed view is dropped first: PostgreSQL's
    CREATE OR REPLACE VIEW cannot change a column's type or order."""
    for name, ddl in (("approvals", APPROVALS_VIEW), ("tool_calls", TOOL_CALLS_VIEW),
                      ("runs", RUNS_VIEW), ("messages", MESSAGES_VIEW)):
        cur.execute(f"DROP VIEW IF EXISTS {name}")
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
