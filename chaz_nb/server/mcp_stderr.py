"""An MCP server process's stderr, kept as a bounded tail (a rotating buffer in memory).

The process writes to a pipe that a reader thread drains as fast as it comes, keeping only the
last ``STDERR_KEEP`` bytes: a server that writes 200 MB of stderr in one call costs 64 KB, not a
200 MB file. The tail a person is shown (a failed server's reason, ``%chaz mcp list``, an Error
entry) is redacted before it is cut (``core.redaction.redact_then_cut``): a key split by the cut
would otherwise leak most of its characters.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable
from typing import IO

from ..core.redaction import redact, redact_then_cut

#: bytes of a server's stderr kept (the newest); the rest is dropped as it is read
STDERR_KEEP = 64 * 1024
#: characters of that tail shown in a failed server's reason
STDERR_TAIL = 800
_CHUNK = 65_536


class StderrTail:
    """The write end of a pipe for a server's stderr, and the newest ``keep`` bytes read from it."""

    def __init__(self, keep: int = STDERR_KEEP) -> None:
        self.keep = keep
        self._lock = threading.RLock()
        self._data = bytearray()
        self.dropped = 0  # bytes read and no longer kept
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self._fd: int | None = read_fd
        #: what the process is given as its stderr (``stdio_client(errlog=...)``)
        self.writer: IO[bytes] = os.fdopen(write_fd, "wb", buffering=0)
        self._reader = threading.Thread(target=self._drain, args=(read_fd,), name="chaz-mcp-stderr", daemon=True)
        self._reader.start()

    def _drain(self, fd: int) -> None:
        try:
            while True:
                select.select([fd], [], [])  # (no lock held while waiting)
                if not self._pump(fd):
                    return  # every writer closed: the process (and its children) ended
        except (OSError, ValueError):
            return
        finally:
            with self._lock:  # (text() pumps only while the fd is ours: never a reused number)
                self._fd = None
                os.close(fd)

    def _pump(self, fd: int) -> bool:
        """Read what the pipe holds now into the tail; False at end of file.

        Called by the reader thread, and by ``text`` so that what a process wrote just before
        it exited is in the tail its failure quotes (the thread may not have run yet). The
        lock covers read and append together, so the bytes stay in order.
        """
        with self._lock:
            while True:
                try:
                    chunk = os.read(fd, _CHUNK)
                except BlockingIOError:
                    return True
                if not chunk:
                    return False
                self._data += chunk
                over = len(self._data) - self.keep
                if over > 0:
                    del self._data[:over]
                    self.dropped += over

    def close_writer(self) -> None:
        """Close this process's copy of the write end (the child keeps its own until it exits)."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def size(self) -> int:
        """Bytes kept now."""
        with self._lock:
            return len(self._data)

    def text(self, limit: int = STDERR_TAIL, mask: Callable[[str], str] | None = None) -> str:
        """The last ``limit`` characters, masked by ``mask`` (credentials) before the cut."""
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    self._pump(self._fd)
            data, dropped = bytes(self._data), self.dropped
        text = data.decode("utf-8", "replace")
        if dropped:  # the kept bytes start mid-line (maybe mid-key): begin at the next line
            text = text.partition("\n")[2] or text
        return redact_then_cut(text.strip(), limit, keep="tail", redact_text=mask or redact)
