"""The statement check of %chaz sql on PostgreSQL, alone (no server): PostgreSQL's grammar,
an allow-list of pure functions, node kinds and types. Attacks on a real server: test_sqlquery_pg."""

import pytest

from chaz_nb.core.pgsqlcheck import PURE_FUNCTIONS, checked_statements
from chaz_nb.errors import SQLFailed, SQLRefused


@pytest.mark.parametrize("query, named", [
    ("SELECT U&\"\\0070g_read_file\"('x')", "pg_read_file()"),
    ("SELECT U&\"set\\005fconfig\"('a', 'b', false)", "set_config()"),
    ("SELECT \"pg_sleep\"(1)", "pg_sleep()"),
    ("SELECT \"LOWER\"('A')", "LOWER()"),  # a quoted upper-case name is another function
    ("SELECT public.lower('A')", "public.lower()"),  # only pg_catalog's own
    ("SELECT current_setting('data_directory')", "current_setting()"),
    ("SELECT * FROM ts_stat('SELECT 1')", "ts_stat()"),
    ("SELECT 'pg_sleep'::regproc", "the type regproc"),
    ("SELECT * FROM jsonb_to_record('{}') AS t(a regclass)", "the type regclass"),
    ("SELECT * FROM pg_catalog.pg_authid", "the system catalog pg_catalog.pg_authid"),
    ("SELECT * FROM U&\"\\0070g_stat_activity\"", "the system catalog pg_stat_activity"),
    ("SELECT * INTO t FROM entries", "SELECT INTO"),
    ("SELECT 1 FOR SHARE", "SELECT ... FOR UPDATE/SHARE"),
    ("SELECT $1", "a $n parameter"),
    ("WITH d AS (UPDATE entries SET content = '' RETURNING 1) SELECT 1", "a WITH that runs UPDATE"),
    ("EXPLAIN ANALYZE DELETE FROM entries", "EXPLAIN of DELETE"),
    ("/* hi */ notify x", "NOTIFY statements"),
    ("SELECT * FROM entries TABLESAMPLE bernoulli(1)", "the range table sample clause"),
])
def test_refused_with_what_it_names(query, named):
    with pytest.raises(SQLRefused) as info:
        checked_statements(query)
    assert info.value.what == named
    assert "\n" not in str(info.value)


def test_each_statement_is_checked_and_returned_on_its_own():
    assert checked_statements("SELECT 1; -- note\n SELECT 'a;b'; ") == ["SELECT 1", "SELECT 'a;b'"]
    with pytest.raises(SQLRefused, match="DELETE statements"):
        checked_statements("SELECT 1; DELETE FROM entries")


def test_text_the_grammar_rejects_fails_in_one_line():
    with pytest.raises(SQLFailed, match="^PostgreSQL's parser: syntax error"):
        checked_statements("SELECT FROM WHERE")
    with pytest.raises(SQLFailed, match="no SQL statement"):
        checked_statements("  -- only a comment")


@pytest.mark.parametrize("query", [
    "SELECT tool, count(*), avg(duration_ms) FROM tool_calls GROUP BY tool",
    "SELECT substring(content FROM 1 FOR 3), trim(both ' ' FROM content), position('a' IN content) FROM entries",
    "SELECT extract(epoch FROM now() - interval '1 day'), now() AT TIME ZONE 'UTC'",
    "SELECT content::jsonb ->> 'a', jsonb_path_query_first(content::jsonb, '$.a') FROM entries",
    "SELECT row_number() OVER (PARTITION BY session_id ORDER BY seq) FROM entries",
    "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 3) SELECT * FROM t",
    "SELECT * FROM entries e, LATERAL jsonb_each(e.metadata::jsonb) AS kv",
    "SELECT x FROM unnest(ARRAY[1, 2]) AS x WHERE x IN (SELECT seq FROM entries)",
    "TABLE runs", "VALUES (1, 'a')",
    "SELECT table_name FROM information_schema.tables",
    "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM entries",
    "SELECT CASE WHEN seq > 1 THEN 'b' ELSE 'a' END, coalesce(NULL, 1), greatest(1, 2) FROM entries",
    "SELECT pg_catalog.lower('A'), 1 OPERATOR(pg_catalog.+) 1",
])
def test_ordinary_reads_pass(query):
    assert len(checked_statements(query)) == 1


def test_no_function_that_acts_is_on_the_list():
    acting = {"set_config", "current_setting", "pg_notify", "pg_sleep", "pg_advisory_lock", "pg_read_file",
              "pg_terminate_backend", "ts_stat", "ts_rewrite", "query_to_xml", "nextval", "setval",
              "lo_import", "dblink", "txid_current", "setseed", "pg_cancel_backend"}
    assert not acting & PURE_FUNCTIONS
