"""The context window of a session: what a run reads of its log, whatever the log's length.

Both stores (``store/duckdb.py``, ``store/postgres.py``) implement ``context_window(session_id, max_tokens)``
with ``fill_window``: entries are read newest first, in chunks, and reading stops at the latest
Summary (the boundary, docs/design.md "Entry types") or where the token budget is spent, so a
turn in a 50,000-entry session reads about what a turn in a short one reads. The rules:

- the latest Summary is always in the window (it is the context's head), also when the budget
  ends before it is reached; nothing older than it is;
- newest first, an entry is kept while the sum of ``approx_tokens(content)`` of the kept
  entries stays within ``max_tokens`` (the newest one is kept in any case). The Summary is not
  counted: ``entries.fit_to_budget`` counts it, the system prompt and the room labels too, so
  the window is never shorter than what ``build_context(..., context_tokens=max_tokens)`` keeps
  and that function gives the same messages on the window as on the whole log;
- a tool call and its results are kept or dropped together: a ToolResult whose ToolCall is not
  in the window is left out (by default the window holds the context types only, where there
  are no tool entries; a caller that asks for ToolCall/ToolResult gets whole pairs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from .entries import CONTEXT_TYPES, Entry, EntryType, approx_tokens

#: the token budget of a run's context when the agent sets none (``Agent.context_tokens``)
DEFAULT_CONTEXT_TOKENS = 32_000


def budget_for_window(window: int, max_tokens: int | None = None) -> int:
    """The context budget (in ``approx_tokens``) that fits a model's window of ``window`` tokens.

    Room is left for the reply (``max_tokens``, else a quarter of the window), and the rest is
    cut by a quarter: the budget counts about four characters a token, a model's tokenizer
    often fewer, and the chat template and the tool schemas take tokens of their own.
    """
    reply = max_tokens if max_tokens and max_tokens < window else window // 4
    return max(1, (window - reply) * 3 // 4)


class ContextWindow(list[Entry]):
    """The entries of a context window in seq order; ``complete`` when nothing since the
    latest Summary (or, without one, since the session's start) was left out for the budget."""

    complete: bool = True


def window_types(types: Iterable[EntryType] | None) -> frozenset[EntryType]:
    """The entry types a window reads: ``types`` (default: the context types) and the Summary."""
    wanted = CONTEXT_TYPES if types is None else frozenset(EntryType(t) for t in types)
    return wanted | {EntryType.SUMMARY}


def chunk_rows(max_tokens: int | None) -> int:
    """How many rows to read in the first chunk: about what the budget can hold."""
    if max_tokens is None:
        return 2000
    return max(64, min(2000, max_tokens // 16))


def fill_window(
    newest_first: Iterable[list[Entry]],
    max_tokens: int | None,
    latest_summary: Callable[[], Entry | None],
) -> ContextWindow:
    """The window from chunks of entries, newest first (each chunk newest first).

    ``newest_first`` is consumed lazily: no chunk is read past the one where the window ends.
    ``latest_summary()`` is called only when the budget ends before a Summary was met.
    """
    kept: list[Entry] = []
    used = 0
    complete = True
    chunks: Iterator[list[Entry]] = iter(newest_first)
    for chunk in chunks:
        stop = False
        for entry in chunk:
            if entry.entry_type is EntryType.SUMMARY:
                kept.append(entry)
                stop = True
                break
            cost = approx_tokens(entry.content)
            if max_tokens is not None and kept and used + cost > max_tokens:
                complete = False
                summary = latest_summary()
                if summary is not None and (not kept or summary.seq < kept[-1].seq):
                    kept.append(summary)
                stop = True
                break
            kept.append(entry)
            used += cost
        if stop:
            break
    close = getattr(chunks, "close", None)
    if close is not None:
        close()  # a generator: lets it release its cursor now
    window = ContextWindow(_whole_tool_pairs(kept[::-1]))
    window.complete = complete
    return window


def _whole_tool_pairs(entries: list[Entry]) -> list[Entry]:
    """``entries`` without the ToolResults whose ToolCall is not among them."""
    calls = {e.tool_call_id for e in entries if e.entry_type is EntryType.TOOL_CALL}
    return [
        e for e in entries
        if e.entry_type is not EntryType.TOOL_RESULT or (e.tool_call_id is not None and e.tool_call_id in calls)
    ]
