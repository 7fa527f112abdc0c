"""Read-only SQL over a session store: what ``%chaz sql`` runs.

The audit trail cannot be changed from a notebook, and two layers make sure of it:

1. **The database enforces it.** Every statement runs on a cursor of its own inside
   ``BEGIN TRANSACTION READ ONLY`` (``store.read_only_transaction``), begun afresh for each
   statement of the query, so a ``COMMIT`` in the query ends nothing but an empty transaction.
   DuckDB refuses any write to any database there when it binds the statement: a ``DELETE``
   inside a ``WITH``, ``EXPLAIN ANALYZE UPDATE``, ``MERGE``, ``nextval()``. The instance itself
   is opened locked down (``store.LOCKED_DOWN``: ``enable_external_access=false``,
   ``lock_configuration=true``), so ``COPY ... TO``, ``EXPORT DATABASE``, ``ATTACH`` of a file,
   ``LOAD``/``INSTALL`` and ``SET`` fail too, which a transaction alone would let through.
   That holds for this kernel's store (file or ``:memory:``), which is queried on the writer's
   own instance because DuckDB cannot open the same file twice in one process, and for
   ``--db PATH``, opened ``read_only=True`` with the same settings. A relation handed back
   (``-o NAME --relation``) has run once inside the read-only transaction, and DuckDB decides
   at bind time whether a statement writes, so running it again cannot write either.
2. **The parser says so first, in one line.** Each statement is classified by DuckDB's own
   parser; only queries (``SELECT``, ``EXPLAIN`` of a query, informational ``PRAGMA``\\ s) pass.
   ``SELECT``\\ s are searched in DuckDB's parse tree (``json_serialize_sql``) for a
   data-modifying ``WITH`` (``DELETE``/``UPDATE``/``INSERT``/``COPY``) and for table functions
   that do something (``checkpoint()``); ``EXPLAIN`` is judged by the statement it explains.

What the database layer alone would still allow (the parser refuses all of it): ``CHECKPOINT``
(folds the WAL into the file; DuckDB does it by itself too), ``ATTACH ':memory:'`` (an empty
catalog no query can write), ``VACUUM``/``ANALYZE`` (statistics) and per-cursor state
(``SET VARIABLE``, temporary objects) that is gone with the query's cursor.

On a PostgreSQL store neither DuckDB's parser nor its engine is involved: the statements are
checked by PostgreSQL's own grammar (``pgsqlcheck``: SELECTs of pure functions only) and run
one per protocol message, each in a READ ONLY transaction of its own, as a reader role
(``pgreader``); the result's ``warning`` says when that role may write the store.

``--db PATH`` opens another notebook's store read-only (DuckDB refuses it while a kernel holds
the file: we say so).
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from collections.abc import Callable

import duckdb

from .entries import JsonObject, JSONValue
from .store import LOCKED_DOWN, SessionStore, Store, read_only_transaction
from .store.journal import journal_path, missing_rows, read_rows
from ..errors import SQLFailed, SQLRefused, StoreError

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .store.pgsql import PgResult

T = TypeVar("T")

ALLOWED = {"SELECT", "EXPLAIN"}
#: informational pragmas that change nothing
ALLOWED_PRAGMAS = {"table_info", "show_tables", "show_tables_expanded", "database_size", "version",
                   "storage_info", "database_list", "show", "functions", "platform", "user_agent",
                   "collations", "metadata_info"}
#: table functions that change something although they are called from a SELECT
ACTING_FUNCTIONS = {"checkpoint", "force_checkpoint", "truncate_duckdb_logs", "copy_database",
                    "import_database", "json_execute_serialized_sql", "enable_logging",
                    "disable_logging", "enable_profiling", "disable_profiling",
                    "add_grammar_extension", "remove_grammar_extension",
                    "register_external_resource", "register_external_resource_type",
                    "deregister_external_resource", "create_external_resource",
                    "destroy_external_resource"}
#: parse-tree nodes of a statement that writes (inside a WITH of a SELECT)
_WRITING_NODE = re.compile(r"^(DELETE|UPDATE|INSERT|COPY|MERGE_INTO|MERGE)_QUERY_NODE$")
DEFAULT_MAX_ROWS = 1000


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]
    total_rows: int
    #: DuckDB's relation over the same query (PgResult on PostgreSQL; None: EXPLAIN and PRAGMA may have none)
    relation: duckdb.DuckDBPyRelation | PgResult | None
    source: str
    #: said first, above the rows (a PostgreSQL query run as a role that may write)
    warning: str = ""

    @property
    def truncated(self) -> bool:
        return self.total_rows > len(self.rows)

    def df(self) -> pandas.DataFrame:
        """The whole result as a pandas DataFrame (pandas is an optional extra)."""
        if self.relation is None:  # (%chaz sql asks only a result that has one)
            raise SQLFailed("this statement's result is no relation, so there is no DataFrame of it")
        try:
            import pandas  # noqa: F401 - only whether it is installed
        except ImportError:
            raise ImportError(
                "pandas is not installed: pip install 'chaz_nb[pandas]' (or use -o with --relation)"
            ) from None
        return self.relation.df()


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _refused(what: str, why: str = "the audit trail cannot be changed") -> SQLRefused:
    verb = "are" if what.endswith("statements") else "is"
    exc = SQLRefused(f"%chaz sql is read-only: {what} {verb} refused ({why}); use SELECT")
    exc.what = what
    return exc


# ------------------------------------------------------------------ the parser layer
_parser_lock = threading.Lock()
_parser_con: duckdb.DuckDBPyConnection | None = None


def _parse_tree(query: str) -> JsonObject | None:
    """DuckDB's parse tree of one SELECT, or None when DuckDB cannot serialize it."""
    global _parser_con
    with _parser_lock:  # one private, locked-down instance: json_serialize_sql only parses
        if _parser_con is None:
            _parser_con = duckdb.connect(":memory:", config=dict(LOCKED_DOWN))
        try:
            text = _parser_con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()[0][0]
        except duckdb.Error:
            return None
    tree = json.loads(text)
    return None if tree.get("error") else tree


def _acting_parts(tree: JSONValue) -> tuple[set[str], set[str]]:
    """(writing statements inside the tree, acting functions it calls)."""
    writes: set[str] = set()
    functions: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str):
                m = _WRITING_NODE.match(kind)
                if m:
                    writes.add(m.group(1).replace("_", " "))
            name = node.get("function_name")
            if isinstance(name, str) and name.lower() in ACTING_FUNCTIONS:
                functions.add(name.lower())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return writes, functions


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) of the tokens of ``text``, comments left out."""
    try:
        marks = duckdb.tokenize(text)
    except (TypeError, duckdb.Error):  # text it cannot encode (a lone surrogate): no tokens
        return []
    out = []
    for i, (start, kind) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(text)
        if kind.name != "comment":
            out.append((kind.name, text[start:end].strip()))
    return out


def _explained(text: str) -> tuple[bool, str]:
    """(whether it is EXPLAIN ANALYZE, the statement explained) of an EXPLAIN statement."""
    marks = [(start, kind) for start, kind in duckdb.tokenize(text) if kind.name != "comment"]
    words = _tokens(text)
    i = 1  # words[0] is EXPLAIN
    analyze = False
    if i < len(words) and words[i][1].lower() in ("analyze", "analyse"):
        analyze, i = True, i + 1
    elif i < len(words) and words[i][1] == "(":  # EXPLAIN (ANALYZE, FORMAT json) ...
        depth = 0
        while i < len(words):
            token = words[i][1]
            depth += token.count("(") - token.count(")")
            analyze = analyze or token.lower() in ("analyze", "analyse")
            i += 1
            if depth <= 0:
                break
    inner = text[marks[i][0]:] if i < len(marks) else ""
    return analyze, inner


def _statement_kind(st: duckdb.Statement) -> str:
    try:
        return st.type.name
    except ValueError:  # a statement type newer than DuckDB's Python enum (UPDATE EXTENSIONS)
        return " ".join(word.upper() for _, word in _tokens(st.query)[:2]) or "unnamed"


def _check_statement(kind: str, text: str) -> None:
    if kind == "SELECT":
        tree = _parse_tree(text)
        if tree is None:
            return  # DuckDB will say what is wrong with it (and refuse any write)
        writes, functions = _acting_parts(tree)
        if writes:
            verb = sorted(writes)[0]
            raise _refused(f"a WITH that runs {verb}", f"the {verb} would run although the statement is a SELECT")
        if functions:
            raise _refused(f"{sorted(functions)[0]}()", "it changes the database, it does not only read it")
        return
    if kind == "EXPLAIN":
        analyze, inner = _explained(text)
        try:
            statements = duckdb.extract_statements(inner)
        except duckdb.Error:
            return  # DuckDB's own message when it runs
        for st in statements:
            inner_kind = _statement_kind(st)
            try:
                _check_statement(inner_kind, st.query)
            except SQLRefused as exc:
                what = exc.what.removesuffix(" statements")
                if analyze:
                    raise _refused(f"EXPLAIN ANALYZE of {what}", "EXPLAIN ANALYZE runs the statement") from None
                raise _refused(f"EXPLAIN of {what}", "it plans a write") from None
        return
    if kind == "PRAGMA":
        words = _tokens(text)
        if len(words) >= 2 and words[0][1].lower() == "pragma" and words[1][1].lower() in ALLOWED_PRAGMAS:
            return
    raise _refused(f"{kind} statements")


def check_read_only(query: str) -> None:
    """Raise SQLRefused unless every statement only reads (the first, clear message)."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise SQLFailed(one_line(exc)) from None
    if not statements:
        raise SQLFailed("no SQL statement given; try: %chaz sql SELECT * FROM runs")
    for st in statements:
        _check_statement(_statement_kind(st), st.query)


# ------------------------------------------------------------------ the database layer
def open_read_only(path: str) -> duckdb.DuckDBPyConnection:
    """Another notebook's store, read-only and locked down like this kernel's."""
    if not os.path.exists(path):
        raise SQLFailed(f"no database file {path}")
    try:
        con = duckdb.connect(path, read_only=True, config=dict(LOCKED_DOWN))
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise SQLFailed(
                f"{path} is held by another kernel, and DuckDB lets no other process read a file "
                "while one writes it; query it from that kernel, or stop it first"
            ) from None
        raise SQLFailed(one_line(exc)) from None
    except duckdb.Error as exc:
        raise SQLFailed(one_line(exc)) from None
    unreplayed = _unreplayed(con, path)
    if unreplayed:
        con.close()
        raise SQLFailed(unreplayed)
    return con


def _unreplayed(con: duckdb.DuckDBPyConnection, path: str) -> str:
    """Why ``path`` cannot be read yet, or "": its journal holds entries DuckDB lacks (the
    kernel that wrote them stopped before their DuckDB commit; opening it read-write replays
    them), and a read of the file alone would miss them."""
    try:
        missing = missing_rows(con, read_rows(journal_path(path)), path)
    except (StoreError, duckdb.Error) as exc:
        return one_line(exc)
    if not missing:
        return ""
    count = sum(len(rows) for _, rows in missing)
    return (f"{journal_path(path)} holds {count} entries not yet in {path} (its kernel stopped before "
            "committing them there): open it read-write once (%load_ext chaz_nb with CHAZ_DB set to "
            "it) to replay them, then query it")


def _fetch_all(con: duckdb.DuckDBPyConnection, query: str) -> list[tuple[object, ...]]:
    return con.execute(query).fetchall()


def _read_only(con: duckdb.DuckDBPyConnection, run: Callable[[], T]) -> T:
    """``run()`` in a read-only transaction of its own on ``con``."""
    with read_only_transaction(con):
        return run()


#: the first line of a result run as a role that may write the store (no reader role)
WRITABLE_ROLE_WARNING = (
    "warning: ran as {role}, a role that may write the audit trail; only the statement check "
    "stood in the way: set CHAZ_DB_READER to a read-only role's URL (docs/guide/postgresql.md)"
)


def _run_on_postgres(query: str, store: Store, max_rows: int) -> QueryResult:
    """On a PostgreSQL store: checked by PostgreSQL's grammar (``pgsqlcheck``), then each
    statement on its own, read-only, as the reader role (``pgreader``)."""
    import psycopg

    from .store.pgsql import PgResult
    from .store.postgres import PgSessionStore

    if not isinstance(store, PgSessionStore):
        raise SQLFailed(f"{store!r} speaks {store.dialect}, not PostgreSQL")

    try:
        from .pgsqlcheck import checked_statements, unqualified_functions
    except ImportError:  # no pglast: nothing runs unchecked
        raise SQLFailed("pglast is not installed, and on PostgreSQL only SQL checked by it runs: "
                        "pip install 'chaz_nb[postgres]'") from None

    statements = checked_statements(query)
    try:
        run = store.run_read_only(statements, unqualified=unqualified_functions(statements))
    except psycopg.Error as exc:
        raise SQLFailed(one_line(exc)) from None
    columns, rows, total = run.results[-1]
    warning = WRITABLE_ROLE_WARNING.format(role=run.role) if run.can_write else ""
    return QueryResult(columns, rows[:max_rows], total, PgResult(columns, rows), store.path, warning)


def run_query(
    query: str,
    store: Store | None = None,
    db: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> QueryResult:
    """Run a read-only query on ``store`` or on the file ``db`` (opened read-only)."""
    if db is None and store is not None and store.dialect == "postgresql":
        return _run_on_postgres(query, store, max_rows)  # PostgreSQL's grammar, not DuckDB's
    check_read_only(query)
    if db is not None and store is not None and os.path.abspath(db) == os.path.abspath(store.path):
        db = None  # our own file: DuckDB would refuse a second connection from this process
    if db is None:
        if not isinstance(store, SessionStore):
            raise SQLFailed("no session store: %load_ext chaz_nb first, or give --db PATH")
        con = store.reader()  # a cursor of its own: its transactions are the query's alone
        source = store.path
    else:
        con = open_read_only(db)
        source = db
    statements = duckdb.extract_statements(query)
    try:
        for st in statements[:-1]:
            _read_only(con, functools.partial(_fetch_all, con, st.query))
        last = statements[-1].query

        def run_last() -> QueryResult:
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
            return QueryResult(columns, rows, total, relation, source)

        return _read_only(con, run_last)
    except duckdb.PermissionException:  # read_csv('/etc/...'), glob(): the instance has no file access
        raise _refused("file access", "it queries the session store only, no other file") from None
    except duckdb.Error as exc:
        raise SQLFailed(one_line(exc)) from None
