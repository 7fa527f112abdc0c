"""Entry types of the Session Messaging Primitive and how they enter the LLM context.

This module knows nothing about storage or IPython: it is the vocabulary every other layer
shares.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from collections.abc import Iterable


#: a value of JSON as ``json.loads`` gives it
JSONValue = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
#: a JSON object as stored (an entry's payload, a session's metadata)
JsonObject = dict[str, JSONValue]
#: one message of a model's context (OpenAI format: ``role``, ``content``, ...)
ChatMessage = dict[str, JSONValue]


class EntryType(str, Enum):
    """The nine entry types, stored by their names (docs/design.md, "Entry types")."""

    MESSAGE = "Message"
    DIRECTIVE = "Directive"
    TOOL_CALL = "ToolCall"
    TOOL_RESULT = "ToolResult"
    ACK = "Ack"
    ERROR = "Error"
    SUMMARY = "Summary"
    APPROVAL_REQUEST = "ApprovalRequest"
    APPROVAL_DECISION = "ApprovalDecision"

    def __str__(self) -> str:
        return self.value


#: Entry types that start an agent run when written (Message only from a non-agent sender).
TRIGGER_TYPES = frozenset({EntryType.MESSAGE, EntryType.DIRECTIVE})
#: Entry types the LLM sees; a Summary is the boundary where the context starts.
CONTEXT_TYPES = frozenset({EntryType.MESSAGE, EntryType.DIRECTIVE, EntryType.SUMMARY})

SUMMARY_PREFIX = "Summary of the conversation so far:\n"


def json_str(value: JSONValue) -> str | None:
    """A payload's field as text: the value if it is a string, else None."""
    return value if isinstance(value, str) else None


def json_int(value: JSONValue) -> int | None:
    """A payload's field as a whole number (an id, a count): the value if it is one (not a
    bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def json_number(value: JSONValue) -> float | None:
    """A payload's field as a number (a cost, a duration): the value if it is one, else None."""
    return value if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class Entry:
    """One committed row of a session log."""

    id: int
    session_id: int
    seq: int
    entry_type: EntryType
    sender: str
    content: str
    tool_call_id: str | None = None
    tool_name: str | None = None
    payload: JsonObject = field(default_factory=dict)
    created_at: datetime | None = None

    @property
    def run_id(self) -> int | None:
        """The run this entry belongs to (a run's opening Ack is the run itself)."""
        if self.entry_type is EntryType.ACK and "trigger_id" in self.payload:
            return self.id
        return json_int(self.payload.get("run_id"))

    def to_json(self) -> JsonObject:
        """A JSON-safe dict (``type`` for the entry type, ISO ``created_at``)."""
        return {
            "id": self.id,
            "session_id": self.session_id,
            "seq": self.seq,
            "type": self.entry_type.value,
            "sender": self.sender,
            "content": self.content,
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "payload": json.loads(json.dumps(self.payload, default=str)),
            "created_at": self.created_at.isoformat() if self.created_at else None,
        }

    def one_line(self, width: int = 100) -> str:
        """``#seq Type sender: content`` on one line, cut to ``width``."""
        text = " ".join(self.content.split())
        line = f"#{self.seq} {self.entry_type.value} {self.sender}: {text}"
        return line if len(line) <= width else line[: width - 1] + "…"


def context_slice(entries: Iterable[Entry]) -> list[Entry]:
    """The entries from the latest Summary on (the whole log when there is none)."""
    entries = list(entries)
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].entry_type is EntryType.SUMMARY:
            return entries[i:]
    return entries


def build_context(
    entries: Iterable[Entry],
    agent_name: str,
    system: str = "",
    label_other_agents: frozenset[str] | set[str] = frozenset(),
    context_tokens: int | None = None,
) -> list[ChatMessage]:
    """OpenAI-format messages for ``agent_name`` from a session log.

    As in docs/design.md ("Entry types"): Message and Directive are in context, the session agent's own
    Messages with the assistant role and every other Message or Directive with the user role;
    the context starts at the latest Summary; ToolCall/ToolResult/Ack/Error and the approval
    control entries are audit only. Messages and Directives from senders in
    ``label_other_agents`` (other agents in a shared session) are prefixed with their sender so
    the model knows who spoke: an agent's Directive never reads as the person's.
    With ``context_tokens`` the context is filled newest-first within that budget (see
    ``fit_to_budget``).
    """
    messages: list[ChatMessage] = []
    if system:
        messages.append({"role": "system", "content": system})
    for entry in context_slice(entries):
        if entry.entry_type is EntryType.SUMMARY:
            messages.append({"role": "user", "content": SUMMARY_PREFIX + entry.content})
        elif entry.entry_type is EntryType.DIRECTIVE:
            labelled = entry.sender in label_other_agents
            text = f"[@{entry.sender}] {entry.content}" if labelled else entry.content
            messages.append({"role": "user", "content": text})
        elif entry.entry_type is EntryType.MESSAGE:
            if entry.sender == agent_name:
                messages.append({"role": "assistant", "content": entry.content})
            elif entry.sender in label_other_agents:
                messages.append({"role": "user", "content": f"[@{entry.sender}] {entry.content}"})
            else:
                messages.append({"role": "user", "content": entry.content})
    if context_tokens is not None:
        return fit_to_budget(messages, context_tokens)
    return messages


def approx_tokens(text: str) -> int:
    """About four characters a token (the offline models count the same way)."""
    return -(-len(text) // 4) if text else 0


def fit_to_budget(messages: list[ChatMessage], max_tokens: int) -> list[ChatMessage]:
    """Keep the system prompt and the Summary, then fill newest-first within ``max_tokens``.

    The newest message is always kept, even when it alone is over the budget.
    """
    head: list[ChatMessage] = []
    rest = list(messages)
    while rest and rest[0]["role"] == "system":
        head.append(rest.pop(0))
    if rest and rest[0]["role"] == "user" and str(rest[0]["content"]).startswith(SUMMARY_PREFIX):
        head.append(rest.pop(0))
    used = sum(approx_tokens(str(m["content"] or "")) for m in head)
    kept: list[ChatMessage] = []
    for message in reversed(rest):
        cost = approx_tokens(str(message["content"] or ""))
        if kept and used + cost > max_tokens:
            break
        kept.append(message)
        used += cost
    return head + kept[::-1]
