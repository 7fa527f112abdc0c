"""The statement check of ``%chaz sql`` on a PostgreSQL store, by PostgreSQL's own grammar.

``checked_statements(query)`` splits the query with ``pglast`` (PostgreSQL's parser, as a
library) and returns the statements to send, one per protocol message, each parsed again alone
and walked node by node. It passes only what it knows:

- a statement is a ``SELECT`` (or ``EXPLAIN`` of one); no ``FOR UPDATE``, no ``SELECT INTO``,
  and no ``INSERT``/``UPDATE``/``DELETE``/``MERGE`` anywhere in it (a ``WITH`` that writes);
- every parse-tree node is of a kind listed in ``NODES`` (expressions, joins, subqueries,
  CTEs, window clauses): a node this list does not know (``XMLTABLE``, ``TABLESAMPLE``, a
  newer grammar's ``JSON_TABLE``) is refused, so a grammar the check has not seen fails closed;
- every function call (in the select list, ``FROM``, ``WHERE``, subqueries, CTEs, ``LATERAL``,
  ``ORDER BY``, window and aggregate clauses alike) names a function of ``PURE_FUNCTIONS``,
  unqualified or in ``pg_catalog``. The list is an allow-list: ``pg_read_file``,
  ``pg_terminate_backend``, ``pg_notify``, advisory locks, ``pg_sleep``, ``set_config``,
  ``current_setting``, ``ts_stat``/``ts_rewrite``/``query_to_xml`` (they run SQL text no check
  sees) are refused because they are not on it, however they are spelled: the parser has
  already decoded ``U&"\\0070g_read_file"`` and ``"PG_READ_FILE"`` is another (missing) name;
- every type named (casts, column definitions) is of ``PURE_TYPES`` (no ``regproc`` & co);
- relations are not system catalogs (``pg_*``); ``information_schema`` is allowed (it shows
  only what the querying role may see).

Operators are not checked: the built-in ones call pure functions, and a new one needs DDL.
The parser reads strings as a server with ``standard_conforming_strings = on`` does; the
reader connection (``pgreader``) sets it so for every statement. pglast may carry a newer
grammar than the server's: what only the newer one knows is a node kind not on ``NODES``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pglast  # the postgres extra; sqlquery says how to install it when it is missing
import pglast.ast
from pglast import parser as _pg_parser

from ..errors import SQLFailed, SQLRefused


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: parse-tree nodes a read-only SELECT is made of
NODES = frozenset({
    "SelectStmt", "ExplainStmt", "DefElem", "ResTarget", "ColumnRef", "A_Star", "A_Const",
    "A_Expr", "A_Indices", "A_Indirection", "A_ArrayExpr", "BoolExpr", "NullTest",
    "BooleanTest", "CaseExpr", "CaseWhen", "CoalesceExpr", "MinMaxExpr", "NullIfExpr",
    "RowExpr", "SubLink", "TypeCast", "TypeName", "CollateClause", "SQLValueFunction",
    "FuncCall", "NamedArgExpr", "WindowDef", "SortBy", "GroupingSet", "GroupingFunc",
    "RangeVar", "RangeSubselect", "RangeFunction", "JoinExpr", "Alias", "ColumnDef",
    "WithClause", "CommonTableExpr", "CTESearchClause", "CTECycleClause",
    "String", "Integer", "Float", "Boolean", "BitString", "List", "RawStmt",
})
#: nodes of a statement that writes (inside a WITH of a SELECT, or on their own)
WRITING_NODES = {"InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE",
                 "MergeStmt": "MERGE"}
_NODE_WHY = {
    "LockingClause": ("SELECT ... FOR UPDATE/SHARE", "it locks rows other kernels write"),
    "IntoClause": ("SELECT INTO", "it creates a table"),
    "ParamRef": ("a $n parameter", "%chaz sql takes no parameters"),
}

#: functions that only compute from their arguments (and the rows read): the only ones that run
PURE_FUNCTIONS = _words("""
    count sum avg min max array_agg string_agg json_agg jsonb_agg json_object_agg
    jsonb_object_agg bool_and bool_or every bit_and bit_or bit_xor stddev stddev_pop
    stddev_samp variance var_pop var_samp corr covar_pop covar_samp regr_avgx regr_avgy
    regr_count regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy
    percentile_cont percentile_disc mode any_value range_agg range_intersect_agg
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value
    nth_value
    length char_length character_length octet_length bit_length lower upper initcap
    substr substring position strpos overlay trim btrim ltrim rtrim lpad rpad replace
    split_part concat concat_ws left right reverse repeat translate ascii chr to_hex
    md5 sha224 sha256 sha384 sha512 encode decode format quote_ident quote_literal
    quote_nullable regexp_replace regexp_match regexp_matches regexp_split_to_array
    regexp_split_to_table regexp_count regexp_instr regexp_like regexp_substr starts_with
    string_to_array string_to_table array_to_string unistr normalize is_normalized
    convert_from convert_to to_ascii similar_to_escape similar_escape like_escape
    abs ceil ceiling floor round trunc sign sqrt cbrt power pow exp ln log log10 mod div
    pi degrees radians sin cos tan asin acos atan atan2 sind cosd tand asind acosd atand
    atan2d sinh cosh tanh asinh acosh atanh width_bucket gcd lcm factorial scale min_scale
    trim_scale random random_normal num_nulls num_nonnulls
    now clock_timestamp statement_timestamp transaction_timestamp timeofday date_trunc
    date_part extract age make_date make_time make_timestamp make_timestamptz
    make_interval justify_days justify_hours justify_interval isfinite to_timestamp
    to_date to_char to_number date_bin timezone overlaps
    to_json to_jsonb row_to_json array_to_json json_build_object jsonb_build_object
    json_build_array jsonb_build_array json_object jsonb_object json_extract_path
    json_extract_path_text jsonb_extract_path jsonb_extract_path_text json_array_length
    jsonb_array_length json_array_elements json_array_elements_text jsonb_array_elements
    jsonb_array_elements_text json_each json_each_text jsonb_each jsonb_each_text
    json_object_keys jsonb_object_keys json_typeof jsonb_typeof jsonb_pretty json_strip_nulls
    jsonb_strip_nulls jsonb_set jsonb_set_lax jsonb_insert jsonb_path_exists jsonb_path_match
    jsonb_path_query jsonb_path_query_array jsonb_path_query_first json_to_record
    json_to_recordset jsonb_to_record jsonb_to_recordset json_populate_record
    jsonb_populate_record json_populate_recordset jsonb_populate_recordset
    array_length array_lower array_upper array_ndims array_dims cardinality array_position
    array_positions array_append array_prepend array_cat array_remove array_replace
    array_fill unnest generate_series generate_subscripts
    coalesce nullif greatest least gen_random_uuid
    pg_typeof pg_size_pretty pg_column_size
    bool int2 int4 int8 float4 float8 numeric text varchar date time timestamp timestamptz
    interval
""")

#: types a value may be cast to (and a column defined as): their input functions are pure
PURE_TYPES = _words("""
    bool boolean int2 int4 int8 smallint integer int bigint float4 float8 real numeric decimal
    text varchar bpchar char character name date time timetz timestamp timestamptz interval
    json jsonb uuid bytea bit varbit inet cidr macaddr money tsvector tsquery record
    int4range int8range numrange daterange tsrange tstzrange
""")

_WHY_FUNCTION = "on PostgreSQL only pure functions run: aggregates, string, math, date/time, JSON"


def _refused(what: str, why: str) -> SQLRefused:
    verb = "are" if what.endswith("statements") else "is"
    exc = SQLRefused(f"%chaz sql is read-only: {what} {verb} refused ({why}); use SELECT")
    exc.what = what
    return exc


def _names(items: Iterable[object] | None) -> list[str]:
    return [getattr(item, "sval", "") for item in items or ()]


def _qualified(names: list[str]) -> str | None:
    """The bare name of ``[pg_catalog.]name``; None for another schema (or a longer path)."""
    if len(names) == 1:
        return names[0]
    if len(names) == 2 and names[0] == "pg_catalog":
        return names[1]
    return None


def _check_function(node: pglast.ast.FuncCall) -> None:
    names = _names(node.funcname)
    name = _qualified(names)
    if name is None or name not in PURE_FUNCTIONS:
        raise _refused(f"{'.'.join(names)}()", _WHY_FUNCTION)


def unqualified_functions(statements: list[str]) -> set[str]:
    """The functions the (checked) statements call without ``pg_catalog.``: PostgreSQL resolves
    them along the search path, where a schema's own overload may win (``pgreader`` looks)."""
    names: set[str] = set()
    for text in statements:
        for raw in pglast.parse_sql(text):
            stack: list[object] = [raw]
            while stack:
                node = stack.pop()
                if isinstance(node, (list, tuple)):
                    stack.extend(node)
                elif isinstance(node, pglast.ast.Node):
                    if isinstance(node, pglast.ast.FuncCall) and len(node.funcname or ()) == 1:
                        names.add(_names(node.funcname)[0])
                    stack.extend(getattr(node, slot) for slot in node)  # (a Node iterates its field names)
    return names


def _check_type(node: pglast.ast.TypeName) -> None:
    names = _names(node.names)
    name = _qualified(names)
    if name is None or name not in PURE_TYPES:
        raise _refused(f"the type {'.'.join(names)}", "casts to it may run code or look up the server's objects")


def _check_relation(node: pglast.ast.RangeVar) -> None:
    catalog, schema, name = node.catalogname, node.schemaname, node.relname or ""
    if catalog or name.startswith("pg_") or (schema or "").startswith("pg_"):
        shown = ".".join(p for p in (catalog, schema, name) if p)
        raise _refused(f"the system catalog {shown}", "it shows other connections and server settings; "
                       "query tool_calls, runs, approvals or messages")


def _walk(tree: object) -> None:
    """Refuse the first node of ``tree`` (a pglast AST) that is not a pure read. Every node is
    an ``ast.Node`` whatever field holds it, so nothing is reached without being looked at."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (list, tuple)):
            stack.extend(reversed(node))
            continue
        if not isinstance(node, pglast.ast.Node):
            continue  # a name, a number, an enum: no node below it
        kind = type(node).__name__
        if kind in WRITING_NODES:
            verb = WRITING_NODES[kind]
            raise _refused(f"a WITH that runs {verb}", f"the {verb} would run although the statement is a SELECT")
        if kind in _NODE_WHY:
            raise _refused(*_NODE_WHY[kind])
        if kind not in NODES:
            raise _refused(_spelled(kind), "on PostgreSQL %chaz sql runs plain SELECTs of the store's views and tables")
        if isinstance(node, pglast.ast.FuncCall):
            _check_function(node)
        elif isinstance(node, pglast.ast.TypeName):
            _check_type(node)
        elif isinstance(node, pglast.ast.RangeVar):
            _check_relation(node)
        slots = list(node)  # a Node iterates its field names (pglast: the keys of its __slots__)
        stack.extend(getattr(node, slot) for slot in reversed(slots))


def _spelled(node_kind: str) -> str:
    """``RangeTableSample`` -> ``the range table sample clause`` (for a one-line message)."""
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", node_kind.removesuffix("Stmt")).lower()
    return f"the {words} clause"


def _first_word(text: str) -> str:
    for token in _pg_parser.scan(text):
        if token.name not in ("SQL_COMMENT", "C_COMMENT"):
            return text[token.start:token.end + 1].upper()  # offsets are characters, end included
    return "unnamed"


def check_statement(text: str) -> None:
    """Refuse ``text`` (one statement) unless it only reads the store."""
    try:
        stmts = pglast.parse_sql(text)
    except pglast.parser.ParseError as exc:
        raise SQLFailed(f"PostgreSQL's parser: {exc}") from None
    if len(stmts) != 1:
        raise _refused("several statements in one", "each statement is checked and sent on its own")
    stmt = stmts[0].stmt
    kind = type(stmt).__name__
    if isinstance(stmt, pglast.ast.ExplainStmt):
        inner = type(stmt.query).__name__
        if inner != "SelectStmt":
            what = WRITING_NODES.get(inner) or _spelled(inner).removeprefix("the ").removesuffix(" clause").upper()
            raise _refused(f"EXPLAIN of {what}", "EXPLAIN ANALYZE runs the statement it explains")
    elif kind != "SelectStmt":
        what = WRITING_NODES.get(kind) or _first_word(text)
        raise _refused(f"{what} statements", "the audit trail cannot be changed")
    _walk(stmt)


def checked_statements(query: str) -> list[str]:
    """The statements of ``query``, each checked on its own (SQLRefused / SQLFailed otherwise)."""
    try:
        pieces = [p for p in pglast.split(query, with_parser=True) if p.strip()]
    except pglast.parser.ParseError as exc:
        raise SQLFailed(f"PostgreSQL's parser: {exc}") from None
    if not pieces:
        raise SQLFailed("no SQL statement given; try: %chaz sql SELECT * FROM runs")
    for piece in pieces:
        check_statement(piece)
    return pieces
