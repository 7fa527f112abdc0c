"""chaz_nb/core/store/rows.py: a database value is narrowed to its column's type where it is read."""

from datetime import datetime

import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import (
    ENTRY_COLUMNS, StoreError, bool_value, entry_from_row, int_or_none, int_value, session_from_row, str_or_none,
    str_value, time_or_none,
)
from chaz_nb.core.store.rows import SESSION_COLUMNS
from chaz_nb.server.schedules.table import Schedule, ScheduleTable, schedule_from_row


def test_each_reader_gives_a_value_of_its_column_type():
    at = datetime(2026, 1, 2, 3, 4, 5)
    assert (int_value(7), int_or_none(None), int_or_none(0)) == (7, None, 0)
    assert (str_value(""), str_or_none(None), str_or_none("x")) == ("", None, "x")
    assert (bool_value(False), time_or_none(None), time_or_none(at)) == (False, None, at)


@pytest.mark.parametrize(("reader", "value", "expected"), [
    (int_value, "7", "an integer"),
    (int_value, True, "an integer"),  # a boolean column read as a count is a wrong query
    (int_value, None, "an integer"),  # NULL only where the reader's name says so
    (int_or_none, 1.5, "an integer"),
    (str_value, 3, "text"),
    (str_or_none, b"x", "text"),
    (bool_value, 1, "a boolean"),
    (time_or_none, "2026-01-02", "a timestamp"),
])
def test_a_value_of_another_type_is_a_store_error_naming_the_column_not_the_value(reader, value, expected):
    with pytest.raises(StoreError) as info:
        reader(value, "t.c")
    assert str(info.value) == f"t.c holds {type(value).__name__}, expected {expected}"


def test_the_error_never_shows_the_value():
    """A column that holds what its query did not expect may hold anything, a key among it."""
    with pytest.raises(StoreError) as info:
        int_value("sk-proj-ABCDEFGHIJKLMNOPQRSTUV", "entries.seq")
    assert "sk-proj" not in str(info.value)
    assert "entries.seq" in str(info.value)


def test_a_row_whose_column_has_another_type_is_refused_not_made_into_an_entry():
    """Before, the row was copied into the Entry as it came: an id of text made an Entry whose
    ``id`` was a str, failing later wherever it was compared or added to."""
    row = ("7", 1, 1, "Message", "user", "hi", None, None, None, datetime(2026, 1, 1))
    with pytest.raises(StoreError, match="entries.id holds str"):
        entry_from_row(row)
    fine = entry_from_row((7, *row[1:]))
    assert (fine.id, fine.content, fine.payload) == (7, "hi", {})


def test_rows_each_database_returns_pass_the_readers(backend_store):
    """What DuckDB and PostgreSQL give for each column is what the readers expect (ints, text,
    JSON as text, naive timestamps): the codecs read back what the store wrote."""
    store = backend_store
    parent = store.create_session("alice", title="t", metadata={"k": [1]})
    child = store.create_session("bob", kind="spawned", parent_id=parent)
    written = store.append(child, EntryType.TOOL_CALL, "bob", "x", tool_call_id="c1", tool_name="t",
                           payload={"arguments": {"a": 1}})
    for sid in (parent, child):
        (row,) = store.read(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", [sid])
        assert session_from_row(row) == store.session(sid)
    (row,) = store.read(f"SELECT {ENTRY_COLUMNS} FROM entries WHERE id = ?", [written.id])
    assert entry_from_row(row) == written


def test_a_schedule_row_of_each_database_reads_back_as_the_schedule_saved(backend_store):
    table = ScheduleTable(backend_store)
    saved = Schedule(table.next_id("schedules"), "alice", "every 5m", "interval", "tick", None,
                     max_fires=3, created_at=datetime(2026, 1, 1), ceiling='{"tools": []}', budget="run:x")
    table.save(saved)
    (row,) = backend_store.execute(f"SELECT {table._columns} FROM schedules")
    assert schedule_from_row(row) == saved
