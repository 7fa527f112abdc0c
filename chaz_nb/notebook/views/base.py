"""The one live-view base: follow the store (subscribe), refresh at most once per interval
(throttle), and end as a static output (finish).

A live view subscribes to the store's writes on the kernel loop; a write arms one refresh
``interval`` seconds later (a burst of writes is one refresh), and a write from another thread
hops onto the loop first. ``finish`` stops following, replaces the output with the static
bundle (no widget view, so a saved notebook shows the content and not "model not found"),
closes the widgets and tells the ``on_update`` listeners. A view says what its refresh is
(``_tick``), which timers it runs (``_timers``), and what finishing does to its own state
(``_begin_finish`` / ``_final_static``).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any
from collections.abc import Callable

from .display import StaticFallbackView

#: the longest a turn's view waits for its model request to leave before it is displayed anyway
#: (``display_later``): a model that is not called over HTTP (the offline ``chaz/*`` ones)
DISPLAY_CAP = 0.05


class LiveView(StaticFallbackView):
    """Base of the views that follow the store (the session transcript, the audit table)."""

    interval: float
    store: Any
    _loop: Any = None
    _loop_thread: int | None = None
    _unsubscribe: Callable[[], None] | None = None
    _armed: bool = False
    _timer: Any = None
    _closed: bool = False
    _lock: threading.Lock
    _display_timer: Any = None

    # ------------------------------------------------------------ subscribe
    def _subscribe(self) -> None:
        """Follow the store's writes on the kernel loop."""
        try:
            self._loop = self._loop or asyncio.get_running_loop()
        except RuntimeError:
            from ..kernel_loop import get_loop

            self._loop = get_loop()
        # writes from other threads hop onto the loop before touching the widget
        self._loop_thread = threading.get_ident()
        self._unsubscribe = self.store.subscribe(self._on_write)

    def _on_write(self, entry: Any) -> None:  # pragma: no cover - every view has its own
        raise NotImplementedError

    @property
    def following(self) -> bool:
        return self._unsubscribe is not None

    # ------------------------------------------------------------- throttle
    def _request_refresh(self, delay: float) -> None:
        """Arm one refresh ``delay`` seconds from now, unless one is armed already."""
        with self._lock:
            if self._armed:
                return
            self._armed = True
        if threading.get_ident() == self._loop_thread:
            self._arm(delay)
        else:  # a write from a worker thread: hop onto the loop
            self._loop.call_soon_threadsafe(self._arm, delay)

    def _arm(self, delay: float) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or self._closed:
            self._armed = False
            return
        self._timer = loop.call_later(delay, self._tick)

    def _tick(self) -> None:  # pragma: no cover - every view has its own
        raise NotImplementedError

    def _timers(self) -> tuple[str, ...]:
        """The attributes holding this view's pending timer handles."""
        return ("_timer",)

    # -------------------------------------------------------------- display
    def display_later(self, cap: float | None = None) -> Callable[[], None]:
        """Display at the latest ``cap`` s (``DISPLAY_CAP``) from now; returns ``soon``: call it
        (on the loop, from any context) to display as soon as the loop is idle instead.

        A turn's cell writes its trigger and waits: its run then prepares the model request
        (litellm does most of that on a worker thread) and sends it. Opening the view (a
        widget's comm, ~3 ms of the loop and the GIL) in front of the request delayed it; once
        the request is on the wire it costs the turn nothing (issue 32). The display runs in
        this call's context, so it lands in the cell that called it; a cell that stops waiting
        before calls ``show``.
        """
        loop = self._loop
        if self._displayed or loop is None or loop.is_closed():
            self.show()
            return lambda: None
        # (call_later runs it in this context, as the idle callback below is)
        self._display_timer = loop.call_later(DISPLAY_CAP if cap is None else cap, self.show)
        context = contextvars.copy_context()

        def soon() -> None:
            if not self._displayed:
                self.store.when_idle(lambda: context.run(self.show))

        return soon

    def show(self) -> None:
        """Display now unless it is displayed already (see ``display_later``)."""
        timer, self._display_timer = self._display_timer, None
        if timer is not None:
            timer.cancel()
        if not self._displayed and not self._closed:
            self.display()

    # --------------------------------------------------------------- finish
    def _stop_following(self) -> None:
        """Unsubscribe and cancel every timer."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for name in self._timers():
            timer = getattr(self, name)
            if timer is not None:
                timer.cancel()
            setattr(self, name, None)
        self._armed = False

    def _begin_finish(self) -> bool:
        """Whether there is anything to finish (and bring the view's state to its end)."""
        return True

    def _final_static(self) -> None:
        """Replace the output by the static bundle."""

    def _close_widgets(self) -> None:  # pragma: no cover - every view has its own
        raise NotImplementedError

    def finish(self) -> None:
        """Stop following, leave the static form (no widget view) as the output, close the widgets."""
        self._stop_following()
        if not self._begin_finish():
            return
        self._final_static()
        self._close_widgets()
        self._updated()
