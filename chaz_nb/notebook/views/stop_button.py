"""The Stop button of a live session view: a row of its own while the session's run goes on.

The row is drawn by the view's one widget (live.py, static/session.js): this is its state
(shown, disabled, note, tooltip) and what a click does; every change goes to the view
(``on_change``), which sends it with its next update.

The row shows while the session is ``running`` or ``parked`` (a run waiting for an approval
can be stopped too) and hides once it is idle; the session view closes it with its other
widgets when it finishes, so a saved notebook never shows it. A click asks the server to stop
the session's run (``request_stop(session_id, by="user")``, what ``%chaz stop`` does, see
server/stopping.py; on a shared store a run another kernel serves is stopped by that kernel,
server/stop_relay.py) and disables the button; the run then writes its cancelled Ack, which
the view shows as it shows every entry. The click handler never raises into the widget's comm: a
failure is the row's one-line note.

While the cell that shows the view waits (``%chaz @NAME``), a widget click reaches the kernel
only once the wait ends (kernel_loop.py). The chaz JupyterLab extension (Lab and Notebook 7)
delivers this button's click over the kernel's control channel instead
(notebook/stop_control.py); it says so with a ``chaz_stop_hello``. Until a frontend has said
hello, a waiting cell's row says that Stop acts when the wait ends, rather than look live. The
button carries the class ``chaz-stop-session-N`` so the extension knows which session it stops.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any
from collections.abc import Callable

from .display import esc

log = logging.getLogger("chaz_nb.notebook.views.stop_button")
log.addHandler(logging.NullHandler())

#: what a click calls: the Server's ``request_stop`` (session id, who) -> the runs stopped
StopRequest = Callable[..., Any]

#: the class that carries a button's session id into the page (the lab extension reads it)
SESSION_CLASS = "chaz-stop-session-"

#: the live buttons of this kernel (what a Stop over the control channel clicks)
_live: weakref.WeakSet[StopButton] = weakref.WeakSet()
#: a frontend delivers Stop over the control channel (it sent ``chaz_stop_hello``)
_control_delivery = False

#: a waiting cell's note when no frontend delivers clicks during a wait
DEFERRED_NOTE = (
    "Stop acts when this cell stops waiting (this page delivers widget clicks only then); "
    "interrupt the kernel to stop waiting now"
)
DEFERRED_TIP = "this page delivers the click when the cell's wait ends (the chaz lab extension delivers it at once)"


def control_delivery() -> bool:
    """Whether a frontend said it delivers Stop while a cell waits (stop_control.py)."""
    return _control_delivery


def set_control_delivery(on: bool = True) -> None:
    """A frontend said hello (or the kernel forgot it): relabel the live buttons."""
    global _control_delivery
    _control_delivery = on
    for button in list(_live):
        button.relabel()


def live_buttons(session_id: int) -> list[StopButton]:
    """The open Stop buttons of a session (in no particular order)."""
    return [b for b in list(_live) if b.session_id == session_id and not b.closed]


class StopButton:
    """``[■ Stop] note`` under a session view's rows, for one session (state only: the view's
    widget draws it; ``on_change(urgent)`` is called after each change)."""

    def __init__(self, stop: StopRequest, session_id: int, loop: Any = None,
                 on_change: Callable[[bool], None] | None = None) -> None:
        self._stop = stop
        #: the kernel loop: a click delivered on another thread (a comm subshell) hops onto it
        self._loop = loop
        self._thread = threading.get_ident()
        self._on_change = on_change
        self.session_id = session_id
        #: the classes of the button in the page (the lab extension reads the session's)
        self.classes = ["chaz-stop", f"{SESSION_CLASS}{int(session_id)}"]
        self.shown = False
        self.disabled = True
        self.note = ""  # HTML, escaped
        self.tip = ""
        self._requested = False  # a click asked to stop the run going on now
        #: what the last click did (``StoppedRun`` list), for the view and tests
        self.stopped: list[Any] | None = None
        #: the cell showing this view waits for the run (a click may wait with it)
        self.waiting = False
        self.closed = False
        self.relabel()
        _live.add(self)

    def state(self) -> dict[str, Any]:
        """What the front end draws."""
        return {"session": int(self.session_id), "shown": self.shown, "disabled": self.disabled,
                "note": self.note, "tip": self.tip}

    def _changed(self, urgent: bool = False) -> None:
        if self._on_change is not None and not self.closed:
            self._on_change(urgent)

    def relabel(self) -> None:
        """Tooltip and note: honest about when a click acts (see the module docstring)."""
        tip = f"stop the run of session {self.session_id} (%chaz stop {self.session_id})"
        deferred = self.waiting and not _control_delivery
        if deferred:
            tip += f"; {DEFERRED_TIP}"
        before = (self.tip, self.note)
        self.tip = tip
        if deferred and not self._requested:
            self.note = f"<div class='chaz-s chaz-st'>{esc(DEFERRED_NOTE)}</div>"
        elif self.note.find(esc(DEFERRED_NOTE)) >= 0:
            self.note = ""
        if (self.tip, self.note) != before:
            self._changed()

    def set_waiting(self, on: bool, *, interrupted: bool = False) -> None:
        """The cell showing the view starts or ends its wait (``interrupted``: by the user)."""
        self.waiting = on
        self.relabel()
        if interrupted and not self._requested:
            sid = self.session_id
            self.note = (
                f"<div class='chaz-s chaz-st'>stopped waiting: the run goes on (Stop stops it; "
                f"%chaz wait {sid} waits again, %chaz log {sid} shows it)</div>"
            )
            self._changed(urgent=True)

    @property
    def visible(self) -> bool:
        return self.shown

    def show(self, active: bool) -> None:
        """Show the row while the session's run goes on, hide it when it is idle."""
        before = (self.shown, self.disabled)
        self.shown = active
        if not active:
            self._requested = False  # that run is over; the next one may be stopped again
        self.disabled = self._requested or not active
        if (self.shown, self.disabled) != before:
            self._changed()

    def _clicked(self, _event: Any = None) -> None:
        # JupyterLab 4.6 may send widget comm messages on a kernel subshell (its own thread):
        # the stop itself runs on the kernel loop, like every other touch of the server
        loop = self._loop
        if loop is not None and threading.get_ident() != self._thread and not loop.is_closed():
            loop.call_soon_threadsafe(self.request)
            return
        self.request()

    def click(self) -> tuple[bool, str]:
        """What the page's ``stop`` event does (on the kernel loop)."""
        return self.request()

    def request(self) -> tuple[bool, str]:
        """What a click does (also a Stop over the control channel): ``(ok, one line)``."""
        self._requested = True
        self.disabled = True
        try:
            self.stopped = list(self._stop(self.session_id, by="user") or [])
        except Exception as exc:  # noqa: BLE001 - a click must never raise into the comm
            log.debug("stop of session %s failed", self.session_id, exc_info=True)
            self.note = f"<div class='chaz-s'><span class='chaz-err'>could not stop: {esc(exc)}</span></div>"
            self._requested = False
            self.disabled = False
            self._changed(urgent=True)
            return False, f"could not stop session {self.session_id}: {exc}"
        if self.stopped:
            self.note = "<div class='chaz-s chaz-st'>stopping…</div>"
            self._changed(urgent=True)
            return True, "; ".join(run.describe() for run in self.stopped)
        self.note = "<div class='chaz-s chaz-st'>nothing was running</div>"
        self._changed(urgent=True)
        return True, f"session {self.session_id} has no run to stop"

    def close(self) -> None:
        self.closed = True
        _live.discard(self)
