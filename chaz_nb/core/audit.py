"""SQL audit views over the entries table: tool_calls, runs, approvals, messages.

The views read only what was recorded at write time (token usage and cost live in the
entries' payload), so they need no model at query time and work on any notebook's store.
They are created by a migration; a change to a view is a new migration that replaces it
(``create_audit_views`` always makes the newest form).
"""

from __future__ import annotations

import duckdb

# Decisions that the approval book ignored (an agent's, or a second one) carry an Error
# entry pointing at them; the views leave them out.
_IGNORED = """
    SELECT TRY_CAST(json_extract_string(payload, '$.ignored_entry') AS BIGINT) AS id
    FROM entries WHERE entry_type = 'Error' AND json_extract(payload, '$.ignored_entry') IS NOT NULL
"""

APPROVALS_VIEW = f"""
CREATE OR REPLACE VIEW approvals AS
WITH requests AS (
    SELECT e.id AS entry_id, e.session_id, e.seq,
           json_extract_string(e.payload, '$.request_id') AS request_id,
           coalesce(json_extract_string(e.payload, '$.agent'), e.sender) AS agent,
           e.run_id,
           e.tool_call_id,
           json_extract_string(e.payload, '$.tool_name') AS tool_name,
           json_extract_string(e.payload, '$.risk_level') AS risk_level,
           json_extract(e.payload, '$.arguments_display') AS arguments_display,
           TRY_CAST(json_extract_string(e.payload, '$.timeout_secs') AS DOUBLE) AS timeout_secs,
           e.created_at AS requested_at
    FROM entries e WHERE e.entry_type = 'ApprovalRequest'
),
decisions AS (
    SELECT d.id, json_extract_string(d.payload, '$.request_id') AS request_id,
           json_extract_string(d.payload, '$.decision') AS decision,
           coalesce(json_extract_string(d.payload, '$.decided_by'), d.sender) AS decided_by,
           json_extract_string(d.payload, '$.reason') AS reason,
           d.created_at AS decided_at
    FROM entries d
    WHERE d.entry_type = 'ApprovalDecision' AND d.id NOT IN ({_IGNORED})
),
effective AS (
    -- timed_out wins over any other decision; otherwise the first in entry order
    SELECT * FROM (
        SELECT *, row_number() OVER (
            PARTITION BY request_id ORDER BY (decision = 'timed_out') DESC, id) AS rank
        FROM decisions)
    WHERE rank = 1
)
SELECT r.request_id, r.session_id, r.agent, r.run_id, r.tool_call_id, r.tool_name, r.risk_level,
       r.arguments_display, r.timeout_secs, r.requested_at,
       coalesce(d.decision, 'pending') AS decision, d.decided_by, d.reason, d.decided_at,
       CASE WHEN d.decided_at IS NULL THEN NULL
            ELSE date_diff('microsecond', r.requested_at, d.decided_at) / 1000.0 END AS wait_ms,
       r.entry_id
FROM requests r LEFT JOIN effective d ON d.request_id = r.request_id
"""

TOOL_CALLS_VIEW = """
CREATE OR REPLACE VIEW tool_calls AS
WITH calls AS (
    SELECT id, session_id, sender AS agent, run_id, tool_call_id, tool_name,
           json_extract(payload, '$.arguments') AS arguments,
           json_extract_string(payload, '$.mcp_server') AS mcp_server, created_at
    FROM entries WHERE entry_type = 'ToolCall'
),
results AS (
    SELECT id, session_id, run_id, tool_call_id,
           json_extract_string(payload, '$.output') AS output,
           coalesce(TRY_CAST(json_extract_string(payload, '$.is_error') AS BOOLEAN), false) AS is_error,
           TRY_CAST(json_extract_string(payload, '$.duration_ms') AS DOUBLE) AS total_ms,
           coalesce(TRY_CAST(json_extract_string(payload, '$.approval_wait_ms') AS DOUBLE), 0) AS wait_ms,
           json_extract_string(payload, '$.approval') AS approval,
           json_extract_string(payload, '$.decided_by') AS decided_by,
           created_at
    FROM entries WHERE entry_type = 'ToolResult'
)
SELECT c.session_id, c.agent, c.run_id, c.tool_call_id, c.tool_name AS tool, c.arguments,
       r.output, r.is_error,
       c.created_at AS started_at, r.created_at AS finished_at,
       -- time in the tool itself; the wait for a person is in the approvals view
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
    -- a run's opening Ack is the run (its id is the run id); one JSON parse for its fields
    SELECT run_id, session_id, agent, started_at,
           TRY_CAST(f[1] AS BIGINT) AS trigger_entry_id, f[2] AS trigger_kind, f[3] AS schedule_id,
           f[4] AS model, TRY_CAST(f[5] AS BIGINT) AS parent_run, TRY_CAST(f[6] AS INTEGER) AS answers
    FROM (
        SELECT a.id AS run_id, a.session_id, a.sender AS agent, a.created_at AS started_at,
               json_extract_string(a.payload, ['$.trigger_id', '$.trigger_type', '$.schedule_id',
                                               '$.model', '$.parent_run', '$.answers_count']) AS f
        FROM entries a
        WHERE a.entry_type = 'Ack' AND a.run_id = a.id)
),
ends AS (
    -- the first Message, Error or closing Ack of the run (the opening Ack is the run itself)
    SELECT * FROM (
        SELECT run_id, entry_type, created_at,
               -- one JSON parse for all the fields (a parse per field costs 3x on big stores)
               json_extract_string(payload, ['$.steps', '$.prompt_tokens', '$.completion_tokens',
                                             '$.cost_usd', '$.interrupted', '$.status']) AS f,
               row_number() OVER (PARTITION BY run_id ORDER BY id) AS rank
        FROM entries
        WHERE entry_type IN ('Message', 'Error', 'Ack') AND run_id IS NOT NULL AND run_id <> id)
    WHERE rank = 1
),
steps_seen AS (
    SELECT run_id, count(*) AS tool_calls FROM entries WHERE entry_type = 'ToolCall' GROUP BY 1
),
unfinished AS (
    SELECT a.run_id FROM acks a WHERE a.run_id NOT IN (SELECT run_id FROM ends)
),
open_requests AS (
    -- only runs with no end can be parked; decisions carry the request's run and tool call
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
            WHEN e.entry_type = 'Error' AND e.f[5] = 'true' THEN 'interrupted'
            WHEN e.entry_type = 'Error' THEN 'error'
            -- stopped by a person (%chaz stop, a Stop button): a closing Ack, not an error
            WHEN e.entry_type = 'Ack' AND e.f[6] = 'cancelled' THEN 'cancelled'
            ELSE 'ok' END AS status,
       TRY_CAST(e.f[1] AS INTEGER) AS steps,
       coalesce(s.tool_calls, 0) AS tool_calls,
       TRY_CAST(e.f[2] AS BIGINT) AS prompt_tokens,
       TRY_CAST(e.f[3] AS BIGINT) AS completion_tokens,
       TRY_CAST(e.f[4] AS DOUBLE) AS cost_usd,
       CASE WHEN e.created_at IS NULL THEN NULL
            ELSE date_diff('microsecond', a.started_at, e.created_at) / 1000.0 END AS latency_ms,
       a.model, a.parent_run,
       -- Messages/Directives the run answers together (a burst coalesced into one run);
       -- runs recorded before the Ack had the field answered their one trigger
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

VIEWS = ("approvals", "tool_calls", "runs", "messages")


def create_audit_views(con: duckdb.DuckDBPyConnection) -> None:
    """Create (or replace) the audit views; approvals first, runs reads it."""
    for ddl in (APPROVALS_VIEW, TOOL_CALLS_VIEW, RUNS_VIEW, MESSAGES_VIEW):
        con.execute(ddl)
