"""The database side of ``%chaz sql`` on PostgreSQL (chaz_nb/core/pgreader.py), checked with
the statement check out of the way: what holds if a statement ever got past it."""

from urllib.parse import urlsplit

import psycopg
import pytest

from chaz_nb.core import pgreader
from chaz_nb.core.entries import EntryType
from chaz_nb.core.store.postgres import PgSessionStore
from chaz_nb.core.sqlquery import run_query
from chaz_nb.core.store import SessionStore
from chaz_nb.notebook.magics.sql import SqlTable

SCS_OFF = "SELECT set_config('standard_conforming_strings', 'off', false)"
SMUGGLED = "SELECT '\\' AS a, ' ; COMMIT; BEGIN READ WRITE; DELETE FROM entries; COMMIT; -- ' AS b"


@pytest.fixture
def store(pg_url):
    with SessionStore.open(pg_url) as s:
        sid = s.create_session("alice")
        s.append(sid, EntryType.MESSAGE, "user", "kept")
        yield s


def count(store) -> int:
    return store.execute("SELECT count(*) FROM entries")[0][0]


def test_several_statements_in_one_message_are_refused_by_the_server(store):
    with pytest.raises(psycopg.errors.SyntaxError, match="multiple commands"):
        store.query_read_only(["SELECT 1; DELETE FROM entries"])
    assert count(store) == 1


def test_a_setting_changed_by_one_statement_is_gone_for_the_next(store):
    """The issue's pair, sent as the check would have sent it had set_config passed."""
    results = store.query_read_only([SCS_OFF, "SHOW standard_conforming_strings", SMUGGLED])
    assert results[1][1] == [("on",)]
    assert results[2][1][0][0] == "\\"
    assert count(store) == 1


def test_a_session_advisory_lock_is_released_after_its_statement(store):
    results = store.query_read_only([
        "SELECT pg_advisory_lock(7261, 1)",
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
    ])
    assert results[1][1] == [(0,)]
    store.append(1, EntryType.MESSAGE, "user", "writes go on")  # takes (7261, 1) itself


def test_a_role_change_does_not_outlive_its_statement(store):
    results = store.query_read_only(["SELECT set_config('role', 'none', false)", "SELECT current_user::text"])
    assert results[1][1] == [(pgreader.READER_ROLE,)]


def test_a_long_statement_is_stopped_by_the_statement_timeout(store, monkeypatch):
    monkeypatch.setattr(pgreader, "STATEMENT_TIMEOUT_MS", 200)
    with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
        store.query_read_only(["SELECT count(*) FROM generate_series(1, 10000000000)"])


def test_without_chaz_db_reader_the_store_runs_as_a_role_that_can_only_read(store):
    run = store.run_read_only(["SELECT has_table_privilege('entries', 'DELETE'),"
                               " has_table_privilege('runs', 'SELECT')"])
    assert run.role == pgreader.READER_ROLE and not run.can_write
    assert run.results[0][1] == [(False, True)]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # and not only because READ ONLY
        store.run_read_only(["SELECT pg_read_file('PG_VERSION')"])
    result = run_query("SELECT count(*) FROM runs", store)
    assert result.warning == "" and not SqlTable.from_result(result).text().startswith("warning")


def test_a_reader_url_that_can_write_is_said_on_the_first_line(store):
    with PgSessionStore(store.url, reader_url=store.url) as writable:
        result = run_query("SELECT count(*) FROM entries", writable)
    first = SqlTable.from_result(result).text().splitlines()[0]
    assert first.startswith("warning: ran as chaz, a role that may write the audit trail")
    assert "CHAZ_DB_READER" in first
    assert "warning: ran as chaz" in SqlTable.from_result(result)._repr_html_()


def test_a_store_whose_role_cannot_create_roles_runs_as_itself_and_says_so(pg_url):
    role = "plain_" + urlsplit(pg_url).path.strip("/")  # roles are the cluster's: one per database
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN NOCREATEROLE NOSUPERUSER")
        admin.execute(f"GRANT ALL ON SCHEMA public TO {role}")
    url = pg_url.replace("postgresql://chaz@", f"postgresql://{role}@")
    with SessionStore.open(url) as plain:
        sid = plain.create_session("alice")
        plain.append(sid, EntryType.MESSAGE, "user", "kept")
        result = run_query("SELECT current_user::text, count(*) FROM entries", plain)
        assert result.rows == [(role, 1)]
        assert result.warning.startswith(f"warning: ran as {role}")


def test_a_view_created_after_the_reader_role_is_readable_by_it(store):
    store.run_read_only(["SELECT 1"])  # the role is set up
    store.execute("CREATE VIEW later AS SELECT count(*) AS n FROM entries")  # as a new migration would
    assert run_query("SELECT n FROM later", store).rows == [(1,)]
