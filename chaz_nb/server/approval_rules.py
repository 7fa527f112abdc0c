"""The rules of tool approvals, apart from their bookkeeping (approvals.py).

Which call needs approval (a tool's mode and the spawn chain's auto-approve patterns), which of
a request's decisions counts (``timed_out`` wins, else the first in entry order; the SQL
fragments say the same in a query), how arguments are shown to the person deciding, and the
one-line texts of decisions.
"""

from __future__ import annotations

import fnmatch
from typing import Any
from collections.abc import Iterable, Sequence

from ..core.controls import shown_controls
from ..core.entries import Entry
from ..core.redaction import redact_data
from ..engine.tools import Tool

#: ``forked``: the request was open where its session was forked; the branch closes it (fork.py)
DECISIONS = ("approve", "deny", "approve_all", "timed_out", "forked")
DEFAULT_TIMEOUT = 300.0
#: the longest reason kept with a decision (the sidebar, the card's box and the magic all bring one)
MAX_REASON_CHARS = 2_000
MASK = "••••••"
SYSTEM = "system"


def mask_arguments(t: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments as shown to the person: sensitive parameters masked."""
    return {k: (MASK if k in t.sensitive_params else v) for k, v in arguments.items()}


def shown_arguments(t: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments as the person deciding sees them: sensitive ones masked, and each character
    that reorders or hides text, or is a control (ANSI), named (``<U+202E>``,
    core/controls.py), so a right-to-left override cannot make ``/srv/\u202etxt.sgol`` read as
    ``/srv/logs.txt`` in the card; the tool gets them as sent."""
    return redact_data(mask_arguments(t, arguments), shown_controls)


def auto_approved(tool_name: str, chain: Sequence[frozenset[str]]) -> bool:
    """True when every level of the spawn chain auto-approves the tool.

    A child's policy can only be stricter than its parent's: the chain holds the
    auto-approve patterns of the agent and of every ancestor, and all must agree.
    """
    if not chain:
        return False
    return all(any(fnmatch.fnmatchcase(tool_name, p) for p in level) for level in chain)


def named_in_chain(tool_name: str, chain: Sequence[frozenset[str]]) -> bool:
    """True when every level of the chain names the tool exactly (no glob)."""
    return bool(chain) and all(tool_name in level for level in chain)


def needs_approval(t: Tool, chain: Sequence[frozenset[str]]) -> bool:
    if t.approval == "always":
        # cannot be waived, but for a tool that lets an auto_approve naming it exactly do so
        return not (t.waived_by_name and named_in_chain(t.name, chain))
    if t.approval == "unless_auto_approved":
        return not auto_approved(t.name, chain)
    return False


def effective_decision(decisions: Iterable[Entry]) -> Entry | None:
    """``timed_out`` wins over any other decision; otherwise the first in entry order."""
    decisions = sorted(decisions, key=lambda e: e.id)
    for d in decisions:
        if d.payload.get("decision") == "timed_out":
            return d
    return decisions[0] if decisions else None



#: (on the decision ``{d}``) no Error says the serving server ignored it
NOT_IGNORED = """
    NOT EXISTS (
        SELECT 1 FROM entries x
        WHERE x.session_id = {d}.session_id AND x.entry_type = 'Error'
          AND json_extract_string(x.payload, '$.ignored_entry') = CAST({d}.id AS VARCHAR)
          AND json_extract_string(x.payload, '$.request_id') = json_extract_string({d}.payload, '$.request_id'))
"""

#: (on the outer ``entries``) an ApprovalRequest no counted decision closes
OPEN_REQUEST = """
    NOT EXISTS (
        SELECT 1 FROM entries d
        WHERE d.entry_type = 'ApprovalDecision'
          AND json_extract_string(d.payload, '$.request_id') = json_extract_string(entries.payload, '$.request_id')
          AND NOT EXISTS (
            SELECT 1 FROM entries x
            WHERE x.session_id = d.session_id AND x.entry_type = 'Error'
              AND json_extract_string(x.payload, '$.ignored_entry') = CAST(d.id AS VARCHAR)
              AND json_extract_string(x.payload, '$.request_id') = json_extract_string(d.payload, '$.request_id')))
"""

def decision_text(payload: dict[str, Any]) -> str:
    edited = " with edited arguments" if payload.get("edited") else ""
    return f"{payload['decision']} {payload['request_id']}{edited}" + (
        f": {payload['reason']}" if payload.get("reason") else ""
    )


def describe_payload(payload: dict[str, Any]) -> str:
    who = payload.get("decided_by") or "?"
    text = f"{payload.get('decision')}{' with edited arguments' if payload.get('edited') else ''} by {who}"
    return text + (f" ({payload['reason']})" if payload.get("reason") else "")


def describe_decision(entry: Entry) -> str:
    return describe_payload({**entry.payload, "decided_by": entry.payload.get("decided_by", entry.sender)})
