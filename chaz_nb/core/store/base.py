"""The session store's contract: what every store does, and what a shared one does besides.

One documented interface, two implementations:

- ``Store``: the session log. ``SessionStore`` (``duckdb.py``: a file or ``:memory:``, one
  writing process) and ``PgSessionStore`` (``postgres.py``: one database several kernels
  write) both implement it, with the same rows (``rows.py``), the same migrations
  (``migrations.py``) and the same seq rules: each session's entries are numbered 1, 2, 3 ...
  without gaps, and entry ids follow commit order.
- ``SharedSessions``: a ``Store`` whose sessions other processes serve too (PostgreSQL). A
  session is served by the process that holds its lease (``claim``), and entries other
  processes commit reach this one's subscribers through a listener. A caller that needs the
  leases or the notices asks ``isinstance(store, SharedSessions)``; everything else is written
  against ``Store`` and never asks which database is underneath.

Writing is shared code (``chaz_nb.core.writer.GroupCommitWriter``, a base of ``Store``):
``append`` / ``write`` / ``write_one`` / ``write_behind`` / ``hurry`` commit through the
store's ``append_many``, and ``subscribe`` callbacks run after each commit, in commit order.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from ...errors import StoreError
from ..entries import Entry, EntryType
from ..window import ContextWindow
from ..writer import GroupCommitWriter, NewEntry
from .rows import Row, SessionInfo

if TYPE_CHECKING:  # pragma: no cover
    import pandas

@dataclass(frozen=True)
class ForkCopy:
    """What ``fork_session`` wrote: the new session, how many entries it copies, and the
    entries that close what was open at the fork point (written after the copies)."""

    session_id: int
    at_seq: int
    copied: int
    closing: list[Entry]


class SqlResult(Protocol):
    """What ``Store.sql`` returns (DuckDB's relation, or ``postgres.PgResult``)."""

    @property
    def columns(self) -> list[str]: ...

    def fetchall(self) -> list[Row]: ...

    def df(self) -> pandas.DataFrame: ...


class Store(GroupCommitWriter, ABC):
    """The session log: sessions, their entries, and the SQL the server keeps beside them.

    Strings are redacted (``redact``) before anything is written; a closed store raises
    ``StoreError`` on use, a ``read_only`` one on every write.
    """

    #: the SQL the store speaks: ``"duckdb"`` or ``"postgresql"`` (what ``%chaz sql`` checks)
    dialect: ClassVar[str]
    #: where the store is, as it may be shown (a PostgreSQL URL without its password)
    path: str
    read_only: bool
    #: how many migrations the database has (``migrations.MIGRATIONS``)
    schema_version: int
    #: applied to every string before it is written
    redact: Callable[[str], str]
    _closed: bool

    # ----------------------------------------------------------------- basics
    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, schema_version={self.schema_version})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the session store {self.path} is closed; load the extension again")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise StoreError(f"{self.path} is opened read-only; it cannot be written")

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def close(self) -> None:
        """Write what is queued for a group commit, then close the connections."""

    @abstractmethod
    def has_column(self, table: str, column: str) -> bool:
        """Whether the schema has ``table.column`` (a read-only database may be older)."""

    # --------------------------------------------------------------- sessions
    @abstractmethod
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

    @abstractmethod
    def update_session_metadata(self, session_id: int, metadata: Mapping[str, object]) -> None:
        """Replace the session's metadata (a room's members, a schedule's owner) whole."""

    @abstractmethod
    def session(self, session_id: int) -> SessionInfo:
        """The session, or a StoreError naming the unknown id."""

    @abstractmethod
    def sessions(self) -> list[SessionInfo]:
        """Every session, in id order."""

    @abstractmethod
    def fork_session(
        self, source_id: int, at_seq: int | None = None, *, agent: str | None = None, into: int | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> ForkCopy:
        """A new session whose log starts with ``source_id``'s entries up to ``at_seq`` (None:
        its committed end; 0: none), in one transaction, with what was open there closed.

        The session row copies the source's kind, parent, depth, title, metadata (a room's
        members) and ceiling, and records ``forked_from``/``forked_at_seq``; ``agent`` is its
        agent (default: the source's). ``into``: the new session's id (default: the next one);
        one that exists is a StoreError and nothing is written. The copies are not handed to
        the on_write callbacks (they are no news: nothing runs for them); the closing entries are.
        """

    # ---------------------------------------------------------------- entries
    @abstractmethod
    def append_many(self, items: Iterable[NewEntry]) -> list[Entry]:
        """Write several entries in one transaction, then the callbacks, in commit order.

        Nothing is written when any item is invalid (an unknown session, an entry over the
        limit: ``writer.storable_fields``).
        """

    @abstractmethod
    def entries(self, session_id: int, after_seq: int = 0, types: Iterable[EntryType] | None = None) -> list[Entry]:
        """Entries of a session in seq order (after ``after_seq``, of ``types`` when given)."""

    @abstractmethod
    def read_page(self, session_id: int, before_seq: int | None = None, limit: int = 50) -> list[Entry]:
        """The newest ``limit`` entries of a session before ``before_seq`` (all when None), in
        seq order, never the whole log.

        Seqs are gapless from 1, so ``page[0].seq - 1`` entries come before the page (a view's
        "show earlier" count); the next page back is ``read_page(id, before_seq=page[0].seq)``.
        """

    @abstractmethod
    def context_window(
        self, session_id: int, max_tokens: int | None, types: Iterable[EntryType] | None = None
    ) -> ContextWindow:
        """The entries a run's context is built from (``chaz_nb.core.window``), in seq order:
        from the latest Summary on, newest first, only as far as ``max_tokens`` reaches
        (``None``: everything since the Summary), at a cost that follows the budget, not the
        session's length."""

    @abstractmethod
    def latest(self, session_id: int) -> Entry | None:
        """The last entry of a session (None: it has none)."""

    @abstractmethod
    def entry(self, entry_id: int) -> Entry | None:
        """The entry with id ``entry_id``, if there is one."""

    @abstractmethod
    def find_entries(self, entry_type: EntryType, where: str = "", params: Sequence[object] = ()) -> list[Entry]:
        """Entries of one type across sessions, with an extra SQL condition, in id order."""

    # -------------------------------------------------------------------- SQL
    @abstractmethod
    def read(self, query: str, params: Sequence[object] | None = None) -> list[Row]:
        """Fetch all rows of ``query`` where the database refuses writes (a read-only
        transaction): for SQL the store did not write itself (the audit view's, ``%chaz sql``)."""

    @abstractmethod
    def sql(self, query: str, params: Sequence[object] | None = None) -> SqlResult:
        """Run SQL against the store; the result has ``fetchall()``, ``columns`` and ``df()``."""

    @abstractmethod
    def execute(self, query: str, params: Sequence[object] | None = None) -> list[Row]:
        """Run SQL (``?`` parameters, DuckDB's ``INSERT OR REPLACE``) and fetch all rows: the
        server's own tables (schedules, budgets, recovery) are written through it."""


class SharedSessions(Store):
    """A store other processes serve sessions of too (PostgreSQL): leases and a listener.

    One process serves a session at a time: the one that holds its lease. A lease is taken
    with ``claim`` and is freed by ``release`` or when its process dies, so another kernel
    takes the session over at its next trigger. Entries other processes commit reach this
    process's subscribers (``subscribe``) through the listener, in commit order; ``notify`` /
    ``on_notice`` carry other news between kernels (schedule changes, stop requests).
    """

    @abstractmethod
    def claim(self, session_id: int) -> bool:
        """Take (or keep) this process's lease on the session; False while another holds it."""

    @abstractmethod
    def holds(self, session_id: int) -> bool:
        """Whether this process holds the session's lease (it serves the session)."""

    @abstractmethod
    def release(self, session_id: int) -> None:
        """Give the lease on the session up (another kernel may serve it from its next trigger)."""

    @abstractmethod
    def held_elsewhere(self, session_id: int) -> bool:
        """Whether another process holds the session's lease (its runs are its own to close)."""

    @property
    @abstractmethod
    def dispatched_id(self) -> int:
        """The highest entry id handed to every subscriber: what this process has seen of the
        log, so a status read from the table up to it agrees with what the views were shown."""

    @abstractmethod
    def notify(self, channel: str, payload: str) -> None:
        """Tell every kernel's ``on_notice(channel)`` callbacks (this one's too) ``payload``."""

    @abstractmethod
    def on_notice(self, channel: str, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(payload)`` on the loop for each ``notify(channel, ...)`` of any
        kernel; returns the unsubscribe function."""

    @abstractmethod
    def start_listener(self, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task[None]:
        """Start (once) the task that hears other processes' commits and notices on ``loop``."""

    @abstractmethod
    def catch_up(self) -> int:
        """Dispatch every entry committed since the last one seen (by any process); how many."""


def served_elsewhere(store: Store, session_id: int) -> bool:
    """Whether another live process serves the session: its open runs and requests are its own.

    Only a shared store can say yes; an embedded DuckDB file has one writing process, so
    everything open in it was left by a process that is gone.
    """
    return isinstance(store, SharedSessions) and store.held_elsewhere(session_id)
