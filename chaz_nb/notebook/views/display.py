"""What every chaz view shares: a live ipywidget plus a static text/HTML form.

The static form (text/plain, text/html, and whatever ``static_data`` adds) is what a saved
notebook, nbval, GitHub or a kernel-less viewer shows; the widget reference is added only
while the widget lives. Subclasses provide ``text()``, ``html()`` and ``_box``.

A saved notebook must render without a kernel everywhere. JupyterLab prefers a widget view
over the text/html fallback of the same output, and a widget whose model is gone (the kernel
was shut down) shows "Error displaying widget: model not found". So:

- a view that is finished replaces its output by the static form (no widget view), through
  its display_id;
- every chaz output is marked in its metadata (``OUTPUT_METADATA``): the chaz JupyterLab
  extension saves a marked output that is still live without its widget view, i.e. as its
  static form (``labextension/src/save.ts``). The live view on screen is untouched; the
  file holds what a kernel-less reader can show.
"""

from __future__ import annotations

import contextlib
import html
import logging
import time
from typing import Any
from collections.abc import Callable

from ...core.controls import shown_controls

log = logging.getLogger(__name__)

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: output metadata of every chaz view: its static form stands alone (save it without the widget)
OUTPUT_METADATA = {"chaz_nb": {"static_fallback": True}}


#: most characters of one string of an entry in JSON sent to a frontend (the session JSON, a lab
#: page answer): the log keeps a tool's whole output, which may be megabytes; the renderer
#: shows 20,000 characters of it
JSON_TEXT_MAX = 100_000


def clip_json(value: Any, limit: int = JSON_TEXT_MAX) -> Any:
    """``value`` (JSON data) with every string, keys too, cut to ``limit`` characters."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit]}\n… ({len(value) - limit} more characters)"
    if isinstance(value, dict):
        return {clip_json(k, limit): clip_json(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [clip_json(v, limit) for v in value]
    return value


def esc(value: Any) -> str:
    """HTML-escape anything an agent, a tool or a user wrote (the HTML widget does not sanitise);
    control and bidi characters are shown by name (core/controls.py)."""
    return html.escape(shown_controls("" if value is None else str(value)), quote=True)


#: the kernel's one default Layout and Style widgets, shared by the view widgets that keep the
#: defaults (see ``plain``)
_SHARED: dict[str, Any] = {}


def plain(style: str | None = None) -> dict[str, Any]:
    """``layout=`` (and ``style=``: ``"HTMLStyle"`` or ``"ButtonStyle"``)
    for a view widget that keeps the defaults: one Layout and one Style widget per kernel.

    Every DOMWidget otherwise brings a Layout and a Style widget of its own, ~19 a cell, each a
    comm opened with the cell and closed with it (issue 32). Never for a widget whose layout
    or style changes (a row shown and hidden has its own). A shared one that was closed (e.g.
    ``Widget.close_all()``) is made again.
    """
    from ipywidgets.widgets import widget_button, widget_layout, widget_string

    classes = {
        "Layout": widget_layout.Layout,
        "HTMLStyle": widget_string.HTMLStyle,
        "ButtonStyle": widget_button.ButtonStyle,
    }
    kw: dict[str, Any] = {}
    for key, cls in (("layout", "Layout"), ("style", style)):
        if cls is None:
            continue
        shared = _SHARED.get(cls)
        if shared is None or getattr(shared, "comm", None) is None:
            shared = _SHARED[cls] = classes[cls]()
        kw[key] = shared
    return kw


def close_widget(widget: Any) -> None:
    """Close an ipywidget and the Layout and Style widgets it owns.

    ipywidgets' ``close`` closes only the widget itself: its ``layout`` and ``style`` (widgets
    of their own, with a comm each) would stay in the kernel's widget registry for the kernel's
    life, ~19 of them a finished cell (issue 32). Reads the traits without creating them, and
    never raises (teardown: a widget whose comm is gone may).
    """
    if widget is None:
        return
    values = getattr(widget, "_trait_values", {})
    shared = [id(s) for s in _SHARED.values()]
    for part in (widget, values.get("layout"), values.get("style")):
        if part is not None and hasattr(part, "close") and id(part) not in shared:
            with contextlib.suppress(Exception):
                part.close()


class StaticFallbackView:
    """Mixin: ``bundle``, rich repr, and display / update through a display_id."""

    _box: Any = None
    display_id: str | None = None
    _displayed: bool = False
    _last_static: float = 0.0

    def text(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def html(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def static_data(self) -> dict[str, Any]:
        """MIME data beyond text and HTML (e.g. the session JSON for the JupyterLab renderer)."""
        return {}

    def bundle(self, widget: bool = True) -> dict[str, Any]:
        # text/plain holds what agents and tools wrote: their ANSI and bidi controls shown as text
        data: dict[str, Any] = {"text/plain": shown_controls(self.text()), "text/html": self.html(),
                                **self.static_data()}
        if widget and self._box is not None and getattr(self._box, "model_id", None):
            data[WIDGET_MIME] = {"version_major": 2, "version_minor": 0, "model_id": self._box.model_id}
        return data

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.bundle()

    def __repr__(self) -> str:
        return shown_controls(self.text())

    def display(self) -> Any:
        from IPython.display import display

        data = self.bundle()
        display(data, raw=True, metadata=OUTPUT_METADATA, display_id=self.display_id)
        self._remember_sent(data)
        self._displayed = True
        self._last_static = time.monotonic()
        return self

    def _remember_sent(self, data: dict[str, Any]) -> None:
        """Called with each bundle the output is given (a view may keep it)."""

    def on_update(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Call ``callback(view)`` after each live refresh and when the view finishes.

        The views refresh on timers (throttled), so a caller that must know the view caught
        up (a test, another view) waits on this instead of on a guessed delay.
        Returns the function that unsubscribes.
        """
        listeners = self.__dict__.setdefault("_update_listeners", [])
        listeners.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                listeners.remove(callback)

        return unsubscribe

    def _updated(self) -> None:
        for callback in list(self.__dict__.get("_update_listeners", ())):
            try:
                callback(self)
            except Exception:
                log.exception("view update listener %r failed", callback)

    def _update_static(self, widget: bool) -> None:
        from IPython.display import update_display

        data = self.bundle(widget=widget)
        update_display(data, raw=True, metadata=OUTPUT_METADATA, display_id=self.display_id)
        self._remember_sent(data)
        self._last_static = time.monotonic()
