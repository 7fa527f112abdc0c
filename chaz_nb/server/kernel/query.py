"""``kernel__query``: DuckDB SQL over the notebook's frames and arrays, by variable name.

Each query runs in a process of its own (forked.py): the kernel forks, and the child reads
the notebook's frames copy-on-write (nothing copied or shipped), opens a fresh in-memory
DuckDB instance locked down (``store.LOCKED_DOWN``: no file access, no configuration change)
under ``QUERY_LIMITS``, bounds its own memory to ``QUERY_PROCESS_MEMORY_MB`` beyond what the
kernel maps, runs the query and sends back the first rows. DuckDB's ``memory_limit`` bounds
its operators, but one value built by one function (``repeat``, ``lpad``, ``range`` as a
list...) is allocated outside it: in the child, such a value ends the child, never the
kernel. A query over its deadline is killed with its child. Where the kernel cannot fork
(Windows) the query runs in process, on a cursor of the kernel's own locked-down instance,
interrupted at its deadline (``connection.interrupt``).

Each first passes the read-only statement check ``%chaz sql`` uses
(``core.sqlquery.check_read_only``). With file access off DuckDB also turns off its Python
replacement scan, so the variables the query names are registered on the connection by name
instead, each through a relation that masks its secret-named columns (``masked_relation``):
the same zero-copy scan. Only the first rows the data policy allows are fetched, each value
cut by DuckDB itself (``bounded``), so a result of any size costs its first rows. The kernel
formats what comes back under the data policy (``_cell``, ``clip``, ``_query_error``).
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Mapping
from typing import Any

import duckdb

from ...core.sqlquery import check_read_only, one_line
from ...core.store import LOCKED_DOWN
from ...errors import SQLFailed, SQLRefused, ToolError
from .describe import DataToolError, Egress
from .forked import FORKS, ChildDied, ChildFailed, ChildTimedOut, run_forked
from .namespace import user_items
from .policy import REDACTED, VALUE_CHARS, DataPolicy, Secrets, clip, secret_fields, secret_name

#: seconds a query may run before DuckDB is told to stop it
QUERY_DEADLINE = 60.0
#: what one query may take of the kernel's machine: the memory DuckDB's operators may hold
#: (an aggregate, a join, a sort: ``string_agg`` of 400 MB fails at once instead of taking
#: 1.4 GB), no spill to a temporary directory, and two threads
QUERY_MEMORY_LIMIT = "512MB"
#: what the process running one query may take beyond what the kernel maps when it forks
#: (forked.py): DuckDB's limit, the value one function builds outside it, the rows fetched.
#: RLIMIT_DATA counts address space the allocator keeps after freeing it (DuckDB's allocator
#: retains it), not only what is resident: at 1,024 MB a 50 MB ``repeat`` beside a 5M-item
#: list (a peak of ~600 MB resident) failed one run in five
QUERY_PROCESS_MEMORY_MB = 2048
#: what the agent reads when the query's process ran out of memory
OUT_OF_MEMORY = (f"the query needed more than {QUERY_PROCESS_MEMORY_MB} MB (kernel__query may hold "
                 f"{QUERY_PROCESS_MEMORY_MB} MB): filter or aggregate before building large values, or add LIMIT")
QUERY_LIMITS: dict[str, str | int] = {"memory_limit": QUERY_MEMORY_LIMIT, "temp_directory": "",
                                      "max_temp_directory_size": "0B", "threads": 2}
_TABLE_MODULES = ("pandas", "pyarrow", "polars", "numpy")
_instance: duckdb.DuckDBPyConnection | None = None
_instance_lock = threading.Lock()


def _connection() -> duckdb.DuckDBPyConnection:
    """A new connection (cursor) to the process's locked-down query instance."""
    global _instance
    with _instance_lock:
        if _instance is None:
            _instance = duckdb.connect(":memory:", config={**LOCKED_DOWN, **QUERY_LIMITS})
        return _instance.cursor()


def referenced_names(sql: str) -> set[str]:
    """Identifiers and strings of the query (unquoted), as DuckDB's tokenizer sees them."""
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
        elif kind.name == "string_const":  # a frame named in a string: table_info('sales'), query_table('sales')
            names.add(word.strip("'"))
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


def masked_relation(con: duckdb.DuckDBPyConnection, table: Any) -> duckdb.DuckDBPyRelation | None:
    """What the query reads for ``table``: a relation over it whose secret-named columns (by
    their name, or a struct field's) are the constant ``[REDACTED]``, so no SQL can compute
    anything from their values. The object itself gets no name in the query's catalog: the
    relation reads it through an unnamed source. None: nothing to mask (read it as it is)."""
    if isinstance(table, dict):  # numpy columns: value / c0, c1...: names no secret can have
        return None
    rel = con.from_df(table) if type(table).__module__.split(".")[0] == "pandas" else con.from_arrow(table)
    # pyarrow's ``columns`` are the columns' data: its names are ``column_names``
    names = [str(c) for c in (getattr(table, "column_names", None) or getattr(table, "columns", []))]
    duck = rel.columns
    exprs: list[str] = []
    masked = False
    for i, (column, kind) in enumerate(zip(duck, rel.types, strict=True), 1):
        original = names[i - 1] if len(names) == len(duck) else column
        if secret_name(column) or secret_name(original) or secret_fields(str(kind)):
            exprs.append(f"'{REDACTED}'::VARCHAR AS {_quote(column)}")
            masked = True
        elif str(getattr(kind, "id", "")).lower() == "map":  # dicts of varied keys: their keys are data
            exprs.append(f"{_map_masked(i)} AS {_quote(column)}")
            masked = True
        elif str(getattr(kind, "id", "")).lower() == "varchar":  # JSON (or a dict's repr) held as text
            exprs.append(f"{_text_masked(i)} AS {_quote(column)}")
            masked = True
        else:
            exprs.append(f"#{i} AS {_quote(column)}")
    return rel.project(", ".join(exprs)) if masked else rel


#: a map key that says its value is a credential (``policy.secret_name``, in DuckDB's regex)
SECRET_KEY_PATTERN = ("pass_?(word|wd|phrase)|pwd|secret|token|api[-_ ]?key|private[-_ ]?key|access[-_ ]?key"
                      "|credential|authorization|bearer")
#: DuckDB 1.3 writes a lambda ``lambda e: ...`` (the arrow form is refused from 2.0 on)
_LAMBDA = "lambda e: " if tuple(int(p) for p in re.findall(r"\d+", duckdb.__version__)[:2]) >= (1, 3) else "e -> "


def _map_masked(i: int) -> str:
    """Column ``#i``, a MAP, with the value under each secret-looking key NULL."""
    return (f"map_from_entries(list_transform(map_entries(#{i}), {_LAMBDA}{{'key': e.key, 'value': CASE WHEN "
            f"regexp_matches(lower(CAST(e.key AS VARCHAR)), '{SECRET_KEY_PATTERN}') THEN NULL ELSE e.value END}}))")


#: in a text value, a quoted key that says its value is a credential, with its ``:``, then the
#: value (a quoted string, a list or an object without nesting, or a bare word): RE2 has no
#: back-references, so each quote has its own branch
_SECRET_ENTRY = (f"""((?:"[^"]*(?:{SECRET_KEY_PATTERN})[^"]*"|'[^']*(?:{SECRET_KEY_PATTERN})[^']*')\\s*:\\s*)"""
                 r"""("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\[[^\]]*\]|\{[^}]*\}|[^,}\]\s]+)""")


def _text_masked(i: int) -> str:
    """Column ``#i``, text, with the value under each secret-looking quoted key (JSON, a dict's
    repr) replaced by ``"[REDACTED]"``, so ``json_extract_string(config, '$.password')`` and
    any piece of it read the mark. Only a value that holds ``:`` is rewritten."""
    pattern = "(?i)" + _SECRET_ENTRY
    return (f"CASE WHEN strpos(#{i}, ':') > 0 THEN regexp_replace(#{i}, '{pattern.replace(chr(39), chr(39) * 2)}', "
            f"'\\1\"{REDACTED}\"', 'g') ELSE #{i} END")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


#: DuckDB's types whose values are short by nature (fetched as they are)
_SHORT_TYPES = frozenset({"boolean", "tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint",
                          "uinteger", "ubigint", "uhugeint", "double", "decimal", "date", "time", "timestamp",
                          "timestamp_s", "timestamp_ms", "timestamp_ns", "timestamp with time zone",
                          "time with time zone", "interval", "uuid", "null"})


def bounded(rel: duckdb.DuckDBPyRelation, max_columns: int) -> tuple[duckdb.DuckDBPyRelation, list[str], list[str]]:
    """``rel`` projected so that DuckDB itself cuts each value before Python reads it: text to
    ``VALUE_CHARS`` + 1 characters, a blob to its size, anything long (a list, a struct, a
    map, a float kept exact as text) to text so cut; at most ``max_columns`` columns.
    Returns the relation, the column names and each column's kind (``blob``, ``text``, ``value``)."""
    columns, types = rel.columns, rel.types
    exprs, kinds = [], []
    for i, kind in enumerate(types[:max_columns], 1):
        type_id = str(getattr(kind, "id", kind)).lower()
        if type_id == "blob":
            exprs.append(f"octet_length(#{i})")
            kinds.append("blob")
        elif type_id in _SHORT_TYPES:
            exprs.append(f"#{i}")
            kinds.append("value")
        elif type_id == "varchar":
            exprs.append(f"left(#{i}, {VALUE_CHARS + 1})")
            kinds.append("text")
        else:  # REAL as DuckDB writes it (Python's float would show the float32 digits), lists, structs, enums
            exprs.append(f"left(CAST(#{i} AS VARCHAR), {VALUE_CHARS + 1})")
            kinds.append("text")
    return rel.project(", ".join(exprs)), list(columns), kinds


def scan_functions(sql: str) -> set[str]:
    """Table functions of DuckDB's Python client that read an object in memory: a query may not
    name them (a masked relation's view shows one, and older clients take a pointer)."""
    return {n for n in referenced_names(sql) if n.lower() in _SCANS}


_SCANS = frozenset({"pandas_scan", "arrow_scan", "arrow_scan_dumb", "python_arrow_scan", "seq_scan",
                    "python_map_function", "arrow_scan_capsule"})


def run_query(sql: str, ns: Mapping[str, Any], policy: DataPolicy, hidden: Any = (),
              deadline: float | None = None, secrets: Secrets | None = None) -> tuple[str, Egress]:
    """The query's result as the agent reads it, and what it sent (see the module docstring).
    A failure is a ``DataToolError`` whose text went through the same policy, with its egress."""
    deadline = QUERY_DEADLINE if deadline is None else deadline
    secrets = secrets if secrets is not None else Secrets.of(ns, hidden)
    if not policy.values:
        raise ToolError("kernel__query sends values, and this agent's data policy is schema (names, types and "
                        "counts only); use kernel__describe, or define the agent with --data sample")
    try:
        check_read_only(sql)
    except (SQLRefused, SQLFailed) as exc:
        raise ToolError(str(exc).replace("%chaz sql", "kernel__query").replace(
            "the audit trail cannot be changed", "the query may only read the notebook's frames")) from None
    scans = scan_functions(sql)
    if scans:
        raise ToolError(f"kernel__query reads the notebook's frames by their names, not through "
                        f"{', '.join(sorted(scans))}")
    wanted = referenced_names(sql)
    tables: list[tuple[str, Any, Any]] = []
    for name, obj in user_items(ns, hidden):
        if name not in wanted:
            continue
        table = scannable(obj)
        if table is None:
            continue
        if secret_name(name):
            raise ToolError(f"{name} holds a secret (its name says so); kernel__query does not read it")
        tables.append((name, obj, table))
    used = [name for name, _, _ in tables]
    limit = policy.row_limit
    try:
        run = _in_child if FORKS else _in_process
        result = run(sql, tables, policy, deadline)
    except duckdb.InterruptException:
        raise ToolError(f"the query ran over {deadline:g} s and was stopped") from None
    except duckdb.OutOfMemoryException as exc:
        raise _query_error(exc, sql, ns, hidden, used, policy, secrets,
                           hint=f" (kernel__query may hold {QUERY_MEMORY_LIMIT} in DuckDB's operators, "
                                f"{QUERY_PROCESS_MEMORY_MB} MB in all: filter or aggregate before building large "
                                "values, or add LIMIT)") from None
    except duckdb.PermissionException:
        raise ToolError("kernel__query reads only the notebook's variables: files and the network are off "
                        "(query a DataFrame by its name)") from None
    except duckdb.Error as exc:
        raise _query_error(exc, sql, ns, hidden, used, policy, secrets) from None
    if result is None:
        return "the statement returned no rows", Egress(variables=used)
    columns, kinds, rows, fetch = result
    more = len(rows) > fetch
    rows = rows[:fetch]
    secret_cols = {i for i, c in enumerate(columns) if secret_name(c)}
    cut = False
    lines = [" | ".join(columns[: len(kinds)])]
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            text, was_cut = (REDACTED, False) if i in secret_cols else _cell(value, kinds[i])
            cut = cut or was_cut
            cells.append(text)
        lines.append(" | ".join(cells))
    if more and fetch < limit:
        lines.append(f"… more rows not sent (the tool output holds {policy.max_chars:,} characters; "
                     "aggregate or add LIMIT)")
    elif more:
        lines.append(f"… more rows not sent (this agent's data policy sends {limit:,}; aggregate or add LIMIT)")
    if len(columns) > len(kinds):
        lines.append(f"… {len(columns) - len(kinds):,} more columns not sent (select fewer columns)")
    if cut:
        lines.append(f"… values longer than {VALUE_CHARS} characters were cut (marked …)")
    text = clip("\n".join(lines), policy.max_chars, secrets)
    return text, Egress(variables=used, rows=len(rows), columns=len(kinds), chars=len(text))


#: what the query's result is before the policy formats it: column names, each column's kind
#: (``bounded``), at most ``fetch`` + 1 rows, and ``fetch``; None for a statement with no rows
Fetched = tuple[list[str], list[str], list[tuple[Any, ...]], int] | None


def _execute(con: duckdb.DuckDBPyConnection, sql: str, tables: list[tuple[str, Any, Any]],
             policy: DataPolicy) -> Fetched:
    """Register ``tables`` (name, variable, what DuckDB scans) masked on ``con``, run ``sql`` and
    fetch the first rows the policy and the tool output allow, each value cut by DuckDB."""
    for name, obj, table in tables:
        try:
            rel = masked_relation(con, table)
            con.register(name, rel if rel is not None else table)
        except (duckdb.Error, TypeError, ValueError) as exc:
            raise ToolError(f"cannot query {name} ({type(obj).__name__}): {one_line(exc)}") from None
    result = con.sql(sql)
    if result is None:
        return None
    # a value costs at least 4 characters of the text ("x | "): the columns and rows
    # that can fit in the tool output are the most fetched
    max_columns = max(1, policy.max_chars // 4)
    result, columns, kinds = bounded(result, max_columns)
    fit = max(1, policy.max_chars // (4 * max(1, len(kinds))))
    fetch = min(policy.row_limit, fit)
    return columns, kinds, result.limit(fetch + 1).fetchall(), fetch


def _in_child(sql: str, tables: list[tuple[str, Any, Any]], policy: DataPolicy, deadline: float) -> Fetched:
    """The query run in a forked child (forked.py) on a fresh locked-down instance of its own
    (never the kernel's: a thread of the kernel may hold its locks): what it builds, however
    large, dies with the child. Its failures come back as the exceptions ``run_query`` reads."""

    def execute() -> Fetched:
        con = duckdb.connect(":memory:", config={**LOCKED_DOWN, **QUERY_LIMITS})
        return _execute(con, sql, tables, policy)

    try:
        return run_forked(execute, memory_mb=QUERY_PROCESS_MEMORY_MB, deadline=deadline)
    except ChildTimedOut:
        raise duckdb.InterruptException("the query ran over its deadline") from None
    except ChildDied as died:
        if died.signum == signal.SIGINT:
            raise ToolError("the query was interrupted (the kernel was interrupted)") from None
        raise ToolError(OUT_OF_MEMORY) from None
    except ChildFailed as failed:
        kind = getattr(duckdb, failed.kind, None)
        if isinstance(kind, type) and issubclass(kind, duckdb.Error):
            raise kind(failed.message) from None
        if failed.kind == "ToolError":
            raise ToolError(failed.message) from None
        if failed.kind == "MemoryError":
            raise ToolError(OUT_OF_MEMORY) from None
        raise ToolError(f"the query failed: {failed.kind}: {failed.message}") from None


def _in_process(sql: str, tables: list[tuple[str, Any, Any]], policy: DataPolicy, deadline: float) -> Fetched:
    """The query run on the kernel's own query instance, where the kernel cannot fork (Windows):
    DuckDB's memory limit holds, one value built by one function is not bounded."""
    con = _connection()
    timer = threading.Timer(deadline, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        return _execute(con, sql, tables, policy)
    finally:
        timer.cancel()
        con.close()


_QUOTED_VALUE = re.compile(r"'((?:[^']|'')*)'")


def _query_error(exc: duckdb.Error, sql: str, ns: Mapping[str, Any], hidden: Any, used: list[str],
                 policy: DataPolicy, secrets: Secrets, hint: str = "") -> DataToolError:
    """A failed query as the agent reads it: DuckDB's message (its first line) with each value
    it quotes that the SQL does not hold cut to ``VALUE_CHARS``, and hidden under a policy
    that sends no rows; counted in the egress like a row of the result."""
    message = one_line(exc)
    quoted = 0

    def value(match: re.Match[str]) -> str:
        nonlocal quoted
        inner = match.group(1)
        if inner in sql or inner == REDACTED:
            return match.group(0)  # the query's own text, or a masked column's constant
        quoted += 1
        if policy.row_limit == 0:
            return "'[a value: this agent's data policy sends no rows]'"
        return "'" + (inner if len(inner) <= VALUE_CHARS else inner[: VALUE_CHARS - 1] + "…") + "'"

    message = _QUOTED_VALUE.sub(value, message)
    if "does not exist" in message and not used:
        frames = [n for n, o in user_items(ns, hidden) if scannable(o) is not None]
        hint = f" (the notebook's frames and arrays: {', '.join(frames) or 'none'})"
    text = clip(f"{message}{hint}", policy.max_chars, secrets)
    rows = min(quoted, 1) if policy.row_limit else 0
    return DataToolError(text, Egress(variables=used, rows=rows, chars=len(text)))


def _cell(value: Any, kind: str) -> tuple[str, bool]:
    """One value as the query gave it (a float in its shortest round-trip form, a decimal and a
    date as written), and whether it was cut."""
    if value is None:
        return "NULL", False
    if kind == "blob":
        return f"<{value} bytes>", False
    if isinstance(value, float):
        return repr(value), False
    text = str(value)
    if len(text) <= VALUE_CHARS:
        return text, False
    return text[: VALUE_CHARS - 1] + "…", True
