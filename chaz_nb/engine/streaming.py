"""One streamed model call, assembled: text deltas in order, tool calls by index, usage.

``StreamAssembly.add`` takes each chunk litellm yields (``stream=True``) and returns the text
it adds; tool-call deltas are put together by their ``index`` (the id and name come with the
first delta of a call, the arguments are the concatenation of every delta's), so a ToolCall
entry is only ever written from a complete call. Usage is what litellm hands over with the
stream: the provider's ``usage`` of the last chunk when it sent one (``stream_options.
include_usage``), else the usage litellm puts in the last chunk's hidden params once the stream
ends (from its own ``stream_chunk_builder`` over the chunks, which it runs anyway); only a
stream without either, and a priced model's cost, need ``built`` (litellm's whole-response view
of the chunks, ~3 ms of the loop a call: issue 30). A model litellm cannot price gets cost
``None``.

``StreamBroken`` is the failure of a stream after text reached the user: it is never retried
(the user has seen part of a reply), and it carries that text so the Error entry keeps it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["StreamAssembly", "words"]


def words(text: str) -> list[str]:
    """``text`` in word-sized deltas, each word with the spaces that follow it (joins back to ``text``)."""
    out, word = [], ""
    for ch in text:
        if word and not ch.isspace() and word[-1].isspace():
            out.append(word)
            word = ""
        word += ch
    return out + ([word] if word else [])


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembly:
    """The pieces of one streamed reply, as they arrive."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    chunks: list[Any] = field(default_factory=list)

    def add(self, chunk: Any) -> str:
        """Take one chunk; return the text it adds to the reply ("" for none)."""
        self.chunks.append(chunk)
        choices = getattr(chunk, "choices", None) or []
        if not choices:
            return ""  # the usage-only last chunk
        delta = getattr(choices[0], "delta", None)
        if delta is None:
            return ""
        for position, call in enumerate(getattr(delta, "tool_calls", None) or []):
            index = getattr(call, "index", None)
            if not isinstance(index, int):
                index = position
            slot = self.calls.setdefault(index, _Call())
            slot.id = slot.id or (getattr(call, "id", None) or "")
            function = getattr(call, "function", None)
            if function is not None:
                slot.name = slot.name or (getattr(function, "name", None) or "")
                slot.arguments.append(getattr(function, "arguments", None) or "")
        text = getattr(delta, "content", None) or ""
        if text:
            self.text.append(text)
        return text

    @property
    def partial_text(self) -> str:
        return "".join(self.text)

    def tool_calls(self) -> list[tuple[str, str, str]]:
        """``(id, name, arguments)`` of every call, in index order."""
        return [(c.id or f"call_{i}", c.name, "".join(c.arguments))
                for i, c in sorted(self.calls.items())]

    def reported_usage(self) -> Any:
        """The usage litellm handed over with the stream (see the module doc), or None."""
        for chunk in reversed(self.chunks):
            usage = getattr(chunk, "usage", None)
            if usage is None:
                hidden = getattr(chunk, "_hidden_params", None)
                usage = hidden.get("usage") if isinstance(hidden, dict) else None
            if usage is not None:
                return usage
        return None

    def built(self, litellm: Any, messages: list[dict[str, Any]]) -> Any:
        """litellm's whole-response view of the chunks (for usage and cost), or None."""
        try:
            return litellm.stream_chunk_builder(self.chunks, messages=messages)
        except Exception:  # usage is then zero: never fail a reply over its accounting
            log.debug("stream_chunk_builder failed", exc_info=True)
            return None
