"""Two branches side by side from their fork point: each run's reply, tool calls and totals.

``compare(store, a, b)`` reads both logs after the point where they part (``fork_point``): a
fork and its source part at the fork's ``forked_at_seq``, two forks of one source at the
earlier of their points, anything else at the start. Each side is what its session did after
that point (the copies before it are the same on both sides), whichever run it belongs to: a
run that opened before the point and went on after it (a fork made mid-run: its source's run
goes on) is on its side with the calls made after the point (``continued``), while the
``forked`` Ack that closes a branch's copy of it is bookkeeping, not activity.
``first_difference`` is the first tool call (name and arguments, in order across the runs)
where the two sides differ.
The notebook shows it (``%chaz compare``, notebook/views/compare.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.entries import Entry, EntryType, json_int, json_number, json_str
from ..core.forksql import FORKED

if TYPE_CHECKING:  # pragma: no cover
    from ..core.store import Store


@dataclass
class RunSummary:
    """One run of a branch: its reply (or how it ended), tool calls and totals."""

    run_id: int
    seq: int
    agent: str
    model: str | None
    #: the run opened at or before the fork point and went on after it: its tool calls are the
    #: ones after the point, its totals (recorded when it ended) the whole run's
    continued: bool = False
    trigger: str = ""
    reply: str = ""
    status: str = "running"
    tool_calls: list[str] = field(default_factory=list)
    steps: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    duration_ms: float | None = None


@dataclass
class Side:
    session_id: int
    agent: str
    runs: list[RunSummary]

    @property
    def calls(self) -> list[str]:
        return [c for r in self.runs for c in r.tool_calls]

    def total(self, name: str) -> float:
        return sum(getattr(r, name) or 0 for r in self.runs)


@dataclass
class Comparison:
    point: int
    a: Side
    b: Side
    #: index (across each side's calls, in order) of the first differing tool call; None: same
    first_difference: int | None


def fork_point(store: Store, a: int, b: int) -> int:
    """The seq after which the two sessions' logs part (0: they share nothing)."""
    ia, ib = store.session(a), store.session(b)
    if ib.forked_from == ia.id:
        return int(ib.forked_at_seq or 0)
    if ia.forked_from == ib.id:
        return int(ia.forked_at_seq or 0)
    if ia.forked_from is not None and ia.forked_from == ib.forked_from:
        return min(int(ia.forked_at_seq or 0), int(ib.forked_at_seq or 0))
    return 0


def call_text(entry: Entry) -> str:
    """``tool(arguments)`` of a ToolCall entry; of a ToolResult that ran a person's edit, the
    arguments it ran with, marked ``· edited by the approver``."""
    args = entry.payload.get("arguments")
    shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)
    edited = " · edited by the approver" if entry.entry_type is EntryType.TOOL_RESULT else ""
    return f"{entry.tool_name}({shown}){edited}"


def side(store: Store, session_id: int, after: int) -> Side:
    """What ``session_id`` did after seq ``after``: its runs with an entry after it."""
    everything = store.entries(session_id)
    triggers = {e.id: e for e in everything if e.entry_type in (EntryType.MESSAGE, EntryType.DIRECTIVE)}
    opening = {e.id: e for e in everything if e.entry_type is EntryType.ACK and e.run_id == e.id}
    runs: dict[int, RunSummary] = {}
    calls_at: dict[tuple[int | None, str | None], int] = {}
    for e in everything:
        if e.seq <= after or e.run_id is None or e.run_id not in opening:
            continue
        if e.entry_type is EntryType.ACK and e.run_id != e.id and e.payload.get("status") == FORKED:
            continue  # a branch's copy of a run open at the fork point, closed there: no activity
        run = runs.get(e.run_id)
        if run is None:
            ack = opening[e.run_id]
            trigger_id = json_int(ack.payload.get("trigger_id"))
            trigger = triggers.get(trigger_id) if trigger_id is not None else None
            run = runs[ack.id] = RunSummary(ack.id, ack.seq, ack.sender, json_str(ack.payload.get("model")),
                                            continued=ack.seq <= after,
                                            trigger=trigger.content if trigger else "")
        if e.entry_type is EntryType.TOOL_CALL:
            calls_at[(e.run_id, e.tool_call_id)] = len(run.tool_calls)
            run.tool_calls.append(call_text(e))
        elif e.entry_type is EntryType.TOOL_RESULT and e.payload.get("edited") and "arguments" in e.payload:
            # what ran is the person's edit: the call shows it (the model's is in the log)
            at = calls_at.get((e.run_id, e.tool_call_id))
            if at is not None:
                run.tool_calls[at] = call_text(e)
        elif e.id != e.run_id and e.entry_type in (EntryType.MESSAGE, EntryType.ERROR, EntryType.ACK) \
                and run.status == "running":
            _finish(run, e, opening[run.run_id])
    return Side(session_id, store.session(session_id).agent, sorted(runs.values(), key=lambda r: r.seq))


def _finish(run: RunSummary, end: Entry, ack: Entry) -> None:
    """The run's reply (or how it ended) and its totals, from its closing entry."""
    p = end.payload
    run.status = "error" if end.entry_type is EntryType.ERROR else str(p.get("status") or "ok")
    run.reply = end.content
    run.steps = json_int(p.get("steps"))
    prompt, completion = json_int(p.get("prompt_tokens")), json_int(p.get("completion_tokens"))
    run.tokens = (prompt or 0) + (completion or 0) if prompt is not None or completion is not None else None
    run.cost_usd = json_number(p.get("cost_usd"))
    if ack.created_at is not None and end.created_at is not None:
        run.duration_ms = round((end.created_at - ack.created_at).total_seconds() * 1000, 1)


def compare(store: Store, a: int, b: int) -> Comparison:
    """Sessions ``a`` and ``b`` side by side from their fork point (StoreError: unknown one)."""
    point = fork_point(store, a, b)
    left, right = side(store, a, point), side(store, b, point)
    first = None
    for i in range(max(len(left.calls), len(right.calls))):
        x = left.calls[i] if i < len(left.calls) else None
        y = right.calls[i] if i < len(right.calls) else None
        if x != y:
            first = i
            break
    return Comparison(point, left, right, first)
