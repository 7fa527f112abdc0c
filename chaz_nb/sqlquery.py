"""Read-only SQL over a session store: what ``%chaz sql`` runs.

The audit trail is read-only from a notebook: statements are classified by DuckDB's own
parser and anything but a query is refused before it runs. ``--db PATH`` opens another
notebook's store read-only (DuckDB refuses it while a kernel holds the file: we say so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import duckdb

from .store import SessionStore

ALLOWED = {"SELECT", "EXPLAIN"}
#: informational pragmas that change nothing
ALLOWED_PRAGMAS = ("table_info", "show_tables", "show_tables_expanded", "database_size", "version",
                   "storage_info", "database_list", "show", "functions")
DEFAULT_MAX_ROWS = 1000


class SQLRefused(ValueError):
    """A statement that would change the store (or the connection)."""


class SQLFailed(ValueError):
    """DuckDB could not run the query; the message is DuckDB's, on one line."""


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]
    total_rows: int
    relation: Any  # duckdb.DuckDBPyRelation over the same query
    source: str

    @property
    def truncated(self) -> bool:
        return self.total_rows > len(self.rows)

    def df(self) -> Any:
        """The whole result as a pandas DataFrame (pandas is an optional extra)."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise ImportError(
                "pandas is not installed: pip install 'chaz_nb[pandas]' (or use -o with --relation)"
            ) from None
        return self.relation.df()


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def check_read_only(query: str) -> None:
    """Raise SQLRefused unless every statement only reads."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise SQLFailed(one_line(exc)) from None
    if not statements:
        raise SQLFailed("no SQL statement given; try: %chaz sql SELECT * FROM runs")
    for st in statements:
        kind = st.type.name
        if kind in ALLOWED:
            continue
        if kind == "PRAGMA" and st.query.strip().lower().removeprefix("pragma").strip().startswith(ALLOWED_PRAGMAS):
            continue
        raise SQLRefused(
            f"%chaz sql is read-only: {kind} statements are refused (the audit trail cannot be changed); "
            "use SELECT"
        )


def open_read_only(path: str) -> duckdb.DuckDBPyConnection:
    if not os.path.exists(path):
        raise SQLFailed(f"no database file {path}")
    try:
        return duckdb.connect(path, read_only=True)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise SQLFailed(
                f"{path} is held by another kernel, and DuckDB lets no other process read a file "
                "while one writes it; query it from that kernel, or stop it first"
            ) from None
        raise SQLFailed(one_line(exc)) from None


def run_query(
    query: str,
    store: SessionStore | None = None,
    db: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> QueryResult:
    """Run a read-only query on ``store`` or on the file ``db`` (opened read-only)."""
    check_read_only(query)
    if db is not None and store is not None and os.path.abspath(db) == os.path.abspath(store.path):
        db = None  # our own file: DuckDB would refuse a second connection from this process
    if db is None:
        if store is None:
            raise SQLFailed("no session store: %load_ext chaz_nb first, or give --db PATH")
        con = store.reader()
        source = store.path
    else:
        con = open_read_only(db)
        source = db
    statements = duckdb.extract_statements(query)
    try:
        for st in statements[:-1]:
            con.execute(st.query).fetchall()
        last = statements[-1].query
        relation = con.sql(last)
        if relation is None:  # EXPLAIN and PRAGMA can come back without a relation
            rows = con.execute(last).fetchall()
            return QueryResult([d[0] for d in con.description or []], rows, len(rows), None, source)
        columns = list(relation.columns)
        rows = relation.limit(max_rows + 1).fetchall()
        total = len(rows)
        if total > max_rows:
            total = con.sql(f"SELECT count(*) FROM ({last})").fetchall()[0][0]
            rows = rows[:max_rows]
    except duckdb.Error as exc:
        raise SQLFailed(one_line(exc)) from None
    return QueryResult(columns, rows, total, relation, source)
