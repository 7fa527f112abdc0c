"""The session view: a live entry stream (one widget) plus a static transcript.

One ``SessionView`` shows the entries of one session (optionally only those after a given
``seq``, e.g. one turn). It is displayed once, with a ``display_id``, as a single MIME bundle:

- ``application/vnd.jupyter.widget-view+json``: the live view, where a kernel and a widget
  manager exist: ONE widget (an anywidget, live.py and session_live.py) whose model is the
  list of rows, with the approval cards and the Stop row;
- ``application/vnd.chaz.session+json``: the entries shown, as data, for the chaz JupyterLab
  renderer;
- ``text/html`` and ``text/plain``: a static transcript, for saved notebooks, nbval, GitHub,
  VS Code and Colab.

Live updates come from the store's on_write callback, which only queues the entry and arms a
timer: at most one flush per ``interval`` (100 ms) renders the queued entries into the
widget, so a burst of thousands of entries a second costs a few comm messages a second and
no entry is dropped. A flush sends one message with only the rows it added or changed (and
the header, status line, cards or Stop row if they changed); a view that goes idle in that
flush sends none (its output becomes the static form and the widget closes). The static
bundle is refreshed through the display_id at most every ``static_interval`` seconds while
the session runs (not once a page drew the live widget: its "shown" event; JupyterLab would
draw a new widget view for each refresh), and once more when it goes idle; then the view
unsubscribes. Nothing here
prints: output from background callbacks goes through the widget or the display_id only
(stdout would land in whichever cell happens to run).

Streaming: with ``streams`` (the Server's ``subscribe_stream``) the view also follows the
reply text of the session's run as the model writes it. That text is not an entry: a stream
event only stores the text so far and arms the same throttled flush as a write, so a reply of
any number of deltas costs at most one widget update per ``interval`` (0.1 s: at most 10 a
second, under the ~20 a second a view may take) and one static/display_id update per
``stream_static_interval`` (0.25 s). The partial block sits under the rows (widget, static
HTML/text, and the ``stream`` field of the session JSON the JupyterLab renderer draws); the
reply's Message (or the Error) replaces it when it lands.

With ``stop`` (the Server's ``request_stop``) the live widget has a Stop row while the run goes
on (stop_button.py). A run that ends without a reply (stopped, or a silent turn) ends in a
closing row, the stopped one with the text it had streamed (its Ack's ``partial_text``).

Paging: with ``page`` (``%chaz log``, a turn: 50) the view reads only the newest ``page``
entries (``store.read_page``, one indexed query), so a 50,000-entry session shows its first
screen as fast as a short one. The widget has a "show earlier" row whose button loads the
previous page in place (``show_earlier``); the static form's first line says how many entries
come before and the command that shows them; the session JSON has ``first_seq``, ``earlier``
and ``earlier_command`` for the JupyterLab renderer's own "show earlier".

Every string that comes from an agent, a tool or a user passes through ``html.escape``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any
from collections.abc import Callable

from ...core.redaction import redact
from .base import LiveView
from .display import OUTPUT_METADATA, WIDGET_MIME, clip_json
from .session_live import LiveRows, ViewStats
from .transcript import (  # noqa: F401 - re-exported: the pure transcript lives there
    DETAIL_CHARS,
    SUMMARY_CHARS,
    Row,
    Transcript,
    answers_together,
    attachment_names,
    closes_run,
    render_html,
    render_text,
)
from .look import count_label, header_html
from .transcript import entry_type as _type

log = logging.getLogger("chaz_nb.notebook.views.session")
log.addHandler(logging.NullHandler())

MIME_TYPE = "application/vnd.chaz.session+json"
MIME_VERSION = 1

#: entries a paged view (``%chaz log``, a turn) shows first, and loads per "show earlier"
DEFAULT_PAGE = 50


# ----------------------------------------------------------------- the view
#: the status line while a run waits for the model library (litellm's import, after %load_ext)
LOADING_LINE = "loading the model library…"


class SessionView(LiveRows, LiveView):
    """A view of one session: live widget + static transcript, one display_id.

    ``store``: a SessionStore (``subscribe``, ``entries``, ``session``). ``status``: a
    callable giving ``"idle" | "running" | "parked"`` (the server's ``session_status``);
    without it the session is taken as idle. ``after_seq``: show only later entries.
    ``follow``: subscribe to new entries until the session is idle (``None``: only if it is
    running now; ``True``: also when idle, for a turn about to be written).
    """

    def __init__(
        self,
        store: Any,
        session_id: int,
        *,
        status: Callable[[int], str] | None = None,
        after_seq: int = 0,
        follow: bool | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        interval: float = 0.1,
        static_interval: float = 1.0,
        stream_static_interval: float = 0.25,
        streams: Callable[[int, Callable[[Any], None]], Callable[[], None]] | None = None,
        widget: bool = True,
        title: str | None = None,
        approvals: Any = None,
        footer: str | None = None,
        stop: Callable[..., Any] | None = None,
        page: int | None = None,
        before_seq: int | None = None,
        cell: bool = False,
        loading: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        #: the Server's ``model_library_loading``: a run whose request has not left says so
        self._loading = loading
        #: the view shows one cell's part of a run (a turn): its header counts "entries in this cell"
        self.cell = cell
        #: the Server's ``request_stop``: with it, the live view has a Stop button (stop_button.py)
        self._stop_request = stop
        self.stop_button = None  # a StopButton while the live widget exists
        self.live = None  # the LiveWidget (live.py): the one widget's state
        #: the Server: with it, each open ApprovalRequest gets an ApprovalWidget in the live view
        self.approvals = approvals
        self._approval_widgets = {}
        self._new_requests = []
        self.session_id = session_id
        self.info = store.session(session_id)
        self._status = status
        self.after_seq = after_seq
        self.interval = interval
        self.static_interval = static_interval
        self.stream_static_interval = stream_static_interval
        self._streams = streams
        self._unsubscribe_stream: Callable[[], None] | None = None
        self._stream_event: Any = None  # the newest stream event not rendered yet
        self.title = title
        #: a last line (a turn's view says where the whole log is: ``%chaz log N``)
        self.footer = footer
        #: set when a later cell's view took over this session (see ``hand_over``)
        self.handed_over = False
        self._sent: dict[str, Any] | None = None  # the bundle the output shows now
        self._sent_seq = after_seq
        self.display_id = f"chaz-{session_id}-{uuid.uuid4().hex[:12]}"
        self.transcript = Transcript(agent=self.info.agent)
        self.stats = ViewStats()
        self._loop = loop
        self._loop_thread: int | None = None
        self._pending: list[Any] = []
        self._lock = threading.Lock()
        self._timer: Any = None
        self._armed = False
        self._poll: Any = None
        self._last_static = 0.0
        self._displayed = False
        self._closed = False
        self._finished = False
        self._unsubscribe: Callable[[], None] | None = None
        self._last_seq = after_seq
        #: entries per page (None: the whole log at once); ``before_seq``: a window ending there
        self.page = None if page is None else max(1, int(page))
        self.before_seq = before_seq
        #: the first seq shown and how many entries (after ``after_seq``) come before it
        self.first_seq: int | None = None
        self.earlier = 0

        if follow or (follow is None and self.status() != "idle"):
            self._subscribe()
            if streams is not None:
                self._unsubscribe_stream = streams(session_id, self._on_stream)
        for entry in self._first_page():
            self._add(entry)
        if self._unsubscribe is None:
            self._finished = True  # a snapshot: static bundle only, no widget
        elif widget:
            self._build_widget()

    # ---------------------------------------------------------- status
    def status(self) -> str:
        if self._status is None:
            return "idle"
        try:
            return self._status(self.session_id)
        except Exception:  # noqa: BLE001 - the server may be gone (unload): show idle
            return "idle"

    def header(self) -> str:
        i = self.info
        parts = [f"session {i.id}", i.agent, i.kind]
        if i.parent_id is not None:
            parts.append(f"child of {i.parent_id}, depth {i.depth}")
        if i.forked_from is not None:
            parts.append(f"forked from session {i.forked_from} at #{i.forked_at_seq}")
        if self.title:
            parts.insert(0, self.title)
        return " · ".join(str(p) for p in parts) + f" · {self.status()}"

    def header_spans(self) -> list[tuple[str, str]]:
        """The header as the lab renderer draws it: ``(css class, text)`` spans."""
        i = self.info
        status = self.status()
        spans = [("chaz-title", f"Session {i.id}"), ("chaz-agent", str(i.agent)), ("chaz-kind", str(i.kind or ""))]
        if self.title:
            spans.append(("chaz-kind chaz-view-title", self.title))
        if i.parent_id is not None:
            spans.append(("chaz-parent", f"child of {i.parent_id}"))
        if i.forked_from is not None:
            spans.append(("chaz-forked", f"forked from session {i.forked_from} at #{i.forked_at_seq}"))
        spans.append((f"chaz-status chaz-status-{''.join(c for c in status if c.isalpha())}", status))
        spans.append(("chaz-count", self.count_label()))
        return spans

    def count_label(self) -> str:
        """The header's count, of the rows shown as well as the entries they fold."""
        shown = sum(1 for row in self.transcript.rows if row.text())
        return count_label(len(self.transcript.entries), self.cell, shown)

    # ---------------------------------------------------------- paging
    def _first_page(self) -> list[Any]:
        """What the view shows first: the whole log after ``after_seq``, or its newest page."""
        if self.page is None and self.before_seq is None:
            entries = list(self.store.entries(self.session_id, after_seq=self.after_seq))
        elif self.before_seq is None and self.after_seq and self._tail_fits():
            # a turn's view: the few entries after its trigger (the store may have them in memory)
            entries = list(self.store.entries(self.session_id, after_seq=self.after_seq))
        else:
            page = self.store.read_page(self.session_id, before_seq=self.before_seq,
                                        limit=self.page if self.page is not None else 1 << 62)
            entries = [e for e in page if e.seq > self.after_seq]
        self._set_earlier(entries[0].seq if entries else self.before_seq)
        return entries

    def _tail_fits(self) -> bool:
        """Whether the entries after ``after_seq`` fit in one page (from the store's latest entry)."""
        latest = self.store.latest(self.session_id)
        return latest is None or latest.seq - self.after_seq <= (self.page or 0)

    def _set_earlier(self, first_seq: int | None) -> None:
        self.first_seq = first_seq
        # seqs are gapless from 1: this many entries (after after_seq) precede the first shown
        self.earlier = max(0, first_seq - 1 - self.after_seq) if first_seq is not None else 0

    def earlier_command(self) -> str:
        """The command line that shows the entries before this view's first one."""
        limit = f" --limit {self.page}" if self.page is not None and self.page != DEFAULT_PAGE else ""
        return f"%chaz log {self.session_id} --before {self.first_seq}{limit}"

    def earlier_line(self) -> str:
        """``120 earlier entries: %chaz log 3 --before 121`` (empty when nothing is left out)."""
        if not self.earlier:
            return ""
        n = self.earlier
        return f"{n:,} earlier {'entry' if n == 1 else 'entries'}: {self.earlier_command()} (or --all)"

    def show_earlier(self) -> int:
        """Load the page before the first entry shown (the widget's "show earlier" button);
        returns how many entries it added."""
        if not self.earlier or self.first_seq is None:
            return 0
        page = self.store.read_page(self.session_id, before_seq=self.first_seq, limit=self.page or DEFAULT_PAGE)
        older = [e for e in page if e.seq > self.after_seq]
        if not older:
            self._set_earlier(None)
            return 0
        self._set_earlier(older[0].seq)
        # fold again from the start: a ToolResult shown finds its ToolCall on the new page
        shown, partial = self.transcript.entries, self.transcript.partial
        self.transcript = Transcript(agent=self.info.agent)
        for entry in [*older, *shown]:
            self.transcript.add(entry)
        self.transcript.partial = partial
        if self.live is not None:
            self._rebuild_rows()
            self._push()
        # not while the live widget is open: JupyterLab draws the widget view again for each
        # update of its output (a new view: a blank frame, and the text typed in a card's Edit
        # box gone, issue 42 #20); the static forms catch up at the next refresh or the end
        if self._displayed and not self._closed and (self.live is None or not self.live.opened):
            self.update_display()
        self._updated()
        return len(older)

    # ---------------------------------------------------------- entries
    def _on_write(self, entry: Any) -> None:
        """on_write callback: O(1); queue the entry and arm the flush timer."""
        if entry.session_id != self.session_id or self._closed:
            return
        with self._lock:
            self._pending.append(entry)
        self._request_refresh(self.interval)

    def _on_stream(self, event: Any) -> None:
        """Stream listener: O(1); keep the newest text so far and arm the flush timer."""
        if self._closed:
            return
        with self._lock:
            self._stream_event = event
            self.stats.stream_events += 1
        self._request_refresh(self.interval)

    def _take_stream(self) -> bool:
        """Bring the newest stream event into the transcript; whether the partial text changed."""
        with self._lock:
            event, self._stream_event = self._stream_event, None
        if event is None:
            return False
        before = self.transcript.partial
        if getattr(event, "done", False):
            self.transcript.partial = None
        else:
            sender = self.transcript.working or self.info.agent
            # masked as the reply's entry will be (here, at most a few times a second, not per delta)
            self.transcript.partial = (event.run_id, sender, redact(event.text))
        return self.transcript.partial != before

    def _stop_following(self) -> None:
        if self._unsubscribe_stream is not None:
            self._unsubscribe_stream()
            self._unsubscribe_stream = None
        super()._stop_following()

    def _tick(self) -> None:
        with self._lock:
            self._armed = False
            self._timer = None
        try:
            self.flush()
        except Exception:  # never let a rendering problem escape into the kernel loop
            log.exception("session view flush failed")
        self._updated()

    def _add(self, entry: Any) -> list[int]:
        if entry.seq <= self._last_seq:
            return []  # seen already (entries() and on_write overlap at subscribe time)
        self._last_seq = entry.seq
        self.stats.entries += 1
        if _type(entry) == "ApprovalRequest":
            self._new_requests.append(entry)
        return self.transcript.add(entry)

    def flush(self, *, final: bool = False) -> None:
        """Render queued entries; refresh the static bundle when due; finish when idle.

        ``final``: refresh the static bundle now (a wait that returns calls this).
        """
        if self._closed:
            return
        with self._lock:
            batch, self._pending = self._pending, []
        self.stats.flushes += 1
        streamed = self._take_stream()
        changed: set[int] = set()
        for entry in batch:
            changed.update(self._add(entry))
        if self.live is not None:
            self._render_rows(changed)
            self._render_approvals()
            if self._set_status_widget() and streamed:
                self.stats.stream_updates += 1
            if self.stop_button is not None:
                self.stop_button.show(self.status() != "idle")
        if self._unsubscribe is not None and self.status() == "idle":
            with self._lock:
                more = bool(self._pending)
            if not more:
                self.finish()  # sends the final static bundle (the widget closes unsent)
                return
        self._push()  # one message with what this flush changed
        now = time.monotonic()
        # a page that draws the widget gets the changes through it: a timed refresh of the output
        # would make JupyterLab draw a new view (a card's typed drafts lost); the front ends that
        # draw no widget (nbclient, a static viewer) still get the timed refresh
        timed = not (self.drawn and self.live is not None and not self.live.closed)
        if self._displayed and (final or (timed and changed and now - self._last_static >= self.static_interval)
                                or (timed and streamed and now - self._last_static >= self.stream_static_interval)):
            self.update_display()
        if self._unsubscribe is None:
            return
        # A running session can change status without a write (its end, a park): poll slowly.
        if self._poll is None and self._loop is not None and not self._loop.is_closed():
            self._poll = self._loop.call_later(max(self.interval, 0.5), self._poll_tick)

    def _poll_tick(self) -> None:
        self._poll = None
        if not self._armed:
            self._tick()

    # ------------------------------------------------------------ finish (base.py)
    def _timers(self) -> tuple[str, ...]:
        return ("_timer", "_poll")

    def _begin_finish(self) -> bool:
        if self._finished:
            return False
        self._finished = True
        with self._lock:
            batch, self._pending = self._pending, []
        for entry in batch:
            self._add(entry)
        self.transcript.partial = None  # finished: only entries remain
        return True

    def _final_static(self) -> None:
        if self._displayed:
            self.update_display()

    def hand_over(self) -> int:
        """A later cell follows this session now: end this view as its output last showed it.

        Returns the last seq that output shows; the later view starts after it. The output
        keeps exactly what it showed when its cell stopped waiting (the later entries, e.g.
        the decision a later cell writes, belong to the later cell), so each cell's output is
        that cell's step of the run, in JupyterLab as in nbclient/nbval, and a saved notebook
        tells the run step by step. The final bundle has no widget view.
        """
        if self._unsubscribe is None and self._finished:
            return self._sent_seq if self._sent is not None else self._last_seq
        self.handed_over = True
        with self._lock:
            self._pending = []  # not shown yet: the later view shows them
        self._stop_following()
        self._finished = True
        if self._sent is None:  # never displayed: nothing to freeze
            self._close_widgets()
            return self._last_seq
        if self._displayed and not self._closed:
            from IPython.display import update_display

            frozen = {k: v for k, v in self._sent.items() if k != WIDGET_MIME}
            update_display(frozen, raw=True, metadata=OUTPUT_METADATA, display_id=self.display_id)
            self._sent = frozen
            self.stats.static_updates += 1
        self._close_widgets()
        return self._sent_seq

    def set_waiting(self, on: bool, *, interrupted: bool = False) -> None:
        """The cell showing this view waits for the run, or stopped waiting (stop_button.py)."""
        if self.stop_button is not None and not self.stop_button.closed:
            self.stop_button.set_waiting(on, interrupted=interrupted)

    def _remember_sent(self, data: dict[str, Any]) -> None:
        """What the output shows now (see ``hand_over``)."""
        self._sent = data
        self._sent_seq = self._last_seq

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def close(self) -> None:
        """Unsubscribe and close the widgets (no more display updates)."""
        self._closed = True
        self.finish()
        self._close_widgets()

    def _status_line(self) -> str | None:
        """The line under the rows: the run's progress; nothing while parked (the tool row says
        "waiting for approval" and the card says what to do)."""
        status = self.status()
        if status == "idle":  # a run that is over is not "working" (its Ack may have no reply here)
            return None
        if status == "parked" and self.transcript.open_requests():
            return None
        if self.transcript.status is None and status == "running" and self._library_loading():
            # the first turn after %load_ext waits for litellm's import (seconds): its Ack (the
            # "working" line) lands only once the request leaves, so say what the wait is
            return LOADING_LINE
        return self.transcript.status

    def _library_loading(self) -> bool:
        try:
            return bool(self._loading and self._loading())
        except Exception:  # noqa: BLE001 - the server may be gone (unload): nothing to say
            return False

    # ---------------------------------------------------------- static bundle
    def to_json(self) -> dict[str, Any]:
        i = self.info
        session: dict[str, Any] = {
            "id": i.id,
            "agent": i.agent,
            "kind": i.kind,
            "parent_id": i.parent_id,
            "depth": i.depth,
        }
        if i.forked_from is not None:  # (only a fork's: the JSON of other sessions is unchanged)
            session["forked_from"] = i.forked_from
            session["forked_at_seq"] = i.forked_at_seq
        data: dict[str, Any] = {
            "version": MIME_VERSION,
            "session": session,
            "status": self.status(),
            # each string clipped: a tool's megabyte output stays in the log, not in the notebook
            "entries": [clip_json(e.to_json()) for e in self.transcript.entries],
        }
        if self.footer:
            data["footer"] = self.footer
        if self.title:
            data["title"] = self.title
        if self.cell:  # one cell's part of a run: the header counts "entries in this cell"
            data["scope"] = "cell"
        # the renderer shows this count (it folds rows as the Transcript does)
        data["count_label"] = self.count_label()
        if self.earlier:  # a page of a longer log: what the renderer's "show earlier" needs
            data["first_seq"] = self.first_seq
            data["earlier"] = self.earlier
            data["earlier_command"] = self.earlier_command()
            if self.after_seq:  # a turn's view: "show earlier" stops at the turn's start
                data["after_seq"] = self.after_seq
        if self.transcript.partial:
            run_id, sender, text = self.transcript.partial
            data["stream"] = {"run_id": run_id, "sender": sender, "text": text}
        return data

    def _static(self, render: Callable[..., str], **kw: Any) -> str:
        t = self.transcript
        saved, t.status = t.status, self._status_line()
        try:
            return render(self.header(), self.footer or "", self.earlier_line(), **kw)
        finally:
            t.status = saved

    def text(self) -> str:
        return self._static(self.transcript.text)

    def html(self) -> str:
        return self._static(self.transcript.html, head=header_html(self.header_spans()))

    def static_data(self) -> dict[str, Any]:
        return {MIME_TYPE: self.to_json()}

    def update_display(self) -> None:
        # once finished, the bundle is static only (the widget is about to close)
        self._update_static(widget=not self._finished)
        self.stats.static_updates += 1
