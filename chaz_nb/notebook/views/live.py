"""The live session view's one widget: an anywidget whose model is the list of rows.

A session view (session.py) shows a cell's live entries, its approval cards and its Stop
button through ONE widget (issue 32: a cell made ~19 widgets and ~59 messages before). Its
front end is ``static/session.js``, run by anywidget's front end (the ``anywidget`` pip
package ships the JupyterLab / Notebook 7 extension); it draws rows the kernel rendered as
escaped HTML (transcript.py) and sends clicks back as events.

The model's state (``STATE_KEYS``) goes with the comm's open and with every state request
(a page reload); after that, a change is ONE custom message holding only what changed: the
new or changed rows (``{"rows": {"set": {index: html}, "n": rows}}``), the cards that changed, the
header, the status line, the notice line (a refused event, one line), the Stop row. The kernel
keeps the whole state, so a page that asks for the state again gets all of it.

Events from the page (``{"event": ...}``): ``stop``, ``earlier``, ``decide`` (``request_id``,
``decision``, ``reason``), ``approve_edited`` (``request_id``, ``text``). They are handled on
the kernel loop (JupyterLab 4.6 may deliver comm messages on a subshell thread).

The Python side speaks anywidget's front-end protocol (``_esm``, ``_css``, ``_anywidget_id``
and the ``AnyModel``/``AnyView`` names) from a plain ``DOMWidget``: importing the anywidget
package costs ~5 MB of kernel RSS and 60 ms (psygnal), and its ``AnyWidget.__init__`` makes a
new class per instance. tests/test_live_widget.py checks these names against anywidget's own.
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path
from typing import Any
from collections.abc import Callable

from .display import plain

log = logging.getLogger("chaz_nb.notebook.views.live")
log.addHandler(logging.NullHandler())

STATIC = Path(__file__).with_name("static")
#: what the front end draws (the model's attributes)
STATE_KEYS = ("head", "earlier", "rows", "cards", "tail", "notice", "stop", "footer")


@functools.lru_cache(maxsize=1)
def anywidget_semver() -> str:
    """The front-end module version anywidget's Python side would ask for (``~0.11.*``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("anywidget")
    except PackageNotFoundError:  # pragma: no cover - a dependency; the page then says so
        v = "0.11.0"
    major, minor, rest = (v.split(".", 2) + ["0", "0"])[:3]
    if "a" in rest or "b" in rest:
        return v
    return f"~{major}.{minor}.*"


@functools.lru_cache(maxsize=1)
def _front_end() -> tuple[str, str]:
    """The ESM and the CSS (the transcript's look, the card's and the view's own)."""
    from .approval import CARD_CSS
    from .look import TRANSCRIPT_CSS

    def bare(css: str) -> str:
        return css.removeprefix("<style>").removesuffix("</style>")

    css = bare(TRANSCRIPT_CSS) + bare(CARD_CSS) + (STATIC / "session.css").read_text(encoding="utf-8")
    return (STATIC / "session.js").read_text(encoding="utf-8"), css


@functools.lru_cache(maxsize=1)
def widget_class() -> type:
    """The widget class (made on first use: ipywidgets and traitlets load with the first view)."""
    import ipywidgets
    import traitlets

    esm, css = _front_end()
    semver = anywidget_semver()

    class SessionWidget(ipywidgets.DOMWidget):
        """One live session view (see the module docstring)."""

        _model_name = traitlets.Unicode("AnyModel").tag(sync=True)
        _model_module = traitlets.Unicode("anywidget").tag(sync=True)
        _model_module_version = traitlets.Unicode(semver).tag(sync=True)
        _view_name = traitlets.Unicode("AnyView").tag(sync=True)
        _view_module = traitlets.Unicode("anywidget").tag(sync=True)
        _view_module_version = traitlets.Unicode(semver).tag(sync=True)
        _esm = traitlets.Unicode(esm).tag(sync=True)
        _css = traitlets.Unicode(css).tag(sync=True)
        _anywidget_id = traitlets.Unicode("chaz_nb.notebook.views.live.SessionWidget").tag(sync=True)

        def __init__(self, state: dict[str, Any], **kw: Any) -> None:
            #: the whole state the front end draws (kept current; sent whole only on open/request)
            self.chaz_state = state
            super().__init__(**plain(), _dom_classes=("chaz-session-view",), **kw)

        def get_state(self, key: Any = None) -> dict[str, Any]:
            out: dict[str, Any] = super().get_state(key)
            if key is None:
                out.update(self.chaz_state)
            return out

        def __repr__(self) -> str:  # traitlets' repr serializes every trait
            return f"<SessionWidget {getattr(self, 'model_id', None)}>"

    return SessionWidget


class LiveWidget:
    """The view's side of the widget: the state, the pending changes, the events.

    The comm opens lazily (``widget``), so the state a view builds before it is displayed
    goes out with the open and costs no message of its own. ``change`` records a change;
    ``push`` sends what changed since the last push as one message.
    """

    def __init__(self, state: dict[str, Any], on_event: Callable[[dict[str, Any]], None], loop: Any = None) -> None:
        self.state = state
        self._on_event = on_event
        self._loop = loop
        self._thread = threading.get_ident()
        self._widget: Any = None
        self._changed: dict[str, Any] = {}
        self._rows_set: set[int] = set()
        self._rows_n: int | None = None
        self.closed = False
        #: custom messages sent (tests and bench: one per flush at most)
        self.sends = 0
        self.max_send_chars = 0

    @property
    def widget(self) -> Any:
        """The ipywidget (its comm opens on first use)."""
        if self._widget is None and not self.closed:
            self._widget = widget_class()(self.state)
            self._widget.on_msg(self._received)
        return self._widget

    @property
    def opened(self) -> bool:
        return self._widget is not None

    # ---------------------------------------------------------------- changes
    def set(self, key: str, value: Any) -> None:
        """A state attribute changed (sent with the next push if the comm is open)."""
        if self.state.get(key) == value:
            return
        self.state[key] = value
        if self._widget is not None:
            self._changed[key] = value

    def set_rows(self, rows: list[str], changed: list[int]) -> None:
        """``rows`` is the whole list now; the rows at ``changed`` are new or changed."""
        self.state["rows"] = rows
        if self._widget is not None:
            self._rows_set.update(changed)
            self._rows_n = len(rows)

    def set_card(self, request_id: str, card: dict[str, Any] | None) -> None:
        cards = self.state["cards"]
        if cards.get(request_id) == card:
            return
        if card is None:
            cards.pop(request_id, None)
        else:
            cards[request_id] = card
        if self._widget is not None:
            self._changed.setdefault("cards", {})[request_id] = card

    def reset(self) -> None:
        """Everything moved (an earlier page came in front): the next push sends the whole state."""
        if self._widget is not None:
            self._changed = {"reset": True}
            self._rows_set, self._rows_n = set(), None

    @property
    def pending(self) -> bool:
        return bool(self._changed) or self._rows_n is not None

    def push(self) -> bool:
        """Send what changed as one custom message; whether one was sent."""
        widget = self._widget
        if widget is None or self.closed or not self.pending:
            return False
        if self._changed.get("reset"):
            msg: dict[str, Any] = {"reset": dict(self.state)}
        else:
            msg = {k: v for k, v in self._changed.items() if k != "cards"}
            if "cards" in self._changed:
                msg["cards"] = dict(self._changed["cards"])
            if self._rows_n is not None:
                rows = self.state["rows"]
                n = len(rows)
                msg["rows"] = {"set": {str(i): rows[i] for i in sorted(self._rows_set) if i < n}, "n": n}
        self._changed = {}
        self._rows_set, self._rows_n = set(), None
        try:
            widget.send(msg)
        except Exception:  # noqa: BLE001 - a comm gone mid-send (the page closed): nothing to tell
            log.debug("live view send failed", exc_info=True)
            return False
        self.sends += 1
        size = sum(len(h) for h in msg.get("rows", {}).get("set", {}).values())
        self.max_send_chars = max(self.max_send_chars, size)
        return True

    # ----------------------------------------------------------------- events
    def _received(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict) or not isinstance(content.get("event"), str):
            return
        loop = self._loop
        if loop is not None and threading.get_ident() != self._thread and not loop.is_closed():
            loop.call_soon_threadsafe(self.event, content)  # a comm message on a subshell thread
            return
        self.event(content)

    def event(self, content: dict[str, Any]) -> None:
        """An event from the page (also what tests send): never raises into the comm."""
        try:
            self._on_event(content)
        except Exception:  # noqa: BLE001 - a click must never raise into the comm handler
            log.exception("live view event %r failed", content.get("event"))

    def close(self) -> None:
        """Close the widget's comm (the output shows the static form by then)."""
        self.closed = True
        widget, self._widget = self._widget, None
        if widget is not None:
            try:
                widget.close()
            except Exception:  # noqa: BLE001 - teardown never raises
                log.debug("live view close failed", exc_info=True)
