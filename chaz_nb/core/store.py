"""SessionStore: the DuckDB session log (sessions, entries, migrations, on_write callbacks).

One read-write connection per store, used from the thread that owns the event loop. Threads
that need to read get their own cursor (``SessionStore.reader()``). Entry ids and per-session
``seq`` numbers are allocated in memory: DuckDB admits one read-write process per file, so
this process is the only writer and the counters cannot race another one.

The DuckDB instance is opened locked down (``LOCKED_DOWN``): no file access besides its own
database file (no ``COPY ... TO``, ``EXPORT``, ``ATTACH`` of a file, ``read_csv``, extension
``LOAD``/``INSTALL``) and no configuration change (``SET`` is refused). The store needs none of
them, and this is what lets ``%chaz sql`` and the audit view run users' SQL on the writer's own
instance without being able to write anything (see ``chaz_nb.core.sqlquery``): DuckDB cannot open the
same file a second time in the process, not even read-only. To export data, fetch it
(``store.sql(...).fetchall()`` / ``.df()``) and write it from Python.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from collections.abc import Callable, Iterable, Iterator, Sequence

import duckdb

from .entries import Entry, EntryType
from .migrations import MIGRATIONS, Migration, apply_migrations
from .redaction import redact as redact_secrets
from .redaction import redact_data
from .writer import GroupCommitWriter, NewEntry, OnWrite
from ..errors import StoreError, StoreLockedError

log = logging.getLogger(__name__)

__all__ = ["NewEntry", "OnWrite", "SessionInfo", "SessionStore"]

#: sessions whose logs are kept in memory (least recently used dropped first)
LOG_CACHE_SESSIONS = 128
#: a session with a longer log is read from DuckDB each time (bounds the memory)
LOG_CACHE_MAX_ENTRIES = 5000

_ENTRY_COLUMNS = (
    "id, session_id, seq, entry_type, sender, content, tool_call_id, tool_name, payload, created_at"
)


@dataclass(frozen=True)
class SessionInfo:
    id: int
    agent: str
    kind: str
    parent_id: int | None
    depth: int
    created_at: datetime | None
    title: str | None = None
    metadata: dict[str, Any] | None = None
    #: a spawned session's authority ceiling as stored (JSON text; see chaz_nb/ceiling.py)
    ceiling: str | None = None


def utcnow() -> datetime:
    """Naive UTC: DuckDB's TIMESTAMP has no zone and needs no pytz to come back."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


#: DuckDB settings of every store instance (and of ``%chaz sql --db``'s read-only one):
#: queries cannot touch the file system, load extensions or change any setting afterwards.
LOCKED_DOWN: dict[str, Any] = {"enable_external_access": False, "lock_configuration": True}


@contextmanager
def read_only_transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """Run the block in ``BEGIN TRANSACTION READ ONLY`` on ``con``, rolled back afterwards.

    DuckDB refuses any write to any attached database inside it when the statement is bound
    (before a row is touched), however the write is spelled: a DELETE inside a WITH,
    ``EXPLAIN ANALYZE UPDATE``, ``nextval()``, ``MERGE``. Use a cursor of its own: a statement
    that ends the transaction (``COMMIT``) makes the ROLLBACK fail, which is ignored.
    """
    con.execute("BEGIN TRANSACTION READ ONLY")
    try:
        yield con
    finally:
        # nothing to undo: ends the snapshot; TransactionException: the block ended it itself
        with suppress(duckdb.TransactionException):
            con.execute("ROLLBACK")


def _connect(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    if path != ":memory:":
        parent = os.path.dirname(os.path.abspath(path))
        if not read_only:
            os.makedirs(parent, exist_ok=True)
    try:
        return duckdb.connect(path, read_only=read_only, config=dict(LOCKED_DOWN))
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            raise StoreLockedError(
                f"{path} is in use by another process (another kernel?); "
                "close that kernel or choose another file with CHAZ_DB"
            ) from None
        raise StoreError(f"cannot open {path}: {text.splitlines()[0]}") from None


class SessionStore(GroupCommitWriter):
    """Session log over DuckDB: ``":memory:"`` or a file path."""

    @classmethod
    def open(cls, path: str = ":memory:", **options: Any) -> Any:
        """The store for ``path``: PostgreSQL (``PgSessionStore``) for a ``postgresql://`` URL, else DuckDB."""
        if str(path).startswith(("postgresql://", "postgres://")):
            from .pgstore import PgSessionStore  # psycopg only where PostgreSQL is used

            return PgSessionStore(str(path), **options)
        return cls(path, **options)

    def __init__(
        self,
        path: str = ":memory:",
        *,
        read_only: bool = False,
        migrations: Sequence[Migration] = MIGRATIONS,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.path = str(path)
        self.read_only = read_only
        self._con = _connect(self.path, read_only)
        self._lock = threading.RLock()
        self._init_writer()
        self._closed = False
        # Redaction runs on every string before it is written (secrets never reach the file).
        self.redact: Callable[[str], str] = redact or redact_secrets
        if read_only:
            self.schema_version = self._read_schema_version()
        else:
            try:
                self.schema_version = apply_migrations(self._con, migrations)
            except Exception:
                self._con.close()
                raise
        self._next_entry_id = self._scalar("SELECT coalesce(max(id), 0) FROM entries") + 1
        self._next_session_id = self._scalar("SELECT coalesce(max(id), 0) FROM sessions") + 1
        self._next_seq: dict[int, int] = {}
        self._latest: dict[int, Entry] = {}
        self._sessions: dict[int, SessionInfo] = {}
        self._logs: OrderedDict[int, list[Entry]] = OrderedDict()
        self._has_run_id = self.has_column("entries", "run_id")
        # A read-only file of an older schema has no ceiling column: read it as NULL.
        self._session_columns = (
            "id, agent, kind, parent_id, depth, created_at, title, metadata, "
            + ("ceiling" if self.has_column("sessions", "ceiling") else "NULL")
        )

    # ----------------------------------------------------------------- basics
    def __repr__(self) -> str:
        return f"SessionStore({self.path!r}, schema_version={self.schema_version})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the session store {self.path} is closed; load the extension again")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise StoreError(f"{self.path} is opened read-only; it cannot be written")

    def _scalar(self, query: str, params: Sequence[Any] | None = None) -> Any:
        with self._lock:
            rows = self._con.execute(query, params or []).fetchall()
        return rows[0][0] if rows else None

    def has_column(self, table: str, column: str) -> bool:
        """Whether the file's schema has ``table.column`` (a read-only file may be older)."""
        return bool(
            self._scalar(
                "SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = ?",
                [table, column],
            )
        )

    def _read_schema_version(self) -> int:
        try:
            return int(self._scalar("SELECT count(*) FROM _chaz_migrations"))
        except duckdb.Error:
            return 0

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the connection (DuckDB checkpoints the WAL into the file)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._con.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for reading from another thread (DuckDB connections are not shared)."""
        self._check_open()
        return self._con.cursor()

    def read(self, query: str, params: Sequence[Any] | None = None) -> list[tuple]:
        """Fetch all rows of ``query`` where DuckDB refuses writes (a read-only transaction).

        For SQL the store did not write itself (the audit view's, ``%chaz sql``): nothing it
        says can change the store, the files or the settings.
        """
        self._check_open()
        cursor = self._con.cursor()
        try:
            with read_only_transaction(cursor):
                return cursor.execute(query, list(params or [])).fetchall()
        finally:
            cursor.close()

    # --------------------------------------------------------------- sessions
    def create_session(
        self,
        agent: str,
        kind: str = "chat",
        parent_id: int | None = None,
        depth: int | None = None,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        ceiling: str | None = None,
    ) -> int:
        """Create a session owned by ``agent``; a child's depth defaults to its parent's + 1.

        ``ceiling`` (JSON text) is written with the row, in the same statement, so a spawned
        session never exists without it; nothing updates it later.
        """
        self._check_writable()
        if depth is None:
            depth = 0
            if parent_id is not None:
                parent = self.session(parent_id)
                depth = parent.depth + 1
        with self._lock:
            session_id = self._next_session_id
            columns = "id, agent, kind, parent_id, depth, created_at, title, metadata"
            meta = json.dumps(redact_data(metadata, self.redact)) if metadata is not None else None
            values = [
                session_id,
                agent,
                kind,
                parent_id,
                depth,
                utcnow(),
                self.redact(title) if title else title,
                meta,
            ]
            if ceiling is not None:
                columns += ", ceiling"
                values.append(ceiling)
            self._con.execute(
                f"INSERT INTO sessions ({columns}) VALUES ({', '.join('?' * len(values))})", values
            )
            self._next_session_id += 1
            self._next_seq[session_id] = 1
            # Sole writer: the new session's row and its (empty) log are known without a query,
            # so its first turn reads nothing back.
            self._sessions[session_id] = _session_from_row([*values[:7], meta, ceiling])
            self._logs[session_id] = []
            while len(self._logs) > LOG_CACHE_SESSIONS:
                self._logs.popitem(last=False)
        return session_id

    def update_session_metadata(self, session_id: int, metadata: dict[str, Any]) -> None:
        self._check_writable()
        self.session(session_id)
        with self._lock:
            self._con.execute(
                "UPDATE sessions SET metadata = ? WHERE id = ?",
                [json.dumps(redact_data(metadata, self.redact)), session_id],
            )
            self._sessions.pop(int(session_id), None)

    def session(self, session_id: int) -> SessionInfo:
        """The session, or a StoreError naming the unknown id."""
        self._check_open()
        cached = self._sessions.get(int(session_id))
        if cached is not None:
            return cached
        with self._lock:
            rows = self._con.execute(
                f"SELECT {self._session_columns} FROM sessions WHERE id = ?",
                [int(session_id)],
            ).fetchall()
            row = rows[0] if rows else None
        if row is None:
            raise StoreError(f"no session {session_id} in {self.path}; `%chaz sessions` lists them")
        info = _session_from_row(row)
        if not self.read_only:
            self._sessions[info.id] = info  # sole writer: the cache cannot go stale
        return info

    def sessions(self) -> list[SessionInfo]:
        self._check_open()
        with self._lock:
            rows = self._con.execute(f"SELECT {self._session_columns} FROM sessions ORDER BY id").fetchall()
        return [_session_from_row(row) for row in rows]

    # ---------------------------------------------------------------- entries
    def append(
        self,
        session_id: int,
        entry_type: EntryType | str,
        sender: str,
        content: str = "",
        *,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> Entry:
        """Write one entry in one transaction, then run the on_write callbacks with it."""
        return self.append_many(
            [
                NewEntry(
                    session_id,
                    EntryType(entry_type),
                    sender,
                    content,
                    tool_call_id,
                    tool_name,
                    payload,
                )
            ]
        )[0]

    def append_many(self, items: Iterable[NewEntry]) -> list[Entry]:
        """Write several entries in one transaction (group commit), then the callbacks, in order.

        Nothing is written when any item is invalid.
        """
        self._check_writable()
        items = list(items)
        if not items:
            return []
        now = utcnow()
        with self._lock:
            next_id = self._next_entry_id
            next_seq: dict[int, int] = {}
            rows: list[list[Any]] = []
            entries: list[Entry] = []
            for item in items:
                sid = int(item.session_id)
                if sid not in next_seq:
                    next_seq[sid] = self._seq_start(sid)
                entry_type = EntryType(item.entry_type)
                content = self.redact(_text(item.content))
                payload = redact_data(item.payload or {}, self.redact)
                payload_json = json.dumps(payload, default=str, ensure_ascii=False)
                entry = Entry(
                    id=next_id,
                    session_id=sid,
                    seq=next_seq[sid],
                    entry_type=entry_type,
                    sender=_text(item.sender),
                    content=content,
                    tool_call_id=item.tool_call_id,
                    tool_name=item.tool_name,
                    payload=json.loads(payload_json),
                    created_at=now,
                )
                row = [
                    entry.id,
                    sid,
                    entry.seq,
                    entry_type.value,
                    entry.sender,
                    content,
                    entry.tool_call_id,
                    entry.tool_name,
                    payload_json,
                    now,
                ]
                if self._has_run_id:
                    row.append(_run_id_of(entry))
                rows.append(row)
                entries.append(entry)
                next_id += 1
                next_seq[sid] += 1
            try:
                # One multi-row INSERT in autocommit is one transaction; each DuckDB statement
                # costs ~1 ms here, so BEGIN + executemany + COMMIT would triple the price.
                columns = _ENTRY_COLUMNS + (", run_id" if self._has_run_id else "")
                one_row = "(" + ", ".join("?" * len(rows[0])) + ")"
                self._con.execute(
                    f"INSERT INTO entries ({columns}) VALUES {', '.join([one_row] * len(rows))}",
                    [value for row in rows for value in row],
                )
            except duckdb.Error as exc:
                raise StoreError(f"could not write entry: {str(exc).splitlines()[0]}") from exc
            # Counters move only after the commit, so a failed write leaves no gap.
            self._next_entry_id = next_id
            self._next_seq.update(next_seq)
            for entry in entries:
                self._latest[entry.session_id] = entry
                cached = self._logs.get(entry.session_id)
                if cached is not None:
                    if len(cached) >= LOG_CACHE_MAX_ENTRIES:
                        del self._logs[entry.session_id]
                    else:
                        cached.append(entry)
        self._dispatch(entries)
        return entries

    def _seq_start(self, session_id: int) -> int:
        nxt = self._next_seq.get(session_id)
        if nxt is None:
            exists = self._con.execute(
                "SELECT count(*) FROM sessions WHERE id = ?", [session_id]
            ).fetchall()[0][0]
            if not exists:
                raise StoreError(
                    f"no session {session_id} in {self.path}; create it with create_session first"
                )
            nxt = (
                self._con.execute(
                    "SELECT coalesce(max(seq), 0) FROM entries WHERE session_id = ?", [session_id]
                ).fetchall()[0][0]
                + 1
            )
            self._next_seq[session_id] = nxt
        return nxt

    def entries(
        self,
        session_id: int,
        after_seq: int = 0,
        types: Iterable[EntryType] | None = None,
    ) -> list[Entry]:
        """Entries of a session in seq order (after ``after_seq``, of ``types`` when given)."""
        self._check_open()
        session_id = int(session_id)
        log_ = self._logs.get(session_id)
        if log_ is None and not self.read_only:
            log_ = self._load_log(session_id)
        if log_ is not None:
            self._logs.move_to_end(session_id)
            wanted = None if types is None else {EntryType(t) for t in types}
            return [e for e in log_ if e.seq > after_seq and (wanted is None or e.entry_type in wanted)]
        query = f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND seq > ?"
        params: list[Any] = [int(session_id), int(after_seq)]
        if types is not None:
            names = [EntryType(t).value for t in types]
            query += f" AND entry_type IN ({', '.join('?' for _ in names)})"
            params += names
        with self._lock:
            rows = self._con.execute(query + " ORDER BY seq", params).fetchall()
        return [_entry_from_row(row) for row in rows]

    def _load_log(self, session_id: int) -> list[Entry] | None:
        """Read a session's whole log into the in-memory cache (LRU, small logs only).

        Every run reads its session's log to build the context; a DuckDB read costs ~1-3 ms
        here. This process is the only writer, so a cached log is kept current by appending
        each committed entry to it.
        """
        with self._lock:
            count = self._con.execute(
                "SELECT count(*) FROM entries WHERE session_id = ?", [session_id]
            ).fetchall()[0][0]
            if count > LOG_CACHE_MAX_ENTRIES:
                return None
            rows = self._con.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE session_id = ? ORDER BY seq", [session_id]
            ).fetchall()
        log_ = [_entry_from_row(row) for row in rows]
        self._logs[session_id] = log_
        while len(self._logs) > LOG_CACHE_SESSIONS:
            self._logs.popitem(last=False)
        return log_

    def latest(self, session_id: int) -> Entry | None:
        """The last entry of a session (from memory once this store has written or read it)."""
        self._check_open()
        cached = self._latest.get(int(session_id))
        if cached is not None:
            return cached
        with self._lock:
            rows = self._con.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
                [int(session_id)],
            ).fetchall()
            row = rows[0] if rows else None
        entry = _entry_from_row(row) if row else None
        if entry is not None and not self.read_only:
            # This process is the only writer, so the cache cannot go stale.
            self._latest[entry.session_id] = entry
        return entry

    def entry(self, entry_id: int) -> Entry | None:
        self._check_open()
        with self._lock:
            rows = self._con.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE id = ?", [int(entry_id)]
            ).fetchall()
            row = rows[0] if rows else None
        return _entry_from_row(row) if row else None

    def find_entries(
        self, entry_type: EntryType, where: str = "", params: Sequence[Any] = ()
    ) -> list[Entry]:
        """Entries of one type across sessions, with an extra SQL condition, in id order."""
        self._check_open()
        query = f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE entry_type = ?"
        if where:
            query += f" AND ({where})"
        with self._lock:
            rows = self._con.execute(
                query + " ORDER BY id", [EntryType(entry_type).value, *params]
            ).fetchall()
        return [_entry_from_row(row) for row in rows]

    # -------------------------------------------------------------------- SQL
    def sql(self, query: str, params: Sequence[Any] | None = None) -> duckdb.DuckDBPyRelation:
        """Run SQL against the store and return DuckDB's relation (``.fetchall()``, ``.df()``)."""
        self._check_open()
        with self._lock:
            return self._con.sql(query, params=list(params) if params else None)

    def execute(self, query: str, params: Sequence[Any] | None = None) -> list[tuple]:
        """Run SQL and fetch all rows (used by the server's own tables)."""
        self._check_open()
        with self._lock:
            return self._con.execute(query, list(params or [])).fetchall()


def _run_id_of(entry: Entry) -> int | None:
    """The run an entry belongs to; a run's opening Ack is the run (its id is the run id)."""
    if entry.entry_type is EntryType.ACK and "trigger_id" in entry.payload:
        return entry.id
    run_id = entry.payload.get("run_id")
    return run_id if isinstance(run_id, int) and not isinstance(run_id, bool) else None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else str(value)


def _entry_from_row(row: Sequence[Any]) -> Entry:
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


def _session_from_row(row: Sequence[Any]) -> SessionInfo:
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
    )


# The row format both stores share (chaz_nb/core/pgstore.py reads and writes the same rows).
ENTRY_COLUMNS = _ENTRY_COLUMNS
entry_from_row = _entry_from_row
session_from_row = _session_from_row
run_id_of = _run_id_of
as_text = _text


def served_elsewhere(store: Any, session_id: int) -> bool:
    """Whether another live process serves the session: its open runs and requests are its own.

    Only a shared store (PostgreSQL, with leases) can say yes; an embedded DuckDB file has one
    writing process, so everything open in it was left by a process that is gone.
    """
    check = getattr(store, "held_elsewhere", None)
    return bool(check is not None and check(session_id))
