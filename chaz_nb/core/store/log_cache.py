"""The DuckDB store's memory of its sessions' newest entries (least recently used dropped first).

Every run reads its session's newest entries; a DuckDB read costs ~1-5 ms. A DuckDB file has
one writing process, so a window read once is kept current by appending each committed entry
to it (``committed``); its oldest entries fall out past the bounds below. (The PostgreSQL store
keeps no such cache: other processes write its sessions.)
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable

from ..entries import Entry, EntryType

#: sessions whose newest entries are kept in memory (least recently used dropped first)
LOG_CACHE_SESSIONS = 128
#: the cache keeps a window of each session's newest entries, at most this many ...
LOG_CACHE_MAX_ENTRIES = 1000
#: ... and at most this many bytes (about: content + payload) ...
LOG_CACHE_SESSION_BYTES = 1 << 20
#: ... and all sessions' windows together at most this many bytes
LOG_CACHE_BYTES = 16 << 20


def row_bytes(content: str | None, payload_json: str | None) -> int:
    """About what an entry read from a row holds in memory (its texts and a fixed part)."""
    return 200 + len(content or "") + len(payload_json or "")


def entry_bytes(entry: Entry) -> int:
    return 200 + len(entry.content) + (len(str(entry.payload)) if entry.payload else 0)


class LogWindow:
    """A session's newest entries in memory: contiguous in seq, bounded in count and bytes."""

    __slots__ = ("entries", "sizes", "first_seq", "nbytes", "summary", "summary_known")

    def __init__(self, first_seq: int) -> None:
        self.entries: deque[Entry] = deque()
        self.sizes: deque[int] = deque()
        #: the seq the window starts at (1: the whole log)
        self.first_seq = first_seq
        self.nbytes = 0
        #: the session's latest Summary, once looked up or seen (``summary_known``)
        self.summary: Entry | None = None
        self.summary_known = False

    @property
    def complete(self) -> bool:
        return self.first_seq <= 1

    def covers(self, after_seq: int) -> bool:
        """Whether every entry past ``after_seq`` is in the window."""
        return after_seq >= self.first_seq - 1

    def know_summary(self, summary: Entry | None) -> None:
        self.summary, self.summary_known = summary, True

    def add(self, entry: Entry, size: int) -> None:
        if not self.entries:
            self.first_seq = entry.seq
        self.entries.append(entry)
        self.sizes.append(size)
        self.nbytes += size
        if entry.entry_type is EntryType.SUMMARY:
            self.know_summary(entry)

    def trim(self) -> None:
        while len(self.entries) > 1 and (
            len(self.entries) > LOG_CACHE_MAX_ENTRIES or self.nbytes > LOG_CACHE_SESSION_BYTES
        ):
            self.entries.popleft()
            self.nbytes -= self.sizes.popleft()
            self.first_seq = self.entries[0].seq


class LogCache:
    """The windows of the sessions used last, within ``LOG_CACHE_SESSIONS`` and ``LOG_CACHE_BYTES``."""

    def __init__(self) -> None:
        self._windows: OrderedDict[int, LogWindow] = OrderedDict()
        #: the cached windows' bytes together
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._windows)

    def clear(self) -> None:
        self._windows.clear()
        self.nbytes = 0

    def get(self, session_id: int) -> LogWindow | None:
        """The session's window (now the most recently used), if it is cached."""
        window = self._windows.get(session_id)
        if window is not None:
            self._windows.move_to_end(session_id)
        return window

    def put(self, session_id: int, first_seq: int, entries: Iterable[tuple[Entry, int]] = ()) -> LogWindow:
        """Cache the session's window: ``entries`` (each with its size) from ``first_seq`` on."""
        window = LogWindow(first_seq)
        for entry, size in entries:
            window.add(entry, size)
        window.trim()
        old = self._windows.pop(session_id, None)
        self.nbytes += window.nbytes - (old.nbytes if old is not None else 0)
        self._windows[session_id] = window
        self._evict()
        return window

    def committed(self, entries: Iterable[Entry]) -> None:
        """Append committed entries to their sessions' windows (within the bounds)."""
        for entry in entries:
            window = self._windows.get(entry.session_id)
            if window is None:
                continue
            before = window.nbytes
            window.add(entry, entry_bytes(entry))
            window.trim()
            self.nbytes += window.nbytes - before
        self._evict()

    def _evict(self) -> None:
        while self._windows and (len(self._windows) > LOG_CACHE_SESSIONS or self.nbytes > LOG_CACHE_BYTES):
            _, window = self._windows.popitem(last=False)
            self.nbytes -= window.nbytes
