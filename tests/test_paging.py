"""core/paging.py: reading a session from its end, a page at a time, on both back ends."""

from __future__ import annotations

import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.core.paging import newest_first
from chaz_nb.core.store import NewEntry


@pytest.fixture
def store(backend_store):
    """DuckDB and PostgreSQL (tests/conftest.py's backend_store)."""
    return backend_store


def test_newest_first_reads_pages_backwards_and_stops_when_the_caller_does(store):
    s = store.create_session("alice")
    types = [EntryType.MESSAGE, EntryType.ACK, EntryType.TOOL_CALL]
    store.append_many([NewEntry(s, types[i % 3], "alice", f"e{i + 1}") for i in range(25)])
    pages = []
    read_page = store.read_page
    store.read_page = lambda *a, **k: pages.append(k["before_seq"]) or read_page(*a, **k)
    assert [e.seq for e in newest_first(store, s, page=10)] == list(range(25, 0, -1))
    assert pages == [None, 16, 6]
    pages.clear()
    first_ack = next(newest_first(store, s, types=[EntryType.ACK], page=10))
    assert (first_ack.seq, first_ack.entry_type, pages) == (23, EntryType.ACK, [None])  # one query
    assert [e.seq for e in newest_first(store, s, types=[EntryType.MESSAGE], page=7)] == list(range(25, 0, -3))
    assert list(newest_first(store, store.create_session("bob"))) == []
