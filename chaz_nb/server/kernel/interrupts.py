"""Stopping code that runs on a thread we do not own the loop of: a deadline, an Interrupt,
a Stop, each raised as an exception *inside* the code.

Agent code (``kernel__run``) runs on the kernel's main thread, as a cell would, so while it
runs nothing else on that thread can stop it: the kernel loop is held. What can:

- the kernel's Interrupt (SIGINT). Between cells ipykernel ignores SIGINT, and while a
  ``%chaz`` cell waits chaz_nb turns it into "stop waiting"; while agent code runs, this
  guard's handler turns it into ``KeyboardInterrupt`` in that code.
- a deadline: a timer thread sends SIGINT to the main thread (``pthread_kill``: it also ends
  a ``time.sleep`` at once), or, for code on another thread, sets an asynchronous exception
  in it (``PyThreadState_SetAsyncExc``: raised at its next bytecode).
- ``stop(reason)`` from any thread (what a Stop that reaches the kernel off the loop calls).

A signal or exception sent just as the code ends is waited for (or withdrawn) before the
previous handler comes back, so it never lands in a user's cell or in a chaz_nb wait.
"""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType

#: how long ``__exit__`` waits for a signal it sent to arrive
LATE_SIGNAL_WAIT = 0.2

#: a SIGINT handler as ``signal.signal`` returns and takes it (None: one not set from Python)
Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class Interrupter:
    """``with Interrupter(timeout) as guard:`` run code; ``guard.reason`` says why it stopped."""

    def __init__(self, timeout: float | None, exc: type[BaseException] = KeyboardInterrupt,
                 what: str = "the code") -> None:
        self.timeout = timeout
        self.exc = exc
        self.what = what
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._active = False
        self._sent = 0
        self._received = 0
        self._thread = 0
        self._signals = False
        self._previous: Handler = None
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Interrupter:
        self._thread = threading.get_ident()
        if threading.current_thread() is threading.main_thread() and self.exc is KeyboardInterrupt:
            try:
                self._previous = signal.signal(signal.SIGINT, self._on_sigint)
                self._signals = True
            except (ValueError, OSError):  # pragma: no cover - not the main interpreter
                self._signals = False
        self._active = True
        if self.timeout is not None:
            self._timer = threading.Timer(self.timeout, self.stop, [f"over its {self.timeout:g} s timeout"])
            self._timer.daemon = True
            self._timer.start()
        return self

    def stop(self, reason: str) -> bool:
        """Raise in the running code (from any thread); False when it is not running."""
        with self._lock:
            if not self._active or self.reason is not None:
                return False
            self.reason = reason
            self._sent += 1
            if self._signals:
                signal.pthread_kill(self._thread, signal.SIGINT)
            else:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), ctypes.py_object(self.exc))
            return True

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        with self._lock:
            ours = self._sent > self._received
            if ours:
                self._received += 1
            active = self._active
            if not ours and active and self.reason is None:
                self.reason = "interrupted (the kernel's Interrupt)"
        if active:
            raise KeyboardInterrupt

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            self._active = False
            if self._timer is not None:
                self._timer.cancel()
            pending = self._sent - self._received
            if pending and not self._signals:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), None)
        if self._signals:
            deadline = time.monotonic() + LATE_SIGNAL_WAIT
            while self._sent > self._received and time.monotonic() < deadline:
                time.sleep(0.005)  # a signal in flight arrives here, where it is ignored
            signal.signal(signal.SIGINT, self._previous)
