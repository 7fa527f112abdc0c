"""``%chaz sql`` and ``%chaz audit``: the read-only SQL audit trail from a notebook.

``%chaz sql [-o NAME [--relation]] [--db PATH] [--max-rows N] QUERY`` (or ``%%chaz sql
[options]`` with the query as the cell body) runs a read-only query (see ``chaz_nb.core.sqlquery``)
and shows a :class:`SqlTable`: pandas-style HTML in a scrollable box with the row count, long
values folded into ``<details>``, and a plain-text table for saved notebooks and terminals.
Every value is HTML-escaped. Refused writes and bad SQL are one-line ``UsageError``\\ s.
"""

from __future__ import annotations

import keyword
import math
import re
from decimal import Decimal
from typing import Any

from IPython.core.error import UsageError

from .args import CommandParser, unknown_option
from .host import MagicsHost

from ...core.controls import shown_controls
from ..views.display import esc as _esc

SQL_USAGE = "usage: %chaz sql [-o|--out NAME [--relation]] [--db PATH] [--max-rows N] QUERY"
AUDIT_USAGE = "usage: %chaz audit [SESSION]"
SQL_HELP = "\n".join([
    SQL_USAGE,
    "  read-only SQL over the session log's tables and views (entries, sessions, runs, tool_calls, ...)",
    "  -o, --out NAME   also put the result in the variable NAME (a pandas DataFrame)",
    "  --relation       with -o: DuckDB's relation instead of a DataFrame",
    "  --db PATH        query another notebook's DuckDB file, read-only",
    "  --max-rows N     rows shown and kept (default 1,000)",
    "  %%chaz sql [options] puts the query in the cell body",
])

#: characters of a value shown in a table cell before it folds into <details>
CELL_CHARS = 80
#: characters of a folded value shown when it is expanded (the query has all of it)
FULL_CHARS = 20_000
#: characters of a value in the plain-text table
TEXT_CHARS = 40

_OPTION = re.compile(r"""\s*("[^"]*"|'[^']*'|\S+)""")

# No wrapping inside a cell (a column name or a timestamp stays on one line): a wide result
# scrolls sideways in its box, as pandas tables do. Numbers are right-aligned.
_CSS = (
    "<style>"
    ".chaz-sql{max-height:420px;overflow:auto;border:1px solid var(--jp-border-color2,#e0e0e0);"
    "display:block;max-width:100%;width:max-content;box-sizing:border-box}"
    ".chaz-sql table.dataframe{border:none;border-collapse:collapse;font-size:12px;table-layout:auto}"
    ".chaz-sql table.dataframe th,.chaz-sql table.dataframe td{padding:2px 8px;text-align:left;"
    "vertical-align:top;border:none;border-bottom:1px solid var(--jp-border-color3,#eee);"
    "color:var(--jp-content-font-color1,inherit);white-space:nowrap;max-width:none;"
    "text-align:left!important}"
    ".chaz-sql table.dataframe td.chaz-num{text-align:right!important;font-variant-numeric:tabular-nums}"
    ".chaz-sql table.dataframe{margin:0}"
    ".chaz-sql thead th{position:sticky;top:0;background:var(--jp-layout-color1,#fff)}"
    ".chaz-sql .chaz-null{color:var(--jp-ui-font-color3,#999);font-style:italic}"
    ".chaz-sql details pre{margin:2px 0;white-space:pre-wrap;max-width:60em;overflow-wrap:anywhere}"
    ".chaz-sql-warning{color:var(--jp-warn-color0,#a15c00);font-size:12px;margin:2px 0}"
    ".chaz-sql-n{color:var(--jp-ui-font-color2,#666);font-size:11px;margin:2px 0 6px}"
    "</style>"
)




def fmt_number(value: float | Decimal) -> str:
    """A float as a person reads it: ``6.91`` for ``6.9099999999998545``, at most 6 decimals,
    no trailing zeros; scientific notation only for the very large or very small."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return str(value)
    v = float(value)
    if v != 0 and (abs(v) >= 1e15 or abs(v) < 1e-4):
        return f"{v:.6g}"
    text = f"{v:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def _value_text(value: Any) -> str:
    if isinstance(value, bytes):
        return repr(value)
    if isinstance(value, (float, Decimal)):
        return fmt_number(value)
    return str(value)


def _cell_html(value: Any) -> str:
    if value is None:
        return "<span class='chaz-null'>NULL</span>"
    text = _value_text(value)
    if len(text) <= CELL_CHARS and "\n" not in text:
        return _esc(text)
    first = " ".join(text[: CELL_CHARS * 2].split())[:CELL_CHARS]
    full = text if len(text) <= FULL_CHARS else (
        text[:FULL_CHARS] + f"\n… ({len(text) - FULL_CHARS:,} more characters; select this column alone to read them)"
    )
    return f"<details><summary>{_esc(first)}…</summary><pre>{_esc(full)}</pre></details>"


def _cell_text(value: Any) -> str:
    if value is None:
        return "NULL"
    text = " ".join(_value_text(value).split()) if "\n" in _value_text(value) else _value_text(value)
    text = shown_controls(text)  # a tool's ANSI or bidi controls, stored as written, shown as text
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def _td(value: Any) -> str:
    cls = " class='chaz-num'" if _is_number(value) else ""
    return f"<td{cls}>{_cell_html(value)}</td>"


def count_line(shown: int, total: int) -> str:
    if total > shown:
        return f"showing {shown:,} of {total:,} rows"
    return f"{total:,} row" + ("" if total == 1 else "s")


class SqlTable:
    """A query result as a notebook output: ``text/html`` and ``text/plain`` reprs."""

    def __init__(self, columns: list[str], rows: list[tuple], total_rows: int, source: str = "",
                 note: str = "", warning: str = "") -> None:
        self.columns = list(columns)
        self.rows = list(rows)
        self.total_rows = total_rows
        self.source = source
        self.note = note
        #: the first line, above the rows (a query run as a role that may write the store)
        self.warning = warning

    @classmethod
    def from_result(cls, result: Any, note: str = "") -> SqlTable:
        return cls(result.columns, result.rows, result.total_rows, result.source, note,
                   getattr(result, "warning", ""))

    @property
    def truncated(self) -> bool:
        return self.total_rows > len(self.rows)

    def footer(self) -> str:
        parts = [count_line(len(self.rows), self.total_rows)]
        if self.note:
            parts.append(self.note)
        return " · ".join(parts)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{_esc(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(_td(v) for v in row) + "</tr>" for row in self.rows
        )
        warning = f"<div class='chaz-sql-warning'>{_esc(self.warning)}</div>" if self.warning else ""
        return (
            f"{_CSS}{warning}<div class='chaz-sql'><table border='1' class='dataframe'>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            f"<div class='chaz-sql-n'>{_esc(self.footer())}</div>"
        )

    def text(self) -> str:
        grid = [[str(c) for c in self.columns]] + [[_cell_text(v) for v in row] for row in self.rows]
        lines = [self.warning] if self.warning else []
        if self.columns:
            widths = [max(len(r[i]) for r in grid) for i in range(len(self.columns))]
            lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in grid]
        lines.append(f"({self.footer()})")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": self.text(), "text/html": self._repr_html_()}

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())


def _take_options(text: str) -> tuple[list[str], str]:
    """Split the leading ``-x`` options off a line; the query after them is kept verbatim."""
    tokens: list[str] = []
    rest = text
    takes_value = {"-o", "--out", "--db", "--max-rows"}
    while True:
        m = _OPTION.match(rest)
        if m is None:
            break
        token = m.group(1)
        if not token.startswith("-") or token.startswith("--") and len(token) == 2:
            break  # the query (a leading "-- comment" stays part of it)
        if re.match(r"-\d", token):  # a query cannot start with a number anyway
            break
        tokens.append(token)
        rest = rest[m.end():]
        if token in takes_value:
            m = _OPTION.match(rest)
            if m is None:
                break
            value = m.group(1)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            tokens.append(value)
            rest = rest[m.end():]
    return tokens, rest.strip()


def _sql_parser() -> CommandParser:
    p = CommandParser(prog="sql", usage=SQL_USAGE[len("usage: "):], add_help=False)
    p.add_argument("-o", "--out", dest="out")
    p.add_argument("--relation", action="store_true")
    p.add_argument("--db")
    p.add_argument("--max-rows", dest="max_rows", type=int)
    return p


def _fail(exc: BaseException) -> UsageError:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if not msg.startswith("%chaz sql"):
        msg = f"%chaz sql: {msg}"
    return UsageError(msg)


class SqlCommands(MagicsHost):
    """Mixin of ChazMagics: ``_cmd_sql``, ``_cmd_audit``, and ``_sql_cell`` (``%%chaz sql``)."""

    def _cmd_sql(self, rest: str) -> Any:
        options, query = _take_options(rest)
        return self._run_sql(options, query)

    def _sql_cell(self, line: str, cell: str) -> Any:
        options, extra = _take_options(line)
        if extra:
            raise UsageError(
                f"%%chaz sql: the query is the cell body; put only options on the line, not {extra!r}; "
                f"{SQL_USAGE.replace('%chaz', '%%chaz').replace(' QUERY', '')}"
            )
        return self._run_sql(options, cell)

    def _run_sql(self, options: list[str], query: str) -> Any:
        from ...errors import SQLFailed, SQLRefused
        from ...server import DEFAULT_MAX_ROWS, run_query

        if {"-h", "--help"} & set(options) or query.strip() in ("-h", "--help"):
            print(SQL_HELP)
            return None
        args = _sql_parser().parse_args(options)
        if not query.strip():
            raise UsageError(f"%chaz sql: no query; {SQL_USAGE}, e.g. %chaz sql SELECT * FROM runs LIMIT 5")
        if args.out is not None and (not args.out.isidentifier() or keyword.iskeyword(args.out)):
            raise UsageError(f"%chaz sql: -o needs a Python variable name, not {args.out!r}")
        if args.relation and args.out is None:
            raise UsageError("%chaz sql: --relation goes with -o NAME (it puts DuckDB's relation in NAME)")
        max_rows = DEFAULT_MAX_ROWS if args.max_rows is None else args.max_rows
        if max_rows < 1:
            raise UsageError(f"%chaz sql: --max-rows must be at least 1, not {max_rows}")
        store = None
        if args.db is None:
            store = self.state.server.store
        else:
            try:  # --db works without the extension too (reading another notebook's file)
                store = self.state.server.store
            except UsageError:
                store = None
        try:
            result = run_query(query, store, db=args.db, max_rows=max_rows)
        except (SQLFailed, SQLRefused) as exc:
            raise _fail(exc) from None
        note = f"from {args.db}" if args.db is not None and result.source == args.db else ""
        if args.out is not None:
            if args.relation:
                if result.relation is None:
                    raise UsageError("%chaz sql: this statement gives no relation; use -o NAME without --relation")
                value: Any = result.relation
                kind = "DuckDB relation"
            else:
                try:
                    if result.relation is None:
                        import pandas

                        value = pandas.DataFrame(result.rows, columns=result.columns)
                    else:
                        value = result.df()
                except ImportError as exc:
                    raise _fail(exc) from None
                except Exception as exc:  # noqa: BLE001 - duckdb/pandas error while fetching: one line
                    raise _fail(exc) from None
                kind = "DataFrame"
            self.shell.user_ns[args.out] = value
            note = " · ".join(p for p in (note, f"all {result.total_rows:,} in {args.out} ({kind})") if p)
        return SqlTable.from_result(result, note)

    def _cmd_audit(self, rest: str) -> None:
        from ..views.audit import AuditView
        from .turns import parse_session

        state = self.state
        server = state.server
        rest = rest.strip()
        if rest in ("-h", "--help"):
            print(AUDIT_USAGE)
            return
        if rest.startswith("-"):
            raise unknown_option("%chaz audit", rest.split()[0], ["--help"], AUDIT_USAGE)
        session = parse_session(server, rest, None, "audit") if rest else None
        view = AuditView(server.store, session, loop=state.loop)
        state.views.append(view)
        view.display()
        return
