"""Property-based: any %chaz line, agent body or SQL text ends in its documented behaviour or a
one-line error; never a traceback from deep inside, never a changed or corrupted store."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.testing.globalipapp import get_ipython

import chaz_nb
from chaz_nb.core.sqlquery import SQLFailed, SQLRefused, run_query

ip = get_ipython()

SUBCOMMANDS = ["", "agent", "agents", "sessions", "log", "new", "wait", "sql", "config", "help", "directive",
               "pending", "approve", "deny", "schedule", "room", "compact", "audit", "bogus", "agnt", "Agents"]
words = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n\r"), max_size=40)
token = st.sampled_from(["@assistant", "@nobody", "--no-wait", "--model", "chaz/echo", "--tools", "a,b", "--script",
                         "[1", "'[\"hi\"]'", "--max-depth", "-1", "3", "db=", "x=y", "--reason", "last", "all",
                         "'unclosed", "\"", "\\", "SELECT 1", "DROP TABLE entries", "--db", "/nonexistent.duckdb",
                         "every 0s", "*/5 * * * *", "\x00", "🤖", "{}"]) | words
lines = st.tuples(st.sampled_from(SUBCOMMANDS), st.lists(token, max_size=6)).map(
    lambda t: " ".join([t[0], *t[1]]).strip())

_loaded = False


def chaz():
    """Load the extension once for all examples, on an in-memory store."""
    global _loaded
    if not _loaded:
        import os

        os.environ["CHAZ_DB"] = ":memory:"
        os.environ.pop("CHAZ_MODEL", None)
        ip.run_line_magic("load_ext", "chaz_nb")
        _loaded = True
    return chaz_nb.current()


@pytest.fixture(scope="module", autouse=True)
def unload_at_end():
    yield
    global _loaded
    if _loaded:
        ip.run_line_magic("unload_ext", "chaz_nb")
        _loaded = False
        import os

        os.environ.pop("CHAZ_DB", None)


def entry_ids(server):
    return [r[0] for r in server.store.execute("SELECT id FROM entries ORDER BY id")]


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(line=lines)
def test_any_magic_line_is_handled_or_refused_in_one_line(line):
    server = chaz()
    before = entry_ids(server)
    try:
        ip.run_line_magic("chaz", line)
    except UsageError as exc:
        assert "\n" not in str(exc).strip(), repr(str(exc))
    # whatever happened, nothing already written was lost or rewritten
    server = chaz_nb.current()
    after = entry_ids(server)
    assert after[: len(before)] == before


toml_keys = st.sampled_from(["model", "system", "tools", "max_depth", "max_iterations", "script", "auto_approve",
                             "approval_timeout", "bogus"])
toml_values = st.sampled_from(['"chaz/echo"', '"chaz/script"', "3", "-2", '["a"]', "[1, 2]", '"x"', "true",
                               '[{tool = "add"}]', "{ }", '"""multi\nline"""', "1e999", "'lit'"])
bodies = st.lists(st.tuples(toml_keys, toml_values), max_size=4).map(
    lambda kv: "\n".join(f"{k} = {v}" for k, v in kv)) | words


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(body=bodies)
@example(body='tools = """multi\nline"""')  # found by this test: a newline in a tool name
@example(body="auto_approve = 3")  # found by this test: a TypeError deep in describe_agent
def test_any_agent_body_defines_an_agent_or_is_refused_in_one_line(body):
    chaz()
    try:
        ip.run_cell_magic("chaz", "agent fuzzed", body)
    except UsageError as exc:
        assert "\n" not in str(exc).strip(), repr(str(exc))
    else:
        assert "fuzzed" in chaz_nb.current().agents


sql_text = st.sampled_from(["SELECT", "FROM", "entries", "runs", "tool_calls", "*", "count(*)", ";", "DROP", "TABLE",
                            "INSERT", "INTO", "VALUES", "(1)", "DELETE", "ATTACH", "'x'", "WHERE", "1=1", "--", "/*",
                            "UPDATE", "SET", "content", "=", "CREATE", "COPY", "TO", "PRAGMA", "EXPLAIN"]) | words
queries = st.lists(sql_text, min_size=1, max_size=8).map(" ".join)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(query=queries)
def test_any_sql_text_reads_or_is_refused_in_one_line(query):
    server = chaz()
    before = entry_ids(server)
    tables = server.store.execute("SELECT count(*) FROM duckdb_tables()")
    try:
        run_query(query, server.store, max_rows=10)
    except (SQLRefused, SQLFailed) as exc:
        assert "\n" not in str(exc)
    assert entry_ids(server) == before
    assert server.store.execute("SELECT count(*) FROM duckdb_tables()") == tables
