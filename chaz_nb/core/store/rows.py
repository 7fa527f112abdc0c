"""The rows both stores read and write: entries and sessions to and from their columns.

DuckDB and PostgreSQL keep the same tables (``migrations.py``), so one codec serves both:
JSON columns come back as text on both (``pgsql.connect`` registers a text loader for json),
timestamps are naive UTC (``utcnow``).

This is the one module of core/ where ``Any`` is written (mypy's ``disallow_any_explicit``
holds for the others, see pyproject.toml): a value the database returns has the type of its
column, which only the query knows (``Value``, ``Row``); the codecs here turn such rows into
typed ``Entry`` and ``SessionInfo``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ...errors import StoreError
from ..entries import Entry, EntryType
from ..entries import JsonObject
from ..redaction import redact_data

#: a value as the database returns it: of its column's type
Value = Any
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


def utcnow() -> datetime:
    """Naive UTC: DuckDB's TIMESTAMP has no zone and needs no pytz to come back."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def entry_from_row(row: Sequence[Value]) -> Entry:
    """The entry of a row of ``ENTRY_COLUMNS``."""
    payload = row[8]
    return Entry(
        id=row[0],
        session_id=row[1],
        seq=row[2],
        entry_type=EntryType(row[3]),
        sender=row[4],
        content=row[5] or "",
        tool_call_id=row[6],
        tool_name=row[7],
        payload=json.loads(payload) if payload else {},
        created_at=row[9],
    )


def session_from_row(row: Sequence[Value]) -> SessionInfo:
    """The session of a row of ``SESSION_COLUMNS`` (an older schema's row may end early)."""
    return SessionInfo(
        id=row[0],
        agent=row[1],
        kind=row[2],
        parent_id=row[3],
        depth=row[4],
        created_at=row[5],
        title=row[6],
        metadata=json.loads(row[7]) if row[7] else None,
        ceiling=row[8] if len(row) > 8 else None,
        forked_from=row[9] if len(row) > 9 else None,
        forked_at_seq=row[10] if len(row) > 10 else None,
    )


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
