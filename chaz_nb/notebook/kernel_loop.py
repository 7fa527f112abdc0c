"""Driving the kernel's asyncio loop from synchronous code (a line or cell magic).

IPython never awaits what a magic returns, so a magic that waits for an agent run has to run
the kernel's *already running* loop itself, re-entrantly. Measured on this stack (ipykernel
7.4, Python 3.11), in a real kernel:

- ``nest_asyncio`` 1.6: nested ``run_until_complete`` works and background tasks keep
  ticking, but a shell message that arrives meanwhile (a widget click: ``comm_msg``) fails
  with ``RuntimeError: cannot enter context ... is already entered`` (ipykernel 7 runs every
  shell handler in one shared ``Context``, which the waiting cell has entered). The error is
  printed into the cell and the click is lost.
- ``nest_asyncio2`` 1.7.4 (a dependency of ipykernel 7.4 already): the same wait works and
  such a handle is deferred until the nested run returns; the click is then processed.

So we use ``nest_asyncio2``, applied lazily, the first time a magic has to wait on a running
loop. Widget clicks are therefore handled only *after* a synchronous wait returns, which is
why a wait stops as soon as the run parks on something a person must do.

Outside a kernel (plain IPython, tests) no loop is running; the loop IPython uses for
``await`` in cells is driven with a plain ``run_until_complete``.

Ctrl-C / "interrupt kernel" during a wait must stop *waiting* only: the default SIGINT
handler would raise ``KeyboardInterrupt`` inside whatever task happens to be running (an
agent's run), killing it. While we wait, SIGINT only cancels the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from dataclasses import dataclass
from typing import Any, TypeVar
from collections.abc import Awaitable, Callable, Iterator


T = TypeVar("T")

#: how often a wait re-checks the session status (parked runs have no future to await)
POLL_INTERVAL = 0.05

#: ``wake(callback)`` calls ``callback()`` whenever what a wait checks may have changed, and
#: returns the function that stops it (``chaz_nb.server.remote.session_writes``)
WakeSource = Callable[[Callable[[], None]], Callable[[], None]]


#: waits in progress that only wait on a run (``wait_run``, ``chaz_nb.ask``): while one is, the
#: cell running only awaits, and an agent's ``kernel__run`` code may take its turn (kernel_host.py)
_waits = 0


def only_waiting() -> bool:
    """Whether the running cell is only waiting on a run now."""
    return _waits > 0


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """Mark a wait on a run (see ``only_waiting``)."""
    global _waits
    _waits += 1
    try:
        yield
    finally:
        _waits -= 1


def get_loop() -> asyncio.AbstractEventLoop:
    """The kernel's running loop; else the loop IPython runs ``await`` cells on."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    try:
        from IPython.core.async_helpers import get_asyncio_loop

        return get_asyncio_loop()
    except ImportError:  # pragma: no cover - IPython always has it (>= 8)
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        return loop


def make_reentrant(loop: asyncio.AbstractEventLoop) -> None:
    """Patch a running loop so that ``run_until_complete`` can nest (nest_asyncio2)."""
    if getattr(type(loop), "_nest_patched", False):
        if not getattr(type(loop), "_nest_asyncio2", None):
            # The user applied the original nest_asyncio first: waits work, but widget
            # clicks during a wait are lost on ipykernel 7 (see the module docstring).
            import warnings

            warnings.warn(
                "chaz_nb: asyncio is patched by nest_asyncio, not nest_asyncio2; widget clicks "
                "made while a %chaz magic waits may be lost",
                RuntimeWarning,
                stacklevel=3,
            )
        return
    import nest_asyncio2

    nest_asyncio2.apply(loop)


@dataclass
class _SigintGuard:
    """While active, SIGINT calls ``on_interrupt`` (on the loop) instead of raising."""

    loop: asyncio.AbstractEventLoop
    on_interrupt: Callable[[], object]
    _previous: Any = None
    _installed: bool = False
    interrupted: bool = False

    def __enter__(self) -> _SigintGuard:
        if threading.current_thread() is threading.main_thread():
            try:
                self._previous = signal.signal(signal.SIGINT, self._handler)
                self._installed = True
            except (ValueError, OSError):  # pragma: no cover - not the main interpreter
                self._installed = False
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        # Runs between two bytecodes of whatever is executing: only set a flag and wake the
        # loop (its self-pipe); the cancellation itself happens on the loop.
        self.interrupted = True
        self.loop.call_soon_threadsafe(self.on_interrupt)

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


def run_sync(awaitable: Awaitable[T], loop: asyncio.AbstractEventLoop | None = None) -> T:
    """Run ``awaitable`` to completion from synchronous code, on the kernel's loop.

    Other tasks on the loop (agent runs, widget flushes) keep running meanwhile.
    """
    loop = loop or get_loop()
    if loop.is_running():
        make_reentrant(loop)
    return loop.run_until_complete(awaitable)


@dataclass
class WaitOutcome:
    """How a wait ended: ``done`` (the run finished), ``parked`` or ``interrupted``."""

    state: str
    result: Any = None


class _Waker:
    """The wake callback of a wait: resolves the future the wait sleeps on, from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread = threading.get_ident()
        self.future: asyncio.Future[None] = loop.create_future()

    def __call__(self) -> None:
        if threading.get_ident() == self.thread:
            self._set()
        else:  # a write from a worker thread: futures are not thread-safe
            self.loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def rearm(self) -> None:
        """Before a check: a wake from now on ends the next sleep."""
        if self.future.done():
            self.future = self.loop.create_future()


async def watch_run(
    is_done: Callable[[], bool],
    is_parked: Callable[[], bool],
    future: asyncio.Future[Any] | None = None,
    *,
    timeout: float | None = None,
    wake: WakeSource | None = None,
    poll_interval: float | None = None,
) -> WaitOutcome:
    """Until the run is done (``future`` resolves, else ``is_done()``), parks, or ``timeout``.

    The predicates are checked every ``poll_interval`` seconds (``POLL_INTERVAL`` by default),
    and at once each time ``wake`` reports a change: with a wake source the interval is only
    the fallback for what no event announces.
    """
    loop = asyncio.get_running_loop()
    interval = POLL_INTERVAL if poll_interval is None else poll_interval
    deadline = None if timeout is None else loop.time() + timeout
    waker = _Waker(loop)
    stop = wake(waker) if wake is not None else None
    try:
        while True:
            waker.rearm()  # (the checks below see every change reported before this)
            if future is not None and future.done():
                return WaitOutcome("done", None if future.cancelled() else future.result())
            if future is None and is_done():
                return WaitOutcome("done")
            if is_parked():
                return WaitOutcome("parked")
            if deadline is not None and loop.time() >= deadline:
                return WaitOutcome("timeout")
            sleep = interval if deadline is None else max(0.0, min(interval, deadline - loop.time()))
            wakers = [f for f in (future, waker.future if stop is not None else None) if f is not None]
            if wakers:
                await asyncio.wait(wakers, timeout=sleep, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(sleep)
    finally:
        if stop is not None:
            stop()


def wait_run(
    is_done: Callable[[], bool],
    is_parked: Callable[[], bool],
    future: asyncio.Future[Any] | None = None,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
    timeout: float | None = None,
    wake: WakeSource | None = None,
    poll_interval: float | None = None,
) -> WaitOutcome:
    """Drive the loop until the run is done, or parks, or the user interrupts (``watch_run``).

    ``future`` (a run's future), when given, ends the wait as soon as it resolves; the
    predicates are checked every ``poll_interval`` seconds and at each ``wake``. The run is
    never cancelled here.
    """
    loop = loop or get_loop()
    watch = watch_run(is_done, is_parked, future, timeout=timeout, wake=wake, poll_interval=poll_interval)

    if loop.is_running():
        make_reentrant(loop)
    task = loop.create_task(watch)
    guard = _SigintGuard(loop, lambda: task.cancel())
    try:
        with guard, waiting():
            try:
                return loop.run_until_complete(task)
            except KeyboardInterrupt:
                # SIGINT before our handler was installed, or outside the loop: same meaning.
                task.cancel()
                return WaitOutcome("interrupted")
    except asyncio.CancelledError:
        if guard.interrupted:
            return WaitOutcome("interrupted")
        raise
