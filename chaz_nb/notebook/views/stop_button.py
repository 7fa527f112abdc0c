"""The Stop button of a live session view: a row of its own while the session's run goes on.

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

from .display import close_widget, esc, plain

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
    """``[■ Stop] note`` under a session view's rows, for one session."""

    def __init__(self, stop: StopRequest, session_id: int, loop: Any = None) -> None:
        import ipywidgets as w

        self._stop = stop
        #: the kernel loop: a click delivered on another thread (a comm subshell) hops onto it
        self._loop = loop
        self._thread = threading.get_ident()
        self.session_id = session_id
        self.button = w.Button(description="Stop", icon="stop", button_style="danger", **plain("ButtonStyle"))
        self.button.add_class("chaz-stop")
        self.button.add_class(f"{SESSION_CLASS}{int(session_id)}")
        self.note = w.HTML("", **plain("HTMLStyle"))
        self.widget = w.HBox([self.button, self.note])  # its own Layout: the row is shown and hidden
        self.widget.add_class("chaz-stop-row")
        self.widget.layout.display = "none"
        self.button.disabled = True
        self._requested = False  # a click asked to stop the run going on now
        self.button.on_click(self._clicked)
        #: what the last click did (``StoppedRun`` list), for the view and tests
        self.stopped: list[Any] | None = None
        #: the cell showing this view waits for the run (a click may wait with it)
        self.waiting = False
        self.closed = False
        self.relabel()
        _live.add(self)

    def relabel(self) -> None:
        """Tooltip and note: honest about when a click acts (see the module docstring)."""
        tip = f"stop the run of session {self.session_id} (%chaz stop {self.session_id})"
        deferred = self.waiting and not _control_delivery
        if deferred:
            tip += f"; {DEFERRED_TIP}"
        if self.button.tooltip != tip:
            self.button.tooltip = tip
        if deferred and not self._requested:
            self.note.value = f"<div class='chaz-s chaz-st'>{esc(DEFERRED_NOTE)}</div>"
        elif self.note.value.find(esc(DEFERRED_NOTE)) >= 0:
            self.note.value = ""

    def set_waiting(self, on: bool, *, interrupted: bool = False) -> None:
        """The cell showing the view starts or ends its wait (``interrupted``: by the user)."""
        self.waiting = on
        self.relabel()
        if interrupted and not self._requested:
            sid = self.session_id
            self.note.value = (
                f"<div class='chaz-s chaz-st'>stopped waiting: the run goes on (Stop stops it; "
                f"%chaz wait {sid} waits again, %chaz log {sid} shows it)</div>"
            )

    @property
    def visible(self) -> bool:
        return self.widget.layout.display != "none"

    def show(self, active: bool) -> None:
        """Show the row while the session's run goes on, hide it when it is idle."""
        display = "" if active else "none"
        if self.widget.layout.display != display:
            self.widget.layout.display = display
        if not active:
            self._requested = False  # that run is over; the next one may be stopped again
        disabled = self._requested or not active
        if self.button.disabled != disabled:
            self.button.disabled = disabled

    def _clicked(self, _button: Any = None) -> None:
        # JupyterLab 4.6 may send widget comm messages on a kernel subshell (its own thread):
        # the stop itself runs on the kernel loop, like every other touch of the server
        loop = self._loop
        if loop is not None and threading.get_ident() != self._thread and not loop.is_closed():
            loop.call_soon_threadsafe(self.request)
            return
        self.request()

    def request(self) -> tuple[bool, str]:
        """What a click does (also a Stop over the control channel): ``(ok, one line)``."""
        self._requested = True
        self.button.disabled = True
        try:
            self.stopped = list(self._stop(self.session_id, by="user") or [])
        except Exception as exc:  # noqa: BLE001 - a click must never raise into the comm
            log.debug("stop of session %s failed", self.session_id, exc_info=True)
            self.note.value = f"<div class='chaz-s'><span class='chaz-err'>could not stop: {esc(exc)}</span></div>"
            self._requested = False
            self.button.disabled = False
            return False, f"could not stop session {self.session_id}: {exc}"
        if self.stopped:
            self.note.value = "<div class='chaz-s chaz-st'>stopping…</div>"
            return True, "; ".join(run.describe() for run in self.stopped)
        self.note.value = "<div class='chaz-s chaz-st'>nothing was running</div>"
        return True, f"session {self.session_id} has no run to stop"

    def close(self) -> None:
        self.closed = True
        _live.discard(self)
        for w in (self.button, self.note, self.widget):
            close_widget(w)  # with its layout and style; never raises
