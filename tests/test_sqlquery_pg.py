"""``%chaz sql`` on a PostgreSQL store, attacked: nothing a query says may change the audit
trail, end another kernel's connection, signal it, stall its writes or read the server's files.

Each attack runs against a real cluster (tests/fakes/postgres.py) with a second store serving
a session (its lease held on a connection of its own) and a listener on the kernels' channels;
afterwards the entries are the same, the lease is still held and no notification came.
"""

import psycopg
import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.core.sqlquery import SQLFailed, SQLRefused, run_query
from chaz_nb.core.store import SessionStore

#: the two statements of issue 24 (in the default set-up they emptied ``entries``)
SCS_OFF = "SELECT U&\"set\\005fconfig\"('standard_conforming_strings','off',false)"
SMUGGLED = "SELECT '\\' AS a, ' ; COMMIT; BEGIN READ WRITE; DELETE FROM entries; COMMIT; -- ' AS b"


class Victim:
    def __init__(self, url: str) -> None:
        self.url = url
        self.serving = SessionStore.open(url)
        self.querying = SessionStore.open(url)
        self.sid = self.serving.create_session("alice")
        for i in range(3):
            self.serving.append(self.sid, EntryType.MESSAGE, "user", f"m{i}")
        assert self.serving.claim(self.sid)
        self.lease_pid = self.serving._lease_con.info.backend_pid
        self.writer_pid = self.serving._con.info.backend_pid
        self.before = self.entries()
        self.listener = psycopg.connect(url, autocommit=True)
        for channel in ("chaz_stop", "chaz_entries", "chaz_schedules"):
            self.listener.execute(f"LISTEN {channel}")

    def entries(self) -> list[tuple]:
        return self.serving.execute("SELECT id, session_id, seq, content FROM entries ORDER BY id")

    def notifications(self) -> list[str]:
        """What arrived on the kernels' channels before a sentinel sent now (no fixed wait)."""
        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute("NOTIFY chaz_stop, 'sentinel'")
        got = []
        for n in self.listener.notifies(timeout=10):
            if n.payload == "sentinel":
                break
            got.append(f"{n.channel}:{n.payload}")
        return got

    def assert_untouched(self) -> None:
        assert self.entries() == self.before, "the audit trail changed"
        assert self.querying.held_elsewhere(self.sid), "the serving kernel lost its lease"
        assert self.notifications() == [], "a notification reached the kernels"
        self.serving.append(self.sid, EntryType.MESSAGE, "user", "still writable")  # no lock left behind
        self.before = self.entries()

    def close(self) -> None:
        self.listener.close()
        self.querying.close()
        self.serving.close()


@pytest.fixture
def victim(pg_url):
    v = Victim(pg_url)
    yield v
    v.close()


ATTACKS = [
    # issue 24: one query, two statements; the second is one SELECT only with standard strings
    f"{SCS_OFF};\n{SMUGGLED}",
    SCS_OFF,
    # each refused function spelled with U& (DuckDB's grammar read it as U & "...")
    "SELECT U&\"\\0070g_read_file\"('PG_VERSION')",
    "SELECT U&\"\\0070g_ls_dir\"('.')",
    "SELECT U&\"\\0070g_terminate_backend\"({lease_pid})",
    "SELECT U&\"\\0070g_cancel_backend\"({writer_pid})",
    "SELECT U&\"\\0070g_notify\"('chaz_stop', '{{\"session\": 1, \"by\": \"forged\"}}')",
    "SELECT U&\"\\0070g_advisory_xact_lock\"(7261, 1), U&\"\\0070g_sleep\"(0.2)",
    "SELECT U&\"\\0070g_advisory_lock\"(7261, 1)",
    "SELECT U&\"!0070g_read_file\" UESCAPE '!' ('PG_VERSION')",
    "SELECT U&\"query\\005fto\\005fxml\"('DELETE FROM entries RETURNING id', true, true, '')",
    # SQL text run by the server, seen by no check
    "SELECT * FROM ts_stat('SELECT to_tsvector(pg_terminate_backend({lease_pid})::text)')",
    "SELECT ts_rewrite('a'::tsquery, 'SELECT ''a''::tsquery, pg_notify(''chaz_stop'', ''x'')::text::tsquery')",
    # statements other than SELECT, alone or after one
    "NOTIFY chaz_stop, 'forged'",
    "SELECT 1; NOTIFY chaz_stop, 'forged'",
    "SELECT 1; DELETE FROM entries",
    "LISTEN chaz_entries",
    "SELECT 1 FROM entries FOR UPDATE",
    # quoting and comments the old check read differently from PostgreSQL
    "SELECT $a$ $b$ $a$ AS x, U&\"\\0070g_read_file\"('PG_VERSION')",
    "SELECT $$'$$ AS x, U&\"\\0070g_notify\"('chaz_stop', 'x')",
    "SELECT E'\\'' AS x, U&\"\\0070g_terminate_backend\"({lease_pid}) -- '",
    "SELECT 1 /* /* */ , 2 */ , U&\"\\0070g_cancel_backend\"({writer_pid})",
    # every place a function may hide
    "SELECT * FROM generate_series(1, 1) g, LATERAL (SELECT U&\"\\0070g_read_file\"('PG_VERSION')) x",
    "WITH x AS (SELECT U&\"\\0070g_notify\"('chaz_stop', 'x') AS v) SELECT * FROM x",
    "SELECT 1 ORDER BY U&\"\\0070g_terminate_backend\"({lease_pid})",
    "SELECT count(*) FILTER (WHERE U&\"\\0070g_notify\"('chaz_stop', 'x') IS NULL) FROM entries",
    "SELECT (SELECT array_agg(v) FROM (SELECT U&\"\\0070g_read_file\"('PG_VERSION') v) s)",
    "EXPLAIN ANALYZE SELECT U&\"\\0070g_notify\"('chaz_stop', 'x')",
    "SELECT * FROM ROWS FROM (U&\"\\0070g_ls_dir\"('.'))",
    "SELECT pg_catalog.\"pg_terminate_backend\"({lease_pid})",
    "SELECT 1 LIMIT U&\"\\0070g_terminate_backend\"({lease_pid})::int",
    "SELECT * FROM (VALUES (U&\"\\0070g_notify\"('chaz_stop', 'x'))) v",
    "SELECT count(*) FROM entries GROUP BY GROUPING SETS ((U&\"\\0070g_notify\"('chaz_stop', 'x')::text))",
    "SELECT sum(seq) OVER (ORDER BY seq ROWS BETWEEN U&\"\\0070g_cancel_backend\"({writer_pid})::int PRECEDING"
    " AND CURRENT ROW) FROM entries",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attack_is_refused_and_changes_nothing(victim, attack):
    query = attack.format(lease_pid=victim.lease_pid, writer_pid=victim.writer_pid)
    with pytest.raises(SQLRefused, match=r"^%chaz sql is read-only: .* refused"):
        run_query(query, victim.querying)
    victim.assert_untouched()


def test_the_issues_second_statement_alone_is_a_select_of_two_strings(victim):
    with pytest.raises(SQLRefused):
        run_query(SCS_OFF, victim.querying)
    result = run_query(SMUGGLED, victim.querying)
    assert result.rows == [("\\", " ; COMMIT; BEGIN READ WRITE; DELETE FROM entries; COMMIT; -- ")]
    victim.assert_untouched()


@pytest.mark.parametrize("query", [
    "SELECT * INTO copied FROM entries",
    "WITH d AS (DELETE FROM entries RETURNING id) SELECT count(*) FROM d",
    "BEGIN READ WRITE",
    "SET ROLE chaz",
    "DO $$BEGIN DELETE FROM entries; END$$",
])
def test_writes_in_any_form_are_refused(victim, query):
    with pytest.raises(SQLRefused):
        run_query(query, victim.querying)
    victim.assert_untouched()


@pytest.mark.parametrize("query, rows", [
    ("SELECT content, content LIKE 'm%' FROM entries ORDER BY seq LIMIT 1", [("m0", True)]),
    ("SELECT format('%s-%s', seq, content) FROM entries ORDER BY seq LIMIT 1", [("1-m0",)]),
    ("SELECT E'a\\tb', $$it's$$, U&'\\0041'", [("a\tb", "it's", "A")]),
    ("SELECT count(*) FILTER (WHERE seq > 1), max(seq) OVER () FROM entries GROUP BY seq ORDER BY seq LIMIT 1",
     [(0, 3)]),
    ("SELECT extract(year FROM now()) > 2000, date_trunc('day', now()) <= now()", [(True, True)]),
    ("SELECT 1; SELECT 2", [(2,)]),
    ("SELECT $$;DELETE FROM entries;$$", [(";DELETE FROM entries;",)]),  # one statement, one string
])
def test_ordinary_reads_still_run(victim, query, rows):
    assert run_query(query, victim.querying).rows == rows
    victim.assert_untouched()


def test_a_query_the_grammar_rejects_fails_in_one_line(victim):
    with pytest.raises(SQLFailed, match="syntax error") as info:
        run_query("SELEC 1", victim.querying)
    assert "\n" not in str(info.value)


def test_a_function_planted_in_the_stores_schema_is_not_called_for_a_pure_one(victim):
    """A role that may create in the schema overloads lower(varchar): PostgreSQL would call it
    (an exact argument type wins over pg_catalog's lower(text)) with the querying role's rights."""
    with psycopg.connect(victim.url, autocommit=True) as planter:
        planter.execute(
            "CREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE sql AS "
            f"$$SELECT pg_terminate_backend({victim.lease_pid})::text$$")
    with pytest.raises(SQLRefused, match=r"public\.lower\(\) is refused .* write pg_catalog\.lower"):
        run_query("SELECT lower(content::varchar) FROM entries", victim.querying)
    assert run_query("SELECT pg_catalog.lower('A'::varchar)", victim.querying).rows == [("a",)]
    victim.assert_untouched()
