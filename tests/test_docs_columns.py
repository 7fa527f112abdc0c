"""Every column the README and docs/ name exists in the real views, on both stores.

The README once named ``runs.trigger`` and ``tool_calls.error`` (they are
``trigger_entry_id``/``trigger_type`` and ``is_error``). Here every backticked ``view.column``
in README.md and docs/ (and the files the docs include), and every column of the views table
in docs/guide/audit-sql.md, is checked against the columns a fresh store has: DuckDB in memory
and a real PostgreSQL database (the ``backend_store`` fixture).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "bench" / "README.md",
         ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
#: ``sessions.duckdb``, ``agents.md``: file names, not columns
FILE_SUFFIXES = {"md", "py", "ts", "css", "js", "json", "ipynb", "duckdb", "sql", "yml", "yaml", "toml", "txt", "html"}
QUALIFIED = re.compile(r"`(?<![\w.])([a-z_]+)\.([a-z_]+)`")
TABLE_ROW = re.compile(r"^\|\s*`([a-z_]+)`\s*\|[^|]*\|(.*)\|\s*$")


def store_columns(store) -> dict[str, set[str]]:
    rows = store.read(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
    )
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(str(table), set()).add(str(column))
    return out


def named_columns(text: str, relations: set[str]) -> set[tuple[str, str]]:
    """The ``(view, column)`` pairs a page names: backticked ``view.column`` (a view of the
    store, not a file name), and the rows of a ``| `view` | ... | `col`, `col` |`` table."""
    found = {(v, c) for v, c in QUALIFIED.findall(text) if v in relations and c not in FILE_SUFFIXES}
    for line in text.splitlines():
        m = TABLE_ROW.match(line)
        if m and m.group(1) in relations:
            found |= {(m.group(1), c) for c in re.findall(r"`([a-z_]+)`", m.group(2))}
    return found


def unknown(text: str, columns: dict[str, set[str]]) -> list[str]:
    return sorted(f"{v}.{c}" for v, c in named_columns(text, set(columns)) if c not in columns[v])


def test_every_column_the_docs_name_is_in_the_views(backend_store):
    columns = store_columns(backend_store)
    assert {"tool_calls", "runs", "approvals", "messages", "branches"} <= set(columns)
    bad = {str(p.relative_to(ROOT)): unknown(p.read_text(), columns) for p in PAGES if p.exists()}
    assert {page: names for page, names in bad.items() if names} == {}
    named = set().union(*(named_columns(p.read_text(), set(columns)) for p in PAGES if p.exists()))
    # the ones the issue found wrong are named, rightly
    assert {("runs", "trigger_entry_id"), ("runs", "trigger_type"), ("tool_calls", "is_error")} <= named


def test_the_check_catches_the_names_the_readme_once_had(backend_store):
    columns = store_columns(backend_store)
    old = "Filter `runs.trigger` or `tool_calls.error`; see `agents.md` and `sessions.duckdb`.\n" \
          "| `runs` | run | `trigger`, `status` |"
    assert unknown(old, columns) == ["runs.trigger", "tool_calls.error"]
