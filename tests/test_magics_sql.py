"""%chaz sql / %%chaz sql through IPython's test shell (globalipapp), with an in-memory store."""

from __future__ import annotations

import duckdb
import pytest

import chaz_nb
from chaz_nb.notebook.magics.sql import CELL_CHARS, SqlTable, _take_options
from chaz_nb.core.store import SessionStore

from ipython_harness import ip, one_line_error
EVIL = "<script>alert('x')</script>"


@pytest.fixture
def chaz(chaz):
    yield chaz
    for name in ("df", "rel", "big", "evil_df"):
        ip.user_ns.pop(name, None)


def sql(line: str) -> SqlTable:
    return ip.run_line_magic("chaz", "sql " + line)


def count_entries(server) -> int:
    return server.store.execute("SELECT count(*) FROM entries")[0][0]


# ------------------------------------------------------------------ options
@pytest.mark.parametrize(
    "line, options, query",
    [
        ("SELECT 1", [], "SELECT 1"),
        ("-o df SELECT 1", ["-o", "df"], "SELECT 1"),
        (
            "--db 'my file.duckdb' --max-rows 5 SELECT '-o'",
            ["--db", "my file.duckdb", "--max-rows", "5"],
            "SELECT '-o'",
        ),
        ("-o rel --relation  select  'a  b'", ["-o", "rel", "--relation"], "select  'a  b'"),
        ("-- a comment\nSELECT 1", [], "-- a comment\nSELECT 1"),
    ],
)
def test_options_come_first_and_the_query_is_kept_verbatim(line, options, query):
    assert _take_options(line) == (options, query)


# ------------------------------------------------------------------ results
def test_result_table_has_html_and_text_with_the_row_count(chaz):
    ip.run_line_magic("chaz", "@assistant hello")
    table = sql("SELECT seq, entry_type, sender, content FROM entries ORDER BY seq")
    assert isinstance(table, SqlTable)
    assert table.columns == ["seq", "entry_type", "sender", "content"]
    assert [r[1] for r in table.rows] == ["Message", "Ack", "Message"]
    html = table._repr_html_()
    assert "<table" in html and "class='dataframe'" in html and "<th>entry_type</th>" in html
    assert "overflow:auto" in html  # scrollable
    assert "3 rows" in html and not table.truncated
    text = table.text()
    assert text.splitlines()[0].split() == ["seq", "entry_type", "sender", "content"]
    assert "echo: hello" in text and text.endswith("(3 rows)")
    # IPython shows it as the cell's result, with both reprs
    fmt = ip.display_formatter.format(table)[0]
    assert "text/html" in fmt and "text/plain" in fmt and fmt["text/plain"] == text


def test_one_row_and_no_rows(chaz):
    assert "(1 row)" in sql("SELECT 1 AS x").text()
    empty = sql("SELECT * FROM tool_calls")
    assert empty.rows == [] and "0 rows" in empty._repr_html_()
    assert "<th>tool</th>" in empty._repr_html_()


def test_truncation_shows_n_of_total(chaz):
    table = sql("--max-rows 10 SELECT range AS i FROM range(2500)")
    assert len(table.rows) == 10 and table.total_rows == 2500 and table.truncated
    assert "showing 10 of 2,500 rows" in table._repr_html_()
    assert "showing 10 of 2,500 rows" in table.text()
    default = sql("SELECT range AS i FROM range(2500)")
    assert len(default.rows) == 1000 and "showing 1,000 of 2,500 rows" in default.text()


def test_long_values_fold_with_the_full_value_on_expand(chaz):
    long = "word " * 100
    table = sql(f"SELECT '{long}' AS long, 'short' AS short, NULL AS nothing")
    html = table._repr_html_()
    assert html.count("<details>") == 1
    summary = html.split("<summary>")[1].split("</summary>")[0]
    assert summary.endswith("…") and len(summary) <= CELL_CHARS + 1
    assert f"<pre>{long}</pre>" in html  # the full value
    assert "NULL" in html and "chaz-null" in html
    assert len(max(table.text().splitlines()[1].split("  "), key=len)) <= 40


def test_every_value_and_column_is_escaped(chaz):
    server = chaz
    sid = server.store.create_session("assistant")
    server.store.append(sid, chaz_nb.EntryType.MESSAGE, "user", EVIL)
    server.store.append(sid, chaz_nb.EntryType.MESSAGE, "user", EVIL + " " * 100 + EVIL)
    table = sql(f"SELECT content AS \"{EVIL}\" FROM entries ORDER BY id")
    html = table._repr_html_()
    assert "<script" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert EVIL in table.text()  # the plain text is shown as text


# ------------------------------------------------------------------ -o
def test_o_puts_a_dataframe_in_the_namespace(chaz):
    pandas = pytest.importorskip("pandas")
    ip.run_line_magic("chaz", "@assistant hello")
    table = sql("-o df --max-rows 1 SELECT seq, sender FROM entries ORDER BY seq")
    df = ip.user_ns["df"]
    assert isinstance(df, pandas.DataFrame)
    assert list(df.columns) == ["seq", "sender"] and len(df) == 3  # all rows, not only those shown
    assert list(df["sender"]) == ["user", "assistant", "assistant"]
    assert "all 3 in df (DataFrame)" in table.text()


def test_o_without_pandas_is_a_one_line_message(chaz, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    one_line_error(capsys, "%chaz sql -o df SELECT 1", "pip install 'chaz_nb[pandas]'")
    assert "df" not in ip.user_ns


def test_o_relation_of_a_hidden_write_is_never_handed_out(chaz, capsys, monkeypatch):
    """Even past the parser, the relation is made inside the read-only transaction, which refuses it."""
    from chaz_nb.core import sqlquery

    ip.run_line_magic("chaz", "@assistant hello")
    monkeypatch.setattr(sqlquery, "check_read_only", lambda query: None)
    one_line_error(capsys, "%chaz sql -o rel --relation WITH d AS (DELETE FROM entries RETURNING id) SELECT * FROM d",
                   "read-only")
    assert "rel" not in ip.user_ns
    assert count_entries(chaz) == 3


def test_o_relation_is_duckdbs_relation(chaz):
    ip.run_line_magic("chaz", "@assistant hello")
    sql("-o rel --relation SELECT seq FROM entries ORDER BY seq")
    rel = ip.user_ns["rel"]
    assert isinstance(rel, duckdb.DuckDBPyRelation)
    assert rel.fetchall() == [(1,), (2,), (3,)]


def test_bad_options_are_one_line(chaz, capsys):
    one_line_error(capsys, "%chaz sql", "%chaz sql: no query")
    one_line_error(capsys, "%chaz sql -o 1x SELECT 1", "-o needs a Python variable name")
    one_line_error(capsys, "%chaz sql --relation SELECT 1", "--relation goes with -o NAME")
    one_line_error(capsys, "%chaz sql --max-rows many SELECT 1", "invalid int value")
    one_line_error(capsys, "%chaz sql --max-rows 0 SELECT 1", "--max-rows must be at least 1")
    one_line_error(capsys, "%chaz sql --frob SELECT 1", "unrecognized arguments: --frob")


# ------------------------------------------------------------------ --db
def test_db_queries_another_notebooks_file_read_only(chaz, tmp_path, capsys):
    path = str(tmp_path / "other.duckdb")
    other = SessionStore(path)
    sid = other.create_session("researcher")
    other.append(sid, chaz_nb.EntryType.MESSAGE, "user", "from the other notebook")
    other.close()
    table = sql(f"--db {path} SELECT sender, content FROM messages")
    assert table.rows == [("user", "from the other notebook")]
    assert f"from {path}" in table.text()
    # read-only: a write is refused before it runs, and the file is unchanged
    one_line_error(capsys, f"%chaz sql --db {path} DELETE FROM entries", "read-only")
    assert sql(f"--db {path} SELECT count(*) FROM entries").rows == [(1,)]
    # this kernel's own store is untouched
    assert count_entries(chaz) == 0
    one_line_error(capsys, f"%chaz sql --db {tmp_path / 'nope.duckdb'} SELECT 1", "no database file")


# ------------------------------------------------------------------ refused writes, bad SQL
@pytest.mark.parametrize(
    "query",
    [
        "INSERT INTO sessions VALUES (99, 'x', 'chat', NULL, 0, now())",
        "DELETE FROM entries",
        "DROP TABLE entries",
        "DROP VIEW tool_calls",
        "UPDATE entries SET content = 'x'",
        "ALTER TABLE entries ADD COLUMN x INT",
        "ATTACH ':memory:' AS other",
        "SELECT 1; DELETE FROM entries",
        "CREATE TABLE t AS SELECT 1",
        "WITH d AS (DELETE FROM entries RETURNING id) SELECT count(*) FROM d",
        "EXPLAIN ANALYZE DELETE FROM entries",
        "EXPLAIN ANALYZE UPDATE entries SET content = 'x'",
        "EXPLAIN ANALYZE COPY entries TO 'copied.csv'",
        "WITH c AS (COPY entries TO 'copied.csv') SELECT * FROM c",
        "COPY entries TO 'copied.csv'",
        "EXPORT DATABASE 'exported'",
    ],
)
def test_writes_are_refused_in_one_line_and_change_nothing(chaz, capsys, tmp_path, monkeypatch, query):
    monkeypatch.chdir(tmp_path)
    ip.run_line_magic("chaz", "@assistant hello")
    before = count_entries(chaz)
    err = one_line_error(capsys, f"%chaz sql {query}", "%chaz sql is read-only")
    assert "%chaz sql: %chaz sql" not in err
    assert count_entries(chaz) == before
    assert chaz.store.execute("SELECT count(*) FROM sessions")[0][0] == 1
    assert {r[0] for r in chaz.store.execute("SELECT database_name FROM duckdb_databases()")} >= {"memory"}
    assert "other" not in {r[0] for r in chaz.store.execute("SELECT database_name FROM duckdb_databases()")}
    assert list(tmp_path.iterdir()) == []  # no file written


def test_bad_sql_is_one_line(chaz, capsys):
    one_line_error(capsys, "%chaz sql SELEC 1", "%chaz sql: Parser Error")
    one_line_error(capsys, "%chaz sql SELECT * FROM nowhere", "%chaz sql: Catalog Error")
    one_line_error(capsys, "%chaz sql SELECT no_such_column FROM entries", "%chaz sql: Binder Error")


# ------------------------------------------------------------------ %%chaz sql
def test_cell_form_takes_the_body_as_the_query(chaz):
    ip.run_line_magic("chaz", "@assistant hello")
    table = ip.run_cell_magic("chaz", "sql", "SELECT sender, content\nFROM entries\nWHERE seq = 3\n")
    assert table.rows == [("assistant", "echo: hello")]
    ip.run_cell_magic("chaz", "sql -o df --max-rows 1", "SELECT seq FROM entries ORDER BY seq")
    if "df" in ip.user_ns:  # pandas installed
        assert len(ip.user_ns["df"]) == 3


def test_cell_form_errors(chaz, capsys):
    one_line_error(capsys, "%%chaz sql SELECT 1\nSELECT 2", "the query is the cell body")
    one_line_error(capsys, "%%chaz sql\nDROP TABLE entries", "%chaz sql is read-only")
    one_line_error(capsys, "%%chaz sql\n\n", "no query")
    result = ip.run_cell("%%chaz sql\nSELECT 41 + 1 AS answer")
    assert result.error_in_exec is None and result.result.rows == [(42,)]


# ------------------------------------------------------------------ %chaz audit
def test_audit_magic_shows_the_tool_calls_and_unload_unsubscribes(chaz, capsys):
    from chaz_nb.notebook import extension
    from chaz_nb.notebook.views.audit import AuditView

    ip.run_cell(
        "import chaz_nb\n@chaz_nb.tool\ndef add(a: int, b: int) -> int:\n    '''Add.'''\n    return a + b\n"
    ).raise_error()
    ip.run_line_magic(
        "chaz",
        "agent calc --model chaz/script --tools add "
        """--script '[{"tool": "add", "args": {"a": 2, "b": 3}}, "{result}"]'""",
    )
    ip.run_line_magic("chaz", "@calc add")
    capsys.readouterr()
    subscribers = len(chaz.store._subscribers)
    assert ip.run_line_magic("chaz", "audit") is None
    out = capsys.readouterr().out
    assert "tool calls · all sessions" in out and "1 call · 0 errors" in out and '{"a": 2, "b": 3} → 5' in out
    view = extension.current_state().views[-1]
    assert isinstance(view, AuditView) and view.following
    assert len(chaz.store._subscribers) == subscribers + 1
    ip.run_line_magic("chaz", "audit @calc")
    assert extension.current_state().views[-1].session == chaz.current_session("calc")
    one_line_error(capsys, "%chaz audit 99", "there is no session 99")
    one_line_error(capsys, "%chaz audit --bogus", "unknown option --bogus")
    ip.run_line_magic("unload_ext", "chaz_nb")
    assert not view.following
    ip.run_line_magic("load_ext", "chaz_nb")  # for the fixture's unload


def test_cells_do_not_wrap_and_floats_are_formatted(chaz):
    """Issue 26 §5: a 16-column result broke words (``ses/sio/n_i/d``) and showed
    ``6.9099999999998545``: cells stay on one line (the box scrolls sideways) and numbers read."""
    from decimal import Decimal

    from chaz_nb.notebook.magics.sql import _CSS, fmt_number

    table = sql("SELECT 6.9099999999998545::DOUBLE AS duration_ms, 3 AS n, 'x' AS s, 0.1 + 0.2 AS f")
    html = table._repr_html_()
    assert "6.9099999999998545" not in html and "<td class='chaz-num'>6.91</td>" in html
    assert "<td class='chaz-num'>3</td>" in html and "<td>x</td>" in html
    assert "6.91" in table.text() and "0.3" in table.text().splitlines()[1]
    cell_rule = _CSS.split("table.dataframe td{")[1].split("}")[0]
    assert "white-space:nowrap" in cell_rule and "word-break" not in cell_rule
    assert "overflow:auto" in _CSS.split(".chaz-sql{")[1].split("}")[0]
    assert fmt_number(1e-7) == "1e-07" and fmt_number(2.5e16) == "2.5e+16"
    assert fmt_number(Decimal("1.50")) == "1.5" and fmt_number(-0.0) == "0" and fmt_number(12.0) == "12"
