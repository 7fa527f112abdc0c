"""Where the notebook's data goes (the ``egress`` payloads the ``data_egress`` view reads):
the target of a send, and the send a fork's first run makes of its copied context.

The kernel's tools write an ``egress`` payload on each result (server/kernel/); a recorded
replay writes one on each result it sends again (replay.py). A branch's first run sends the
context copied from its source (the source's tool results, its attachments) to the branch's
model: when that model or host is not the one the source sent them to, it is a new send, and
the run's opening Ack carries its ``egress`` (``via = 'fork_context'`` in the view).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..core.entries import EntryType

if TYPE_CHECKING:  # pragma: no cover
    from ..core.store import SessionInfo, Store


def egress_target(agent: Any) -> dict[str, Any]:
    """Where an ``egress`` goes: the agent, its model, the model's provider and the host."""
    model = getattr(agent, "model", None)
    api_base = getattr(agent, "api_base", None)
    return {"agent": getattr(agent, "name", None), "model": model,
            "provider": model.split("/", 1)[0] if model and "/" in model else None,
            "host": urlparse(api_base).hostname if api_base else None}


def copied_context_egress(store: Store, session: SessionInfo, agent: Any) -> dict[str, Any] | None:
    """The ``egress`` of a branch's first run: the notebook's data in its copied entries that
    went to another model or host than ``agent``'s; None when there is none (or it is not a
    branch's first run)."""
    if session.forked_from is None:
        return None
    types = (EntryType.ACK, EntryType.TOOL_RESULT, EntryType.MESSAGE)
    entries = store.entries(session.id, types=types)
    if any(e.entry_type is EntryType.ACK and e.run_id == e.id and e.payload.get("copied_from") is None
           for e in entries):
        return None  # a run of the branch's own has sent it already
    target = egress_target(agent)
    variables: list[str] = []
    rows = chars = sent = 0
    for e in entries:
        egress = e.payload.get("egress")
        if e.payload.get("copied_from") is None or not isinstance(egress, dict):
            continue
        if (egress.get("model"), egress.get("host")) == (target["model"], target["host"]):
            continue  # the same provider had it from the source's run
        sent += 1
        names = egress.get("variables")
        variables += [str(v) for v in names if str(v) not in variables] if isinstance(names, list) else []
        rows += _count(egress.get("rows"))
        chars += _count(egress.get("chars"))
    if not sent:
        return None
    return {"variables": variables, "rows": rows, "columns": 0, "chars": chars, "policy": None,
            "copied_entries": sent, **target}


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
