"""SessionStore: the DuckDB session log (sessions, entries, migrations, on_write callbacks).

One read-write connection per store, used from the thread that owns the event loop. Threads
that need to read get their own cursor (``SessionStore.reader()``). Entry ids and per-session
``seq`` numbers are allocated in memory: DuckDB admits one read-write process per file, so
this process is the only writer and the counters cannot race another one.

The DuckDB instance is opened locked down (``lockdown.py``).

About 600 lines, one class: the ``Store`` methods of DuckDB; what is not one of them lives in
``rows.py``, ``log_cache.py``, ``lockdown.py`` and ``migrations.py`` already.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import suppress

import duckdb

from ...errors import StoreError
from ..entries import Entry, EntryType
from ..redaction import redact as redact_secrets
from ..redaction import redact_json_text
from ..window import ContextWindow, chunk_rows, fill_window, window_types
from ..writer import NewEntry, Statement, payload_text, storable_fields, when_idle
from .base import ForkCopy, Row, SessionInfo, Store
from . import log_cache
from .journal import Journal, JournalRows, journal_path, missing_rows, read_rows
from .lockdown import connect, read_only_transaction
from .log_cache import LogCache, LogWindow, row_bytes
from .migrations import MIGRATIONS, Migration, apply_duckdb
from .rows import (ENTRY_COLUMNS, duckdb_entries_insert, entry_from_row, fork_metadata, fork_point, int_value,
                   metadata_text, run_id_of, session_from_row, utcnow, Value)

log = logging.getLogger(__name__)

__all__ = ["SessionStore"]

#: seconds journaled rows wait at most for their DuckDB commit when the loop is never idle
APPLY_WINDOW = 0.05
#: the journal is emptied once everything in it is in DuckDB and it is at least this large
JOURNAL_RESET_BYTES = 1 << 20


class SessionStore(Store):
    """Session log over DuckDB: ``":memory:"`` or a file path (``chaz_nb.core.store.base.Store``).

    A DuckDB file has one writing process, so every session in it is this process's: it is not
    a ``SharedSessions`` store, and it keeps what it wrote in memory (``log_cache``).
    """

    dialect = "duckdb"

    @classmethod
    def open(
        cls, path: str = ":memory:", *, read_only: bool = False, redact: Callable[[str], str] | None = None
    ) -> Store:
        """The store for ``path``: PostgreSQL (``postgres.PgSessionStore``) for a
        ``postgresql://`` URL, else DuckDB."""
        if str(path).startswith(("postgresql://", "postgres://")):
            from .postgres import PgSessionStore  # psycopg only where PostgreSQL is used

            return PgSessionStore(str(path), read_only=read_only, redact=redact)
        return cls(path, read_only=read_only, redact=redact)

    def __init__(
        self,
        path: str = ":memory:",
        *,
        read_only: bool = False,
        migrations: Sequence[Migration] = MIGRATIONS,
        redact: Callable[[str], str] | None = None,
        journal: bool = True,
    ) -> None:
        """``journal``: a file store's appends are durable once journaled (``journal.py``), their
        DuckDB commit behind; False: each append is its DuckDB commit (a journal left by an
        earlier process is replayed either way)."""
        self.path = str(path)
        self.read_only = read_only
        self._db = connect(self.path, read_only)
        self._lock = threading.RLock()
        # The journal (``journal.py``): the rows journaled and not yet committed in DuckDB, in
        # order; every query of ``_con`` commits them first (``_settle``)
        self._journal: Journal | None = None
        self._unapplied: list[tuple[str, JournalRows]] = []
        self._apply_scheduled = False
        self._init_writer()
        self._closed = False
        # Redaction runs on every string before it is written (secrets never reach the file).
        self.redact: Callable[[str], str] = redact or redact_secrets
        if read_only:
            self.schema_version = self._read_schema_version()
        else:
            try:
                self.schema_version = apply_duckdb(self._con, migrations)
            except Exception:  # re-raised: only the connection is closed first
                self._db.close()
                raise
        if self.path != ":memory:":
            try:
                self._open_journal(journal)
            except Exception:  # re-raised: only the connection is closed first
                self._db.close()
                raise
        self._next_entry_id = int_value(self._scalar("SELECT coalesce(max(id), 0) FROM entries")) + 1
        self._next_session_id = int_value(self._scalar("SELECT coalesce(max(id), 0) FROM sessions")) + 1
        self._next_seq: dict[int, int] = {}
        self._latest: dict[int, Entry] = {}
        self._sessions: dict[int, SessionInfo] = {}
        self._logs = LogCache()
        self._has_run_id = self.has_column("entries", "run_id")
        # A read-only file of an older schema has no ceiling or fork columns: read them as NULL.
        self._session_columns = (
            "id, agent, kind, parent_id, depth, created_at, title, metadata, "
            + ("ceiling" if self.has_column("sessions", "ceiling") else "NULL")
            + (", forked_from, forked_at_seq" if self.has_column("sessions", "forked_from") else ", NULL, NULL")
        )

    # ---------------------------------------------------------------- journal
    @property
    def _con(self) -> duckdb.DuckDBPyConnection:
        """The connection, once every journaled row is committed in DuckDB: each query of the
        store goes through here, so it sees every entry appended before it."""
        if self._unapplied:
            self._settle()
        return self._db

    @_con.setter
    def _con(self, connection: duckdb.DuckDBPyConnection) -> None:
        self._db = connection  # (tests put a spy in its place)

    def _open_journal(self, keep: bool) -> None:
        """Replay the journal's rows that DuckDB lacks (a process killed before their DuckDB
        commit), then empty it; read-only: refuse a file whose journal holds rows DuckDB lacks."""
        path = journal_path(self.path)
        records = read_rows(path)
        missing = missing_rows(self._db, records, self.path)
        if self.read_only:
            if missing:
                raise StoreError(
                    f"{path} holds {sum(len(rows) for _, rows in missing)} entries not yet in {self.path} "
                    "(its kernel stopped before committing them there): open it read-write once "
                    "(%load_ext chaz_nb with CHAZ_DB set to it) to replay them, then read it")
            return
        for columns, rows in missing:
            statement, values = duckdb_entries_insert(columns, rows)
            self._db.execute(statement, values)  # (each record: one autocommitted transaction)
        if missing:
            log.info("replayed %d journaled entries into %s", sum(len(r) for _, r in missing), self.path)
        if not keep and not os.path.exists(path):
            return
        opened = Journal(path)
        if opened.size:
            opened.reset()  # every row is in DuckDB now, durably (each INSERT committed)
        if keep:
            self._journal = opened
        else:
            opened.close()

    def _journal_append(self, insert_columns: str, rows: JournalRows) -> None:
        """Make ``rows`` durable in the journal; their DuckDB commit follows behind."""
        assert self._journal is not None
        self._journal.append(insert_columns, rows)
        self._unapplied.append((insert_columns, rows))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to do it behind: now (a script's ``append``)
            self._apply_behind(scheduled=False)
            return
        if self._apply_scheduled:
            return
        self._apply_scheduled = True
        when_idle(self._apply_behind, loop)
        loop.call_later(APPLY_WINDOW, self._apply_behind)

    def _apply_behind(self, scheduled: bool = True) -> None:
        """The DuckDB commit of what the journal holds, once the loop is idle (or at its window).

        Never raises: the entries are durable already (their append returns them); when DuckDB
        refuses, the rows stay journaled and the next read tries again (and says why)."""
        if scheduled:
            self._apply_scheduled = False
        if self._unapplied and not self._closed:
            try:
                self._settle()
            except StoreError:
                log.exception("could not commit journaled entries to %s", self.path)

    def _settle(self) -> None:
        """Commit every journaled row in DuckDB, in one transaction (a StoreError when it cannot:
        they stay journaled, and the next read tries again)."""
        with self._lock:
            if not self._unapplied:
                return
            records = self._unapplied
            try:
                if len({columns for columns, _ in records}) == 1:
                    statement, values = duckdb_entries_insert(records[0][0], [r for _, rows in records for r in rows])
                    self._db.execute(statement, values)
                else:  # (a migration between two records: never within one process, but keep it right)
                    self._db.execute("BEGIN TRANSACTION")
                    for columns, rows in records:
                        self._db.execute(*duckdb_entries_insert(columns, rows))
                    self._db.execute("COMMIT")
            except duckdb.Error as exc:
                with suppress(duckdb.Error):
                    self._db.execute("ROLLBACK")
                raise StoreError(f"could not commit journaled entries to {self.path}: "
                                 f"{str(exc).splitlines()[0]}") from exc
            self._unapplied = []
            if self._journal is not None and self._journal.size >= JOURNAL_RESET_BYTES:
                self._journal.reset()

    # ----------------------------------------------------------------- basics
    def _scalar(self, query: str, params: Sequence[object] | None = None) -> Value:
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
            return int_value(self._scalar("SELECT count(*) FROM _chaz_migrations"))
        except duckdb.Error:
            return 0

    def close(self) -> None:
        """Close the connection (DuckDB checkpoints the WAL into the file)."""
        self._flush_queued()  # entries queued for a group commit are written first
        with self._lock:
            if not self._closed:
                try:
                    self._settle()
                    if self._journal is not None and self._journal.size:
                        self._journal.reset()
                except (StoreError, OSError):  # the journal keeps them: the next open replays them
                    log.exception("closing %s with journaled entries not yet committed there", self.path)
                self._closed = True
                if self._journal is not None:
                    self._journal.close()
                self._db.close()

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for reading from another thread (DuckDB connections are not shared)."""
        self._check_open()
        return self._con.cursor()  # (``_con``: what the journal holds is committed first)

    def read(self, query: str, params: Sequence[object] | None = None) -> list[Row]:
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
        metadata: Mapping[str, object] | None = None,
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
        if ceiling is not None:  # its tool patterns are the parent's words: a key in them is masked
            ceiling = redact_json_text(ceiling, self.redact)
        with self._lock:
            session_id = self._next_session_id
            columns = "id, agent, kind, parent_id, depth, created_at, title, metadata"
            meta = metadata_text(metadata, self.redact)
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
            self._sessions[session_id] = session_from_row([*values[:7], meta, ceiling])
            self._logs.put(session_id, first_seq=1)
        return session_id

    def update_session_metadata(self, session_id: int, metadata: Mapping[str, object]) -> None:
        self._check_writable()
        self.session(session_id)
        with self._lock:
            self._con.execute(
                "UPDATE sessions SET metadata = ? WHERE id = ?",
                [metadata_text(metadata, self.redact), session_id],
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
        info = session_from_row(row)
        if not self.read_only:
            self._sessions[info.id] = info  # sole writer: the cache cannot go stale
        return info

    def sessions(self) -> list[SessionInfo]:
        self._check_open()
        with self._lock:
            rows = self._con.execute(f"SELECT {self._session_columns} FROM sessions ORDER BY id").fetchall()
        return [session_from_row(row) for row in rows]

    # ---------------------------------------------------------------- entries
    def append_many(self, items: Iterable[NewEntry]) -> list[Entry]:
        """Write several entries in one transaction (group commit), then the callbacks, in order.

        Nothing is written when any item is invalid.
        """
        self._check_writable()
        items = list(items)
        if not items:
            return []
        entries, _ = self._commit_with(items, [])
        self._dispatch(entries)
        return entries

    def _commit_with(self, items: list[NewEntry], statements: list[Statement]) -> tuple[list[Entry], list[list[Row]]]:
        """``GroupCommitWriter._commit_with``: the statements, then the entries, in one transaction.

        Each ``execute`` lets go of the GIL and waits for it back (under load, behind litellm's
        threads), so a commit is as few of them as DuckDB allows: the entries alone are one
        autocommit INSERT, a statement alone one ``execute``; together ``BEGIN`` goes with the
        first statement (parameters are taken by the last statement of a string only), then the
        other statements, the entries' INSERT and ``COMMIT``.
        """
        entries: list[Entry] = []
        results: list[list[Row]] = []
        if self._journal is not None and items and not statements:
            # The journal is the durability point (``journal.py``): the line is fdatasync'd
            # here, the DuckDB commit follows behind. A batch with statements (``join_commit``:
            # their rows come back from DuckDB) is committed there as before, after what the
            # journal holds (``_con``).
            with self._lock:
                entries, columns, rows, next_seq = self._prepare_rows(items, self._next_entry_id)
                self._journal_append(columns, rows)
                self._committed(entries, next_seq)
            return entries, results
        with self._lock:
            next_seq = {}
            if items:
                entries, insert, values, next_seq = self._prepare(items, self._next_entry_id)
            try:
                if not statements or (not items and len(statements) == 1):
                    for st in statements:
                        results.append(self._con.execute(st.sql, st.params).fetchall())
                    if items:
                        self._con.execute(insert, values)
                else:
                    for i, st in enumerate(statements):
                        begin = "BEGIN TRANSACTION; " if i == 0 else ""
                        results.append(self._con.execute(begin + st.sql, st.params).fetchall())
                    if items:
                        self._con.execute(insert, values)
                    self._con.execute("COMMIT")
            except duckdb.Error as exc:
                if statements:
                    with suppress(duckdb.Error):
                        self._con.execute("ROLLBACK")
                raise StoreError(f"could not write entry: {str(exc).splitlines()[0]}") from exc
            self._committed(entries, next_seq)
        return entries, results

    def _prepare(self, items: list[NewEntry], next_id: int) -> tuple[list[Entry], str, list[object], dict[int, int]]:
        """The entries ``items`` become from id ``next_id`` on, their INSERT, its values, and
        each session's next seq after them (an unknown session is a StoreError)."""
        entries, columns, rows, next_seq = self._prepare_rows(items, next_id)
        # One INSERT in autocommit is one transaction: ~1.4 ms for one row here
        # (bench/bench_commit.py: parsing ~0.1 ms, WAL write + fdatasync ~0.35 ms, the
        # rest DuckDB's transaction, ~35 us a column); BEGIN + INSERT + COMMIT costs 30 %
        # more, and a reused cursor, PREPARE/EXECUTE or the Appender no less. Many rows
        # bind one list a column (``duckdb_entries_insert``).
        statement, values = duckdb_entries_insert(columns, rows)
        return entries, statement, values, next_seq

    def _prepare_rows(
        self, items: list[NewEntry], next_id: int
    ) -> tuple[list[Entry], str, JournalRows, dict[int, int]]:
        """``_prepare``'s entries, the INSERT's columns and its rows (what the journal keeps)."""
        now = utcnow()
        next_seq: dict[int, int] = {}
        rows: list[list[object]] = []
        entries: list[Entry] = []
        for item in items:
            sid = int(item.session_id)
            if sid not in next_seq:
                next_seq[sid] = self._seq_start(sid)
            entry_type = EntryType(item.entry_type)
            fields = storable_fields(item, self.redact, limit=self.max_entry_chars)
            content = fields.content
            payload_json = payload_text(fields.payload)
            entry = Entry(
                id=next_id,
                session_id=sid,
                seq=next_seq[sid],
                entry_type=entry_type,
                sender=fields.sender,
                content=content,
                tool_call_id=fields.tool_call_id,
                tool_name=fields.tool_name,
                payload=json.loads(payload_json),
                created_at=now,
            )
            row: list[object] = [
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
                row.append(run_id_of(entry))
            rows.append(row)
            entries.append(entry)
            next_id += 1
            next_seq[sid] += 1
        columns = ENTRY_COLUMNS + (", run_id" if self._has_run_id else "")
        return entries, columns, rows, next_seq

    def _committed(self, entries: list[Entry], next_seq: dict[int, int]) -> None:
        # Counters move only after the commit, so a failed write leaves no gap.
        if entries:
            self._next_entry_id = entries[-1].id + 1
        self._next_seq.update(next_seq)
        for entry in entries:
            self._latest[entry.session_id] = entry
        self._logs.committed(entries)

    # ------------------------------------------------------------------ forks
    def fork_session(
        self, source_id: int, at_seq: int | None = None, *, agent: str | None = None, into: int | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> ForkCopy:
        """``Store.fork_session``: the copies keep their seqs, so the branch goes on from ``at_seq``."""
        from ..forksql import closing_entries, copy_entries_sql

        self._check_writable()
        source = self.session(source_id)
        with self._lock:
            end = self._latest_seq(source.id)
            at = fork_point(at_seq, end, source.id)
            new_id = self._next_session_id if into is None else int(into)
            if self._scalar("SELECT count(*) FROM sessions WHERE id = ?", [new_id]):
                raise StoreError(
                    f"session {new_id} exists in {self.path}; a fork makes a new session (leave the id out)")
            first = self._next_entry_id
            row = [new_id, agent or source.agent, source.kind, source.parent_id, source.depth, utcnow(),
                   source.title, fork_metadata(source.metadata, metadata, self.redact),
                   source.ceiling, source.id, at]
            self._con.execute("BEGIN TRANSACTION")
            try:
                self._con.execute(
                    "INSERT INTO sessions (id, agent, kind, parent_id, depth, created_at, title, metadata, ceiling,"
                    " forked_from, forked_at_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
                self._con.execute(copy_entries_sql("duckdb", first, source.id, at, new_id))
                copied = int_value(self._scalar("SELECT count(*) FROM entries WHERE session_id = ?", [new_id]))
                self._next_seq[new_id] = at + 1  # the copies keep their seqs: the branch goes on from #at
                closing: list[Entry] = []
                next_seq: dict[int, int] = {}
                items = closing_entries(self, new_id, at)
                if items:
                    closing, statement, values, next_seq = self._prepare(items, first + at)
                    self._con.execute(statement, values)
                self._con.execute("COMMIT")
            except Exception as exc:  # re-raised (as a StoreError) once the fork is rolled back
                with suppress(duckdb.Error):
                    self._con.execute("ROLLBACK")
                self._next_seq.pop(new_id, None)
                if isinstance(exc, StoreError):
                    raise
                raise StoreError(f"could not fork session {source.id}: {str(exc).splitlines()[0]}") from exc
            self._next_session_id = max(self._next_session_id, new_id + 1)
            self._next_entry_id = first + at + len(closing)  # (the copy of seq N has id first + N - 1)
            self._committed(closing, next_seq)
        self._dispatch(closing)
        return ForkCopy(new_id, at, copied, closing)

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
        """Entries of a session in seq order (after ``after_seq``, of ``types`` when given).

        Served from the session's cached window when it reaches back past ``after_seq``
        (the newest entries: a view's next entries, a short session's whole log), else read.
        """
        self._check_open()
        session_id = int(session_id)
        window = self._cached_window(session_id)
        if window is not None and window.covers(after_seq):
            wanted = None if types is None else {EntryType(t) for t in types}
            return [e for e in window.entries if e.seq > after_seq and (wanted is None or e.entry_type in wanted)]
        query = f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND seq > ?"
        params: list[object] = [int(session_id), int(after_seq)]
        if types is not None:
            names = [EntryType(t).value for t in types]
            query += f" AND entry_type IN ({', '.join('?' for _ in names)})"
            params += names
        with self._lock:
            rows = self._con.execute(query + " ORDER BY seq", params).fetchall()
        return [entry_from_row(row) for row in rows]

    def read_page(self, session_id: int, before_seq: int | None = None, limit: int = 50) -> list[Entry]:
        """The newest ``limit`` entries of a session before ``before_seq`` (all when None), in
        seq order, never the whole log.

        Seqs are gapless from 1, so ``page[0].seq - 1`` entries come before the page (a view's
        "show earlier" count); the next page back is ``read_page(id, before_seq=page[0].seq)``.
        On DuckDB that also makes the page a seq range, which the table's zonemaps prune to a
        few row groups (~1-2 ms on 50k entries, where ``ORDER BY seq DESC LIMIT`` scans the
        session: ~20 ms): ``max(seq)``, then the range; a range with a gap falls back to the
        top-N query.
        """
        self._check_open()
        if limit < 1:
            return []
        sid, limit = int(session_id), int(limit)
        with self._lock:
            top = self._con.execute("SELECT max(seq) FROM entries WHERE session_id = ?", [sid]).fetchall()[0][0]
            if top is None:
                return []
            hi = top + 1 if before_seq is None else min(int(before_seq), top + 1)
            lo = max(1, hi - limit)
            rows = self._con.execute(
                f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND seq >= ? AND seq < ? ORDER BY seq",
                [sid, lo, hi],
            ).fetchall()
            if len(rows) < hi - lo:  # a gap in the seqs (not written by this store): the plain query
                rows = self._con.execute(
                    f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
                    [sid, hi, min(limit, 2**63 - 1)],
                ).fetchall()[::-1]
        return [entry_from_row(row) for row in rows]

    # ------------------------------------------------------ context window
    def context_window(
        self, session_id: int, max_tokens: int | None, types: Iterable[EntryType] | None = None
    ) -> ContextWindow:
        """The entries a run's context is built from (``chaz_nb.core.window``), in seq order.

        From the latest Summary on, newest first, only as far as ``max_tokens`` reaches
        (``None``: everything since the Summary). The session's cached window serves the
        newest entries; older ones are read in seq ranges of the session going back, each
        range twice the last (DuckDB filters the seq column by its zone maps and vectors: its
        ART index serves point lookups, not ranges), and only the rows in range are built, so
        the cost follows the budget, not the session's length (bench/bench_context.py).
        """
        self._check_open()
        session_id = int(session_id)
        wanted = window_types(types)
        window = self._cached_window(session_id)

        def chunks() -> Iterator[list[Entry]]:
            if window is not None:
                yield [e for e in reversed(window.entries) if e.entry_type in wanted]
                if window.complete:
                    return
                hi = window.first_seq - 1
            else:
                hi = self._latest_seq(session_id)
            size = chunk_rows(max_tokens)
            names = [t.value for t in wanted]
            marks = ", ".join("?" for _ in names)
            while hi >= 1:
                lo = max(1, hi - size + 1)
                with self._lock:
                    rows = self._con.execute(
                        f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND seq BETWEEN ? AND ?"
                        f" AND entry_type IN ({marks}) ORDER BY seq DESC",
                        [session_id, lo, hi, *names],
                    ).fetchall()
                yield [entry_from_row(row) for row in rows]
                hi, size = lo - 1, size * 2

        def latest_summary() -> Entry | None:
            if window is not None and window.summary_known:
                return window.summary
            summary = self._latest_summary(session_id)
            if window is not None:
                window.know_summary(summary)
            return summary

        return fill_window(chunks(), max_tokens, latest_summary)

    def _latest_seq(self, session_id: int) -> int:
        nxt = self._next_seq.get(session_id)
        if nxt is not None:
            return nxt - 1
        return int_value(self._scalar("SELECT coalesce(max(seq), 0) FROM entries WHERE session_id = ?", [session_id]))

    def _latest_summary(self, session_id: int) -> Entry | None:
        with self._lock:
            seq = self._con.execute(
                "SELECT max(seq) FROM entries WHERE session_id = ? AND entry_type = 'Summary'", [session_id]
            ).fetchall()[0][0]
            if seq is None:
                return None
            rows = self._con.execute(
                f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND seq = ?", [session_id, seq]
            ).fetchall()
        return entry_from_row(rows[0]) if rows else None

    # ------------------------------------------------------------ log cache
    def _cached_window(self, session_id: int) -> LogWindow | None:
        """The session's cached window of newest entries (read on first use; None read-only)."""
        if self.read_only:
            return None
        window = self._logs.get(session_id)
        if window is not None:
            return window
        latest = self._latest_seq(session_id)
        with self._lock:
            rows = self._con.execute(
                f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND seq > ? ORDER BY seq",
                [session_id, latest - log_cache.LOG_CACHE_MAX_ENTRIES],
            ).fetchall()
        first_seq = latest + 1 - len(rows) if rows else 1
        return self._logs.put(session_id, first_seq, ((entry_from_row(r), row_bytes(r[5], r[8])) for r in rows))

    def latest(self, session_id: int) -> Entry | None:
        """The last entry of a session (from memory once this store has written or read it)."""
        self._check_open()
        cached = self._latest.get(int(session_id))
        if cached is not None:
            return cached
        with self._lock:
            rows = self._con.execute(
                f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
                [int(session_id)],
            ).fetchall()
            row = rows[0] if rows else None
        entry = entry_from_row(row) if row else None
        if entry is not None and not self.read_only:
            # This process is the only writer, so the cache cannot go stale.
            self._latest[entry.session_id] = entry
        return entry

    def entry(self, entry_id: int) -> Entry | None:
        self._check_open()
        with self._lock:
            rows = self._con.execute(
                f"SELECT {ENTRY_COLUMNS} FROM entries WHERE id = ?", [int(entry_id)]
            ).fetchall()
            row = rows[0] if rows else None
        return entry_from_row(row) if row else None

    def find_entries(
        self, entry_type: EntryType, where: str = "", params: Sequence[object] = ()
    ) -> list[Entry]:
        """Entries of one type across sessions, with an extra SQL condition, in id order."""
        self._check_open()
        query = f"SELECT {ENTRY_COLUMNS} FROM entries WHERE entry_type = ?"
        if where:
            query += f" AND ({where})"
        with self._lock:
            rows = self._con.execute(
                query + " ORDER BY id", [EntryType(entry_type).value, *params]
            ).fetchall()
        return [entry_from_row(row) for row in rows]

    # -------------------------------------------------------------------- SQL
    def sql(self, query: str, params: Sequence[object] | None = None) -> duckdb.DuckDBPyRelation:
        """Run SQL against the store and return DuckDB's relation (``.fetchall()``, ``.df()``)."""
        self._check_open()
        with self._lock:
            return self._con.sql(query, params=list(params) if params else None)

    def execute(self, query: str, params: Sequence[object] | None = None) -> list[Row]:
        """Run SQL and fetch all rows (used by the server's own tables)."""
        self._check_open()
        with self._lock:
            return self._con.execute(query, list(params or [])).fetchall()
