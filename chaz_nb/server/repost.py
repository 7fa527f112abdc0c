"""What a trigger written again (``fork --rerun``, ``replay``) carries: the authority of the run it
re-starts, never more.

A trigger a run wrote carries its writer's authority (``payload["authority"]``, ceiling.py):
the ceiling the run it starts is capped by, and the run-tree budget it draws on. A fork that
re-runs a trigger, and a replay that writes each of a session's triggers again, write a new
entry; without that key the new entry would be read as a person's (no cap, a fresh budget,
and in a room the start of a new burst), so a run that could not even see ``kernel__run`` ran
again with its agent's full tools and auto-approve list. So the entry written again carries:

- the meet of the authorities of every trigger the source's run answered (the Ack's
  ``answers``: a person's Message answered together with a capped run's Directive ran capped,
  and runs capped again), with the budget of the first that names one. The run in the branch
  then also meets its session's stored ceiling and its agent's own tools and auto-approve
  list (run.py), so the branch's agent narrows it and nothing widens it;
- the original's sender, and its routing in a room (``to``, ``default``), so a person's
  re-post is the person's only where the original was the person's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.entries import EntryType
from ..errors import CeilingError
from .ceiling import AUTHORITY_KEY, Authority

if TYPE_CHECKING:  # pragma: no cover
    from ..core.entries import Entry
    from ..core.store import Store

#: the payload keys of a trigger that say where a room routes it
ROUTING_KEYS = ("to", "default")


def answered_index(store: Store, session_id: int) -> dict[int, list[int]]:
    """For each trigger a run of the session answered: the ids of every trigger that run
    answered (its opening Ack's ``answers``), read in one pass over the session's Acks."""
    index: dict[int, list[int]] = {}
    for ack in store.entries(session_id, types=(EntryType.ACK,)):
        answers = ack.payload.get("answers")  # (only a run's opening Ack lists them)
        if isinstance(answers, list):
            ids = [i for i in answers if isinstance(i, int)]
            for i in ids:
                index.setdefault(i, ids)
    return index


def answered_with(store: Store, trigger: Entry, index: dict[int, list[int]] | None = None) -> list[Entry]:
    """The triggers the source's run that answered ``trigger`` answered (``trigger`` first);
    ``[trigger]`` when no run answered it (it was cut by the fork point, or is still queued)."""
    if index is None:
        index = answered_index(store, trigger.session_id)
    others = [store.entry(i) for i in index.get(trigger.id, ()) if i != trigger.id]
    return [trigger, *(e for e in others if e is not None)]


def repost_payload(store: Store, trigger: Entry, marker: dict[str, Any],
                   index: dict[int, list[int]] | None = None) -> dict[str, Any]:
    """The payload of ``trigger`` written again: ``marker`` (``rerun_of`` / ``replays``), its
    routing, and the authority of the run it re-starts (a CeilingError when unreadable: the
    run must not run open). ``index``: ``answered_index`` of its session, when read already."""
    payload = dict(marker)
    for key in ROUTING_KEYS:
        if key in trigger.payload:
            payload[key] = trigger.payload[key]
    authority = Authority.of_entries(e.payload for e in answered_with(store, trigger, index))
    if authority is not None:
        payload.update(authority.to_payload())
    return payload


def carried(payload: dict[str, Any] | None, own: Authority) -> dict[str, Any]:
    """A run's trigger's payload with the run's authority, met with one the payload carries
    already (a re-post written inside a run): never wider than either."""
    payload = dict(payload or {})
    found: Authority | None
    try:
        found = Authority.of_entry(payload)
    except CeilingError:  # an unreadable one is replaced by the run's own
        found = None
    payload[AUTHORITY_KEY] = (found.meet(own) if found is not None else own).to_payload()[AUTHORITY_KEY]
    return payload
