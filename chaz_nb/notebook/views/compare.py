"""``%chaz compare A B``: two branches side by side from their fork point (a static view).

The data comes from ``server/compare.py``; this renders it as text and HTML. Everything an
agent, a tool or a person wrote is escaped, and control characters (ANSI escapes, bidi
overrides, zero-width characters) are shown as text (``\\x1b``, ``<U+202E>``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .display import StaticFallbackView, esc

if TYPE_CHECKING:  # pragma: no cover
    from ...server import Comparison, RunSummary, Side

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
#: characters of a reply or a tool call shown per cell
CELL_CHARS = 300


def shown(text: str, limit: int = CELL_CHARS) -> str:
    """``text`` with control characters named, cut to ``limit`` characters."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"<U+{ord(m.group()):04X}>",
                        text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _totals(run: RunSummary) -> str:
    parts = [run.status]
    if run.steps is not None:
        parts.append(f"{run.steps} steps")
    if run.tokens is not None:
        parts.append(f"{run.tokens} tokens")
    if run.cost_usd:
        parts.append(f"${run.cost_usd:.6f}")
    if run.duration_ms is not None:
        parts.append(f"{run.duration_ms:.1f} ms")
    return ", ".join(parts)


def _opened(run: RunSummary, point: int) -> str:
    """``#2 (open at the fork point #4, went on after it; totals: the whole run)`` for a
    continued run."""
    if not run.continued:
        return f"#{run.seq}"
    return f"#{run.seq} (open at the fork point #{point}, went on after it; totals: the whole run)"


class CompareView(StaticFallbackView):
    """Two branches' runs after their fork point, one column each."""

    def __init__(self, comparison: Comparison) -> None:
        self.c = comparison

    def _title(self, s: Side) -> str:
        return f"session {s.session_id} (@{shown(s.agent, 80)})"

    def _calls(self, s: Side, run: RunSummary) -> list[str]:
        """The run's calls, the first one that differs from the other side marked."""
        start = sum(len(r.tool_calls) for r in s.runs[: s.runs.index(run)])
        out = []
        for i, call in enumerate(run.tool_calls):
            mark = "  ◀ first difference" if start + i == self.c.first_difference else ""
            out.append(shown(call, 200) + mark)
        return out

    def text(self) -> str:
        c = self.c
        lines = [f"compare {self._title(c.a)} and {self._title(c.b)} from #{c.point}"]
        if c.first_difference is None:
            lines.append("the same tool calls on both sides")
        for s in (c.a, c.b):
            lines.append(f"── {self._title(s)}: {len(s.runs)} run(s), {len(s.calls)} tool call(s), "
                         f"{int(s.total('tokens'))} tokens")
            for run in s.runs:
                lines.append(f"  {_opened(run, c.point)} {shown(run.agent, 80)} ({run.model or '?'}; {_totals(run)})")
                lines.extend(f"    {call}" for call in self._calls(s, run))
                lines.append(f"    → {shown(run.reply)}")
        return "\n".join(lines)

    def _column(self, s: Side) -> str:
        runs = []
        for run in s.runs:
            calls = "".join(f"<li><code>{esc(call)}</code></li>" for call in self._calls(s, run))
            runs.append(
                f"<div style='margin-bottom:6px'><b>{esc(_opened(run, self.c.point))}</b> {esc(shown(run.agent, 80))} "
                f"<small>({esc(run.model or '?')}; {esc(_totals(run))})</small>"
                f"<ul style='margin:2px 0'>{calls}</ul><div>→ {esc(shown(run.reply))}</div></div>")
        head = (f"<b>{esc(self._title(s))}</b><br><small>{len(s.runs)} run(s), {len(s.calls)} tool call(s), "
                f"{int(s.total('tokens'))} tokens</small>")
        return f"<td style='vertical-align:top;text-align:left'>{head}{''.join(runs) or '<i>no runs</i>'}</td>"

    def html(self) -> str:
        c = self.c
        note = "" if c.first_difference is not None else "<br><small>the same tool calls on both sides</small>"
        return (f"<div class='chaz-compare'><b>compare from #{c.point}</b>{note}"
                f"<table><tr>{self._column(c.a)}{self._column(c.b)}</tr></table></div>")
