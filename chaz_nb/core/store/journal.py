"""The DuckDB store's journal: the durability point of an entry (issue 43, section 2).

A DuckDB commit of one row costs ~1.8-2 ms of CPU on the calling thread; a line appended to a
file and ``fdatasync``'d costs the disk's flush (~0.3 ms here). So an entry is durable once its
row is a line of ``<db>.journal`` (beside the DuckDB file, like DuckDB's own ``.wal``), and the
DuckDB commit of what the journal holds follows behind (``duckdb.py``: ``_apply``).

One line a group commit (one ``append_many``)::

    <crc32 of the JSON, 8 hex digits> <JSON: {"columns": "...", "rows": [[...], ...]}>\\n

Rows are the ``entries`` INSERT's values, ``created_at`` as ISO text. On open, the journal's
complete lines are read (``read_rows``); a torn last line (no newline, or a checksum that does
not match: the process died inside the write) is ignored, since its append never returned.
A damaged line with complete lines after it is not a torn write: the store refuses to open
rather than drop entries.

The file is emptied (``reset``: ``ftruncate`` + ``fsync``, so the new size is durable before
the next append lands at offset 0) only once every row it holds is in DuckDB and committed.
"""

from __future__ import annotations

import json
import os
import zlib
from datetime import datetime
from typing import TYPE_CHECKING

from ...errors import StoreError

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

#: the journal of the DuckDB file ``db``: a file beside it (move or copy them together, with
#: DuckDB's ``.wal``)
SUFFIX = ".journal"
#: index of ``created_at`` in a row (``rows.ENTRY_COLUMNS``)
CREATED_AT = 9

JournalRows = list[list[object]]


def journal_path(db: str) -> str:
    """Where the journal of the DuckDB file ``db`` is."""
    return db + SUFFIX


def encode(columns: str, rows: JournalRows) -> bytes:
    """One journal line for ``rows`` (the INSERT's values, in ``columns`` order)."""
    out = []
    for row in rows:
        row = list(row)
        at = row[CREATED_AT]
        if isinstance(at, datetime):
            row[CREATED_AT] = at.isoformat()
        out.append(row)
    body = json.dumps({"columns": columns, "rows": out}, separators=(",", ":")).encode("ascii")
    return b"%08x " % zlib.crc32(body) + body + b"\n"


def _decode(line: bytes) -> tuple[str, JournalRows] | None:
    """The columns and rows of a complete line; None when it is damaged."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    body = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(body):
            return None
        record = json.loads(body)
        columns, rows = str(record["columns"]), record["rows"]
        for row in rows:
            if isinstance(row[CREATED_AT], str):
                row[CREATED_AT] = datetime.fromisoformat(row[CREATED_AT])
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    return columns, rows


def read_rows(path: str) -> list[tuple[str, JournalRows]]:
    """The records of the journal at ``path``, in order (none when there is no file).

    A torn last line is left out; a damaged line before the last is a StoreError.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # ``tail``: after the last newline (a torn write, or b"")
    records: list[tuple[str, JournalRows]] = []
    for number, line in enumerate(complete, 1):
        record = _decode(line)
        if record is None:
            if number == len(complete) and not tail:  # the last line: torn inside its write
                break
            raise StoreError(
                f"{path}: line {number} of the journal is damaged and entries follow it; nothing was "
                "replayed: keep the file, and open the store from a copy of the .duckdb, .wal and "
                ".journal files to look"
            )
        records.append(record)
    return records


def missing_rows(
    con: duckdb.DuckDBPyConnection, records: list[tuple[str, JournalRows]], db: str
) -> list[tuple[str, JournalRows]]:
    """The records' rows whose entries are not in the DuckDB file ``db`` (open as ``con``).

    An entry is there when its id is, with the same session and seq (one writing process
    allocates ids, so a row of the same id is the same entry); another entry under its id is a
    StoreError: nothing is skipped past it.
    """
    if not records:
        return []
    first = min(int(str(row[0])) for _, rows in records for row in rows)
    have = {r[0]: (r[1], r[2]) for r in con.execute(
        "SELECT id, session_id, seq FROM entries WHERE id >= ?", [first]).fetchall()}
    out = []
    for columns, rows in records:
        for row in rows:
            if row[0] in have and have[row[0]] != (row[1], row[2]):
                raise StoreError(
                    f"{journal_path(db)} holds entry {row[0]} (session {row[1]} #{row[2]}), and {db} has "
                    "another entry with that id; nothing was replayed: keep both files")
        rows = [row for row in rows if row[0] not in have]
        if rows:
            out.append((columns, rows))
    return out


class Journal:
    """The open journal of one DuckDB file (one writing process: DuckDB's file lock is held)."""

    def __init__(self, path: str) -> None:
        self.path = path
        existed = os.path.exists(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        self.size = os.fstat(self._fd).st_size
        self._broken: str | None = None  # a failed write left the file in doubt: no more lines
        if not existed:  # the file's name must survive a crash too, before a line counts on it
            _sync_dir(os.path.dirname(os.path.abspath(path)))

    def append(self, columns: str, rows: JournalRows) -> None:
        """Write ``rows`` as one line and ``fdatasync`` it: durable when this returns, else a
        StoreError (and nothing of the line is left: a later line must not follow a torn one)."""
        if self._broken:
            raise StoreError(self._broken)
        line = memoryview(encode(columns, rows))
        start = self.size
        try:
            while line:
                written = os.write(self._fd, line)
                line = line[written:]
                self.size += written
            os.fdatasync(self._fd)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, start)
                os.fsync(self._fd)
                self.size = start
            except OSError:
                self._broken = (f"the journal {self.path} could not be written ({exc.strerror}); "
                                "nothing more is written: restart the kernel")
            raise StoreError(f"could not write entry: the journal {self.path}: {exc.strerror}") from exc

    def reset(self) -> None:
        """Empty the file (every row it holds is committed in DuckDB); the size is made durable
        before any later line is written at its start."""
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self.size = 0

    def close(self) -> None:
        os.close(self._fd)


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
