"""Where the notebook's data goes (the ``egress`` payloads the ``data_egress`` view reads):
the target of a send, and the send a fork's first run makes of its copied context.

The kernel's tools write an ``egress`` payload on each result (server/kernel/); a recorded
replay writes one on each result it sends again (replay.py). A branch's first run sends the
context copied from its source (the source's tool results, its attachments) to the branch's
model: when that model or host is not the one the source sent them to, it is a new send, and
the run's opening Ack carries its ``egress`` (``via = 'fork_context'`` in the view).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..core.entries import Entry, EntryType

if TYPE_CHECKING:  # pragma: no cover
    from ..core.store import Store


def egress_target(agent: Any) -> dict[str, Any]:
    """Where an ``egress`` goes: the agent, its model, the model's provider and the host."""
    model = getattr(agent, "model", None)
    api_base = getattr(agent, "api_base", None)
    return {"agent": getattr(agent, "name", None), "model": model,
            "provider": model.split("/", 1)[0] if model and "/" in model else None,
            "host": urlparse(api_base).hostname if api_base else None}


#: entry types whose content reaches a model's context (build_context) and may carry data
_CARRY = (EntryType.TOOL_RESULT, EntryType.MESSAGE, EntryType.SUMMARY)
_POLICY_RANK = {"schema": 0, "sample": 1, "full": 2}
#: where a --with Message's attachments start (server/kernel: ``attach``)
ATTACHED = "\n\n--- attached: "
#: the egress gate's decisions that sent nothing (egress_gate.py)
_KEPT = ("deny", "timed_out")


def _key(entry: Entry) -> int:
    """The entry a copy stands for (a fork's copy and its source are one send's content)."""
    source = entry.payload.get("copied_from")
    return source if isinstance(source, int) else entry.id


def _target_of(egress: dict[str, Any]) -> tuple[object, object]:
    return egress.get("model"), egress.get("host")


@dataclass
class ContextData:
    """The notebook's data a session's context carries: which entries (a reply of a run whose
    tool results sent it, a ``--with`` Message, a Summary made from them), what each carries
    (their ``egress`` payloads) and where each was sent already."""

    #: entry id -> the ``egress`` payloads of the data it carries
    carried: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: ``_key`` of an entry -> the (model, host) pairs it was sent to
    sent: dict[int, set[tuple[object, object]]] = field(default_factory=dict)
    #: ``_key`` of the entries the egress gate kept from this run's request (egress_gate.py)
    denied: set[int] = field(default_factory=set)

    def withheld(self, entry: Entry, agent: Any) -> bool:
        """Whether ``agent``'s data policy keeps ``entry`` out of its context: it carries data
        sent under a wider policy than ``agent``'s (another room member's rows for a
        ``schema`` agent, or the agent's own from before it was redefined narrower), or the
        egress gate denied sending it."""
        if entry.id in self.carried and _key(entry) in self.denied:
            return True
        mine = _POLICY_RANK.get(str(getattr(agent, "data", "full")), 2)
        return any(_POLICY_RANK.get(str(e.get("policy")), -1) > mine for e in self.carried.get(entry.id, ()))


def context_data(store: Store, session_id: int) -> ContextData:
    """What of the notebook's data each entry of ``session_id`` carries and where it went.

    Two reads, so that a run in a long session with no data in it reads no Ack: what entries
    carry comes from the tool results, Messages and Summaries; where it went from the Acks,
    read only when something is carried and only from the first carrying entry on (an Ack
    records a send of entries before it)."""
    data = ContextData()
    by_run: dict[int, list[dict[str, Any]]] = {}
    so_far: list[dict[str, Any]] = []
    first_seq: int | None = None
    for e in store.entries(session_id, types=_CARRY):
        egress = e.payload.get("egress")
        egress = egress if isinstance(egress, dict) else None
        if egress is not None and egress.get("decision") in _KEPT:
            egress = None  # the egress gate kept it in the kernel: the content carries none of it
        if e.entry_type is EntryType.TOOL_RESULT:
            if egress is not None and e.run_id is not None:
                by_run.setdefault(e.run_id, []).append(egress)
            continue
        pending = e.payload.get("egress_pending")  # a --with attachment the gate has not let go yet
        pending_carried: list[dict[str, Any]] | None = None
        if e.entry_type is EntryType.SUMMARY:  # made from everything before it
            carried = list(so_far)
        elif egress is not None:  # a --with attachment
            carried = [egress]
        elif isinstance(pending, dict) and e.entry_type is EntryType.MESSAGE:
            carried = pending_carried = [pending]  # sent nowhere yet: the run that reads it records the send
        else:  # a reply: the model that wrote it had its run's tool results
            carried = list(by_run.get(e.run_id, [])) if e.run_id is not None else []
        if not carried:
            continue
        first_seq = e.seq if first_seq is None else first_seq
        so_far += carried
        data.carried[e.id] = carried
        # the models that had this content: those of the data it carries, and the one that
        # summarized it (a Summary names it; an older Summary carried its own ``egress``)
        by = e.payload.get("summarized_by") if e.entry_type is EntryType.SUMMARY else None
        by = by if isinstance(by, dict) else egress
        origin = {_target_of(c) for c in carried} | ({_target_of(by)} if by is not None else set())
        data.sent.setdefault(_key(e), set()).update(origin if carried is not pending_carried else set())
    if first_seq is None:
        return data
    for e in store.entries(session_id, after_seq=first_seq - 1, types=(EntryType.ACK,)):
        egress = e.payload.get("egress")
        if not isinstance(egress, dict):
            continue
        keys = egress.get("entries")
        for k in keys if isinstance(keys, list) else []:
            if isinstance(k, int):
                data.sent.setdefault(k, set()).add(_target_of(egress))
    return data


def context_egress(store: Store, session_id: int, agent: Any, via: str = "context",
                   entries: list[Entry] | None = None, data: ContextData | None = None) -> dict[str, Any] | None:
    """The ``egress`` of a model request of ``agent`` built from ``session_id``'s context (its
    ``entries``; default: everything since the latest Summary): the notebook's data there that
    was never recorded as sent to ``agent``'s model and host, withheld entries left out; None
    when there is none. Written before the request (the run's Ack, the compaction's own Ack).
    ``data``: the session's ``context_data`` when the caller has it already (read once a run)."""
    if data is None:
        data = context_data(store, session_id)
    if not data.carried:
        return None
    if entries is None:
        entries = list(store.context_window(session_id, None))
    target = egress_target(agent)
    variables: list[str] = []
    keys: list[int] = []
    rows = chars = copied = pending = 0
    policies: list[str] = []
    for e in entries:
        carried = data.carried.get(e.id)
        if not carried or data.withheld(e, agent):
            continue
        if (target["model"], target["host"]) in data.sent.get(_key(e), set()):
            continue
        keys.append(_key(e))
        copied += e.payload.get("copied_from") is not None
        # an attachment says how much of it is data; a reply is all sent
        own = e.payload.get("egress") or e.payload.get("egress_pending")
        pending += isinstance(e.payload.get("egress_pending"), dict)
        chars += _count(own.get("chars")) if isinstance(own, dict) else len(e.content)
        for c in carried:
            names = c.get("variables")
            variables += [str(v) for v in names if str(v) not in variables] if isinstance(names, list) else []
            rows += _count(c.get("rows"))
            if isinstance(c.get("policy"), str) and c["policy"] not in policies:
                policies.append(c["policy"])
    if not keys:
        return None
    return {"variables": variables, "rows": rows, "columns": 0, "chars": chars,
            "policy": max(policies, key=lambda p: _POLICY_RANK.get(p, -1)) if policies else None,
            "entries": keys, "copied_entries": copied,
            "via": "fork_context" if copied == len(keys) and via == "context"
            else "attachment" if pending == len(keys) and via == "context" else via, **target}


def withhold(entries: list[Entry], data: ContextData, agent: Any) -> list[Entry]:
    """``entries`` with each one ``agent``'s data policy keeps out replaced by a one-line note."""
    out: list[Entry] = []
    for e in entries:
        if data.withheld(e, agent):
            names = sorted({str(v) for c in data.carried[e.id] for v in (c.get("variables") or [])})
            what = (f"this entry of {e.sender} carries the notebook's data"
                    f"{' (' + ', '.join(names) + ')' if names else ''}")
            if _key(e) in data.denied:  # the egress gate's deny (egress_gate.py)
                target = egress_target(agent)
                note = (f"[withheld: {what}; sending it to {target['model']} at "
                        f"{target['host'] or target['provider'] or target['model']} was denied (egress gate)]")
                if e.payload.get("attachments"):  # a --with Message: the person's own words still go
                    note = f"{e.content.split(ATTACHED, 1)[0].rstrip()}\n\n{note}"
            else:
                note = (f"[withheld: {what} sent under a wider data policy than "
                        f"{getattr(agent, 'name', 'this agent')}'s ({getattr(agent, 'data', '?')})]")
            e = dataclasses.replace(e, content=note)
        out.append(e)
    return out


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def as_allowed(store: Store, session_id: int, entries: list[Entry], agent: Any,
               data: ContextData | None = None) -> list[Entry]:
    """``entries`` as ``agent``'s data policy lets it read them (``withhold``); a ``full``
    agent reads them all, so the session is not read again for it. ``data``: the session's
    ``context_data`` when the caller has it already (a run reads it once, for its Ack too)."""
    if str(getattr(agent, "data", "full")) == "full" and (data is None or not data.denied):
        return entries
    return withhold(entries, data if data is not None else context_data(store, session_id), agent)
