"""Audit queries on a store of 1,000,000 synthetic entries in 10,000 sessions.

Builds the file with the real schema (migrations) and realistic runs: per run an Ack, tool
calls with results (some errors, some behind approvals) and a reply Message with usage.
Prints the time of each audit query (best of 3), on the store's connection and through
``run_query`` (what ``%chaz sql`` runs: parser check, read-only transactions), and the file size.
Targets (issue 5): each query < 200 ms; file < 200 MB.
Run: python bench/bench_audit.py [--entries 1000000] [--keep PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

from chaz_nb.core.sqlquery import run_query
from chaz_nb.core.store import SessionStore

QUERIES = {
    "slowest tools": "SELECT tool, count(*) AS calls, avg(duration_ms) AS avg_ms, max(duration_ms) AS max_ms "
                     "FROM tool_calls GROUP BY tool ORDER BY avg_ms DESC LIMIT 10",
    "failed calls (latest 50)": "SELECT session_id, agent, tool, output FROM tool_calls WHERE is_error "
                                "ORDER BY finished_at DESC LIMIT 50",
    "what each child agent did": "SELECT r.agent, count(*) AS runs, sum(r.tool_calls) AS tool_calls "
                                 "FROM runs r WHERE r.parent_run IS NOT NULL GROUP BY r.agent ORDER BY runs DESC",
    "approvals and their wait": (
        "SELECT decision, count(*) AS n, avg(wait_ms) AS avg_wait_ms FROM approvals GROUP BY decision"
    ),
    "cost per agent": "SELECT agent, sum(prompt_tokens) AS prompt, sum(completion_tokens) AS completion, "
                      "sum(cost_usd) AS cost FROM runs GROUP BY agent ORDER BY cost DESC NULLS LAST",
    "one session's transcript": (
        "SELECT seq, entry_type, sender, content FROM messages WHERE session_id = 4242 ORDER BY seq"
    ),
    "runs of one session": "SELECT * FROM runs WHERE session_id = 4242",
}

# One run = 10 entries: Message, Ack, ToolCall, ToolResult, ToolCall, ApprovalRequest,
# ApprovalDecision, ToolResult, Message (reply), plus a Directive every other run.
BUILD = """
INSERT INTO entries
WITH runs AS (
    SELECT r AS run_no, (r % {sessions}) + 1 AS session_id, r // {sessions} AS turn
    FROM range({runs}) t(r)
),
slots AS (SELECT * FROM runs, range(10) s(k))
SELECT
    run_no * 10 + k + 1 AS id,
    session_id,
    turn * 10 + k + 1 AS seq,
    CASE k WHEN 0 THEN 'Message' WHEN 1 THEN 'Ack' WHEN 2 THEN 'ToolCall' WHEN 3 THEN 'ToolResult'
           WHEN 4 THEN 'ToolCall' WHEN 5 THEN 'ApprovalRequest' WHEN 6 THEN 'ApprovalDecision'
           WHEN 7 THEN 'ToolResult' WHEN 8 THEN 'Message' ELSE 'Directive' END,
    CASE WHEN k IN (0, 6) THEN 'user' ELSE 'agent' || (session_id % 25) END,
    CASE k WHEN 0 THEN 'question number ' || run_no WHEN 8 THEN 'the answer is ' || run_no
           WHEN 2 THEN 'search({{"q": "x' || run_no || '"}})' WHEN 3 THEN 'search: result text ' || run_no
           ELSE 'entry ' || k END,
    CASE WHEN k IN (2, 3) THEN 'c1' WHEN k IN (4, 5, 6, 7) THEN 'c2' END,
    CASE WHEN k IN (2, 3) THEN 'search' WHEN k IN (4, 5, 6, 7) THEN 'tool' || (run_no % 7) END,
    CASE k
      WHEN 1 THEN json_object('trigger_id', run_no * 10 + 1, 'trigger_type', 'Message', 'model', 'chaz/script',
                              'parent_run', CASE WHEN session_id % 3 = 0 THEN 1 END)
      WHEN 2 THEN json_object('run_id', run_no * 10 + 2, 'arguments', json_object('q', 'x' || run_no))
      WHEN 3 THEN json_object('run_id', run_no * 10 + 2, 'output', 'result text ' || run_no,
                              'is_error', run_no % 17 = 0, 'duration_ms', (run_no % 97) * 1.5)
      WHEN 4 THEN json_object('run_id', run_no * 10 + 2, 'arguments', json_object('target', 'prod'))
      WHEN 5 THEN json_object('request_id', 'r' || run_no, 'tool_name', 'tool' || (run_no % 7),
                              'risk_level', 'high', 'arguments_display', json_object('target', 'prod'),
                              'timeout_secs', 300, 'agent', 'agent' || (session_id % 25), 'run_id', run_no * 10 + 2)
      WHEN 6 THEN json_object('request_id', 'r' || run_no,
                              'decision', CASE WHEN run_no % 5 = 0 THEN 'deny' ELSE 'approve' END,
                              'decided_by', 'user', 'run_id', run_no * 10 + 2)
      WHEN 7 THEN json_object('run_id', run_no * 10 + 2, 'output', 'ok', 'is_error', run_no % 5 = 0,
                              'duration_ms', 12.5,
                              'approval', CASE WHEN run_no % 5 = 0 THEN 'denied' ELSE 'approved' END,
                              'decided_by', 'user', 'approval_wait_ms', 2000)
      WHEN 8 THEN json_object('run_id', run_no * 10 + 2, 'prompt_tokens', 120 + run_no % 50, 'completion_tokens', 30,
                              'cost_usd', 0.0001, 'steps', 3, 'stop_reason', 'final')
      ELSE '{{}}' END,
    TIMESTAMP '2026-11-01' + INTERVAL (run_no * 10 + k) SECOND,
    CASE WHEN k BETWEEN 1 AND 8 THEN run_no * 10 + 2 END AS run_id
FROM slots
"""


def build(path: str, entries: int, sessions: int = 10_000) -> None:
    store = SessionStore(path)
    con = store._con
    con.execute(
        f"INSERT INTO sessions (id, agent, kind, parent_id, depth, created_at) "
        f"SELECT s, 'agent' || (s % 25), CASE WHEN s % 3 = 0 THEN 'child' ELSE 'chat' END, "
        f"CASE WHEN s % 3 = 0 THEN s - 1 END, CASE WHEN s % 3 = 0 THEN 1 ELSE 0 END, TIMESTAMP '2026-11-01' "
        f"FROM range(1, {sessions + 1}) t(s)"
    )
    # A run's opening Ack is its id (run_no * 10 + 2); its other entries carry that run_id.
    con.execute(BUILD.format(sessions=sessions, runs=entries // 10))
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--keep", help="keep the built file at this path")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or os.path.join(tmp, "audit.duckdb")
        t0 = time.perf_counter()
        build(path, args.entries)
        size = os.path.getsize(path) + (os.path.getsize(path + ".wal") if os.path.exists(path + ".wal") else 0)
        print(f"built {args.entries:,} entries in 10,000 sessions in {time.perf_counter() - t0:.1f} s; "
              f"file {size / 1e6:.1f} MB (target < 200 MB: {'met' if size < 200e6 else 'NOT met'})")
        store = SessionStore(path)
        print(f"{'query':32} {'best of 3':>10} {'%chaz sql':>11}  rows")
        worst = 0.0
        for label, query in QUERIES.items():
            times, magic = [], []
            for _ in range(3):
                t = time.perf_counter()
                result = store.sql(query).fetchall()
                times.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                run_query(query, store)
                magic.append((time.perf_counter() - t) * 1000)
            worst = max(worst, min(times), min(magic))
            print(f"{label:32} {min(times):8.1f} ms {min(magic):8.1f} ms  {len(result)}")
        print(f"slowest audit query {worst:.1f} ms (target < 200 ms: {'met' if worst < 200 else 'NOT met'})")
        store.close()


if __name__ == "__main__":
    main()
