from chaz_nb.core.entries import CONTEXT_TYPES, Entry, EntryType, build_context


def entry(seq, etype, sender, content):
    return Entry(id=seq, session_id=1, seq=seq, entry_type=etype, sender=sender, content=content)


def test_nine_entry_types_are_stored_by_reference_names():
    assert [t.value for t in EntryType] == [
        "Message", "Directive", "ToolCall", "ToolResult", "Ack", "Error", "Summary",
        "ApprovalRequest", "ApprovalDecision",
    ]
    assert {EntryType.MESSAGE, EntryType.DIRECTIVE, EntryType.SUMMARY} == CONTEXT_TYPES


def test_context_roles_follow_the_reference_table():
    log = [
        entry(1, EntryType.MESSAGE, "user", "hi"),
        entry(2, EntryType.ACK, "bot", "bot is working"),
        entry(3, EntryType.TOOL_CALL, "bot", "add({})"),
        entry(4, EntryType.TOOL_RESULT, "bot", "add: 3"),
        entry(5, EntryType.MESSAGE, "bot", "3"),
        entry(6, EntryType.DIRECTIVE, "parent", "do X"),
        entry(7, EntryType.ERROR, "bot", "boom"),
        entry(8, EntryType.APPROVAL_REQUEST, "bot", "?"),
        entry(9, EntryType.APPROVAL_DECISION, "user", "approve"),
    ]
    assert build_context(log, "bot", system="be brief") == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "3"},
        {"role": "user", "content": "do X"},
    ]


def test_context_starts_at_the_latest_summary():
    log = [
        entry(1, EntryType.MESSAGE, "user", "old question"),
        entry(2, EntryType.SUMMARY, "system", "first summary"),
        entry(3, EntryType.MESSAGE, "user", "middle"),
        entry(4, EntryType.SUMMARY, "system", "second summary"),
        entry(5, EntryType.MESSAGE, "user", "new question"),
    ]
    context = build_context(log, "bot")
    assert len(context) == 2
    assert context[0]["role"] == "user" and context[0]["content"].endswith("second summary")
    assert context[1] == {"role": "user", "content": "new question"}


def test_other_agents_messages_name_their_sender():
    log = [entry(1, EntryType.MESSAGE, "alice", "hello bob")]
    assert build_context(log, "bob", label_other_agents={"alice"}) == [
        {"role": "user", "content": "[@alice] hello bob"}
    ]


def test_entry_to_json_is_json_safe():
    import json
    from datetime import datetime

    e = Entry(1, 2, 3, EntryType.TOOL_RESULT, "a", "x", "c1", "add", {"output": "5"}, datetime(2026, 1, 1))
    data = json.loads(json.dumps(e.to_json()))
    assert data["type"] == "ToolResult" and data["created_at"] == "2026-01-01T00:00:00"


def test_a_payload_is_read_through_its_json_types():
    from chaz_nb.core.entries import json_int, json_number, json_str

    assert (json_str("gpt"), json_str(5), json_str(None)) == ("gpt", None, None)
    # a flag is no count: True is an int to Python, never a run id or a token count here
    assert (json_int(7), json_int(True), json_int(7.0), json_int("7")) == (7, None, None, None)
    assert (json_number(0.25), json_number(2), json_number("0.25")) == (0.25, 2, None)
    ack = Entry(9, 1, 2, EntryType.ACK, "bot", "", payload={"trigger_id": 8})
    reply = Entry(10, 1, 3, EntryType.MESSAGE, "bot", "hi", payload={"run_id": 9})
    flagged = Entry(11, 1, 4, EntryType.ERROR, "bot", "x", payload={"run_id": True})
    assert (ack.run_id, reply.run_id, flagged.run_id) == (9, 9, None)
