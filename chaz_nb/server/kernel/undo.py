"""Undo a ``kernel__run`` call (``Server.undo``, ``%chaz undo``): put back the variables it
created, rebound or deleted as they were before it ran, and record the undo.

Nothing is touched until every check passed: the call exists and is a ``kernel__run`` that ran,
it was not undone already, this kernel still holds its before-state (undo_book.py), and what
it did can be undone. What cannot (a variable changed in place, a file written, a network call,
a process, a module imported) is named in one line and stops the undo unless ``partial``; a
variable changed since (by the person or a later call) is named too and stops it unless
``force`` (put it back anyway) or ``partial`` (leave it as it is now).

The undo is an Ack entry in the call's session: ``tool_call_id`` and ``tool_name`` are the
call's, its payload has ``undo_of`` (the call's id) and ``namespace_changes`` in the form a
``kernel__run`` result has, so the ``variable_changes`` view lists the undo's changes beside
the call's (``undo_of`` set). ``undo_of(entry)`` and ``undone_calls`` are how other parts (a
notebook cell marked for that call) learn that a call was undone.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import timezone
from typing import TYPE_CHECKING, Any

from ...core.entries import Entry, EntryType, json_str
from ...core.store import Store
from ...errors import UndoRefused
from .namespace import Seen, fingerprint, shape_of, type_name
from .undo_book import Change, UndoBook, UndoRecord

if TYPE_CHECKING:  # pragma: no cover
    from . import KernelTools

RUN = "kernel__run"
_LIST = "%chaz sql SELECT session_id, tool_call_id, arguments FROM tool_calls WHERE tool = 'kernel__run' lists them"


@dataclass
class UndoOutcome:
    """What an undo did."""

    tool_call_id: str
    session_id: int
    #: the undo's Ack
    entry: Entry
    #: ``removed top``, ``put back sales``
    done: list[str] = field(default_factory=list)
    #: what was left as it is (``partial``), with why
    skipped: list[str] = field(default_factory=list)

    def describe(self) -> str:
        line = f"undid kernel__run {self.tool_call_id} (session {self.session_id}, #{self.entry.seq}): "
        line += "; ".join(self.done) if self.done else "no variable put back"
        if self.skipped:
            line += "; left as they are: " + ", ".join(self.skipped)
        return line


def undo_of(entry: Entry) -> str | None:
    """The tool call an entry undid (None: the entry is no undo)."""
    if entry.entry_type is not EntryType.ACK:
        return None
    return json_str(entry.payload.get("undo_of"))


def undone_calls(store: Store, session_id: int) -> dict[str, Entry]:
    """The session's undone calls: tool call id -> the undo's Ack."""
    found = store.find_entries(EntryType.ACK, "session_id = ? AND tool_name = ?", [session_id, RUN])
    return {cid: e for e in found if (cid := undo_of(e)) is not None}


# ------------------------------------------------------------------ finding the call
def find_call(store: Store, book: UndoBook, session_id: int | None, tool_call_id: str | None) -> tuple[int, str, Entry]:
    """(session, call id, its ToolResult) of the call to undo; an UndoRefused says why none."""
    if tool_call_id is None:
        if session_id is None:
            raise UndoRefused("no session yet: name the tool call to undo")
        results = [r for r in store.find_entries(EntryType.TOOL_RESULT, "session_id = ? AND tool_name = ?",
                                                 [session_id, RUN]) if "namespace_changes" in r.payload]
        if not results or results[-1].tool_call_id is None:
            raise UndoRefused(f"session {session_id} has no kernel__run call that ran; nothing to undo")
        return session_id, results[-1].tool_call_id, results[-1]
    record = book.get(tool_call_id)
    calls = store.find_entries(EntryType.TOOL_CALL, "tool_call_id = ?", [tool_call_id])
    if record is not None:
        calls = [c for c in calls if c.session_id == record.session_id] or calls
    elif session_id is not None and any(c.session_id == session_id for c in calls):
        calls = [c for c in calls if c.session_id == session_id]
    if not calls:
        raise UndoRefused(f"there is no tool call {tool_call_id!r}; {_LIST}")
    sessions = sorted({c.session_id for c in calls})
    if len(sessions) > 1:
        raise UndoRefused(f"tool call {tool_call_id!r} is in sessions {', '.join(map(str, sessions))}; "
                          "say which with --session SESSION")
    call = calls[-1]
    if call.tool_name != RUN:
        raise UndoRefused(f"tool call {tool_call_id} is a {call.tool_name} call, not kernel__run: only "
                          "kernel__run changes the notebook's variables")
    results = store.find_entries(EntryType.TOOL_RESULT, "session_id = ? AND tool_call_id = ?",
                                 [call.session_id, tool_call_id])
    if not results:
        raise UndoRefused(f"tool call {tool_call_id} has not finished (or never ran); nothing to undo")
    result = results[-1]
    if "namespace_changes" not in result.payload:
        how = json_str(result.payload.get("approval")) or "refused"
        raise UndoRefused(f"tool call {tool_call_id} never ran ({how}); nothing to undo")
    return call.session_id, tool_call_id, result


def _ran_before(result: Entry, book: UndoBook) -> bool:
    """Whether the call's result was written before this kernel's tools started."""
    at = result.created_at
    if at is None:
        return False
    stamp = (at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at).timestamp()
    return stamp < book.started


def record_of(store: Store, book: UndoBook, session_id: int, tool_call_id: str, result: Entry) -> UndoRecord:
    """The call's record, once it is known not to be undone; an UndoRefused says why none."""
    undone = undone_calls(store, session_id).get(tool_call_id)
    if undone is not None:
        raise UndoRefused(f"tool call {tool_call_id} was already undone (#{undone.seq} in session {session_id}); "
                          "nothing was changed")
    record = book.get(tool_call_id)
    if record is not None:
        return record
    why = book.dropped(tool_call_id)
    if why is not None:
        raise UndoRefused(f"tool call {tool_call_id} can no longer be undone: {why}; nothing was changed")
    if _ran_before(result, book):
        raise UndoRefused(f"the kernel restarted since tool call {tool_call_id} ran: its before-state was in the "
                          "old kernel's memory and is gone; nothing was changed")
    raise UndoRefused(f"tool call {tool_call_id} ran in another kernel: only that kernel holds its "
                      "before-state; nothing was changed")


# ------------------------------------------------------------------ planning
@dataclass
class Plan:
    restore: list[Change] = field(default_factory=list)
    #: cannot be undone: phrases
    cannot: list[str] = field(default_factory=list)
    #: changed since: (change, who)
    since: list[tuple[Change, str]] = field(default_factory=list)


def plan(record: UndoRecord, book: UndoBook, ns: Mapping[str, Any]) -> Plan:
    """What undoing ``record`` would do to ``ns`` now, and what stands in its way."""
    out = Plan()
    for change in record.changes:
        if change.kind == "in_place":
            out.cannot.append(f"{change.name} (changed in place)")
            continue
        kept = change.before_seen
        if change.kind != "created" and kept is not None and fingerprint(change.before) != kept.fingerprint:
            out.cannot.append(f"{change.name} (the value it held was changed in place)")
            continue
        if _moved(change, ns):
            later = book.later(record, change.name)
            who = f"kernel__run {later.tool_call_id}" if later is not None else "you or other code"
            out.since.append((change, who))
            continue
        out.restore.append(change)
    out.cannot.extend(record.effects)
    return out


def _moved(change: Change, ns: Mapping[str, Any]) -> bool:
    """Whether the variable is no longer as the call left it."""
    if change.kind == "deleted":
        return change.name in ns
    after = change.after_seen
    if change.name not in ns or after is None:
        return True
    now = ns[change.name]
    return id(now) != after.ident or fingerprint(now) != after.fingerprint


def refusal(tool_call_id: str, p: Plan, partial: bool, force: bool) -> str | None:
    """The one line that stops the undo, or None when it may go on."""
    parts: list[str] = []
    flags: list[str] = []
    if p.cannot and not partial:
        parts.append("cannot undo " + ", ".join(p.cannot))
        flags.append("--partial puts back the rest")
    if p.since and not (partial or force):
        names = ", ".join(f"{c.name} (by {who})" for c, who in p.since)
        parts.append(f"changed since: {names}")
        flags.append("--force puts back the earlier values anyway; --partial leaves them as they are")
    if not parts:
        return None
    return f"tool call {tool_call_id}: {'; '.join(parts)}; nothing was changed ({'; '.join(flags)})"


# ------------------------------------------------------------------ doing it
def _change_json(name: str, change: str, seen: Seen) -> dict[str, Any]:
    return {"name": name, "change": change, "type": seen.type, "shape": seen.shape,
            "fingerprint": None if change == "deleted" else seen.fingerprint}


def _seen(obj: Any) -> Seen:
    return Seen(id(obj), type_name(obj), shape_of(obj), fingerprint(obj))


def steps(p: Plan, ns: Mapping[str, Any], force: bool) -> list[tuple[Change, str, dict[str, Any]]]:
    """What the undo will do, before it does it: (change, ``removed x``/``put back x``, the
    change in kernel__run's form). Nothing is touched here: the log is written first."""
    todo = p.restore + ([c for c, _ in p.since] if force else [])
    out: list[tuple[Change, str, dict[str, Any]]] = []
    for change in sorted(todo, key=lambda c: c.name):
        if change.kind == "created":
            if change.name in ns:
                out.append((change, f"removed {change.name}",
                            _change_json(change.name, "deleted", _seen(ns[change.name]))))
            continue
        kind = "changed" if change.name in ns else "created"
        out.append((change, f"put back {change.name}", _change_json(change.name, kind, _seen(change.before))))
    return out


def apply(todo: list[tuple[Change, str, dict[str, Any]]], ns: MutableMapping[str, Any]) -> None:
    """Put the variables back (plain dict operations: nothing here can fail halfway)."""
    for change, _, _ in todo:
        if change.kind == "created":
            ns.pop(change.name, None)
        else:
            ns[change.name] = change.before


def undo_call(kernel: KernelTools, store: Store, session_id: int | None, tool_call_id: str | None, *,
              partial: bool = False, force: bool = False, by: str = "user") -> UndoOutcome:
    """Undo a call of ``kernel``'s ``kernel__run`` (see the module docstring)."""
    book = kernel.undo_book
    sid, cid, result = find_call(store, book, session_id, tool_call_id)
    record = record_of(store, book, sid, cid, result)
    if not record.changes and not record.effects:
        raise UndoRefused(f"tool call {cid} changed no variable; nothing to undo")
    ns = kernel.host.namespace
    p = plan(record, book, ns)
    why = refusal(cid, p, partial, force)
    if why is not None:
        raise UndoRefused(why)
    if not p.restore and not (force and p.since):
        raise UndoRefused(f"tool call {cid} left nothing undo can put back; nothing was changed")
    todo = steps(p, ns, force)
    done, changes = [what for _, what, _ in todo], [c for _, _, c in todo]
    skipped = [f"{c.name} (changed since by {who})" for c, who in p.since] if not force else []
    skipped += p.cannot if partial else []
    payload: dict[str, Any] = {
        "undo_of": cid, "undone_run_id": record.run_id, "agent": record.agent, "namespace_changes": changes,
        "skipped": skipped, "partial": partial, "forced": force,
    }
    text = f"undid {record.agent}'s kernel__run {cid}: " + ("; ".join(done) or "nothing put back")
    # the log first: a store that cannot write leaves the namespace as it was
    entry = store.append(sid, EntryType.ACK, by, text, tool_call_id=cid, tool_name=RUN, payload=payload)
    apply(todo, ns)
    record.undone_seq = entry.seq
    book.forget(cid, "it was undone")  # its objects are the namespace's again, or let go
    return UndoOutcome(cid, sid, entry, done, skipped)

