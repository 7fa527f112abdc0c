"""``%chaz audit [SESSION]``: a live table of tool calls, with filters and totals.

The rows come from the ``tool_calls`` audit view (joined with ``approvals`` for the approval
state, and ``runs`` for tokens and cost). A fork's copies of its source's calls and runs
(``copied_from``) are rows marked "(copy)" and no part of the totals: the line counts them
apart ("4 calls copied by a fork, not counted"). With a SESSION the table covers that session and the
sessions of the agents it spawned, transitively; without one, every session of the store.
Its queries run through ``SessionStore.read`` (a read-only transaction on the locked-down
instance), like ``%chaz sql``'s: the view cannot change what it shows.

It is displayed once with a ``display_id``, as one MIME bundle: the ipywidgets view (filters:
agent and tool Dropdowns, "errors only" and "needs approval only" Checkboxes; a totals line;
the rows, each a ``<details>`` that unfolds to the call's arguments and output) plus
``text/html`` and ``text/plain`` static forms for saved notebooks, nbval, GitHub and VS Code.

Live updates: a store ``on_write`` callback only notes that something relevant was written
and arms one timer; at most one refresh per ``interval`` (250 ms) re-reads the view and
re-renders. The static bundle follows through the display_id at most every
``static_interval`` seconds (and once more after the last change). ``finish()`` (unloading the
extension, the store closing) stops following and replaces the output by the static form, so
what stays in the notebook renders without a kernel; closing the widget unsubscribes. Every
string from an agent, a tool or a user passes through ``html.escape``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from .base import LiveView
from .display import close_widget
from .display import esc as _esc

log = logging.getLogger("chaz_nb.notebook.views.audit")
log.addHandler(logging.NullHandler())

ALL = "(all)"
#: entry types after which the table (or its totals) may change
RELEVANT = {"ToolCall", "ToolResult", "ApprovalRequest", "ApprovalDecision", "Ack", "Message", "Error"}
SUMMARY_CHARS = 60
DETAIL_CHARS = 4000
TEXT_CHARS = 50

_SCOPE_ALL = "SELECT id FROM sessions"
_SCOPE_TREE = """
    WITH RECURSIVE tree(id) AS (
        SELECT id FROM sessions WHERE id = ?
        UNION ALL
        SELECT s.id FROM sessions s JOIN tree ON s.parent_id = tree.id
    ) SELECT id FROM tree
"""

_CALLS = """
SELECT t.session_id, t.agent, t.tool, t.arguments, t.output, t.is_error, t.duration_ms,
       t.result_entry_id IS NOT NULL AS finished, a.decision, a.decided_by, t.call_entry_id, t.run_id,
       t.copied_from IS NOT NULL AS copied
FROM tool_calls t
LEFT JOIN approvals a
  ON a.session_id = t.session_id AND a.run_id IS NOT DISTINCT FROM t.run_id AND a.tool_call_id = t.tool_call_id
WHERE t.session_id IN ({scope})
ORDER BY t.call_entry_id
"""

_RUNS = """
SELECT agent, count(*) AS runs,
       coalesce(sum(prompt_tokens), 0) + coalesce(sum(completion_tokens), 0) AS tokens,
       sum(cost_usd) AS cost, count(*) - count(cost_usd) AS unpriced
FROM runs WHERE session_id IN ({scope}) AND copied_from IS NULL GROUP BY agent ORDER BY agent
"""

_APPROVAL_WORDS = {
    "approve": "approved",
    "approve_all": "approved",
    "approved": "approved",
    "deny": "denied",
    "denied": "denied",
    "timed_out": "timeout",
    "timeout": "timeout",
    "pending": "pending",
}

_CSS = (
    "<style>"
    ".chaz-audit{font-family:var(--jp-code-font-family,monospace);font-size:12px}"
    ".chaz-audit .chaz-h{color:var(--jp-ui-font-color2,#666);margin:2px 0}"
    ".chaz-audit .chaz-tot{font-weight:bold;margin:2px 0 4px}"
    ".chaz-audit .chaz-scroll{max-height:480px;overflow:auto;max-width:100%;"
    "border:1px solid var(--jp-border-color2,#e0e0e0)}"
    ".chaz-audit table{border:none;border-collapse:collapse;width:auto;table-layout:auto;margin:0}"
    ".chaz-audit th,.chaz-audit td{padding:2px 6px;text-align:left!important;vertical-align:top;"
    "border:none;border-bottom:1px solid var(--jp-border-color3,#eee);white-space:nowrap;"
    "color:var(--jp-content-font-color1,inherit)}"
    ".chaz-audit .chaz-io{white-space:nowrap}"
    ".chaz-audit thead{border-bottom:1px solid var(--jp-border-color1,#bbb)}"
    ".chaz-audit thead th{position:sticky;top:0;background:var(--jp-layout-color1,#fff)}"
    ".chaz-audit .chaz-err,.chaz-audit .chaz-err td{color:var(--jp-error-color1,#c00)}"
    ".chaz-audit .chaz-wait,.chaz-audit .chaz-wait td{color:var(--jp-warn-color0,#b60)}"
    ".chaz-audit details pre{margin:2px 0 2px 1em;white-space:pre-wrap;max-width:60em;overflow-wrap:anywhere}"
    "</style>"
)




def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= 10_000:
        return f"{ms / 1000:,.1f} s"
    return f"{ms:,.1f} ms"


def fmt_cost(cost: float | None, unpriced: int = 0) -> str:
    """``cost $0.0123``; ``cost n/a`` where nothing is priced (``cost`` None, or only unpriced
    runs besides free ones), so runs of a model without a price never read as free."""
    runs = f"{unpriced} run{'s' if unpriced != 1 else ''} without a price"
    if cost is None or (unpriced and not cost):
        return "cost n/a" + (f" ({runs})" if unpriced else "")
    text = f"cost ${cost:,.4f}"
    if unpriced:
        text += f" (+{runs})"
    return text


@dataclass
class CallRow:
    """One tool call as the table shows it."""

    n: int
    session_id: int
    agent: str
    tool: str
    arguments: str
    output: str | None
    is_error: bool
    duration_ms: float | None
    finished: bool
    approval: str  # "" (none) | pending | approved | denied | timeout
    decided_by: str | None
    #: a fork's copy of its source's call (it did not run here; not in the totals)
    copied: bool = False

    @property
    def status(self) -> str:
        if not self.finished:
            return "waiting" if self.approval == "pending" else "running"
        return "error" if self.is_error else "ok"

    def status_text(self) -> str:
        """The status as the table shows it: ``ok (copy)`` for a fork's copy."""
        return f"{self.status} (copy)" if self.copied else self.status

    @property
    def needs_approval(self) -> bool:
        return bool(self.approval)

    def approval_text(self) -> str:
        if not self.approval:
            return "-"
        if self.decided_by and self.approval in ("approved", "denied"):
            return f"{self.approval} by {self.decided_by}"
        return self.approval


@dataclass
class Totals:
    calls: int = 0
    errors: int = 0
    tool_ms: float = 0.0
    tokens: int = 0
    cost: float | None = None
    unpriced: int = 0
    #: calls shown that a fork copied from its source (not counted above)
    copied: int = 0

    def text(self) -> str:
        text = (
            f"{self.calls:,} call{'s' if self.calls != 1 else ''} · {self.errors:,} "
            f"error{'s' if self.errors != 1 else ''} · tool time {fmt_ms(self.tool_ms)} · "
            f"{self.tokens:,} tokens · {fmt_cost(self.cost, self.unpriced)}"
        )
        if self.copied:
            text += f" · {self.copied:,} call{'s' if self.copied != 1 else ''} copied by a fork, not counted"
        return text


def _json_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            return json.dumps(json.loads(value), ensure_ascii=False)
        except ValueError:
            return value
    return json.dumps(value, ensure_ascii=False, default=str)


class AuditView(LiveView):
    """Tool calls of a store (or of one session and its children), live, with filters.

    ``store``: a SessionStore. ``session``: a session id, or None for every session.
    ``follow``: subscribe to the store's writes (until ``close()``/``finish()``).
    """

    def __init__(
        self,
        store: Any,
        session: int | None = None,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        interval: float = 0.25,
        static_interval: float = 1.0,
        follow: bool = True,
        widget: bool = True,
        max_rows: int = 500,
    ) -> None:
        self.store = store
        self.session = session
        self.interval = interval
        self.static_interval = static_interval
        self.max_rows = max_rows
        self.display_id = f"chaz-audit-{uuid.uuid4().hex[:12]}"
        self.rows: list[CallRow] = []
        self.run_totals: dict[str, tuple[int, float | None, int]] = {}  # agent -> tokens, cost, unpriced
        self.agent = ALL
        self.tool = ALL
        self.errors_only = False
        self.approval_only = False
        self.refreshes = 0
        self._loop = loop
        self._loop_thread: int | None = None
        self._lock = threading.Lock()
        self._armed = False
        self._timer: Any = None
        self._static_timer: Any = None
        self._dirty = False
        self._displayed = False
        self._last_static = 0.0
        self._closed = False
        self._unsubscribe: Callable[[], None] | None = None
        self._box: Any = None
        self.refresh()
        if follow:
            self._subscribe()
        if widget:
            self._build_widget()

    # ------------------------------------------------------------ data
    def _scope(self) -> tuple[str, list[Any]]:
        if self.session is None:
            return _SCOPE_ALL, []
        return _SCOPE_TREE, [int(self.session)]

    def load(self) -> None:
        """Re-read the rows and the run totals from the store."""
        scope, params = self._scope()
        calls = self.store.read(_CALLS.format(scope=scope), params)
        rows = []
        for i, r in enumerate(calls, 1):
            (session_id, agent, tool, arguments, output, is_error, duration_ms, finished, decision,
             decided_by, _entry_id, _run_id, copied) = r
            rows.append(
                CallRow(
                    n=i,
                    session_id=session_id,
                    agent=agent or "?",
                    tool=tool or "?",
                    arguments=_json_text(arguments),
                    output=output,
                    is_error=bool(is_error),
                    duration_ms=duration_ms,
                    finished=bool(finished),
                    approval=_APPROVAL_WORDS.get(decision, decision or "") if decision else "",
                    decided_by=decided_by,
                    copied=bool(copied),
                )
            )
        self.rows = rows
        self.run_totals = {
            agent: (int(tokens or 0), cost, int(unpriced or 0))
            for agent, _runs, tokens, cost, unpriced in self.store.read(_RUNS.format(scope=scope), params)
        }

    def agents(self) -> list[str]:
        return sorted({r.agent for r in self.rows} | set(self.run_totals))

    def tools(self) -> list[str]:
        return sorted({r.tool for r in self.rows})

    def set_filter(
        self,
        *,
        agent: str | None = None,
        tool: str | None = None,
        errors_only: bool | None = None,
        approval_only: bool | None = None,
    ) -> None:
        """Change the filters (None leaves one as it is) and re-render."""
        if agent is not None:
            self.agent = agent or ALL
        if tool is not None:
            self.tool = tool or ALL
        if errors_only is not None:
            self.errors_only = bool(errors_only)
        if approval_only is not None:
            self.approval_only = bool(approval_only)
        self._sync_filter_widgets()
        self._render()

    def visible_rows(self) -> list[CallRow]:
        out = []
        for r in self.rows:
            if self.agent != ALL and r.agent != self.agent:
                continue
            if self.tool != ALL and r.tool != self.tool:
                continue
            if self.errors_only and not r.is_error:
                continue
            if self.approval_only and not r.needs_approval:
                continue
            out.append(r)
        return out

    def totals(self) -> Totals:
        """Calls, errors and tool time of the rows shown; tokens and cost of their agents' runs
        (a fork's copies of its source's calls and runs left out, their calls counted apart)."""
        shown = self.visible_rows()
        rows = [r for r in shown if not r.copied]
        t = Totals(calls=len(rows), errors=sum(r.is_error for r in rows),
                   tool_ms=sum(r.duration_ms or 0.0 for r in rows), copied=len(shown) - len(rows))
        costs = [
            v for a, v in self.run_totals.items() if self.agent == ALL or a == self.agent
        ]
        t.tokens = sum(v[0] for v in costs)
        known = [v[1] for v in costs if v[1] is not None]
        t.cost = sum(known) if known else (None if costs else 0.0)
        t.unpriced = sum(v[2] for v in costs)
        return t

    def header(self) -> str:
        where = "all sessions" if self.session is None else f"session {self.session} and the sessions it spawned"
        filters = []
        if self.agent != ALL:
            filters.append(f"agent {self.agent}")
        if self.tool != ALL:
            filters.append(f"tool {self.tool}")
        if self.errors_only:
            filters.append("errors only")
        if self.approval_only:
            filters.append("needs approval only")
        text = f"tool calls · {where}"
        if filters:
            text += " · " + ", ".join(filters)
        return text

    # ------------------------------------------------------------ static forms
    def text(self) -> str:
        rows = self.visible_rows()
        lines = [self.header(), self.totals().text()]
        if not rows:
            lines.append("(no tool calls)" if not self.rows else "(no tool call matches the filters)")
            return "\n".join(lines)
        shown = rows[: self.max_rows]
        # the time goes last: its width varies from run to run, the other columns' does not
        grid = [("#", "session", "agent", "tool", "status", "approval", "arguments → output", "time")]
        for r in shown:
            io = f"{_short(r.arguments, TEXT_CHARS)} → {_short(r.output or '', TEXT_CHARS)}"
            grid.append((str(r.n), str(r.session_id), r.agent, r.tool, r.status_text(), r.approval_text(), io,
                         fmt_ms(r.duration_ms)))
        widths = [max(len(g[i]) for g in grid) for i in range(len(grid[0]) - 1)]
        for g in grid:
            lines.append("  ".join([c.ljust(w) for c, w in zip(g[:-1], widths, strict=True)] + [g[-1]]).rstrip())
        if len(rows) > len(shown):
            lines.append(f"(showing {len(shown):,} of {len(rows):,} calls)")
        return "\n".join(lines)

    def _rows_html(self) -> str:
        rows = self.visible_rows()
        if not rows:
            msg = "no tool calls" if not self.rows else "no tool call matches the filters"
            return f"<div class='chaz-h'>({_esc(msg)})</div>"
        shown = rows[: self.max_rows]
        out = [
            "<div class='chaz-scroll'><table><thead><tr><th>#</th><th>session</th><th>agent</th>"
            "<th>tool</th><th>status</th><th>approval</th><th>time</th><th class='chaz-io'>arguments → output</th>"
            "</tr></thead><tbody>"
        ]
        for r in shown:
            cls = " class='chaz-err'" if r.is_error else (" class='chaz-wait'" if not r.finished else "")
            pending = "(waiting for a decision)" if r.status == "waiting" else "(running)"
            out_text = r.output if r.output is not None else pending
            details = (
                f"<details><summary>{_esc(_short(r.arguments, SUMMARY_CHARS))} → "
                f"{_esc(_short(out_text, SUMMARY_CHARS))}</summary>"
                f"arguments:<pre>{_esc(r.arguments[:DETAIL_CHARS])}</pre>"
                f"output:<pre>{_esc(out_text[:DETAIL_CHARS])}</pre></details>"
            )
            out.append(
                f"<tr{cls}><td>{r.n}</td><td>{r.session_id}</td><td>{_esc(r.agent)}</td>"
                f"<td>{_esc(r.tool)}</td><td>{_esc(r.status_text())}</td><td>{_esc(r.approval_text())}</td>"
                f"<td>{_esc(fmt_ms(r.duration_ms))}</td><td class='chaz-io'>{details}</td></tr>"
            )
        out.append("</tbody></table></div>")
        if len(rows) > len(shown):
            out.append(f"<div class='chaz-h'>showing {len(shown):,} of {len(rows):,} calls</div>")
        return "".join(out)

    def html(self) -> str:
        return (
            f"{_CSS}<div class='chaz-audit'><div class='chaz-h'>{_esc(self.header())}</div>"
            f"<div class='chaz-tot'>{_esc(self.totals().text())}</div>{self._rows_html()}</div>"
        )

    def update_display(self) -> None:
        self._update_static(widget=self._box is not None)
        self._dirty = False

    # ------------------------------------------------------------ live updates
    def _on_write(self, entry: Any) -> None:
        """on_write callback: O(1); arm one refresh ``interval`` from now."""
        if self._closed:
            return
        t = getattr(entry.entry_type, "value", entry.entry_type)
        if t not in RELEVANT:
            return
        self._request_refresh(self.interval)

    def _tick(self) -> None:
        with self._lock:
            self._armed = False
            self._timer = None
        if self._closed:
            return
        if self.store.closed:
            self.finish()
            return
        try:
            self.refresh()
        except Exception:  # never let a rendering problem escape into the kernel loop
            log.exception("audit view refresh failed")

    def refresh(self) -> None:
        """Re-read the store, re-render the widget, and bring the static output up to date."""
        before = (len(self.rows), [r.status for r in self.rows], self.run_totals)
        self.load()
        self.refreshes += 1
        changed = before != (len(self.rows), [r.status for r in self.rows], self.run_totals)
        if self._box is not None:
            self._sync_options()
            self._render()
        if changed:
            self._dirty = True
        self._maybe_update_static()
        self._updated()

    def _maybe_update_static(self) -> None:
        if not (self._displayed and self._dirty):
            return
        wait = self.static_interval - (time.monotonic() - self._last_static)
        if wait <= 0:
            self.update_display()
        elif self._static_timer is None and self._loop is not None and not self._loop.is_closed():
            def later() -> None:
                self._static_timer = None
                if not self._closed:
                    self._maybe_update_static()

            self._static_timer = self._loop.call_later(wait, later)

    # ------------------------------------------------------------ finish (base.py)
    def _timers(self) -> tuple[str, ...]:
        return ("_timer", "_static_timer")

    def _begin_finish(self) -> bool:
        return self._box is not None  # a snapshot has no widget to replace

    def _final_static(self) -> None:
        if self._displayed and not self._closed:
            try:
                self._update_static(widget=False)
            except Exception:  # the kernel may be going away
                log.exception("audit view: final static output failed")

    def close(self) -> None:
        """Unsubscribe and close the widgets."""
        self._closed = True
        self.finish()
        self._close_widgets()

    def _close_widgets(self) -> None:
        box, self._box = self._box, None
        if box is not None:
            for w in [*self._widgets, box]:
                close_widget(w)  # with its layout and style; never raises

    # ------------------------------------------------------------ widget
    def _build_widget(self) -> None:
        try:
            import ipywidgets as w
        except ImportError:  # pragma: no cover - ipywidgets is a dependency
            return
        self._w = w
        self._agent_dd = w.Dropdown(description="agent", options=[ALL, *self.agents()], value=ALL,
                                    layout=w.Layout(width="220px"))
        self._tool_dd = w.Dropdown(description="tool", options=[ALL, *self.tools()], value=ALL,
                                   layout=w.Layout(width="220px"))
        self._errors_cb = w.Checkbox(description="errors only", value=False, indent=False,
                                     layout=w.Layout(width="120px"))
        self._approval_cb = w.Checkbox(description="needs approval only", value=False, indent=False,
                                       layout=w.Layout(width="180px"))
        self._header_w = w.HTML()
        self._totals_w = w.HTML()
        self._table_w = w.HTML()
        filters = w.HBox([self._agent_dd, self._tool_dd, self._errors_cb, self._approval_cb])
        self._widgets = [self._agent_dd, self._tool_dd, self._errors_cb, self._approval_cb,
                         self._header_w, self._totals_w, self._table_w, filters]
        self._box = w.VBox([self._header_w, filters, self._totals_w, self._table_w])
        self._box.add_class("chaz-audit-view")
        self._syncing = False
        self._agent_dd.observe(lambda ch: self._from_widgets(), names="value")
        self._tool_dd.observe(lambda ch: self._from_widgets(), names="value")
        self._errors_cb.observe(lambda ch: self._from_widgets(), names="value")
        self._approval_cb.observe(lambda ch: self._from_widgets(), names="value")
        self._render()
        comm = getattr(self._box, "comm", None)
        if comm is not None and hasattr(comm, "on_close"):
            # a frontend without comm close events: the view closes on finish() instead
            with contextlib.suppress(Exception):
                comm.on_close(lambda _msg: self.close())

    @property
    def widget(self) -> Any:
        return self._box

    def _from_widgets(self) -> None:
        if self._box is None or self._syncing:
            return
        self.agent = self._agent_dd.value or ALL
        self.tool = self._tool_dd.value or ALL
        self.errors_only = bool(self._errors_cb.value)
        self.approval_only = bool(self._approval_cb.value)
        self._render()

    def _sync_options(self) -> None:
        self._syncing = True
        try:
            for dd, names, current in ((self._agent_dd, self.agents(), self.agent),
                                       (self._tool_dd, self.tools(), self.tool)):
                options = [ALL, *names]
                if current not in options:
                    options.append(current)  # a filter the user set stays selectable
                if list(dd.options) != options:
                    dd.options = options
                    dd.value = current
        finally:
            self._syncing = False

    def _sync_filter_widgets(self) -> None:
        if self._box is None:
            return
        self._sync_options()
        self._syncing = True
        try:
            self._agent_dd.value = self.agent
            self._tool_dd.value = self.tool
            self._errors_cb.value = self.errors_only
            self._approval_cb.value = self.approval_only
        finally:
            self._syncing = False

    def _render(self) -> None:
        if self._box is None:
            return
        header = f"{_CSS}<div class='chaz-audit'><div class='chaz-h'>{_esc(self.header())}</div></div>"
        totals = f"<div class='chaz-audit'><div class='chaz-tot'>{_esc(self.totals().text())}</div></div>"
        table = f"<div class='chaz-audit'>{self._rows_html()}</div>"
        for wid, value in ((self._header_w, header), (self._totals_w, totals), (self._table_w, table)):
            if wid.value != value:
                wid.value = value
