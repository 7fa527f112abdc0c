"""The Stop button of a live session view: a row of its own while the session's run goes on.

The row shows while the session is ``running`` or ``parked`` (a run waiting for an approval
can be stopped too) and hides once it is idle; the session view closes it with its other
widgets when it finishes, so a saved notebook never shows it. A click asks the server to stop
the session's run (``request_stop(session_id, by="user")``, what ``%chaz stop`` does, see
server/stopping.py; on a shared store a run another kernel serves is stopped by that kernel,
server/stop_relay.py) and disables the button; the run then writes its cancelled Ack, which
the view shows as it shows every entry. The click handler never raises into the widget's comm: a
failure is the row's one-line note.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any
from collections.abc import Callable

from .display import esc

log = logging.getLogger("chaz_nb.notebook.views.stop_button")
log.addHandler(logging.NullHandler())

#: what a click calls: the Server's ``request_stop`` (session id, who) -> the runs stopped
StopRequest = Callable[..., Any]


class StopButton:
    """``[■ Stop] note`` under a session view's rows, for one session."""

    def __init__(self, stop: StopRequest, session_id: int) -> None:
        import ipywidgets as w

        self._stop = stop
        self.session_id = session_id
        self.button = w.Button(description="Stop", icon="stop", button_style="danger",
                               tooltip=f"stop the run of session {session_id} (%chaz stop {session_id})")
        self.button.add_class("chaz-stop")
        self.note = w.HTML("")
        self.widget = w.HBox([self.button, self.note])
        self.widget.add_class("chaz-stop-row")
        self.widget.layout.display = "none"
        self.button.disabled = True
        self._requested = False  # a click asked to stop the run going on now
        self.button.on_click(self._clicked)
        #: what the last click did (``StoppedRun`` list), for the view and tests
        self.stopped: list[Any] | None = None

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
        self._requested = True
        self.button.disabled = True
        try:
            self.stopped = list(self._stop(self.session_id, by="user") or [])
        except Exception as exc:  # noqa: BLE001 - a click must never raise into the comm
            log.debug("stop of session %s failed", self.session_id, exc_info=True)
            self.note.value = f"<div class='chaz-s'><span class='chaz-err'>could not stop: {esc(exc)}</span></div>"
            self._requested = False
            self.button.disabled = False
            return
        if self.stopped:
            self.note.value = "<div class='chaz-s chaz-st'>stopping…</div>"
        else:
            self.note.value = "<div class='chaz-s chaz-st'>nothing was running</div>"

    def close(self) -> None:
        for w in (self.button, self.note, self.widget):
            with contextlib.suppress(Exception):  # teardown: a widget whose comm is gone
                w.close()
