"""PgSessionStore: the session log on PostgreSQL, shared by every kernel that opens the URL.

The contract of ``base.Store`` and the ``base.SharedSessions`` capability; the same rows
(``rows.py``), seq rules, migrations (``migrations.py``) and audit views as the DuckDB store
(``duckdb.py``); ``SessionStore.open(url)`` picks this one for a ``postgresql://`` URL. What
differs, because several processes write one database:

- **Ids and seq.** Every write transaction takes one advisory transaction lock
  (``pg_advisory_xact_lock``) before it reads ``max(id)`` and the sessions' ``max(seq)``, so
  entry ids and each session's seq are gapless and follow commit order across processes
  (a rolled-back write takes nothing). Writes are serialized store-wide, which is one commit
  at a time: cheap next to a model call, and it is what lets a reader rely on ids.
- **on_write across processes.** The insert transaction sends ``NOTIFY chaz_entries`` with
  ``session_id:entry_id``. A listener task on the loop (``start_listener``, started by the
  first ``subscribe``/``write`` on a running loop) reads every entry past the last id it has
  seen from the table, so a lost or coalesced notification loses nothing and a reconnecting
  listener catches up. Local writes are dispatched right after their commit, after any
  entries of other processes that committed before them: each subscriber sees entries in
  commit (id) order, its own and others' alike.
- **Leases.** ``claim(session_id)`` takes a session-level advisory lock on a connection of its
  own: one process serves a session at a time, and the lock frees when that process dies
  (its connection closes), so another kernel takes the session over at its next trigger.
- **No caches of what others write.** Logs and latest entries are read from the table.
- **``%chaz sql``** runs each statement on a connection of its own, one statement per protocol
  message, in a ``READ ONLY`` transaction, as the role of ``CHAZ_DB_READER`` (a URL) when set,
  else as the ``chaz_nb_reader`` role the store sets up where it may (``chaz_nb.core.pgreader``).

The store's own SQL (and the server's: schedules, recovery) is written with ``?`` parameters
and DuckDB's ``INSERT OR REPLACE``; ``execute`` turns them into psycopg's ``%s`` and
``ON CONFLICT (id) DO UPDATE``.

About 600 lines, one class: the ``Store`` methods of PostgreSQL; what is not one of them lives
in ``pgsql.py``, ``pgreader.py``, ``rows.py`` and ``migrations.py`` already.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import psycopg

from ...errors import StoreError
from ..entries import Entry, EntryType
from ..pgreader import ReadRun, ensure_reader_role, run_read_only
from ..redaction import redact as redact_secrets
from ..redaction import redact_json_text
from ..window import ContextWindow, chunk_rows, fill_window, window_types
from ..writer import LONE_SURROGATE_OR_NUL, NewEntry, Statement, payload_text, storable_fields
from .base import ForkCopy, Row, SessionInfo, SharedSessions
from .migrations import MIGRATIONS, Migration, apply_postgres
from .pgteam import TeamAccess, not_shared
from .pgsql import PgResult, bigint, connect, display_url, one_line, to_pg
from .rows import (ENTRY_COLUMNS, SESSION_COLUMNS, entry_from_row, fork_metadata, fork_point, int_or_none,
                   int_value, metadata_text, run_id_of, session_from_row, utcnow, Value)

log = logging.getLogger(__name__)

__all__ = ["PgSessionStore"]
CHANNEL = "chaz_entries"
#: other channels the listener relays to ``on_notice`` callbacks (schedule changes, stop
#: requests between kernels: server/stop_relay.py, agent definitions: server/agent_book.py)
NOTICE_CHANNELS = ("chaz_schedules", "chaz_stop", "chaz_agents")
#: advisory lock keys (first int: this project's namespace; second: what is locked)
_WRITE_LOCK = (7261, 1)
_LEASE_NS = 7262


#: an entry ready for its INSERT: session, type, sender, content, tool call id, tool, payload JSON
Prepared = tuple[int, EntryType, str, str, "str | None", "str | None", str]


class PgSessionStore(TeamAccess, SharedSessions):
    """Session log over PostgreSQL (psycopg 3): ``PgSessionStore("postgresql://...")``.

    Several kernels serve this store's sessions, one per session: the lease holder (``claim``).
    """

    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        redact: Callable[[str], str] | None = None,
        reader_url: str | None = None,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        self.url = str(url)
        self.path = display_url(self.url)
        self.read_only = read_only
        self.reader_url = reader_url or os.environ.get("CHAZ_DB_READER") or None
        #: the role %chaz sql runs as without CHAZ_DB_READER (pgreader), once looked up
        self._reader_role: str | None = None
        self._reader_set_up = False
        self.redact: Callable[[str], str] = redact or redact_secrets
        self._lock = threading.RLock()
        try:
            self._con = connect(self.url)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open {self.path}: {one_line(exc)}") from None
        self._lease_con: psycopg.Connection | None = None
        self._held: set[int] = set()
        self._init_writer()
        self._notice: dict[str, list[Callable[[str], None]]] = {}
        self._closed = False
        self._listener: asyncio.Task | None = None
        try:
            self.schema_version = (
                int_value(self._scalar("SELECT count(*) FROM _chaz_migrations")) if read_only
                else apply_postgres(self._con, migrations)
            )
        except Exception:  # re-raised: only the connection is closed first
            self._con.close()
            raise
        #: the role this kernel acts as (``session_user``: who the database says wrote an entry)
        self.role = str(self._scalar("SELECT session_user"))
        #: a team's store (migration 021): ids are read store-wide, past row-level security
        self._team = bool(self._scalar("SELECT to_regproc('chaz_last_entry_id') IS NOT NULL"))
        self._last_entry_id = "chaz_last_entry_id()" if self._team else "(SELECT coalesce(max(id), 0) FROM entries)"
        self._last_session_id = (
            "chaz_last_session_id()" if self._team else "(SELECT coalesce(max(id), 0) FROM sessions)")
        #: a team's person (pgteam.py): the rows this role reads are some of the ids only
        self._confined_role = self.confined
        #: the highest entry id handed to the subscribers (or queued for them)
        self._seen = int_value(self._scalar(f"SELECT {self._last_entry_id}"))
        #: the highest entry id every subscriber has been handed (``dispatched_id``)
        self._dispatched = self._seen
        # a database of an older schema (read only) has no copies to skip
        self._not_copies = " AND copied_from IS NULL" if self.has_column("entries", "copied_from") else ""

    # ----------------------------------------------------------------- basics
    def _rows(self, query: str, params: Sequence[object] | None = None) -> list[Row]:
        with self._lock:
            cur = self._con.execute(to_pg(query), list(params or []))
            return cur.fetchall() if cur.description else []

    def _scalar(self, query: str, params: Sequence[object] | None = None) -> Value:
        rows = self._rows(query, params)
        return rows[0][0] if rows else None

    def has_column(self, table: str, column: str) -> bool:
        return bool(self._scalar(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = ? AND column_name = ?", [table, column],
        ))

    def close(self) -> None:
        """Close the connections; the leases this store held are freed with them."""
        self._flush_queued()  # entries queued for a group commit are written first
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._listener is not None:
                self._listener.cancel()
            for con in (self._con, self._lease_con):
                if con is not None:
                    con.close()

    def read(self, query: str, params: Sequence[object] | None = None) -> list[Row]:
        """Fetch all rows of ``query`` in a READ ONLY transaction (SQL the store did not write)."""
        self._check_open()
        return self.query_read_only([query], params=params)[-1][1]

    def query_read_only(
        self, statements: Sequence[str], params: Sequence[object] | None = None, max_rows: int | None = None
    ) -> list[tuple[list[str], list[tuple], int]]:
        """``(columns, rows, total)`` of each statement, run as ``run_read_only`` runs them."""
        return self.run_read_only(statements, params=params, max_rows=max_rows).results

    def run_read_only(
        self, statements: Sequence[str], params: Sequence[object] | None = None, max_rows: int | None = None,
        unqualified: Collection[str] = (),
    ) -> ReadRun:
        """Each statement on its own, in a READ ONLY transaction, one per protocol message, as
        the reader role (``chaz_nb.core.pgreader``); ``?`` parameters go with the last one."""
        self._check_open()
        if self.reader_url:
            url, role = self.reader_url, None
        else:
            url = self.url
            if not self._reader_set_up:
                self._reader_role = ensure_reader_role(self.url, create=not self.read_only)
                self._reader_set_up = True
            role = self._reader_role
        statements = list(statements)
        if params and statements:
            statements[-1] = to_pg(statements[-1])
        return run_read_only(url, statements, params, role=role, max_rows=max_rows, unqualified=unqualified)

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
        """Create a session owned by ``agent``; a child's depth defaults to its parent's + 1."""
        self._check_writable()
        if depth is None:
            depth = 0 if parent_id is None else self.session(parent_id).depth + 1
        meta = metadata_text(metadata, self.redact)
        if ceiling is not None:  # its tool patterns are the parent's words: a key in them is masked
            ceiling = redact_json_text(ceiling, self.redact)
        with self._lock, self._con.transaction():
            self._con.execute("SELECT pg_advisory_xact_lock(%s, %s)", _WRITE_LOCK)
            row = self._con.execute(
                "INSERT INTO sessions (id, agent, kind, parent_id, depth, created_at, title, metadata, ceiling)"
                f" SELECT {self._last_session_id} + 1, %s, %s, %s, %s, %s, %s, %s, %s RETURNING id",
                [agent, kind, parent_id, depth, utcnow(), self.redact(title) if title else title, meta, ceiling],
            ).fetchone()
        assert row is not None
        return int(row[0])

    def update_session_metadata(self, session_id: int, metadata: Mapping[str, object]) -> None:
        self._check_writable()
        self.session(session_id)
        self._rows("UPDATE sessions SET metadata = ? WHERE id = ?",
                   [metadata_text(metadata, self.redact), int(session_id)])

    def session(self, session_id: int) -> SessionInfo:
        """The session, or a StoreError naming the unknown id."""
        self._check_open()
        rows = self._rows(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", [int(session_id)])
        if not rows:
            owner = self._owner_of(session_id)
            if owner is not None:
                raise StoreError(not_shared(int(session_id), owner, self.role, "read"))
            raise StoreError(f"no session {session_id} in {self.path}; `%chaz sessions` lists them")
        return session_from_row(rows[0])

    def _owner_of(self, session_id: int) -> str | None:
        """On a team's store, the owner of a session this role cannot see (None: no such one)."""
        if not self._team:
            return None
        owner = self._scalar("SELECT chaz_session_owner(?)", [bigint(session_id)])
        return None if owner is None else str(owner)

    def sessions(self) -> list[SessionInfo]:
        self._check_open()
        return [session_from_row(row) for row in self._rows(f"SELECT {SESSION_COLUMNS} FROM sessions ORDER BY id")]

    # ---------------------------------------------------------------- entries
    def append_many(self, items: Iterable[NewEntry]) -> list[Entry]:
        """Write several entries in one transaction, then the callbacks, in commit order.

        Nothing is written when any item is invalid.
        """
        self._check_writable()
        items = list(items)
        if not items:
            return []
        entries, _ = self._commit_with(items, [])
        self._drain()
        return entries

    def _commit_with(self, items: list[NewEntry], statements: list[Statement]) -> tuple[list[Entry], list[list[Row]]]:
        """``GroupCommitWriter._commit_with``: the statements, then the entries, in one transaction.

        The statements go before the write lock is taken (the entries' ids and seqs need it,
        they do not), so they add nothing to the time other kernels' commits wait for it.
        """
        prepared = self._prepare(items)
        entries: list[Entry] = []
        results: list[list[Row]] = []
        with self._lock:
            try:
                with self._con.transaction():
                    for st in statements:
                        cur = self._con.execute(to_pg(st.sql), list(st.params))
                        results.append(cur.fetchall() if cur.description else [])
                    if prepared:
                        self._con.execute("SELECT pg_advisory_xact_lock(%s, %s)", _WRITE_LOCK)
                        entries = self._insert(prepared)
            except StoreError:
                raise
            except psycopg.errors.InsufficientPrivilege as exc:
                raise StoreError(f"could not write entry: {self._refusal(items, exc)}") from None
            except psycopg.Error as exc:
                raise StoreError(f"could not write entry: {one_line(exc)}") from exc
            if entries:
                self._enqueue(entries)
        return entries, results

    def _refusal(self, items: list[NewEntry], exc: psycopg.Error) -> str:
        """Why row-level security refused ``items`` (a team's store), as what to ask whom."""
        for item in items:
            owner = self._owner_of(item.session_id)
            if owner is not None:
                need = "approve" if EntryType(item.entry_type) is EntryType.APPROVAL_DECISION else "write"
                if not self._scalar("SELECT chaz_may(?, ?)", [int(item.session_id), 3 if need == "approve" else 2]):
                    return not_shared(int(item.session_id), owner, self.role, need)
        return one_line(exc)

    def _hand_out(self, entries: list[Entry]) -> None:
        """The callbacks after ``_commit_with``: what ``_enqueue`` queued, in id order."""
        self._drain()

    def _prepare(self, items: Iterable[NewEntry]) -> list[Prepared]:
        prepared = []
        for item in items:
            fields = storable_fields(item, self.redact, LONE_SURROGATE_OR_NUL, self.max_entry_chars)
            payload_json = payload_text(fields.payload)
            prepared.append((int(item.session_id), EntryType(item.entry_type), fields.sender, fields.content,
                             fields.tool_call_id, fields.tool_name, payload_json))
        return prepared

    def _insert(self, prepared: list[Prepared]) -> list[Entry]:
        """Insert prepared entries inside the caller's transaction, which holds the write lock."""
        now = utcnow()
        con = self._con
        entries: list[Entry] = []
        sids = sorted({p[0] for p in prepared})
        found = {r[0] for r in con.execute("SELECT id FROM sessions WHERE id = ANY(%s)", [sids])}
        missing = [s for s in sids if s not in found]
        if missing:
            owner = self._owner_of(missing[0])
            if owner is not None:
                raise StoreError(not_shared(missing[0], owner, self.role, "write"))
            raise StoreError(
                f"no session {missing[0]} in {self.path}; create it with create_session first"
            )
        next_seq: dict[int, int] = dict(con.execute(
            "SELECT s, coalesce((SELECT max(seq) FROM entries WHERE session_id = s), 0) + 1"
            " FROM unnest(%s::bigint[]) AS s", [sids]).fetchall())
        row = con.execute(f"SELECT {self._last_entry_id} + 1").fetchone()
        next_id = int(row[0]) if row else 1
        rows = []
        for sid, entry_type, sender, content, call_id, tool, payload_json in prepared:
            entry = Entry(id=next_id, session_id=sid, seq=next_seq[sid], entry_type=entry_type,
                          sender=sender, content=content, tool_call_id=call_id, tool_name=tool,
                          payload=json.loads(payload_json), created_at=now)
            rows.append((entry.id, sid, entry.seq, entry_type.value, sender, content, call_id, tool,
                         payload_json, now, run_id_of(entry)))
            entries.append(entry)
            next_id += 1
            next_seq[sid] += 1
        with con.cursor() as cur:
            cur.executemany(
                f"INSERT INTO entries ({ENTRY_COLUMNS}, run_id) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
        last: dict[int, int] = {}
        for entry in entries:
            last[entry.session_id] = entry.id
        for sid, eid in last.items():
            con.execute("SELECT pg_notify(%s, %s)", [CHANNEL, f"{sid}:{eid}"])
        return entries

    # ------------------------------------------------------------------ forks
    def fork_session(
        self, source_id: int, at_seq: int | None = None, *, agent: str | None = None, into: int | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> ForkCopy:
        """``SessionStore.fork_session`` on PostgreSQL: one transaction under the write lock,
        so the copy ends at an entry every kernel has committed, and no write lands between
        the copy and the entries that close what was open at the fork point."""
        from ..forksql import closing_entries, copy_entries_sql

        self._check_writable()
        source = self.session(source_id)
        with self._lock:
            try:
                with self._con.transaction():
                    con = self._con
                    con.execute("SELECT pg_advisory_xact_lock(%s, %s)", _WRITE_LOCK)
                    end = int_value(self._scalar("SELECT coalesce(max(seq), 0) FROM entries WHERE session_id = ?",
                                           [source.id]))
                    at = fork_point(at_seq, end, source.id)
                    if into is None:
                        new_id = int_value(self._scalar(f"SELECT {self._last_session_id} + 1"))
                    elif self._scalar("SELECT count(*) FROM sessions WHERE id = ?", [int(into)]):
                        raise StoreError(
                            f"session {into} exists in {self.path}; a fork makes a new session (leave the id out)")
                    else:
                        new_id = int(into)
                    first = int_value(self._scalar(f"SELECT {self._last_entry_id} + 1"))
                    self._rows(
                        "INSERT INTO sessions (id, agent, kind, parent_id, depth, created_at, title, metadata,"
                        " ceiling, forked_from, forked_at_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [new_id, agent or source.agent, source.kind, source.parent_id, source.depth, utcnow(),
                         source.title, fork_metadata(source.metadata, metadata, self.redact),
                         source.ceiling, source.id, at])
                    self._con.execute(copy_entries_sql("postgresql", first, source.id, at, new_id))
                    copied = int_value(self._scalar("SELECT count(*) FROM entries WHERE session_id = ?", [new_id]))
                    items = closing_entries(self, new_id, at)
                    closing = self._insert(self._prepare(items)) if items else []
            except StoreError:
                raise
            except psycopg.Error as exc:
                raise StoreError(f"could not fork session {source.id}: {one_line(exc)}") from exc
            self._enqueue(closing)
        self._drain()
        return ForkCopy(new_id, at, copied, closing)

    def entries(self, session_id: int, after_seq: int = 0, types: Iterable[EntryType] | None = None) -> list[Entry]:
        """Entries of a session in seq order (after ``after_seq``, of ``types`` when given)."""
        self._check_open()
        query = f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND seq > ?"
        params: list[object] = [int(session_id), int(after_seq)]
        if types is not None:
            params.append([EntryType(t).value for t in types])
            query += " AND entry_type = ANY(?)"
        return [entry_from_row(row) for row in self._rows(query + " ORDER BY seq", params)]

    def context_window(
        self, session_id: int, max_tokens: int | None, types: Iterable[EntryType] | None = None
    ) -> ContextWindow:
        """The entries a run's context is built from (``chaz_nb.core.window``), in seq order.

        From the latest Summary on, newest first, only as far as ``max_tokens`` reaches
        (``None``: everything since the Summary): keyset reads down the (session_id, seq)
        index, and the Summary is one probe of (session_id, entry_type, seq) (migration 009).
        """
        self._check_open()
        sid = int(session_id)
        names = [t.value for t in window_types(types)]

        def chunks() -> Iterable[list[Entry]]:
            below, size = None, chunk_rows(max_tokens)
            while True:
                upto = "" if below is None else " AND seq < ?"
                params: list[object] = [sid, names] + ([] if below is None else [below]) + [size]
                rows = self._rows(
                    f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND entry_type = ANY(?){upto}"
                    " ORDER BY seq DESC LIMIT ?", params)
                yield [entry_from_row(row) for row in rows]
                if len(rows) < size:
                    return
                below, size = rows[-1][2], size * 2

        def latest_summary() -> Entry | None:
            rows = self._rows(
                f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? AND entry_type = 'Summary'"
                " ORDER BY seq DESC LIMIT 1", [sid])
            return entry_from_row(rows[0]) if rows else None

        return fill_window(chunks(), max_tokens, latest_summary)

    def read_page(self, session_id: int, before_seq: int | None = None, limit: int = 50) -> list[Entry]:
        """The newest ``limit`` entries before ``before_seq`` (all when None), in seq order: one
        backward scan of the (session_id, seq) index (see ``SessionStore.read_page``)."""
        self._check_open()
        if limit < 1:
            return []
        # any whole number is a page request (a frontend's, %chaz log's): past bigint, PostgreSQL
        # refuses a LIMIT and compares as numeric (no index); no seq or id is that far out
        query = f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ?"
        params: list[object] = [bigint(session_id)]
        if before_seq is not None:
            query += " AND seq < ?"
            params.append(bigint(before_seq))
        rows = self._rows(query + " ORDER BY seq DESC LIMIT ?", [*params, bigint(limit)])
        return [entry_from_row(row) for row in reversed(rows)]

    def latest(self, session_id: int) -> Entry | None:
        self._check_open()
        rows = self._rows(f"SELECT {ENTRY_COLUMNS} FROM entries WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
                          [int(session_id)])
        return entry_from_row(rows[0]) if rows else None

    def entry(self, entry_id: int) -> Entry | None:
        self._check_open()
        rows = self._rows(f"SELECT {ENTRY_COLUMNS} FROM entries WHERE id = ?", [int(entry_id)])
        return entry_from_row(rows[0]) if rows else None

    def find_entries(self, entry_type: EntryType, where: str = "", params: Sequence[object] = ()) -> list[Entry]:
        """Entries of one type across sessions, with an extra SQL condition, in id order."""
        self._check_open()
        query = f"SELECT {ENTRY_COLUMNS} FROM entries WHERE entry_type = ?"
        if where:
            query += f" AND ({where})"
        rows = self._rows(query + " ORDER BY id", [EntryType(entry_type).value, *params])
        return [entry_from_row(row) for row in rows]

    # -------------------------------------------------------------- callbacks
    def _writing_on(self, loop: asyncio.AbstractEventLoop) -> None:
        self.start_listener(loop)

    def _subscribed(self) -> None:
        """Subscribers hear this process's commits and others': the listener brings the others'.

        No running loop: the first ``write`` (or ``start_listener(loop)``) starts it.
        """
        with contextlib.suppress(RuntimeError):
            self.start_listener(asyncio.get_running_loop())

    def notify(self, channel: str, payload: str) -> None:
        """Tell every kernel's ``on_notice(channel)`` callbacks (this one's too) ``payload``."""
        self._check_open()
        self._rows("SELECT pg_notify(?, ?)", [channel, payload])

    def on_notice(self, channel: str, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(payload)`` on the loop for each ``notify(channel, ...)`` of any kernel
        (one of ``NOTICE_CHANNELS``); a notice lost while the listener reconnects is not replayed."""
        if channel not in NOTICE_CHANNELS:
            raise StoreError(f"no notices on {channel!r}; channels: {', '.join(NOTICE_CHANNELS)}")
        self._notice.setdefault(channel, []).append(callback)
        with contextlib.suppress(RuntimeError):
            self.start_listener(asyncio.get_running_loop())

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._notice[channel].remove(callback)

        return unsubscribe

    def _enqueue(self, local: list[Entry]) -> None:
        """Queue ``local`` (just committed) behind the others' entries committed before them."""
        first = local[0].id if local else None
        if first is None or first > self._seen + 1:
            # up to the newest id first, then the entries to it: a fork's copies (copied_from) are
            # skipped, as no news (nothing runs for them), yet seen (ids commit in order, so no
            # entry below that id can still come)
            upto = "" if first is None else " AND id < ?"
            params = [self._seen] if first is None else [self._seen, first]
            top: int | None
            if self._confined_role:
                # a confined role sees only some ids: up to the store's newest (every id below
                # committed), so what it cannot see still counts as seen (dispatched_id)
                newest = first - 1 if first is not None else int_value(self._scalar("SELECT chaz_last_entry_id()"))
                top = newest if newest > self._seen else None
            else:
                top = int_or_none(self._scalar(f"SELECT max(id) FROM entries WHERE id > ?{upto}", params))
            if top is not None:
                earlier = [entry_from_row(r) for r in self._rows(
                    f"SELECT {ENTRY_COLUMNS} FROM entries WHERE id > ? AND id <= ?{self._not_copies}"
                    " ORDER BY id", [self._seen, top])]
                self._queue.extend(earlier)
                self._seen = max(self._seen, top)
        fresh = [e for e in local if e.id > self._seen]
        self._queue.extend(fresh)
        if fresh:
            self._seen = fresh[-1].id

    def catch_up(self) -> int:
        """Dispatch every entry committed since the last one seen (by any process); how many."""
        if self._closed:
            return 0
        with self._lock:
            before = len(self._queue)
            self._enqueue([])
            count = len(self._queue) - before
        self._drain()
        if self._confined_role and not self._queue:  # the ids it cannot see: none to hand out
            self._dispatched = max(self._dispatched, self._seen)
        return count

    def _after_dispatch(self, entry: Entry) -> None:
        self._dispatched = max(self._dispatched, entry.id)

    def start_listener(self, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task:
        """Start (once) the LISTEN task on ``loop`` (the running one by default)."""
        if self._listener is None or self._listener.done():
            loop = loop or asyncio.get_running_loop()
            self._listener = loop.create_task(self._listen(), name="chaz-pg-listener")
        return self._listener

    async def _listen(self) -> None:
        delay = 0.1
        while not self._closed:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as con:
                    for channel in (CHANNEL, *NOTICE_CHANNELS):
                        await con.execute(f"LISTEN {channel}")
                    delay = 0.1
                    self.catch_up()  # what was committed before LISTEN took effect
                    async for notice in con.notifies():
                        if notice.channel == CHANNEL:
                            self.catch_up()
                            continue
                        self._notice_pid = notice.pid  # who sent it (TeamAccess.notice_sender_may)
                        for callback in list(self._notice.get(notice.channel, ())):
                            try:
                                callback(notice.payload)
                            except Exception:  # a callback's failure must not end the listener (logged)
                                log.exception("notice callback %r failed on %s", callback, notice.channel)
                        self._notice_pid = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any connection failure: reconnect and catch up
                if self._closed:
                    return
                log.warning("PostgreSQL listener lost its connection (%s); reconnecting", one_line(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    # ----------------------------------------------------------------- leases
    def claim(self, session_id: int) -> bool:
        """Take (or keep) this process's lease on the session; False while another holds it."""
        self._check_open()
        sid = int(session_id)
        if sid in self._held:
            return True
        with self._lock:
            if self._lease_con is None:
                self._lease_con = psycopg.connect(self.url, autocommit=True)
            row = self._lease_con.execute("SELECT pg_try_advisory_lock(%s, %s)", [_LEASE_NS, sid]).fetchone()
        if row and row[0]:
            self._held.add(sid)
            return True
        return False

    @property
    def dispatched_id(self) -> int:
        """The highest entry id handed to every subscriber: what this process has seen of the
        log, so a status read from the table up to it agrees with what the views were shown."""
        return self._dispatched

    def holds(self, session_id: int) -> bool:
        """Whether this process holds the session's lease (it serves the session)."""
        return int(session_id) in self._held

    def release(self, session_id: int) -> None:
        """Give the lease on the session up (another kernel may serve it from its next trigger)."""
        sid = int(session_id)
        if sid in self._held and self._lease_con is not None and not self._closed:
            with self._lock:
                self._lease_con.execute("SELECT pg_advisory_unlock(%s, %s)", [_LEASE_NS, sid])
            self._held.discard(sid)

    def held_elsewhere(self, session_id: int) -> bool:
        """Whether another process holds the session's lease (its runs are its own to close)."""
        sid = int(session_id)
        if sid in self._held:
            return False
        rows = self._rows(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = ? AND objid = ?"
            " AND objsubid = 2 AND pid <> pg_backend_pid() AND database = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())", [_LEASE_NS, sid])
        return bool(rows[0][0]) if rows else False

    # -------------------------------------------------------------------- SQL
    def sql(self, query: str, params: Sequence[object] | None = None) -> PgResult:
        """Run SQL against the store; the result has ``fetchall()``, ``columns`` and ``df()``."""
        self._check_open()
        with self._lock:
            cur = self._con.execute(to_pg(query) if params else query, list(params) if params else None)
            columns = [d.name for d in cur.description or []]
            return PgResult(columns, cur.fetchall() if cur.description else [])

    def execute(self, query: str, params: Sequence[object] | None = None) -> list[Row]:
        """Run SQL (``?`` parameters) and fetch all rows (used by the server's own tables)."""
        self._check_open()
        return self._rows(query, params)
