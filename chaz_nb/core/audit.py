"""SQL audit views over the entries table: tool_calls, runs, approvals, messages.

The views read only what was recorded at write time (token usage and cost live in the
entries' payload), so they need no model at query time and work on any notebook's store.
They are created by a migration; a change to a view is a new migration that replaces it
(``create_audit_views`` always makes the newest form). The SQL is in ``core/auditsql.py``,
written once for DuckDB and PostgreSQL.
"""

from __future__ import annotations

import duckdb

from .auditsql import DUCKDB, VIEWS

__all__ = ["VIEWS", "create_audit_views"]


def create_audit_views(con: duckdb.DuckDBPyConnection) -> None:
    """Create (or replace) the audit views; approvals first, runs reads it."""
    forks = bool(con.execute(
        "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'sessions' AND column_name = 'forked_from'"
    ).fetchall()[0][0])
    for _name, ddl in DUCKDB.views(forks):
        con.execute(ddl)
