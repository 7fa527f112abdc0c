"""The transcript of a session, pure: entries -> rows -> text and HTML (no ipywidgets).

``Transcript`` folds a stream of entries into rows (``Row``: a ToolCall with its ToolResult and
the approval that gated it; an Ack as the run's status line), and renders them as plain text
(saved notebooks, terminals, nbval) and as HTML in the same frame and header as the JupyterLab
renderer draws (``labextension/src/transcript.ts``), so a live view and a finished one look
alike. ``session.py`` puts these rows into ipywidgets; nothing here imports IPython.

Every string that comes from an agent, a tool or a user passes through ``html.escape``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable

from ...server.approvals import name_hidden
from .code import CODE_CSS, code_html, code_of
from .display import esc as _esc

#: characters of a tool's arguments/output shown in the folded row's summary line
SUMMARY_CHARS = 80
#: characters of a tool's output shown in the unfolded row (the log has all of it)
DETAIL_CHARS = 4000

TRANSCRIPT_CSS = (
    "<style>"
    ".chaz-s{font-family:var(--jp-code-font-family,monospace);font-size:12px;line-height:1.45;"
    "color:var(--jp-content-font-color1,inherit)}"
    ".chaz-s .chaz-h{color:var(--jp-ui-font-color2,#666);"
    "border-bottom:1px solid var(--jp-border-color2,#ddd);margin-bottom:2px}"
    ".chaz-s .chaz-f{color:var(--jp-ui-font-color2,#666);font-size:11px;margin-top:2px;"
    "border-top:1px solid var(--jp-border-color2,#ddd)}"
    ".chaz-s .chaz-r{white-space:pre-wrap;word-break:break-word;margin:1px 0}"
    ".chaz-s .chaz-who{font-weight:bold}"
    ".chaz-s .chaz-t{color:var(--jp-ui-font-color3,#888);font-size:10px}"
    ".chaz-s .chaz-err{color:var(--jp-error-color1,#c00)}"
    ".chaz-s .chaz-wait{color:var(--jp-warn-color0,#b60);font-style:italic}"
    ".chaz-s .chaz-st{color:var(--jp-ui-font-color2,#777);font-style:italic}"
    ".chaz-s details{margin:1px 0 1px 1.5em;color:var(--jp-content-font-color2,#555)}"
    ".chaz-s details pre{margin:2px 0 2px 1em;white-space:pre-wrap}"
    ".chaz-s .chaz-card-in{margin-left:1.5em}"
    ".chaz-s .chaz-chip{display:inline-block;margin:1px 4px 1px 0;padding:0 6px;border-radius:8px;"
    "border:1px solid var(--jp-border-color2,#ccc);background:var(--jp-layout-color2,#eee);font-size:11px}"
    + CODE_CSS
    + "</style>"
)




def entry_type(entry: Any) -> str:
    """The type name of an entry (``Message``, ``ToolCall``…), from an Entry or its JSON."""
    t = getattr(entry, "entry_type", None)
    if t is None:
        t = getattr(entry, "type", "")
    return str(getattr(t, "value", t))


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # pragma: no cover - payloads are JSON already
        return str(value)


def _arguments_html(arguments: Any, text: str) -> str:
    """A call's arguments in the unfolded row: the code of a code call (``kernel__run``) as a
    numbered code block, else the JSON text."""
    code = code_of(arguments)
    if code is not None:
        return f"code:{code_html(code)}"
    text = name_hidden(text or _json(arguments))
    return f"arguments:<pre>{_esc(text[:DETAIL_CHARS])}</pre>"


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

    @property
    def request_id(self) -> str | None:
        return (self.request.payload or {}).get("request_id") if self.request is not None else None

    @property
    def open_request(self) -> bool:
        """An approval is asked for and not decided yet (the card shows the buttons/hint)."""
        return self.request is not None and self.decision is None

    def _denied(self) -> bool:
        return self.decision is not None and (self.decision.payload or {}).get("decision") in ("deny", "timed_out")

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

    # -- text
    def text(self, card: bool = True) -> str:
        e = self.entry
        if self.kind == "tool":
            args = _json((e.payload or {}).get("arguments", ""))
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

    # -- html
    def html(self, card: bool = True) -> str:
        e = self.entry
        if self.kind == "tool":
            payload = e.payload or {}
            args = _json(payload.get("arguments", ""))
            name = _esc(self._tool_name())
            call = _esc(self._call(args))
            note = self._approval_note()
            gate = ""
            if note:
                cls = "chaz-wait" if self.open_request else ("chaz-err" if self._denied() else "chaz-t")
                gate = f" <span class='{cls}'>{_esc(note)}</span>"
            shown_args = _arguments_html(payload.get("arguments", ""), args)
            if self.result is None:
                state = "" if (self.open_request or self._denied()) else " <i>running…</i>"
                summary = f"⚙ <b>{name}</b>{call}{gate}{state}"
                body = shown_args
            else:
                rp = self.result.payload or {}
                out = str(rp.get("output", self.result.content))
                err = bool(rp.get("is_error"))
                arrow = '<span class="chaz-err">→ error:</span>' if err else "→"
                summary = (
                    f"⚙ <b>{name}</b>{call}{gate} {arrow} "
                    f"{_esc(_short(out, SUMMARY_CHARS))}"
                )
                dur = rp.get("duration_ms")
                took = f" <span class='chaz-t'>({_esc(dur)} ms)</span>" if dur is not None else ""
                if rp.get("edited"):  # approved with edits: what the tool ran with
                    shown_args += "edited by the approver to:" + _arguments_html(rp.get("arguments"), "")
                body = f"{shown_args}output{took}:<pre>{_esc(out[:DETAIL_CHARS])}</pre>"
            row = f"<details class='chaz-tool'><summary>{summary}</summary>{body}</details>"
            if card and self.open_request:
                row += self._card_html()
            return row
        who = f"<span class='chaz-who'>{_esc(e.sender)}</span>"
        if self.kind == "error":
            return f"<div class='chaz-r chaz-err'>✗ {who}: {_esc(e.content)}</div>"
        if self.kind == "directive":
            return (
                f"<div class='chaz-r'>{who} <span class='chaz-t'>directive</span> "
                f"{_esc(e.content)}</div>"
            )
        if self.kind == "summary":
            return f"<div class='chaz-r chaz-st'>— summary: {_esc(e.content)}</div>"
        if self.kind == "message":
            return f"<div class='chaz-r'>{who}: {_esc(e.content)}{_chips_html(e)}</div>"
        if self.kind == "answers":
            return f"<div class='chaz-r chaz-st'>&nbsp;&nbsp;↳ {who} {_esc(_answers_phrase(e))}</div>"
        if self.kind == "closed":
            return f"<div class='chaz-r chaz-st chaz-closed'>{_esc(_closed_text(e))}</div>"
        if self.kind == "approval":
            if self.open_request:
                return self._card_html() if card else ""
            source = self.request if self.request is not None else e
            decision = self.decision
            if decision is None and entry_type(e) == "ApprovalDecision":
                decision = e
            cls = "chaz-r chaz-ap-row"
            if decision is not None and (decision.payload or {}).get("decision") in ("deny", "timed_out"):
                cls += " chaz-err"
            line = _approval_line(source)
            if self.request is not None:
                line += f" · {self._approval_note()}"
            return f"<div class='{cls}'>&nbsp;&nbsp;{_esc(line)}</div>"
        return (
            f"<div class='chaz-r'><span class='chaz-t'>{_esc(entry_type(e))}</span> {who}: "
            f"{_esc(e.content)}</div>"
        )


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
        args = _json(p.get("arguments_display", {}))
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

    def __init__(self) -> None:
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
            self.rows.append(Row("closed", entry))
            return [len(self.rows) - 1]
        if t == "Ack":
            # Shown as a status line, replaced by the reply (or the error) when it comes.
            self._working = entry.sender
            self._steps = 1
            self.status = f"{entry.sender} is working… step 1"
            if answers_together(entry):
                self.rows.append(Row("answers", entry))
                return [len(self.rows) - 1]
            return []
        if t == "ToolCall":
            if self.status and last not in ("ToolCall", "ApprovalRequest", "ApprovalDecision"):
                self._steps += 1  # a batch of tool calls: the model takes another step after it
                self.status = f"{self._working} is working… step {self._steps}"
            self.rows.append(Row("tool", entry))
            if entry.tool_call_id:
                self._tool_rows[entry.tool_call_id] = len(self.rows) - 1
            return [len(self.rows) - 1]
        if t == "ToolResult":
            idx = self._tool_rows.pop(entry.tool_call_id, None) if entry.tool_call_id else None
            if idx is not None:
                self.rows[idx].result = entry
                return [idx]
            self.rows.append(Row("tool", entry, result=entry))  # a result without its call
            return [len(self.rows) - 1]
        if t == "ApprovalRequest":
            rid = (entry.payload or {}).get("request_id")
            idx = self._tool_rows.get(entry.tool_call_id) if entry.tool_call_id else None
            if idx is not None and self.rows[idx].request is None and self.rows[idx].result is None:
                self.rows[idx].request = entry  # the gated call: one row, the card under it
            else:  # a request whose call this view did not see
                self.rows.append(Row("approval", entry, request=entry))
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
                self.rows.append(Row("tool", entry, decision=entry))
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
            t == "Message" and entry.sender == self._working)
        if self.status and ends:
            self.status = None
            self._working = None
        self.rows.append(Row(kind, entry))
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
        # styled inline: the shared _CSS stays as saved notebooks have it
        return (f"<div class='chaz-r chaz-partial' style='opacity:.85'><span class='chaz-who'>{_esc(sender)}"
                f"</span>: {_esc(text)}<span class='chaz-t'> ▍</span></div>")

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

    def html(self, header: str = "", footer: str = "", earlier: str = "") -> str:
        parts = [TRANSCRIPT_CSS, "<div class='chaz-s'>"]
        if earlier:
            parts.append(f"<div class='chaz-h chaz-earlier'>{_esc(earlier)}</div>")
        if header:
            parts.append(f"<div class='chaz-h'>{_esc(header)}</div>")
        parts += [r.html() for r in self.rows]
        parts.append(self.partial_html())
        if self.status:
            parts.append(f"<div class='chaz-r chaz-st'>{_esc(self.status)}</div>")
        if footer:
            parts.append(f"<div class='chaz-f'>{_esc(footer)}</div>")
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
