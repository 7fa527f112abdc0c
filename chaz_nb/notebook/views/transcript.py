"""The transcript of a session, pure: entries -> rows -> text and HTML (no ipywidgets).

``Transcript`` folds a stream of entries into rows (``Row``: a ToolCall with its ToolResult and
the approval that gated it; an Ack as the run's status line), and renders them as plain text
(saved notebooks, terminals, nbval) and as HTML in the same frame and header as the JupyterLab
renderer draws (``labextension/src/transcript.ts``), so a live view and a finished one look
alike. ``session.py`` puts these rows into ipywidgets; nothing here imports IPython.

Every string that comes from an agent, a tool or a user passes through ``html.escape``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable

from ...core.controls import name_hidden
from .code import code_html, code_of
from .display import esc as _esc
from .look import (  # noqa: F401 - re-exported with the transcript
    SUMMARY_CHARS,
    TRANSCRIPT_CSS,
    args_preview,
    as_json_text,
    count_label,
    entry_head_html,
    fmt_duration,
    header_html,
    seq_html,
    seq_label,
    seq_of,
    time_of,
    tool_timing,
)

#: characters of a tool's output shown in the unfolded row (the log has all of it)
DETAIL_CHARS = 4000


def entry_type(entry: Any) -> str:
    """The type name of an entry (``Message``, ``ToolCall``…), from an Entry or its JSON."""
    t = getattr(entry, "entry_type", None)
    if t is None:
        t = getattr(entry, "type", "")
    return str(getattr(t, "value", t))


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _arguments_html(arguments: Any, text: str) -> str:
    """A call's arguments in the unfolded row: the code of a code call (``kernel__run``) as a
    numbered code block, else the JSON text."""
    code = code_of(arguments)
    if code is not None:
        return f"<div class='chaz-label'>code</div>{code_html(code)}"
    text = name_hidden(text or as_json_text(arguments))
    pre = f"<pre class='chaz-pre chaz-tool-arguments'>{_esc(text[:DETAIL_CHARS])}</pre>"
    return f"<div class='chaz-label'>arguments</div>{pre}"


def attachment_names(entry: Any) -> list[str]:
    """The names of a Message's attachments (``payload.attachments``: ``[{name, ...}]``)."""
    items = (getattr(entry, "payload", None) or {}).get("attachments")
    if not isinstance(items, list):
        return []
    return [str(a.get("name")) for a in items if isinstance(a, dict) and a.get("name") is not None]


def _chips_html(entry: Any) -> str:
    """A Message's attachments as chips (name, and type/shape where given), escaped."""
    items = (getattr(entry, "payload", None) or {}).get("attachments")
    if not isinstance(items, list):
        return ""
    chips = []
    for a in items:
        if not isinstance(a, dict) or a.get("name") is None:
            continue
        detail = " ".join(str(a[k]) for k in ("type", "shape") if a.get(k) not in (None, ""))
        title = f" title='{_esc(detail)}'" if detail else ""
        chips.append(f"<span class='chaz-chip'{title}>📎 {_esc(a['name'])}</span>")
    return f"<div class='chaz-chips'>{''.join(chips)}</div>" if chips else ""


# ----------------------------------------------------------------- rows
@dataclass
class Row:
    """One line of the transcript: an entry, or a ToolCall folded with what belongs to it.

    A tool row carries its ToolResult and, for a gated call, its ApprovalRequest and
    ApprovalDecision: the call shows once, in entry order, saying "waiting for approval"
    while parked and who decided once decided; the approval card (``request`` still open)
    sits right under it.
    """

    # "message" | "directive" | "tool" | "error" | "summary" | "approval" | "answers" | "closed" | "other"
    kind: str
    entry: Any
    result: Any = None  # the ToolResult of a tool row
    request: Any = None  # the ApprovalRequest that gated the call (or of an "approval" row)
    decision: Any = None  # the ApprovalDecision of that request
    agent: str | None = None  # the session's agent (its rows are marked, another's calls named)

    @property
    def request_id(self) -> str | None:
        return (self.request.payload or {}).get("request_id") if self.request is not None else None

    @property
    def open_request(self) -> bool:
        """An approval is asked for and not decided yet (the card shows the buttons/hint)."""
        return self.request is not None and self.decision is None

    def _denied(self) -> bool:
        return self.decision is not None and (self.decision.payload or {}).get("decision") in ("deny", "timed_out")

    def _ran_arguments(self) -> Any:
        """The arguments the tool ran with: a person's edit, when they approved one (the
        ToolResult's), else the model's (the ToolCall's)."""
        rp = (self.result.payload or {}) if self.result is not None else {}
        if rp.get("edited") and "arguments" in rp:
            return rp["arguments"]
        return (self.entry.payload or {}).get("arguments", "")

    def _call(self, args: str) -> str:
        """``(arguments)``; nothing for a row whose call an earlier cell's view shows."""
        # hidden characters named, as the approval card shows them (a reordered path misleads here too)
        return f"({_short(name_hidden(args), SUMMARY_CHARS)})" if entry_type(self.entry) == "ToolCall" else ""

    def _tool_name(self) -> str:
        for e in (self.entry, self.result):
            name = e.tool_name or (e.payload or {}).get("tool_name") if e is not None else None
            if name:
                return str(name)
        return "?"

    def _approval_note(self) -> str:
        replayed = (self.result.payload or {}).get("replayed_from") if self.result is not None else None
        if replayed is not None:  # a branch's call answered from its source's log (server/replay.py)
            return f"replayed from entry {replayed}"
        if self.request is None:
            if self.decision is not None:
                from .approval import describe_decision

                return describe_decision(self.decision.payload or {}, self.decision.sender)
            if self.entry is self.result and self.result is not None:
                p = self.result.payload or {}  # the result says how its call was decided
                if p.get("approval") and p.get("decided_by"):
                    return f"{p['approval']} by {p['decided_by']}"
            return ""
        if self.decision is None:
            return "waiting for approval"
        from .approval import describe_decision

        return describe_decision(self.decision.payload or {}, self.decision.sender)

    def card_info(self) -> dict[str, Any]:
        from .approval import request_info

        return request_info(self.request)

    @property
    def seq(self) -> int | None:
        """The seq the row starts at (its call's, its request's, or its entry's)."""
        return seq_of(self.entry)

    # -- text
    def text(self, card: bool = True) -> str:
        """The row as text, after its seq (``#12 user: ...``); '' for nothing to show."""
        line = self._text(card)
        return seq_label(self.seq) + line if line else line

    def _text(self, card: bool) -> str:
        e = self.entry
        if self.kind == "tool":
            args = as_json_text(self._ran_arguments())
            line = f"  ⚙ {self._tool_name()}{self._call(args)}"
            note = self._approval_note()
            if note:
                line += f" · {note}"
            if self.result is None:
                line += "" if (self.open_request or self._denied()) else " …"
            else:
                out = (self.result.payload or {}).get("output", self.result.content)
                mark = " ✗" if (self.result.payload or {}).get("is_error") else ""
                line = f"{line} →{mark} {_short(out, SUMMARY_CHARS)}"
            if card and self.open_request:
                line += "\n" + self._card_text()
            return line
        if self.kind == "error":
            return f"✗ {e.sender}: {e.content}"
        if self.kind == "directive":
            return f"{e.sender} ⇒ directive: {e.content}"
        if self.kind == "summary":
            return f"— summary: {_short(e.content, 200)}"
        if self.kind == "message":
            names = attachment_names(e)
            return f"{e.sender}: {e.content}" + (f"\n  📎 {', '.join(names)}" if names else "")
        if self.kind == "answers":
            return f"  ↳ {e.sender} {_answers_phrase(e)}"
        if self.kind == "closed":
            return _closed_text(e)
        if self.kind == "approval":
            if self.request is not None:
                if self.open_request:
                    return self._card_text() if card else ""
                return "  " + _approval_line(self.request) + f" · {self._approval_note()}"
            return "  " + _approval_line(e)
        return f"[{entry_type(e)}] {e.sender}: {e.content}"

    def _card_text(self) -> str:
        from .approval import card_text

        return "\n".join("    " + line for line in card_text(self.card_info(), None).splitlines())

    def _card_html(self) -> str:
        from .approval import card_html

        return f"<div class='chaz-card-in'>{card_html(self.card_info(), None)}</div>"

    # -- html (the lab renderer's rows: labextension/src/transcript.ts)
    def _state(self) -> str:
        """``ok · 14 ms``, ``error · ran 6.9 ms after 9.8 s waiting for approval``, ``running…``."""
        if self.result is None:
            return "" if (self.open_request or self._denied()) else "running…"
        rp = self.result.payload or {}
        state = "error" if rp.get("is_error") else "ok"
        timing = tool_timing(rp)
        return f"{state} · {timing}" if timing else state

    def html(self, card: bool = True) -> str:
        e = self.entry
        if self.kind == "tool":
            return self._tool_html(card)
        sender = e.sender
        if self.kind in ("message", "directive", "error", "other"):
            t = entry_type(e) or "Entry"
            cls = f"chaz-entry chaz-type-{_esc(t.lower())}"
            if self.agent and sender == self.agent:
                cls += " chaz-from-agent"
            chips = _chips_html(e) if self.kind == "message" else ""
            body = f"<div class='chaz-content'>{_esc(e.content)}</div>" if e.content else ""
            head = entry_head_html(t, sender, e.created_at, self.seq)
            return f"<div class='{cls}' data-type='{_esc(t)}'>{head}{body}{chips}</div>"
        if self.kind == "summary":
            return (
                "<div class='chaz-entry chaz-summary' data-type='Summary'><div class='chaz-summary-line'>"
                f"<span class='chaz-summary-label'>{seq_html(self.seq)} Summary (context starts here)</span></div>"
                "<details class='chaz-summary-details'><summary>summary text</summary>"
                f"<div class='chaz-content'>{_esc(e.content)}</div></details></div>"
            )
        if self.kind == "answers":
            return (
                f"<div class='chaz-entry chaz-type-ack' data-type='Ack'>"
                f"{entry_head_html('Ack', sender, e.created_at, self.seq)}"
                f"<div class='chaz-answers'>↳ {_esc(_answers_phrase(e))}</div></div>"
            )
        if self.kind == "closed":
            p = e.payload or {}
            kept = p.get("partial_text")
            extra = f"<div class='chaz-partial-kept'>it had written: {_esc(kept)}</div>" if kept else ""
            stopped = " chaz-stopped" if p.get("status") == "cancelled" else ""
            return (
                f"<div class='chaz-entry chaz-type-ack chaz-closed{stopped}' data-type='Ack'>"
                f"{entry_head_html('Ack', sender, e.created_at, self.seq)}"
                f"<div class='chaz-content'>{_esc(e.content)}</div>{extra}</div>"
            )
        if self.kind == "approval":
            if self.open_request:
                return self._card_html() if card else ""
            source = self.request if self.request is not None else e
            decision = self.decision
            if decision is None and entry_type(e) == "ApprovalDecision":
                decision = e
            outcome = str((decision.payload or {}).get("decision") or "decided") if decision is not None else "pending"
            line = _approval_line(source)
            if self.request is not None:
                line += f" · {self._approval_note()}"
            cls = "chaz-entry chaz-approval chaz-approval-" + "".join(c for c in outcome if c.isalpha() or c == "_")
            return (
                f"<div class='{cls}' data-type='{_esc(entry_type(source))}'>"
                f"{entry_head_html('Approval', sender, e.created_at, seq_of(source))}"
                f"<div class='chaz-content'>{_esc(line)}</div></div>"
            )
        return f"<div class='chaz-entry'>{_esc(e.content)}</div>"  # pragma: no cover - every kind is above

    def _tool_html(self, card: bool) -> str:
        e = self.entry
        payload = e.payload or {}
        args = as_json_text(payload.get("arguments", ""))
        cls = "chaz-entry chaz-tool"
        rp = (self.result.payload or {}) if self.result is not None else {}
        if rp.get("is_error"):
            cls += " chaz-tool-error"
        if self.result is None:
            cls += " chaz-tool-pending"
        parts = [
            seq_html(self.seq),
            "<span class='chaz-badge chaz-badge-tool'>Tool</span>",
            f"<span class='chaz-tool-name'>{_esc(self._tool_name())}</span>",
        ]
        if entry_type(e) == "ToolCall":
            preview = args_preview(self._ran_arguments())
            parts.append(f"<span class='chaz-tool-args'>({_esc(preview)})</span>")
        note = self._approval_note()
        if note:
            if self.open_request:
                ncls = "chaz-tool-approval chaz-tool-waiting"
            else:
                d = str(((self.decision.payload or {}) if self.decision is not None else {}).get("decision") or "")
                ncls = "chaz-tool-approval" + (f" chaz-approval-{_esc(d)}" if d else "")
            parts.append(f"<span class='{ncls}'>{_esc(note)}</span>")
        state = self._state()
        if state:
            parts.append(f"<span class='chaz-tool-state'>{_esc(state)}</span>")
        if self.result is not None:
            out = str(rp.get("output", self.result.content))
            parts.append(f"<span class='chaz-tool-out'>→ {_esc(_short(out, SUMMARY_CHARS))}</span>")
        who = e.sender
        if who and self.agent and who != self.agent:  # a call by another agent than the session's: say whose
            parts.append(f"<span class='chaz-tool-by'>called by {_esc(who)}</span>")
        body = ""
        if rp.get("edited"):  # approved with edits: what the tool ran with first, then the model's
            body += "<div class='chaz-label'>ran as edited by the approver</div>" + _arguments_html(
                rp.get("arguments"), "")
            if entry_type(e) == "ToolCall":
                body += "<div class='chaz-label'>proposed by the model</div>" + _arguments_html(
                    payload.get("arguments", ""), args)
        elif entry_type(e) == "ToolCall":
            body += _arguments_html(payload.get("arguments", ""), args)
        if self.result is not None:
            out = str(rp.get("output", self.result.content))
            label = "error" if rp.get("is_error") else "output"
            body += (
                f"<div class='chaz-label'>{label}</div>"
                f"<pre class='chaz-pre chaz-tool-output'>{_esc(out[:DETAIL_CHARS])}</pre>"
            )
        row = (
            f"<details class='{cls}' data-type='ToolCall'><summary class='chaz-tool-summary'>{''.join(parts)}"
            f"</summary><div class='chaz-tool-body'>{body}</div></details>"
        )
        if card and self.open_request:
            row += self._card_html()
        return row


def closes_run(ack: Any) -> bool:
    """An Ack that ends its run (payload ``status``: ``cancelled`` by a stop, or ``silent``)."""
    return (getattr(ack, "payload", None) or {}).get("status") in ("cancelled", "silent")


def _closed_text(ack: Any) -> str:
    """``■ ops was stopped by user · it had written: …`` (the text streamed before the stop)."""
    p = ack.payload or {}
    mark = "■" if p.get("status") == "cancelled" else "—"
    partial = p.get("partial_text")
    return f"{mark} {ack.content}" + (f" · it had written: {partial}" if partial else "")


def _answers_phrase(ack: Any) -> str:
    n = (ack.payload or {}).get("answers_count")
    return f"answers {n} messages together"


def answers_together(ack: Any) -> bool:
    """An Ack whose run answers several Messages/Directives at once (payload ``answers_count``)."""
    n = (getattr(ack, "payload", None) or {}).get("answers_count")
    return isinstance(n, int) and not isinstance(n, bool) and n > 1


def _approval_line(e: Any) -> str:
    """One line for an ApprovalRequest (what is asked) or an ApprovalDecision (who decided what)."""
    p = e.payload or {}
    if entry_type(e) == "ApprovalRequest":
        args = as_json_text(p.get("arguments_display", {}))
        return (
            f"⚠ {p.get('agent', e.sender)} asks to run {p.get('tool_name', e.tool_name)}"
            f"({_short(args, SUMMARY_CHARS)}) · risk {p.get('risk_level', '?')}"
        )
    from .approval import describe_decision

    return f"{describe_decision(p, e.sender)} ({p.get('tool_name') or e.tool_name or 'tool call'})"


_KINDS = {
    "Message": "message",
    "Directive": "directive",
    "Error": "error",
    "Summary": "summary",
    "ApprovalRequest": "approval",
    "ApprovalDecision": "approval",
}


class Transcript:
    """Folds a stream of entries into rows, plus the Ack status line (pure, no widgets)."""

    def __init__(self, agent: str | None = None) -> None:
        #: the session's agent: its rows are marked as the agent's (``chaz-from-agent``)
        self.agent = agent
        self.rows: list[Row] = []
        self.entries: list[Any] = []
        self._tool_rows: dict[str, int] = {}
        #: request_id -> index of the row that shows the request (a tool row, or an approval row)
        self.request_rows: dict[str, int] = {}
        self.status: str | None = None  # "assistant is working… step 2" while a run goes on
        self._steps = 0
        self._working: str | None = None
        self._last_type: str | None = None
        #: the reply being written (not an entry): ``(run_id, sender, text so far)``
        self.partial: tuple[int, str, str] | None = None

    def _row(self, kind: str, entry: Any, **kw: Any) -> Row:
        return Row(kind, entry, agent=self.agent, **kw)

    def add(self, entry: Any) -> list[int]:
        """Add one entry; return the indexes of the rows it created or changed."""
        self.entries.append(entry)
        t = entry_type(entry)
        last, self._last_type = self._last_type, t
        if t == "Ack" and closes_run(entry):
            # a run that ends without a reply (stopped, or a silent turn): the status line goes
            self.status = self._working = None
            if self.partial is not None and entry.sender == self.partial[1]:
                self.partial = None  # a stopped run's text so far is in its Ack (payload.partial_text)
            self.rows.append(self._row("closed", entry))
            return [len(self.rows) - 1]
        if t == "Ack" and ((entry.payload or {}).get("compaction") or (entry.payload or {}).get("ledger")):
            return []  # a record of what a compaction or the egress gate sends (data_egress): no run
        if t == "Ack":
            # Shown as a status line, replaced by the reply (or the error) when it comes.
            self._working = entry.sender
            self._steps = 1
            self.status = f"{entry.sender} is working… step 1"
            if answers_together(entry):
                self.rows.append(self._row("answers", entry))
                return [len(self.rows) - 1]
            return []
        if t == "ToolCall":
            if self.status and last not in ("ToolCall", "ApprovalRequest", "ApprovalDecision"):
                self._steps += 1  # a batch of tool calls: the model takes another step after it
                self.status = f"{self._working} is working… step {self._steps}"
            self.rows.append(self._row("tool", entry))
            if entry.tool_call_id:
                self._tool_rows[entry.tool_call_id] = len(self.rows) - 1
            return [len(self.rows) - 1]
        if t == "ToolResult":
            idx = self._tool_rows.pop(entry.tool_call_id, None) if entry.tool_call_id else None
            if idx is not None:
                self.rows[idx].result = entry
                return [idx]
            self.rows.append(self._row("tool", entry, result=entry))  # a result without its call
            return [len(self.rows) - 1]
        if t == "ApprovalRequest":
            rid = (entry.payload or {}).get("request_id")
            idx = self._tool_rows.get(entry.tool_call_id) if entry.tool_call_id else None
            if idx is not None and self.rows[idx].request is None and self.rows[idx].result is None:
                self.rows[idx].request = entry  # the gated call: one row, the card under it
            else:  # a request whose call this view did not see
                self.rows.append(self._row("approval", entry, request=entry))
                idx = len(self.rows) - 1
            if rid:
                self.request_rows[rid] = idx
            return [idx]
        if t == "ApprovalDecision":
            p = entry.payload or {}
            request_id = p.get("request_id")
            idx = self.request_rows.get(request_id) if request_id else None
            row = self.rows[idx] if idx is not None else None
            asker = (row.request.payload or {}).get("agent", row.request.sender) if row is not None else None
            if row is None and entry.tool_call_id and entry.tool_call_id not in self._tool_rows:
                # the decision on a call an earlier cell's view shows: this row gets its result
                self.rows.append(self._row("tool", entry, decision=entry))
                idx = len(self.rows) - 1
                self._tool_rows[entry.tool_call_id] = idx
                if p.get("request_id"):
                    self.request_rows[p["request_id"]] = idx
                return [idx]
            if row is not None and idx is not None and entry.sender != asker:  # an agent cannot decide its own call
                # the first decision is the effective one, except that a timeout always wins
                if row.decision is None or p.get("decision") == "timed_out":
                    row.decision = entry
                    return [idx]
                return []
        kind = _KINDS.get(t, "other")
        if self.partial is not None and t in ("Message", "Error") and entry.sender == self.partial[1]:
            self.partial = None  # the entry replaces the text streamed so far
        # an Error ends the run, except a note written while it goes on (a failed MCP server)
        ends = (t == "Error" and not (entry.payload or {}).get("note")) or (
            t == "Message" and entry.sender == self._working
        )
        if self.status and ends:
            self.status = None
            self._working = None
        self.rows.append(self._row(kind, entry))
        return [len(self.rows) - 1]

    @property
    def working(self) -> str | None:
        """The agent whose run is going on (from its Ack), if one is."""
        return self._working

    def open_requests(self) -> list[Row]:
        return [r for r in self.rows if r.open_request]

    def partial_text(self) -> str:
        return f"{self.partial[1]}: {self.partial[2]} …" if self.partial else ""

    def partial_html(self) -> str:
        if not self.partial:
            return ""
        _, sender, text = self.partial
        return (
            f"<div class='chaz-entry chaz-partial chaz-from-agent'><span class='chaz-sender'>{_esc(sender)}"
            f"</span> <span class='chaz-content'>{_esc(text)}</span><span class='chaz-writing'>writing…</span></div>"
        )

    def status_html(self, status: str | None) -> str:
        """The run's progress line (``assistant is working… step 2``) under the rows."""
        return f"<div class='chaz-status-line'>{_esc(status)}</div>" if status else ""

    def text(self, header: str = "", footer: str = "", earlier: str = "") -> str:
        lines = [earlier] if earlier else []
        lines += [header] if header else []
        lines += [t for t in (r.text() for r in self.rows) if t]
        if self.partial:
            lines.append(self.partial_text())
        if self.status:
            lines.append(f"… {self.status}")
        if footer:
            lines.append(footer)
        return "\n".join(lines)

    def html(self, header: str = "", footer: str = "", earlier: str = "", *, head: str | None = None) -> str:
        """The whole transcript in the renderer's frame: ``head`` (``header_html``) or a plain
        ``header`` line, the rows, the streamed text, the status line, the footer."""
        parts = [TRANSCRIPT_CSS, "<div class='chaz-transcript chaz-s'>"]
        if head is not None:
            parts.append(head)
        elif header:
            parts.append(header_html([("chaz-title", header)]))
        if earlier:
            parts.append(f"<div class='chaz-earlier'>{_esc(earlier)}</div>")
        parts.append("<div class='chaz-entries'>")
        parts += [r.html() for r in self.rows]
        parts.append(self.partial_html())
        parts.append(self.status_html(self.status))
        parts.append("</div>")
        if footer:
            parts.append(f"<div class='chaz-footer'>{_esc(footer)}</div>")
        parts.append("</div>")
        return "".join(parts)


def render_text(entries: Iterable[Any], header: str = "") -> str:
    """The plain transcript of some entries (no widgets)."""
    t = Transcript()
    for e in entries:
        t.add(e)
    return t.text(header)


def render_html(entries: Iterable[Any], header: str = "") -> str:
    """The static HTML transcript of some entries (no widgets); every string escaped."""
    t = Transcript()
    for e in entries:
        t.add(e)
    return t.html(header)
