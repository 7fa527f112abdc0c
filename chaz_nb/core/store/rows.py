"""The rows both stores read and write: entries and sessions to and from their columns.

DuckDB and PostgreSQL keep the same tables (``migrations.py``), so one codec serves both:
JSON columns come back as text on both (``pgsql.connect`` registers a text loader for json),
timestamps are naive UTC (``utcnow``).

A value the database returns has the type of its column, which only the query knows: it is
typed ``object`` (``Value``, ``Row``) and narrowed where it is read, by the codecs here (rows
into ``Entry`` and ``SessionInfo``) and by the readers of other queries (``int_value``,
``str_value`` and the others), which check the column holds what the query says and raise a
``StoreError`` naming the column if not.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from ...errors import StoreError
from ..entries import Entry, EntryType
from ..entries import JsonObject
from ..redaction import redact_data

#: a value as the database returns it: of its column's type, which only the query knows
Value = object
#: a row as the database returns it
Row = tuple[Value, ...]

@dataclass(frozen=True)
class SessionInfo:
    """A session's row."""

    id: int
    agent: str
    kind: str
    parent_id: int | None
    depth: int
    created_at: datetime | None
    title: str | None = None
    metadata: JsonObject | None = None
    #: a spawned session's authority ceiling as stored (JSON text; see chaz_nb/ceiling.py)
    ceiling: str | None = None
    #: a fork's source session and the seq it was forked at (server/fork.py)
    forked_from: int | None = None
    forked_at_seq: int | None = None



#: the columns of ``entries`` that make an ``Entry`` (``entry_from_row`` reads them in order)
ENTRY_COLUMNS = (
    "id, session_id, seq, entry_type, sender, content, tool_call_id, tool_name, payload, created_at"
)
#: the columns of ``sessions`` that make a ``SessionInfo`` (``session_from_row``)
SESSION_COLUMNS = (
    "id, agent, kind, parent_id, depth, created_at, title, metadata, ceiling, forked_from, forked_at_seq"
)


#: DuckDB types of ``ENTRY_COLUMNS`` + run_id, for the column-list INSERT (``duckdb_entries_insert``)
_ENTRY_TYPES = ("BIGINT", "BIGINT", "BIGINT", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "JSON",
                "TIMESTAMP", "BIGINT")
#: from this many rows on, a DuckDB commit binds one list a column, not one parameter a value
UNNEST_FROM_ROWS = 8


def duckdb_entries_insert(columns: str, rows: list[list[object]]) -> tuple[str, list[object]]:
    """The INSERT of ``rows`` into DuckDB's ``entries`` (``columns`` in row order) and its parameters.

    A few rows go as one multi-row VALUES (one parameter a value); more as one list a column
    unnested (``UNNEST_FROM_ROWS``): DuckDB binds and plans each of a VALUES' parameters
    (~11 us each), so 22 rows of 11 columns cost ~3.3 ms of CPU that way and ~2.3 ms as 11
    lists (~2.7 against ~5.5 ms at 40 rows; one row 0.7 against 1.3 ms). Same rows, one
    statement, one autocommitted transaction either way.
    """
    width = len(rows[0])
    if len(rows) < UNNEST_FROM_ROWS:
        one_row = "(" + ", ".join("?" * width) + ")"
        return (f"INSERT INTO entries ({columns}) VALUES {', '.join([one_row] * len(rows))}",
                [value for row in rows for value in row])
    lists = ", ".join(f"unnest(?::{t}[])" if t != "JSON" else "unnest(?::VARCHAR[])::JSON"
                      for t in _ENTRY_TYPES[:width])
    return f"INSERT INTO entries ({columns}) SELECT {lists}", [list(column) for column in zip(*rows, strict=True)]


def utcnow() -> datetime:
    """Naive UTC: DuckDB's TIMESTAMP has no zone and needs no pytz to come back."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def entry_from_row(row: Sequence[Value]) -> Entry:
    """The entry of a row of ``ENTRY_COLUMNS``."""
    payload = str_or_none(row[8], "entries.payload")
    return Entry(
        id=int_value(row[0], "entries.id"),
        session_id=int_value(row[1], "entries.session_id"),
        seq=int_value(row[2], "entries.seq"),
        entry_type=EntryType(row[3]),
        sender=str_value(row[4], "entries.sender"),
        content=str_or_none(row[5], "entries.content") or "",
        tool_call_id=str_or_none(row[6], "entries.tool_call_id"),
        tool_name=str_or_none(row[7], "entries.tool_name"),
        payload=json.loads(payload) if payload else {},
        created_at=time_or_none(row[9], "entries.created_at"),
    )


def session_from_row(row: Sequence[Value]) -> SessionInfo:
    """The session of a row of ``SESSION_COLUMNS`` (an older schema's row may end early)."""
    metadata = str_or_none(row[7], "sessions.metadata")
    return SessionInfo(
        id=int_value(row[0], "sessions.id"),
        agent=str_value(row[1], "sessions.agent"),
        kind=str_value(row[2], "sessions.kind"),
        parent_id=int_or_none(row[3], "sessions.parent_id"),
        depth=int_value(row[4], "sessions.depth"),
        created_at=time_or_none(row[5], "sessions.created_at"),
        title=str_or_none(row[6], "sessions.title"),
        metadata=json.loads(metadata) if metadata else None,
        ceiling=str_or_none(row[8], "sessions.ceiling") if len(row) > 8 else None,
        forked_from=int_or_none(row[9], "sessions.forked_from") if len(row) > 9 else None,
        forked_at_seq=int_or_none(row[10], "sessions.forked_at_seq") if len(row) > 10 else None,
    )


# ------------------------------------------------------------------ one value of a row
# Each checks the value is of the type its column has (NULL only where the name says so);
# a value of another type means the query or the schema is not what the caller thinks.

def _unexpected(value: Value, expected: str, column: str) -> StoreError:
    # the type only, never the value: a mismatched column may hold anything
    return StoreError(f"{column or 'a column'} holds {type(value).__name__}, expected {expected}")


def int_value(value: Value, column: str = "") -> int:
    """An integer column's value (an id, a seq, a count, a ``max``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _unexpected(value, "an integer", column)


def int_or_none(value: Value, column: str = "") -> int | None:
    """An integer column's value, or None for NULL."""
    return None if value is None else int_value(value, column)


def str_value(value: Value, column: str = "") -> str:
    """A text column's value."""
    if isinstance(value, str):
        return value
    raise _unexpected(value, "text", column)


def str_or_none(value: Value, column: str = "") -> str | None:
    """A text (or JSON: read as text) column's value, or None for NULL."""
    return None if value is None else str_value(value, column)


def bool_value(value: Value, column: str = "") -> bool:
    """A boolean column's value."""
    if isinstance(value, bool):
        return value
    raise _unexpected(value, "a boolean", column)


def time_or_none(value: Value, column: str = "") -> datetime | None:
    """A timestamp column's value (naive UTC, see ``utcnow``), or None for NULL."""
    if value is None or isinstance(value, datetime):
        return value
    raise _unexpected(value, "a timestamp", column)


def run_id_of(entry: Entry) -> int | None:
    """The run an entry belongs to (its ``run_id`` column); a run's opening Ack is the run
    (its id is the run id)."""
    return entry.run_id


def metadata_text(metadata: Mapping[str, object] | None, redact: Callable[[str], str]) -> str | None:
    """Session metadata as stored: JSON, every string redacted."""
    return None if metadata is None else json.dumps(redact_data(dict(metadata), redact))


def fork_metadata(
    source: Mapping[str, object] | None, extra: Mapping[str, object] | None, redact: Callable[[str], str]
) -> str | None:
    """A fork's session metadata as stored: the source's (a room's members), and ``extra``."""
    if source is None and extra is None:
        return None
    return metadata_text({**(source or {}), **(extra or {})}, redact)


def fork_point(at_seq: object, end: int, source_id: int) -> int:
    """``at_seq`` checked against the source's committed end (None: the end); StoreError else."""
    if at_seq is None:
        return end
    if isinstance(at_seq, bool) or not isinstance(at_seq, int) or not 0 <= at_seq <= end:
        raise StoreError(
            f"cannot fork session {source_id} at {at_seq!r}: its entries are #1-#{end}; "
            f"give a seq from 0 (nothing copied) to {end}, or leave it out for its end"
        )
    return at_seq
