"""What a piece of ``kernel__run`` code did beyond its variables, which no undo can take back:
files it wrote, network calls, processes it started, modules it imported.

``Effects()`` is a context manager around the code's run. Files, sockets and processes are
seen through Python's audit events (``sys.addaudithook``: one hook for the process, installed
at the first use, which returns at once unless a recording is open on the calling thread);
modules are the names new in ``sys.modules`` after the run. What a C library does on its own
(a DuckDB ``COPY``, a driver's socket) and what another thread does are not seen: the list is
what Python itself was asked to do on the code's thread.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

#: effects kept per run (the first ones; the count goes on)
MAX_EFFECTS = 20
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_FILE_EVENTS = {"os.remove": "removed", "os.rename": "renamed", "os.rmdir": "removed", "os.mkdir": "made",
                "os.truncate": "truncated", "shutil.rmtree": "removed", "shutil.copyfile": "wrote",
                "shutil.move": "moved"}
_PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork")

#: the recording open now (one at a time: kernel__run runs one piece of code at a time)
_current: Effects | None = None
_hooked = False
_hook_lock = threading.Lock()


@dataclass
class Effects:
    """What the code did that undo cannot reverse, by kind (``file``, ``network``,
    ``process``, ``module``), as short texts."""

    items: list[tuple[str, str]] = field(default_factory=list)
    #: effects seen beyond ``MAX_EFFECTS``
    more: int = 0
    _thread: int = 0
    _modules: frozenset[str] = frozenset()

    def __enter__(self) -> Effects:
        global _current
        _install()
        self._thread = threading.get_ident()
        self._modules = frozenset(sys.modules)
        _current = self
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        global _current
        _current = None
        new = sorted({name.partition(".")[0] for name in set(sys.modules) - self._modules})
        for name in new:
            self.add("module", name)

    def add(self, kind: str, what: str) -> None:
        if (kind, what) in self.items:
            return
        if len(self.items) >= MAX_EFFECTS:
            self.more += 1
            return
        self.items.append((kind, what))

    def describe(self) -> list[str]:
        """One phrase per effect: ``a file written (out.csv)``, ``a module imported (requests)``."""
        label = {"file": "a file written", "network": "a network call", "process": "a process started",
                 "module": "a module imported"}
        lines = [f"{label.get(kind, kind)} ({what})" for kind, what in self.items]
        if self.more:
            lines.append(f"{self.more} more")
        return lines


def _install() -> None:
    global _hooked
    with _hook_lock:
        if not _hooked:
            sys.addaudithook(_hook)
            _hooked = True


def _hook(event: str, args: tuple[Any, ...]) -> None:
    rec = _current
    if rec is None or threading.get_ident() != rec._thread:
        return
    # an audit hook must never break the code it watches
    with contextlib.suppress(Exception):
        _seen(rec, event, args)


def _seen(rec: Effects, event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else \
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
        if writes and not isinstance(path, int):
            rec.add("file", os.fsdecode(path))
    elif event in _FILE_EVENTS:
        rec.add("file", f"{_FILE_EVENTS[event]} {os.fsdecode(args[0]) if args else ''}".strip())
    elif event in ("socket.connect", "socket.sendto"):
        address = args[1] if len(args) > 1 else None
        if isinstance(address, tuple) and len(address) >= 2:
            rec.add("network", f"{address[0]}:{address[1]}")
        elif address is not None:
            rec.add("network", str(address))
    elif event in _PROCESS_EVENTS:
        first = args[0] if args else event
        rec.add("process", os.fsdecode(first) if isinstance(first, (str, bytes)) else event)
