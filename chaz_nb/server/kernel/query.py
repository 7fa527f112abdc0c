"""``kernel__query``: DuckDB SQL over the notebook's frames and arrays, by variable name.

Queries run on an in-memory DuckDB instance of their own, opened locked down
(``store.LOCKED_DOWN``: no file access, no configuration change), each on a cursor of its
own (a connection of that instance: its registered views are its own, and opening one costs
microseconds where a new instance costs ~30 ms). Each first passes the
read-only statement check ``%chaz sql`` uses (``core.sqlquery.check_read_only``). With file
access off DuckDB also turns off its Python replacement scan, so the variables the query
names are registered on the connection by name instead: the same zero-copy scan (a pandas
frame, an arrow table or a numpy array is read in place, never copied). Only the first rows
the data policy allows are fetched (``fetchmany``), so a result of any size costs its first
rows; a query over its deadline is interrupted (``connection.interrupt``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import duckdb

from ...core.sqlquery import check_read_only, one_line
from ...core.store import LOCKED_DOWN
from ...errors import SQLFailed, SQLRefused, ToolError
from .describe import Egress
from .namespace import user_items
from .policy import REDACTED, DataPolicy, clip, secret_name

#: seconds a query may run before DuckDB is told to stop it
QUERY_DEADLINE = 60.0
_TABLE_MODULES = ("pandas", "pyarrow", "polars", "numpy")
_instance: duckdb.DuckDBPyConnection | None = None
_instance_lock = threading.Lock()


def _connection() -> duckdb.DuckDBPyConnection:
    """A new connection (cursor) to the process's locked-down query instance."""
    global _instance
    with _instance_lock:
        if _instance is None:
            _instance = duckdb.connect(":memory:", config=dict(LOCKED_DOWN))
        return _instance.cursor()


def referenced_names(sql: str) -> set[str]:
    """Identifiers of the query (quoted ones unquoted), as DuckDB's tokenizer sees them."""
    names: set[str] = set()
    try:
        marks = duckdb.tokenize(sql)
    except (TypeError, duckdb.Error):  # text it cannot encode (a lone surrogate): the query says when it runs
        return names
    for i, (start, kind) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(sql)
        word = sql[start:end].strip()
        if kind.name in ("identifier", "keyword"):
            names.add(word.strip('"'))
    return names


def scannable(obj: Any) -> Any | None:
    """What DuckDB scans for a variable (the object itself, or a 2-D array's columns)."""
    module = type(obj).__module__.split(".")[0]
    if module not in _TABLE_MODULES:
        return None
    if module == "numpy":
        ndim = getattr(obj, "ndim", None)
        if ndim == 1:
            return {"value": obj}
        if ndim == 2:
            return {f"c{i}": obj[:, i] for i in range(obj.shape[1])}
        return None
    if module == "pandas" and not hasattr(obj, "columns") and hasattr(obj, "to_frame"):
        return obj.to_frame()
    return obj


def run_query(sql: str, ns: Mapping[str, Any], policy: DataPolicy, hidden: Any = (),
              deadline: float | None = None) -> tuple[str, Egress]:
    deadline = QUERY_DEADLINE if deadline is None else deadline
    if not policy.values:
        raise ToolError("kernel__query sends values, and this agent's data policy is schema (names, types and "
                        "counts only); use kernel__describe, or define the agent with --data sample")
    try:
        check_read_only(sql)
    except (SQLRefused, SQLFailed) as exc:
        raise ToolError(str(exc).replace("%chaz sql", "kernel__query").replace(
            "the audit trail cannot be changed", "the query may only read the notebook's frames")) from None
    wanted = referenced_names(sql)
    con = _connection()
    timer = threading.Timer(deadline, con.interrupt)
    timer.daemon = True
    used: list[str] = []
    try:
        for name, obj in user_items(ns, hidden):
            if name not in wanted:
                continue
            table = scannable(obj)
            if table is None:
                continue
            if secret_name(name):
                raise ToolError(f"{name} holds a secret (its name says so); kernel__query does not read it")
            try:
                con.register(name, table)
            except duckdb.Error as exc:
                raise ToolError(f"cannot query {name} ({type(obj).__name__}): {one_line(exc)}") from None
            used.append(name)
        timer.start()
        try:
            cur = con.execute(sql)
            columns = [d[0] for d in cur.description or []]
            limit = policy.row_limit
            rows = cur.fetchmany(limit + 1)
        except duckdb.InterruptException:
            raise ToolError(f"the query ran over {deadline:g} s and was stopped") from None
        except duckdb.PermissionException:
            raise ToolError("kernel__query reads only the notebook's variables: files and the network are off "
                            "(query a DataFrame by its name)") from None
        except duckdb.Error as exc:
            hint = ""
            if "does not exist" in str(exc) and not used:
                frames = [n for n, o in user_items(ns, hidden) if scannable(o) is not None]
                hint = f" (the notebook's frames and arrays: {', '.join(frames) or 'none'})"
            raise ToolError(f"{one_line(exc)}{hint}") from None
    finally:
        timer.cancel()
        con.close()
    more = len(rows) > limit
    rows = rows[:limit]
    secret_cols = {i for i, c in enumerate(columns) if secret_name(c)}
    lines = [" | ".join(columns)]
    for row in rows:
        lines.append(" | ".join(REDACTED if i in secret_cols else _cell(v) for i, v in enumerate(row)))
    if more:
        lines.append(f"… more rows not sent (this agent's data policy sends {limit:,}; aggregate or add LIMIT)")
    text = clip("\n".join(lines), policy.max_chars)
    return text, Egress(variables=used, rows=len(rows), columns=len(columns), chars=len(text))


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(value))} bytes>"
    text = str(value)
    return text if len(text) <= 200 else text[:199] + "…"
