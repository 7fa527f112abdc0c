"""The session view's live part: its rows, cards and Stop row as the state of ONE widget.

``SessionView`` (session.py) folds entries into transcript rows; this mixin keeps what its
widget (live.py) draws in step with them: each row's HTML (transcript.py, escaped), one card
per open approval request (under the row of the call it gates: buttons, the reason box, the
edit box), the header, the status line (with the streamed partial reply), the "show earlier"
line, the Stop row (stop_button.py) and the footer. A flush sends what changed as one
message (``LiveWidget.push``); the events the page sends (Stop, show earlier, Approve,
Deny, Approve all, Approve edited, and "shown": a page draws the widget) come back to
``_on_event``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .display import esc
from .look import header_html

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from ...core.entries import Entry
    from .approval import ApprovalWidget
    from .live import LiveWidget
    from .stop_button import StopButton
    from .transcript import Transcript

log = logging.getLogger("chaz_nb.notebook.views.session_live")
log.addHandler(logging.NullHandler())

#: the decisions a card's buttons send
DECISIONS = ("approve", "deny", "approve_all")


def _short(value: Any) -> str:
    """A value the page sent, for a one-line answer (a forged one may be huge)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _notice(message: str | None) -> str:
    """The view's notice line (a refused event), escaped; empty once an event is taken."""
    return f"<div class='chaz-s chaz-notice'><span class='chaz-err'>{esc(message)}</span></div>" if message else ""


@dataclass
class ViewStats:
    """What a view sent and why (tests and benches read it)."""
    flushes: int = 0
    static_updates: int = 0
    widget_sends: int = 0
    max_send_chars: int = 0
    entries: int = 0
    sends: list[int] = field(default_factory=list)
    stream_events: int = 0  # stream deltas received
    stream_updates: int = 0  # widget updates they caused (throttled)


class LiveRows:
    """Mixin of ``SessionView``: the state of its one live widget (see the module docstring)."""

    live: LiveWidget | None
    stop_button: StopButton | None
    transcript: Transcript
    approvals: Any  # the Server (its approval methods), or None
    footer: str | None
    session_id: int
    interval: float
    _approval_widgets: dict[str, ApprovalWidget]
    _new_requests: list[Entry]
    _stop_request: Callable[..., Any] | None
    _loop: asyncio.AbstractEventLoop | None
    #: a page drew the live widget (its "shown" event). JupyterLab draws a NEW widget view for
    #: each update of the output (the drafts in a card's boxes lost, the focus too), so while
    #: the widget is open the view sends no timed static refresh; the widget carries the changes.
    drawn: bool = False

    if TYPE_CHECKING:  # what SessionView and LiveView give the mixin (stubs here would shadow LiveView's)
        stats: ViewStats

        def earlier_line(self) -> str: ...
        def status(self) -> str: ...
        def header_spans(self) -> list[tuple[str, str]]: ...
        def show_earlier(self) -> int: ...
        def _status_line(self) -> str | None: ...
        def _request_refresh(self, delay: float) -> None: ...

    # ------------------------------------------------------------------ build
    def _build_widget(self) -> None:
        """The widget's state (its comm opens when the view is first shown: live.py)."""
        from .live import LiveWidget

        self._row_html: list[str] = []
        earlier = esc(self.earlier_line())
        self.live = LiveWidget(
            {"head": "", "earlier": earlier, "rows": [], "cards": {}, "tail": "", "notice": "", "stop": None,
             "footer": f"<div class='chaz-footer'>{esc(self.footer)}</div>" if self.footer else ""},
            self._on_event, loop=self._loop,
        )
        if self._stop_request is not None:
            from .stop_button import StopButton

            self.stop_button = StopButton(self._stop_request, self.session_id, loop=self._loop,
                                          on_change=self._stop_changed)
            self.stop_button.show(self.status() != "idle")
            self.live.set("stop", self.stop_button.state())
        self._render_rows(set(range(len(self.transcript.rows))))
        self._render_approvals()
        self._set_status_widget()

    @property
    def widget(self) -> Any:
        """The live ipywidget (None once the view finished); its comm opens on first use."""
        live = self.live
        return None if live is None or live.closed else live.widget

    @property
    def _box(self) -> Any:  # what StaticFallbackView.bundle puts in the widget view
        return self.widget

    # ------------------------------------------------------------------ rows
    def _render_rows(self, changed: set[int]) -> None:
        """Render the new rows and ``changed`` ones into the widget's state."""
        if self.live is None:
            return
        rows = self.transcript.rows
        cards = self._approval_widgets
        old = self._row_html
        html = old[: len(rows)] + [""] * max(0, len(rows) - len(old))
        todo = {i for i in changed if 0 <= i < len(rows)} | set(range(len(old), len(rows)))
        for i in todo:
            # a row whose card is live leaves the card to the widget (one card per request)
            html[i] = rows[i].html(card=rows[i].request_id not in cards)
        moved = sorted(i for i in todo if i >= len(old) or old[i] != html[i])
        self._row_html = html
        if moved or len(old) != len(html):
            self.live.set_rows(html, moved)
        self.live.set("head", header_html(self.header_spans()))

    def _rebuild_rows(self) -> None:
        """Render every row again (rows moved: an earlier page was put in front)."""
        live = self.live
        if live is None:
            return
        self._row_html = []
        for rid in list(live.state["cards"]):
            self._set_card(rid)
        self._render_rows(set(range(len(self.transcript.rows))))
        live.set("earlier", esc(self.earlier_line()))
        live.reset()

    # ------------------------------------------------------------------ cards
    def _render_approvals(self) -> None:
        """A card (buttons) for each new ApprovalRequest that is still open, placed under the
        row of the call it gates (entry order)."""
        new, self._new_requests = self._new_requests, []
        if self.approvals is None or self.live is None:
            return
        for entry in new:
            rid = str((entry.payload or {}).get("request_id") or "")
            row = self.transcript.request_rows.get(rid) if rid else None
            if row is None or rid in self._approval_widgets or not self.transcript.rows[row].open_request:
                continue
            try:
                from .approval import ApprovalWidget

                aw = ApprovalWidget(self.approvals, entry, widget=False)
            except Exception:
                log.exception("approval card failed")
                continue
            if aw.decided:  # decided before we got to show it: the transcript row says so
                aw.close()
                continue
            self._approval_widgets[rid] = aw
            aw._on_change = lambda _aw, rid=rid: self._card_changed(rid)
            self._set_card(rid)
            self._render_rows({row})  # the row leaves its card to the widget now

    def _set_card(self, rid: str) -> None:
        from .approval import card_html, edit_text
        from .code import code_of

        live = self.live
        if live is None:
            return
        aw = self._approval_widgets.get(rid)
        row = self.transcript.request_rows.get(rid)
        if aw is None or row is None:
            live.set_card(rid, None)
            return
        status = f"<b>{esc(aw.outcome())}</b>" if aw.decided else ""
        if aw.message:
            status += f" <span class='chaz-ap-hint'>{esc(aw.message)}</span>"
        args = aw.info.get("arguments_display")
        live.set_card(rid, {
            "row": row,
            "html": card_html(aw.info, aw.decision, aw.decision_sender, hint=False),
            "done": aw.decided,
            "status": f"<div class='chaz-ap'>{status}</div>" if status else "",
            "edit": edit_text(args),
            "code": code_of(args) is not None,
            "egress": aw.info.get("kind") == "egress",  # Allow once / for this session / Deny
        })

    def _card_changed(self, rid: str) -> None:
        """A card's request was decided (here, in a cell, the sidebar, a timeout) or a click
        was refused: the page shows it now."""
        if self.live is None or self.live.closed:
            return
        self._set_card(rid)
        self._push()

    def _push(self) -> None:
        """Send what changed (one message) and count it."""
        live = self.live
        if live is not None and live.push():
            stats = self.stats
            stats.widget_sends += 1
            stats.max_send_chars = max(stats.max_send_chars, live.max_send_chars)

    # ------------------------------------------------------------------ stop
    def _stop_changed(self, urgent: bool) -> None:
        """The Stop row changed: a click's answer goes now, the rest with the next flush."""
        if self.live is None or self.live.closed or self.stop_button is None:
            return
        self.live.set("stop", self.stop_button.state())
        if urgent:
            self._push()
        elif self.live.pending and getattr(self, "_unsubscribe", None) is not None:
            self._request_refresh(self.interval)

    # ------------------------------------------------------------------ events
    def _on_event(self, content: dict[str, Any]) -> None:
        """An event from the page's widget (on the kernel loop). A forged or stale one (another
        view's request, a decided one, wrong types) decides nothing and says why in one line:
        on its card, or on the view's notice line when it names no card of this view."""
        event = content.get("event")
        if event == "shown":  # a page draws the widget (session.js): see ``drawn``
            self.drawn = True
            return
        refused: str | None = None
        if event == "stop" and self.stop_button is not None:
            self.stop_button.request()
        elif event == "earlier":
            self.show_earlier()
        elif event in ("decide", "approve_edited"):
            refused = self._card_event(str(event), content)
        elif event != "stop":
            refused = f"the page sent an event this view does not know: {_short(event)}"
        if self.live is not None:
            self.live.set("notice", _notice(refused))
        self._push()

    def _card_event(self, event: str, content: dict[str, Any]) -> str | None:
        """A card's button: decide its request (only a card this view shows); why not, for the
        notice line (a refusal about the card itself is said on the card)."""
        rid = content.get("request_id")
        aw = self._approval_widgets.get(rid) if isinstance(rid, str) else None
        if aw is None or aw.decided:
            return (f"no open approval card {_short(rid)} in this view (session {self.session_id}); "
                    "nothing was decided")
        try:
            if event == "approve_edited":
                text = content.get("text")
                if not isinstance(text, str):
                    raise ValueError(f"the edited arguments are text, not {type(text).__name__}; "
                                     "nothing was decided")
                aw.approve_edited(text)
            else:
                decision, reason = content.get("decision"), content.get("reason")
                if decision not in DECISIONS:
                    raise ValueError(f"decision is approve, deny or approve_all, not {_short(decision)}")
                if reason is not None and not isinstance(reason, str):
                    raise ValueError(f"the reason is text, not {type(reason).__name__}; nothing was decided")
                aw.decide(str(decision), reason if decision == "deny" else None)
        except Exception as exc:  # noqa: BLE001 - a click must never raise into the comm
            if not isinstance(exc, ValueError):
                log.exception("approval click failed")
            aw.message = f"could not decide: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            self._card_changed(aw.request_id)
        return None

    def frontend_event(self, event: str, **fields: Any) -> None:
        """Handle ``{"event": event, **fields}`` as if the page's widget had sent it (tests,
        and the way a notebook without a page may click)."""
        if self.live is not None:
            self.live.event({"event": event, **fields})

    # ------------------------------------------------------------------ status line
    def _set_status_widget(self) -> bool:
        """The partial reply (while streamed) and the status line; whether they changed."""
        if self.live is None:
            return False
        status = self._status_line()
        value = self.transcript.partial_html() + self.transcript.status_html(status)
        if self.live.state["tail"] == value:
            return False
        self.live.set("tail", value)
        return True

    def _close_widgets(self) -> None:
        live, self.live = self.live, None
        if self.stop_button is not None:
            self.stop_button.show(False)  # the run is over (or another cell follows it now)
            self.stop_button.close()
        if live is not None:
            live.close()
        for aw in self._approval_widgets.values():
            try:  # teardown: one card failing to close must not keep the others open
                aw.close()
            except Exception:  # noqa: BLE001 - teardown goes on (see the try)
                log.debug("approval card close failed", exc_info=True)
