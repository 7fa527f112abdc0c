"""Reading a session from its end: the newest entries first, a page at a time.

What looks for something near a session's end (a wait's trigger, a room's trailing agent
Messages, a schedule fire's Ack) reads ``store.read_page`` pages backwards and stops where it
finds it, instead of reading and decoding the whole log. Works on either store (DuckDB,
PostgreSQL): ``read_page`` is one indexed query on both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from collections.abc import Iterable, Iterator

from .entries import Entry, EntryType

if TYPE_CHECKING:  # pragma: no cover
    from .store.base import Store

#: entries per query when reading backwards
PAGE = 200


def newest_first(
    store: Store, session_id: int, types: Iterable[EntryType] | None = None, page: int = PAGE
) -> Iterator[Entry]:
    """A session's entries from the newest back (of ``types`` when given), read a page at a time."""
    wanted = None if types is None else {EntryType(t) for t in types}
    before: int | None = None
    while True:
        entries = store.read_page(session_id, before_seq=before, limit=page)
        for entry in reversed(entries):
            if wanted is None or entry.entry_type in wanted:
                yield entry
        if len(entries) < page or entries[0].seq <= 1:
            return
        before = entries[0].seq
