"""The SQL of a fork's copy (``fork_session`` on both stores), written once for both dialects.

A fork copies a session's entries up to a seq into a new session in one ``INSERT ... SELECT``
(no row passes through Python: a 50,000-entry session is copied in tens of milliseconds,
``bench/bench_fork.py``). Each copy keeps its seq, type, sender, text and time, gets a new id
(the next ids, in seq order), and says which entry it copies (the ``copied_from`` column and
payload key). The ids a payload names inside the copied part are mapped to the copies' ids, so
the copy is a log of its own that the views, recovery and approvals read as any other:

- ``run_id`` (column and payload): the copy of the run's Ack;
- an opening Ack's ``trigger_id``: the copy of its trigger;
- an Error's ``ignored_entry``: the copy of the decision it ignores;
- an approval's ``request_id`` (a text shared by a request and its decisions): suffixed with
  ``~f`` and the new session's id, so a decision in one branch never closes the other's request.

The ``answers`` list of an Ack keeps the source's ids (it is a record of what the source run
answered). What was open at the fork point is closed in the branch by entries the store writes
after the copies in the same transaction (``closing_entries``), never left open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .entries import EntryType
from .store.rows import int_or_none, str_or_none, str_value
from .writer import NewEntry

if TYPE_CHECKING:  # pragma: no cover
    from .store.base import Store

#: the entry columns a copy writes (the store's columns and the copy marker)
COPY_COLUMNS = (
    "id, session_id, seq, entry_type, sender, content, tool_call_id, tool_name, payload, created_at, "
    "run_id, copied_from"
)

#: an approval's request_id in a branch: the source's, suffixed (see the module docstring)
REQUEST_SUFFIX = "~f"


def copy_entries_sql(dialect: str, first_id: int, source_id: int, at_seq: int, new_session: int) -> str:
    """``INSERT ... SELECT`` of the copy of ``source_id``'s entries up to ``at_seq``.

    The copy of the entry at seq N gets id ``first_id + N - 1`` (no window over the rows; a
    seq missing in the source leaves an unused id, never a duplicate), so a run's, a trigger's
    or a decision's new id is its seq's, found by joining only the few columns of the entries
    of that type. The numbers are written into the SQL (they are ints, checked here).
    """
    first, src, at, sid = (int(n) for n in (first_id, source_id, at_seq, new_session))
    if dialect == "postgresql":

        def obj(*pairs: tuple[str, str]) -> str:
            return "jsonb_build_object(" + ", ".join(f"'{k}', {v}" for k, v in pairs) + ")"

        empty = "'{}'::jsonb"

        def text(key: str) -> str:
            return f"s.payload->>'{key}'"

        def bigint(key: str) -> str:
            return f"chaz_try_bigint(s.payload->>'{key}')"

        def merged(parts: list[str]) -> str:
            return "(" + " || ".join(["coalesce(s.payload::jsonb, '{}'::jsonb)", *parts]) + ")::json"

    else:

        def obj(*pairs: tuple[str, str]) -> str:
            return "json_object(" + ", ".join(f"'{k}', {v}" for k, v in pairs) + ")"

        empty = "'{}'::JSON"

        def text(key: str) -> str:
            return f"json_extract_string(s.payload, '$.{key}')"

        def bigint(key: str) -> str:
            return f"TRY_CAST(json_extract_string(s.payload, '$.{key}') AS BIGINT)"

        def merged(parts: list[str]) -> str:
            out = "coalesce(s.payload, '{}'::JSON)"
            for part in parts:
                out = f"json_merge_patch({out}, {part})"
            return out

    def new_id(alias: str) -> str:
        return f"{first} + {alias}.seq - 1"

    run = f"CASE WHEN r.seq IS NOT NULL THEN {obj(('run_id', new_id('r')))} ELSE {empty} END"
    trigger = f"CASE WHEN t.seq IS NOT NULL THEN {obj(('trigger_id', new_id('t')))} ELSE {empty} END"
    ignored = f"CASE WHEN g.seq IS NOT NULL THEN {obj(('ignored_entry', new_id('g')))} ELSE {empty} END"
    suffixed = f"{text('request_id')} || '{REQUEST_SUFFIX}{sid}'"
    request = (f"CASE WHEN {text('request_id')} IS NOT NULL THEN {obj(('request_id', suffixed))} ELSE {empty} END")
    marker = obj(("copied_from", "s.id"))
    special = "s.entry_type IN ('ApprovalRequest', 'ApprovalDecision') OR t.seq IS NOT NULL OR g.seq IS NOT NULL"
    # most rows need the marker and their run's new id only: one merge (a JSON merge per remap
    # on 50,000 rows doubles the copy's time); the joins' keys read JSON only where they can
    # match (a CASE), as a JSON read of every row costs as much as the copy itself
    payload = (f"CASE WHEN {special} THEN {merged([marker, run, trigger, ignored, request])} "
               f"ELSE {merged([marker, run])} END")

    def ids_of(types: str) -> str:
        return f"(SELECT id, seq FROM entries WHERE session_id = {src} AND seq <= {at} AND entry_type IN ({types}))"

    return f"""
INSERT INTO entries ({COPY_COLUMNS})
SELECT {new_id('s')}, {sid}, s.seq, s.entry_type, s.sender, s.content, s.tool_call_id, s.tool_name,
       {payload}, s.created_at,
       CASE WHEN s.run_id = s.id THEN {new_id('s')} ELSE {new_id('r')} END, s.id
FROM entries s
LEFT JOIN {ids_of("'Ack'")} r ON s.run_id <> s.id AND r.id = s.run_id
LEFT JOIN {ids_of("'Message', 'Directive'")} t
       ON t.id = CASE WHEN s.entry_type = 'Ack' AND s.run_id = s.id THEN {bigint('trigger_id')} END
LEFT JOIN {ids_of("'ApprovalDecision'")} g
       ON g.id = CASE WHEN s.entry_type = 'Error' THEN {bigint('ignored_entry')} END
WHERE s.session_id = {src} AND s.seq <= {at}
"""


#: the runs of a session with an Ack and no closing entry (parameter: the session, twice)
OPEN_RUNS = """
SELECT a.id, a.sender, json_extract_string(a.payload, '$.model') FROM entries a
WHERE a.session_id = ? AND a.entry_type = 'Ack' AND a.run_id = a.id
  AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.session_id = ? AND e.run_id = a.id AND e.id <> a.id
                  AND e.entry_type IN ('Message', 'Error', 'Ack'))
ORDER BY a.id
"""

#: the approval requests of a session no decision there closes (parameter: the session, twice)
OPEN_REQUESTS = """
SELECT r.id, r.tool_call_id, r.tool_name, json_extract_string(r.payload, '$.request_id'), r.run_id
FROM entries r
WHERE r.session_id = ? AND r.entry_type = 'ApprovalRequest'
  AND NOT EXISTS (SELECT 1 FROM entries d WHERE d.session_id = ? AND d.entry_type = 'ApprovalDecision'
                  AND json_extract_string(d.payload, '$.request_id') = json_extract_string(r.payload, '$.request_id'))
ORDER BY r.id
"""

#: the decision (and a run's closing Ack status) of what a fork found open at its point
FORKED = "forked"


def closing_entries(store: Store, session_id: int, at_seq: int) -> list[NewEntry]:
    """What closes, in the branch, the requests and runs that were open at the fork point: a
    ``forked`` ApprovalDecision per open request, then a ``forked`` Ack per open run (read
    inside the fork's transaction, so they are written with the copies)."""
    note = f"open when the session was forked at #{at_seq}; closed in the branch"
    items: list[NewEntry] = []
    for _id, call_id, tool, request_id, run_id in store.execute(OPEN_REQUESTS, [session_id, session_id]):
        payload = {"request_id": str_or_none(request_id), "decision": FORKED, "reason": note,
                   "decided_by": "system", "run_id": int_or_none(run_id, "entries.run_id")}
        items.append(NewEntry(session_id, EntryType.APPROVAL_DECISION, "system", f"{FORKED} {request_id}: {note}",
                              tool_call_id=str_or_none(call_id, "entries.tool_call_id"),
                              tool_name=str_or_none(tool, "entries.tool_name"), payload=payload))
    for run_id, sender_value, model in store.execute(OPEN_RUNS, [session_id, session_id]):
        sender = str_value(sender_value, "entries.sender")
        items.append(NewEntry(session_id, EntryType.ACK, sender, f"{sender}'s run was {note}",
                              payload={"run_id": run_id, "status": FORKED, **({"model": model} if model else {})}))
    return items
