import os
import re
import subprocess
import sys
import textwrap

import duckdb
import pytest

from chaz_nb.core import sqlquery
from chaz_nb.core.entries import EntryType
from chaz_nb.core.sqlquery import SQLFailed, SQLRefused, check_read_only, run_query
from chaz_nb.core.store import SessionStore


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


# ------------------------------------------------------------------ every statement type
# Each DuckDB statement type with statements that would change the store, its settings or the
# file system if they ran. "{out}" is a directory that must stay empty.
NO_SQL_FORM = {"INVALID", "RELATION", "LOGICAL_PLAN", "EXTENSION"}  # not reachable from SQL text
#: types whose SQL DuckDB's parser reports under another type (SET VARIABLE is a SET, ...)
PARSED_AS = {"VARIABLE_SET": "SET", "CREATE_FUNC": "CREATE", "COPY_DATABASE": "PRAGMA", "ANALYZE": "VACUUM"}
WRITES = {
    "SELECT": [
        "WITH d AS (DELETE FROM entries RETURNING id) SELECT count(*) FROM d",
        "WITH d AS (UPDATE entries SET content = 'changed' RETURNING id) SELECT * FROM d",
        "WITH d AS (INSERT INTO sessions (id, agent, kind, depth) VALUES (99, 'x', 'chat', 0) RETURNING id) "
        "SELECT * FROM d",
        "SELECT * FROM (WITH d AS (DELETE FROM entries RETURNING id) SELECT * FROM d) AS x",
        "WITH c AS (COPY entries TO '{out}/cte.csv') SELECT * FROM c",
        "SELECT * FROM checkpoint()",
    ],
    "INSERT": ["INSERT INTO sessions (id, agent, kind, depth) VALUES (99, 'x', 'chat', 0)"],
    "UPDATE": ["UPDATE entries SET content = 'changed'"],
    "CREATE": ["CREATE OR REPLACE VIEW tool_calls AS SELECT 1 AS x", "CREATE TABLE t AS SELECT 1",
               "CREATE MACRO m(a) AS a", "CREATE SEQUENCE s"],
    "DELETE": ["DELETE FROM entries", "SELECT 1; DELETE FROM entries"],
    "PREPARE": ["PREPARE p AS DELETE FROM entries"],
    "EXECUTE": ["PREPARE p AS SELECT 1; EXECUTE p; DELETE FROM entries"],
    "ALTER": ["ALTER TABLE entries RENAME TO gone", "ALTER TABLE entries ADD COLUMN x INT"],
    "TRANSACTION": ["COMMIT; DELETE FROM entries", "BEGIN; DELETE FROM entries; COMMIT",
                    "ROLLBACK; UPDATE entries SET content = 'changed'"],
    "COPY": ["COPY entries TO '{out}/entries.csv'", "COPY entries FROM '{src}'",
             "COPY (SELECT * FROM entries) TO '{out}/entries.parquet' (FORMAT parquet)"],
    "ANALYZE": ["ANALYZE entries"],
    "VARIABLE_SET": ["SET VARIABLE x = 1"],
    "CREATE_FUNC": ["CREATE FUNCTION f(a) AS a"],
    "EXPLAIN": [
        "EXPLAIN ANALYZE DELETE FROM entries",
        "EXPLAIN ANALYZE UPDATE entries SET content = 'changed'",
        "EXPLAIN ANALYZE INSERT INTO sessions (id, agent, kind, depth) VALUES (99, 'x', 'chat', 0)",
        "EXPLAIN ANALYZE COPY entries TO '{out}/explained.csv'",
        "EXPLAIN (ANALYZE, FORMAT json) DELETE FROM entries",
        "/* why */ explain analyze\nWITH d AS (DELETE FROM entries RETURNING id) SELECT * FROM d",
        "EXPLAIN DELETE FROM entries",
    ],
    "DROP": ["DROP VIEW runs", "DROP TABLE entries CASCADE"],
    "EXPORT": ["EXPORT DATABASE '{out}/export'"],
    "PRAGMA": ["PRAGMA force_checkpoint", "PRAGMA enable_profiling", "COPY FROM DATABASE memory TO other",
               "IMPORT DATABASE '{out}'"],
    "VACUUM": ["VACUUM entries"],
    "CALL": ["CHECKPOINT", "CALL force_checkpoint()"],
    "SET": ["SET threads = 1", "SET memory_limit = '1MB'", "SET VARIABLE x = 1",
            "SET profiling_output = '{out}/profile.json'", "RESET threads"],
    "LOAD": ["LOAD '{out}/evil.duckdb_extension'", "INSTALL '{out}/evil.duckdb_extension'"],
    "ATTACH": ["ATTACH '{out}/new.duckdb' AS other"],
    "DETACH": ["DETACH DATABASE IF EXISTS other"],
    "MULTI": ["PIVOT entries ON entry_type"],
    "COPY_DATABASE": ["ATTACH '{out}/copy.duckdb' AS other; COPY FROM DATABASE memory TO other",
                      "ATTACH ':memory:' AS other; COPY FROM DATABASE memory TO other"],
    "MERGE_INTO": [
        "MERGE INTO entries USING (SELECT 1 AS id) AS s ON s.id = entries.id WHEN MATCHED THEN DELETE",
    ],
}
CASES = [(kind, q) for kind, queries in WRITES.items() for q in queries]


def test_every_statement_type_has_a_case():
    types = set(duckdb.StatementType.__members__)
    assert types - NO_SQL_FORM <= set(WRITES), "a new DuckDB statement type needs cases here"
    for kind, query in CASES:  # each case has a statement of the type it is listed under
        kinds = {st.type.name for st in duckdb.extract_statements(query.format(out="o", src="s.csv"))}
        assert kind in kinds or kind in PARSED_AS, (kind, query, kinds)


@pytest.fixture(scope="module", params=["memory", "file", "--db"])
def shared_store(request, tmp_path_factory):
    """A store with 3 entries (shared by the module's tests: each checks it is unchanged)."""
    path = ":memory:" if request.param == "memory" else str(tmp_path_factory.mktemp("store") / "s.duckdb")
    store = SessionStore(path)
    s = store.create_session("alice")
    for i in range(3):
        store.append(s, EntryType.MESSAGE, "user", f"m{i}")
    if request.param == "--db":  # another notebook's file: closed here, opened read-only by --db
        store.close()
        with SessionStore(path, read_only=True) as ro:
            before = _state(ro)
        yield None, path, before
    else:
        yield store, None, _state(store)
        store.close()


@pytest.fixture
def target(shared_store, tmp_path, monkeypatch):
    """(store, db, an empty directory that must stay empty, a CSV to copy from, the store's state)."""
    store, db, before = shared_store
    out = tmp_path / "out"
    out.mkdir()
    src = tmp_path / "in.csv"
    src.write_text("id\n1\n")
    monkeypatch.chdir(out)  # relative paths land in out/ too
    yield store, db, out, src, before
    if db is not None:
        with SessionStore(db, read_only=True) as ro:
            assert _state(ro) == before


def _state(store: SessionStore) -> tuple:
    """What a write would change: rows, catalog, settings, attached databases."""
    return (
        store.execute("SELECT id, session_id, seq, content FROM entries ORDER BY id"),
        store.execute("SELECT id, agent FROM sessions ORDER BY id"),
        store.execute("SELECT table_name, table_type FROM information_schema.tables ORDER BY ALL"),
        store.execute("SELECT function_name FROM duckdb_functions() WHERE NOT internal ORDER BY ALL"),
        store.execute("SELECT sequence_name FROM duckdb_sequences()"),
        store.execute("SELECT name, value FROM duckdb_settings() WHERE name IN ('threads', 'memory_limit', "
                      "'enable_external_access', 'lock_configuration', 'enable_profiling', 'profiling_output') "
                      "ORDER BY name"),
        store.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal ORDER BY ALL"),
    )


@pytest.mark.parametrize("kind, query", CASES)
def test_the_parser_refuses_every_write_in_one_line(kind, query):
    with pytest.raises(SQLRefused) as info:
        check_read_only(query.format(out="out", src="in.csv"))
    message = str(info.value)
    assert message.startswith("%chaz sql is read-only: ") and message.endswith("; use SELECT")
    assert "\n" not in message


@pytest.mark.parametrize("kind, query", CASES)
def test_the_database_refuses_every_write_the_parser_might_miss(target, monkeypatch, kind, query):
    store, db, out, src, before = target
    monkeypatch.setattr(sqlquery, "check_read_only", lambda q: None)  # only the database stands guard
    try:
        run_query(query.format(out=out, src=src), store, db=db)
    except (SQLFailed, SQLRefused) as exc:  # DuckDB's refusal, or no file access
        assert "\n" not in str(exc)
    assert sorted(os.listdir(out)) == []  # no COPY/EXPORT/ATTACH/profile file
    if store is not None:
        assert _state(store) == before


@pytest.mark.parametrize(
    "query, message",
    [
        ("WITH d AS (DELETE FROM entries RETURNING id) SELECT count(*) FROM d",
         "a WITH that runs DELETE is refused"),
        ("EXPLAIN ANALYZE DELETE FROM entries", "EXPLAIN ANALYZE of DELETE is refused (EXPLAIN ANALYZE runs"),
        ("EXPLAIN ANALYZE COPY entries TO 'x.csv'", "EXPLAIN ANALYZE of COPY is refused"),
        ("EXPLAIN ANALYZE UPDATE entries SET content = ''", "EXPLAIN ANALYZE of UPDATE is refused"),
        ("SELECT * FROM checkpoint()", "checkpoint() is refused"),
    ],
)
def test_hidden_writes_are_named_in_the_message(filled, tmp_path, monkeypatch, query, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SQLRefused, match=re.escape(message)):
        run_query(query, filled)
    assert filled.sql("SELECT count(*) FROM entries").fetchall() == [(5,)]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "query",
    [
        "EXPLAIN SELECT * FROM tool_calls",
        "EXPLAIN ANALYZE SELECT count(*) FROM entries",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
        "SUMMARIZE entries",
        "DESCRIBE entries",
        "SHOW TABLES",
        "PRAGMA table_info('entries')",
        "/* a comment */ PRAGMA version",
        "SELECT 'DELETE FROM entries' AS text",
        "SELECT * FROM duckdb_tables()",
    ],
)
def test_reads_still_run(filled, query):
    assert run_query(query, filled).columns


def test_a_relation_handed_back_reads_the_current_store(filled):
    result = run_query("SELECT count(*) FROM entries", filled)
    filled.append(1, EntryType.MESSAGE, "user", "later")
    assert result.relation.fetchall() == [(6,)]  # not held in an old snapshot


def test_reading_a_file_is_refused_in_one_line(filled, tmp_path):
    (tmp_path / "x.csv").write_text("a\n1\n")
    refused = r"^%chaz sql is read-only: file access is refused \(it queries the session store"
    with pytest.raises(SQLRefused, match=refused):
        run_query(f"SELECT * FROM read_csv('{tmp_path / 'x.csv'}')", filled)


@pytest.mark.parametrize("query", [
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
    "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity",
    "SELECT pg_read_file('PG_VERSION')",
    "SELECT pg_advisory_lock(1), pg_sleep(0)",
    "SELECT query_to_xml('SELECT pg_terminate_backend(pid) FROM pg_stat_activity', true, true, '')",
    "SELECT rolname, rolpassword FROM pg_authid",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "EXPLAIN SELECT pg_sleep(10)",
    # migration 011's sequences: nextval/setval write, and a NOTIFY wakes every kernel's fire loop
    "SELECT nextval('schedules_id_seq')",
    "SELECT pg_catalog.NEXTVAL('schedules_id_seq'::regclass)",
    "SELECT setval('schedules_id_seq', 1)",
    "SELECT pg_notify('chaz_schedules', 'x')",
])
def test_chaz_sql_on_postgres_refuses_server_functions_and_catalogs(pg_url, query):
    """READ ONLY does not stop these: one ends another kernel's lease connection (its sessions
    would be taken over while it runs them), others read the server's files and roles."""
    with SessionStore.open(pg_url) as serving, SessionStore.open(pg_url) as querying:
        sid = serving.create_session("alice")
        assert serving.claim(sid)
        with pytest.raises(SQLRefused, match="read-only: .* refused"):
            run_query(query, querying)
        assert querying.held_elsewhere(sid), "the serving kernel lost its lease"


def test_chaz_sql_on_postgres_still_reads_the_store_with_ordinary_sql(pg_url):
    with SessionStore.open(pg_url) as store:
        sid = store.create_session("alice")
        store.append(sid, EntryType.MESSAGE, "user", '{"a": 1}')
        result = run_query("SELECT pg_typeof(seq)::text, content::jsonb ->> 'a', now() > now() - interval '1 day' "
                           "FROM entries", store)
        assert result.rows == [("bigint", "1", True)]
        columns = run_query("SELECT count(*) FROM information_schema.columns WHERE table_name = 'runs'", store)
        assert columns.rows[0][0] > 0


def test_text_the_tokenizer_cannot_take_has_no_tokens():
    """A lone surrogate (a model's JSON can carry ``"\\ud800"``) is a TypeError in DuckDB's
    binding: the statement check reads no tokens from it, and the query's own error comes when it
    runs (the catch is that TypeError and DuckDB's errors, nothing broader)."""
    from chaz_nb.server.kernel.query import referenced_names

    assert sqlquery._tokens("SELECT '\ud800'") == []
    assert referenced_names("SELECT x FROM \ud800") == set()
    assert referenced_names("SELECT total FROM sales") >= {"total", "sales"}
