"""The look a session transcript shares with the JupyterLab renderer: CSS and small HTML pieces.

``labextension/src/transcript.ts`` draws a finished transcript; ``transcript.py`` draws the same
rows as HTML for the live view (ipywidgets) and the static fallback, with these pieces, so the
two look alike and a cell does not jump when its run ends. Pure: no ipywidgets, no IPython.
Every string from an agent, a tool or a user passes through ``html.escape``.
"""

from __future__ import annotations

import json
from typing import Any

from ...core.controls import name_hidden
from .code import CODE_CSS
from .display import esc as _esc

#: characters of a tool's arguments/output shown in the folded row's summary line
SUMMARY_CHARS = 80

#: The look of the JupyterLab renderer (labextension/style/base.css), scoped to ``.chaz-s`` so a
#: frontend without the lab extension (VS Code, Colab, nbviewer) draws the live and the finished
#: view the same; in JupyterLab both rule sets apply and agree. Theme colours are --jp-* variables.
TRANSCRIPT_CSS = (
    "<style>"
    ".chaz-s{font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:var(--jp-ui-font-size1,13px);"
    "line-height:1.4;color:var(--jp-ui-font-color1,inherit)}"
    ".chaz-transcript.chaz-s,.chaz-session-view{border:1px solid var(--jp-border-color2,#ddd);border-radius:4px;"
    "padding:6px 8px;max-width:100%;box-sizing:border-box}"
    ".chaz-session-view .chaz-transcript.chaz-s{border:none;padding:0;border-radius:0}"
    ".chaz-session-view .widget-html,.chaz-session-view .widget-html-content{margin:0;height:auto;"
    "line-height:inherit}"
    ".chaz-s .chaz-header{display:flex;flex-wrap:wrap;gap:6px;align-items:baseline;padding-bottom:4px;"
    "margin-bottom:4px;border-bottom:1px solid var(--jp-border-color2,#ddd)}"
    ".chaz-s .chaz-title,.chaz-s .chaz-agent{font-weight:600}"
    ".chaz-s .chaz-agent{color:var(--jp-brand-color1,#1976d2)}"
    ".chaz-s .chaz-kind,.chaz-s .chaz-parent,.chaz-s .chaz-forked,.chaz-s .chaz-count,.chaz-s .chaz-time{"
    "color:var(--jp-ui-font-color2,#666);font-size:var(--jp-ui-font-size0,11px)}"
    ".chaz-s .chaz-time{margin-left:auto}"
    ".chaz-s .chaz-status{font-size:var(--jp-ui-font-size0,11px);border-radius:8px;padding:0 6px;"
    "background:var(--jp-layout-color3,#ddd)}"
    ".chaz-s .chaz-status-running{background:var(--jp-brand-color1,#1976d2);color:#fff}"
    ".chaz-s .chaz-status-parked{background:var(--jp-warn-color1,#f57c00);color:#fff}"
    ".chaz-s .chaz-entry{margin:3px 0;padding:3px 6px;border-left:3px solid var(--jp-border-color2,#ddd)}"
    ".chaz-s .chaz-entry-head{display:flex;gap:6px;align-items:baseline}"
    ".chaz-s .chaz-badge{font-size:var(--jp-ui-font-size0,11px);font-family:var(--jp-code-font-family,monospace);"
    "padding:0 4px;border-radius:3px;background:var(--jp-layout-color3,#ddd);color:var(--jp-ui-font-color1,inherit)}"
    ".chaz-s .chaz-sender{font-weight:600}"
    # an entry's seq (what %chaz fork --at takes): muted, one click selects it
    ".chaz-s .chaz-seq{font-family:var(--jp-code-font-family,monospace);font-size:var(--jp-ui-font-size0,11px);"
    "color:var(--jp-ui-font-color3,#888);user-select:all}"
    ".chaz-s .chaz-content{white-space:pre-wrap;overflow-wrap:anywhere;margin-top:2px}"
    ".chaz-s .chaz-from-agent{border-left-color:var(--jp-brand-color1,#1976d2)}"
    ".chaz-s .chaz-type-directive{border-left-color:var(--jp-info-color1,#0288d1)}"
    ".chaz-s .chaz-type-ack{opacity:.7;font-size:var(--jp-ui-font-size0,11px)}"
    ".chaz-s .chaz-type-error{border-left-color:var(--jp-error-color1,#d32f2f)}"
    ".chaz-s .chaz-type-error .chaz-content{color:var(--jp-error-color1,#d32f2f)}"
    ".chaz-s .chaz-tool{border-left-color:var(--jp-success-color1,#388e3c)}"
    ".chaz-s .chaz-tool>summary{cursor:pointer;display:list-item}"
    ".chaz-s .chaz-tool>summary>span{margin-right:6px}"
    ".chaz-s .chaz-tool-name{font-family:var(--jp-code-font-family,monospace);font-weight:600}"
    ".chaz-s .chaz-tool-args,.chaz-s .chaz-tool-out{font-family:var(--jp-code-font-family,monospace);"
    "color:var(--jp-ui-font-color2,#666)}"
    ".chaz-s .chaz-tool-state{font-size:var(--jp-ui-font-size0,11px);color:var(--jp-success-color0,#1b5e20)}"
    ".chaz-s .chaz-tool-pending{border-left-color:var(--jp-warn-color1,#f57c00)}"
    ".chaz-s .chaz-tool-pending .chaz-tool-state{color:var(--jp-warn-color0,#b60)}"
    ".chaz-s .chaz-tool-error{border-left-color:var(--jp-error-color1,#d32f2f)}"
    ".chaz-s .chaz-tool-error .chaz-tool-state,.chaz-s .chaz-tool-error .chaz-tool-output{"
    "color:var(--jp-error-color0,#b71c1c)}"
    ".chaz-s .chaz-tool-approval{font-size:var(--jp-ui-font-size0,11px);color:var(--jp-ui-font-color2,#666)}"
    ".chaz-s .chaz-tool-waiting{color:var(--jp-warn-color0,#b60);font-style:italic}"
    ".chaz-s .chaz-tool-approval.chaz-approval-deny,.chaz-s .chaz-tool-approval.chaz-approval-timed_out{"
    "color:var(--jp-error-color0,#b71c1c)}"
    ".chaz-s .chaz-label{font-size:var(--jp-ui-font-size0,11px);color:var(--jp-ui-font-color2,#666);margin-top:4px}"
    ".chaz-s .chaz-pre{font-family:var(--jp-code-font-family,monospace);font-size:var(--jp-code-font-size,12px);"
    "white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0;padding:4px;background:var(--jp-layout-color2,#f5f5f5);"
    "max-height:24em;overflow:auto}"
    ".chaz-s .chaz-approval{border-left-color:var(--jp-warn-color1,#f57c00)}"
    ".chaz-s .chaz-approval.chaz-approval-deny,.chaz-s .chaz-approval.chaz-approval-timed_out{"
    "color:var(--jp-error-color0,#b71c1c)}"
    ".chaz-s .chaz-answers,.chaz-s .chaz-status-line{font-size:var(--jp-ui-font-size0,11px);"
    "color:var(--jp-ui-font-color2,#666);font-style:italic}"
    ".chaz-s .chaz-partial-kept{white-space:pre-wrap;overflow-wrap:anywhere;color:var(--jp-content-font-color2,#555);"
    "font-style:italic}"
    ".chaz-s .chaz-writing{margin-left:.5em;color:var(--jp-ui-font-color3,#888);font-style:italic}"
    ".chaz-s .chaz-summary{border-left:none;text-align:center}"
    ".chaz-s .chaz-summary-line{border-top:1px dashed var(--jp-border-color1,#bbb);margin-top:8px}"
    ".chaz-s .chaz-summary-label{position:relative;top:-.7em;padding:0 6px;background:var(--jp-layout-color1,#fff);"
    "color:var(--jp-ui-font-color2,#666);font-size:var(--jp-ui-font-size0,11px)}"
    ".chaz-s .chaz-summary-details{text-align:left}"
    ".chaz-s .chaz-footer,.chaz-s .chaz-earlier{font-size:var(--jp-ui-font-size0,11px);"
    "color:var(--jp-ui-font-color2,#666)}"
    ".chaz-s .chaz-footer{margin-top:4px;padding-top:2px;border-top:1px solid var(--jp-border-color2,#ddd)}"
    ".chaz-s .chaz-card-in{margin-left:1.5em}"
    ".chaz-s .chaz-chip{display:inline-block;margin:1px 4px 1px 0;padding:0 6px;border-radius:8px;"
    "border:1px solid var(--jp-border-color2,#ccc);background:var(--jp-layout-color2,#eee);font-size:11px}"
    + CODE_CSS
    + "</style>"
)


def as_json_text(value: Any) -> str:
    """A payload value as text: a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # pragma: no cover - payloads are JSON already
        return str(value)


def args_preview(arguments: Any, limit: int = SUMMARY_CHARS) -> str:
    """One line of a call's arguments as the lab renderer's ``argsPreview``: ``a=1, b="x"``,
    cut at ``limit`` characters, hidden characters named."""
    if isinstance(arguments, dict):
        text = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False, separators=(',', ':'), default=str)}" for k, v in arguments.items()
        )
    elif arguments is None:
        text = ""
    else:
        text = " ".join(as_json_text(arguments).split())
    text = name_hidden(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fmt_duration(ms: Any) -> str:
    """``6.9 ms``, ``14 ms``, ``9.8 s``, ``2 min 5 s``; empty for a missing duration (as the
    lab renderer's ``formatDuration``)."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms != ms or ms < 0:
        return ""
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{round(ms)} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, rest = divmod(ms, 60_000)
    return f"{int(minutes)} min {round(rest / 1000)} s"


def tool_timing(payload: dict[str, Any]) -> str:
    """How long a tool call took, its run and the wait for a person named apart:
    ``ran 6.9 ms after 9.8 s waiting for approval`` (a ToolResult's ``duration_ms`` includes
    the wait, ``approval_wait_ms``), or ``14 ms`` for a call nobody had to approve."""
    total = payload.get("duration_ms")
    if isinstance(total, bool) or not isinstance(total, (int, float)):
        return ""
    wait = payload.get("approval_wait_ms")
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait <= 0:
        return fmt_duration(total)
    return f"ran {fmt_duration(max(total - wait, 0.0))} after {fmt_duration(wait)} waiting for approval"


def time_of(created_at: Any) -> str:
    """``HH:MM:SS`` of an entry's time, as the lab renderer shows it."""
    text = created_at.isoformat() if hasattr(created_at, "isoformat") else str(created_at or "")
    i = text.find("T") if "T" in text else text.find(" ")
    return text[i + 1 : i + 9] if i >= 0 and len(text) >= i + 9 else text


def count_label(n: int, cell: bool, rows: int | None = None) -> str:
    """``6 entries``, or ``3 entries in this cell`` for a view of one cell's part of a run;
    ``2 rows (4 entries)`` where the view folds entries into fewer rows (a call and its result
    are one row), so the count matches what the view shows."""
    label = f"{n:,} {'entry' if n == 1 else 'entries'}"
    if rows is not None and rows != n:
        label = f"{rows:,} {'row' if rows == 1 else 'rows'} ({label})"
    return label + (" in this cell" if cell else "")


def seq_of(entry: Any) -> int | None:
    """An entry's seq (its place in its session, what ``%chaz fork --at`` takes), if it has one."""
    seq = getattr(entry, "seq", None)
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def seq_label(seq: int | None) -> str:
    """``#12 `` before a row's text (nothing for an entry without a seq)."""
    return f"#{seq} " if seq is not None else ""


def seq_html(seq: int | None) -> str:
    """A row's seq, small and muted at its start: ``#12`` (copyable; the title says its use)."""
    if seq is None:
        return ""
    title = f"entry #{seq} of the session: %chaz fork SESSION --at {seq} branches from here"
    return f"<span class='chaz-seq' title='{_esc(title)}'>#{seq}</span>"


def entry_head_html(badge: str, sender: Any, created_at: Any = None, seq: int | None = None) -> str:
    """A row's head: seq, type badge, sender, time (the renderer's ``chaz-entry-head``)."""
    parts = [seq_html(seq)] if seq is not None else []
    parts.append(f"<span class='chaz-badge chaz-badge-{_esc(badge.lower())}'>{_esc(badge)}</span>")
    if sender:
        parts.append(f"<span class='chaz-sender'>{_esc(sender)}</span>")
    t = time_of(created_at) if created_at else ""
    if t:
        parts.append(f"<span class='chaz-time' title='{_esc(created_at)}'>{_esc(t)}</span>")
    return f"<div class='chaz-entry-head'>{''.join(parts)}</div>"


def header_html(spans: list[tuple[str, str]]) -> str:
    """The header line: ``(class, text)`` spans, e.g. ``("chaz-title", "Session 3")``."""
    inner = "".join(f"<span class='{cls}'>{_esc(text)}</span>" for cls, text in spans if text != "")
    return f"<div class='chaz-header'>{inner}</div>"
