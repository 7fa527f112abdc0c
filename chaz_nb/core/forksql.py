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

from typing import Any

from .entries import EntryType
from .writer import NewEntry

#: the entry columns a copy writes (the store's columns and the copy marker)
COPY_COLUMNS = (
    "id, session_id, seq, entry_type, sender, content, tool_call_id, tool_name, payload, created_at, "
    "run_id, copied_from"
)

#: an approval's request_id in a branch: the source's, suffixed (see the module docstring)
REQUEST_SUFFIX = "~f"


def copy_entries_sql(dialect: str) -> str:
    """``INSERT ... SELECT`` of the copy; parameters: first new id, source session, up-to seq,
    new session id, new session id (the request_id suffix)."""
    if dialect == "postgresql":

        def obj(key: str, value: str) -> str:
            return f"jsonb_build_object('{key}', {value})"

        empty, new_sid = "'{}'::jsonb", "CAST(? AS BIGINT)"

        def text(key: str) -> str:
            return f"s.payload->>'{key}'"

        def bigint(key: str) -> str:
            return f"chaz_try_bigint(s.payload->>'{key}')"

    else:

        def obj(key: str, value: str) -> str:
            return f"json_object('{key}', {value})"

        empty, new_sid = "'{}'::JSON", "CAST(? AS BIGINT)"

        def text(key: str) -> str:
            return f"json_extract_string(s.payload, '$.{key}')"

        def bigint(key: str) -> str:
            return f"TRY_CAST(json_extract_string(s.payload, '$.{key}') AS BIGINT)"

    run = (f"CASE WHEN s.run_id IS NOT NULL AND s.run_id <> s.id AND r.new_id IS NOT NULL "
           f"THEN {obj('run_id', 'r.new_id')} ELSE {empty} END")
    trigger = f"CASE WHEN t.new_id IS NOT NULL THEN {obj('trigger_id', 't.new_id')} ELSE {empty} END"
    ignored = f"CASE WHEN g.new_id IS NOT NULL THEN {obj('ignored_entry', 'g.new_id')} ELSE {empty} END"
    suffixed = f"{text('request_id')} || '{REQUEST_SUFFIX}' || CAST({new_sid} AS VARCHAR)"
    request = (f"CASE WHEN s.entry_type IN ('ApprovalRequest', 'ApprovalDecision') AND {text('request_id')} "
               f"IS NOT NULL THEN {obj('request_id', suffixed)} ELSE {empty} END")
    remaps = [obj("copied_from", "s.id"), run, trigger, ignored, request]
    if dialect == "postgresql":
        payload = "(" + " || ".join(["coalesce(s.payload::jsonb, '{}'::jsonb)", *remaps]) + ")::json"
    else:
        payload = "coalesce(s.payload, '{}'::JSON)"
        for part in remaps:
            payload = f"json_merge_patch({payload}, {part})"
    trigger_ref, ignored_ref = bigint("trigger_id"), bigint("ignored_entry")
    return f"""
INSERT INTO entries ({COPY_COLUMNS})
WITH src AS (
    SELECT e.id, e.seq, e.entry_type, e.sender, e.content, e.tool_call_id, e.tool_name, e.payload,
           e.created_at, e.run_id, CAST(? AS BIGINT) + row_number() OVER (ORDER BY e.seq) - 1 AS new_id
    FROM entries e WHERE e.session_id = ? AND e.seq <= ?
)
SELECT s.new_id, CAST(? AS BIGINT), s.seq, s.entry_type, s.sender, s.content, s.tool_call_id, s.tool_name,
       {payload}, s.created_at,
       CASE WHEN s.run_id = s.id THEN s.new_id ELSE r.new_id END, s.id
FROM src s
LEFT JOIN src r ON r.id = s.run_id
LEFT JOIN src t ON s.run_id = s.id AND t.id = {trigger_ref}
LEFT JOIN src g ON s.entry_type = 'Error' AND g.id = {ignored_ref}
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


def closing_entries(store: Any, session_id: int, at_seq: int) -> list[NewEntry]:
    """What closes, in the branch, the requests and runs that were open at the fork point: a
    ``forked`` ApprovalDecision per open request, then a ``forked`` Ack per open run (read
    inside the fork's transaction, so they are written with the copies)."""
    note = f"open when the session was forked at #{at_seq}; closed in the branch"
    items: list[NewEntry] = []
    for _id, call_id, tool, request_id, run_id in store.execute(OPEN_REQUESTS, [session_id, session_id]):
        payload = {"request_id": request_id, "decision": FORKED, "reason": note, "decided_by": "system",
                   "run_id": run_id}
        items.append(NewEntry(session_id, EntryType.APPROVAL_DECISION, "system", f"{FORKED} {request_id}: {note}",
                              tool_call_id=call_id, tool_name=tool, payload=payload))
    for run_id, sender, model in store.execute(OPEN_RUNS, [session_id, session_id]):
        items.append(NewEntry(session_id, EntryType.ACK, sender, f"{sender}'s run was {note}",
                              payload={"run_id": run_id, "status": FORKED, **({"model": model} if model else {})}))
    return items
