"""chaz_nb/core/store/rows.py ``duckdb_entries_insert``: how a batch of entries reaches DuckDB.

A few rows go as one multi-row VALUES, many as one list a column (issue 30: binding each value
as its own parameter was the largest of the server's own costs under load). Both forms must
store the same rows, each in one statement (one autocommitted transaction).
"""

from datetime import datetime

import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import NewEntry, SessionStore
from chaz_nb.core.store.rows import UNNEST_FROM_ROWS


class ExecuteSpy:
    """The store's DuckDB connection, recording each ``execute`` (SQL and parameters)."""

    def __init__(self, con) -> None:
        self.con, self.calls = con, []

    def execute(self, sql, params=None):
        self.calls.append((sql, params))
        return self.con.execute(sql) if params is None else self.con.execute(sql, params)

    def __getattr__(self, name):
        return getattr(self.con, name)


def batch(sid: int, n: int) -> list[NewEntry]:
    """``n`` entries with every column's kind of value: NULLs, unicode, quotes, JSON payloads."""
    kinds = [
        NewEntry(sid, EntryType.MESSAGE, "user", "héllo 'quoted' \"x\" \u202e bidi"),
        NewEntry(sid, EntryType.TOOL_CALL, "a", "", tool_call_id="c1", tool_name="add",
                 payload={"arguments": {"a": 1, "b": [2, None]}, "note": "ü"}),
        NewEntry(sid, EntryType.TOOL_RESULT, "a", "3", tool_call_id="c1", tool_name="add"),
        NewEntry(sid, EntryType.ACK, "a", "x" * 5000, payload={}),
    ]
    return [kinds[i % len(kinds)] for i in range(n)]


def stored(store: SessionStore, sid: int) -> list[tuple]:
    return [(e.seq, e.entry_type, e.sender, e.content, e.tool_call_id, e.tool_name, e.payload)
            for e in store.entries(sid)]


@pytest.mark.parametrize("n", [1, UNNEST_FROM_ROWS - 1, UNNEST_FROM_ROWS, 3 * UNNEST_FROM_ROWS])
def test_a_batch_is_one_statement_and_reads_back_as_written_either_way(tmp_path, n):
    store = SessionStore(str(tmp_path / "s.duckdb"), journal=False)  # each append its DuckDB commit
    try:
        sid = store.create_session("a")
        spy = store._con = ExecuteSpy(store._con)
        before = datetime.utcnow()
        written = store.append_many(batch(sid, n))
        # one execute, no BEGIN/COMMIT: the INSERT in autocommit is the commit
        assert len(spy.calls) == 1
        sql, params = spy.calls[0]
        assert sql.startswith("INSERT INTO entries")
        width = sql[sql.index("(") + 1:sql.index(")")].count(",") + 1  # the INSERT's columns
        if n >= UNNEST_FROM_ROWS:  # many rows bind one list a column, not one parameter a value
            assert len(params) == width and all(isinstance(c, list) and len(c) == n for c in params)
        else:
            assert len(params) == n * width
        store._con = spy.con
        assert [e.seq for e in written] == list(range(1, n + 1))
        assert stored(store, sid) == [(e.seq, e.entry_type, e.sender, e.content, e.tool_call_id, e.tool_name,
                                       e.payload) for e in written]
        assert [e.id for e in store.entries(sid)] == [e.id for e in written]
        assert all(before <= e.created_at <= datetime.utcnow() for e in store.entries(sid))
    finally:
        store.close()


def test_the_two_forms_store_the_same_rows(tmp_path):
    """The same entries, below and above ``UNNEST_FROM_ROWS`` in one batch, read back alike."""
    store = SessionStore(str(tmp_path / "s.duckdb"))
    try:
        few, many = store.create_session("a"), store.create_session("a")
        for i in range(0, 2 * UNNEST_FROM_ROWS, UNNEST_FROM_ROWS - 1):
            store.append_many(batch(few, 2 * UNNEST_FROM_ROWS)[i:i + UNNEST_FROM_ROWS - 1])
        store.append_many(batch(many, 2 * UNNEST_FROM_ROWS))
        assert stored(store, few) == stored(store, many)
        assert store.execute("SELECT count(*) FROM entries WHERE json_valid(payload) IS FALSE")[0][0] == 0
    finally:
        store.close()
