import subprocess
import sys
import textwrap

import pytest

from chaz_nb.entries import EntryType
from chaz_nb.sqlquery import SQLFailed, SQLRefused, run_query
from chaz_nb.store import SessionStore


@pytest.fixture
def filled(store):
    s = store.create_session("alice")
    for i in range(5):
        store.append(s, EntryType.MESSAGE, "user", f"m{i}")
    return store


def test_select_returns_columns_rows_and_count(filled):
    result = run_query("SELECT seq, content FROM entries ORDER BY seq", filled)
    assert result.columns == ["seq", "content"]
    assert result.rows[0] == (1, "m0") and result.total_rows == 5 and not result.truncated


def test_long_results_are_truncated_with_the_true_count(filled):
    result = run_query("SELECT * FROM range(5000)", filled, max_rows=100)
    assert len(result.rows) == 100 and result.total_rows == 5000 and result.truncated


@pytest.mark.parametrize(
    "query, kind",
    [
        ("INSERT INTO entries (id) VALUES (99)", "INSERT"),
        ("UPDATE entries SET content = 'x'", "UPDATE"),
        ("DELETE FROM entries", "DELETE"),
        ("DROP VIEW runs", "DROP"),
        ("ALTER TABLE entries ADD COLUMN x INT", "ALTER"),
        ("ATTACH 'other.duckdb'", "ATTACH"),
        ("SELECT 1; DELETE FROM entries", "DELETE"),
        ("CREATE TABLE t AS SELECT 1", "CREATE"),
        ("COPY entries TO 'out.csv'", "COPY"),
        ("CHECKPOINT", "CALL"),
    ],
)
def test_writes_are_refused_in_one_line_and_change_nothing(filled, query, kind):
    with pytest.raises(SQLRefused) as info:
        run_query(query, filled)
    assert str(info.value).startswith(f"%chaz sql is read-only: {kind} statements are refused")
    assert "\n" not in str(info.value)
    assert filled.sql("SELECT count(*) FROM entries").fetchall() == [(5,)]


def test_bad_sql_gives_duckdbs_message_in_one_line(filled):
    with pytest.raises(SQLFailed) as info:
        run_query("SELECT nope FROM entries", filled)
    assert "nope" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(SQLFailed):
        run_query("SELEC 1", filled)
    with pytest.raises(SQLFailed, match="no SQL statement"):
        run_query("  ", filled)


def test_another_notebooks_store_is_queried_read_only(tmp_path):
    path = str(tmp_path / "other.duckdb")
    with SessionStore(path) as other:
        s = other.create_session("bob")
        other.append(s, EntryType.MESSAGE, "user", "from the other notebook")
    result = run_query("SELECT content FROM messages", db=path)
    assert result.rows == [("from the other notebook",)]


def test_held_file_says_so(tmp_path):
    path = str(tmp_path / "held.duckdb")
    SessionStore(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, duckdb
            con = duckdb.connect({path!r}); print("ready", flush=True); sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(SQLFailed, match="held by another kernel"):
            run_query("SELECT 1", db=path)
    finally:
        holder.communicate("\n", timeout=30)


def test_own_file_given_as_db_uses_the_open_store(tmp_path):
    path = str(tmp_path / "own.duckdb")
    with SessionStore(path) as own:
        assert run_query("SELECT 42", own, db=path).rows == [(42,)]


def test_missing_pandas_gives_the_install_hint(filled, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas":
            raise ImportError("no pandas")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(ImportError, match=r"pip install 'chaz_nb\[pandas\]'"):
        run_query("SELECT 1", filled).df()
