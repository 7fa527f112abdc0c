"""The session view: rendering, escaping, folding, batching, unsubscribing (no kernel)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from chaz_nb.core.entries import Entry, EntryType
from chaz_nb.notebook.views.display import WIDGET_MIME
from chaz_nb.notebook.views.session import (
    MIME_TYPE,
    SessionView,
    Transcript,
    render_html,
    render_text,
)

from waiting import past, until

EVIL = "<script>alert('x')</script>"


def entry(seq, etype, sender, content="", **kw):
    return Entry(
        id=seq, session_id=1, seq=seq, entry_type=EntryType(etype), sender=sender, content=content, **kw
    )


def turn():
    return [
        entry(1, "Message", "user", "add 2 and 3"),
        entry(2, "Ack", "calc", "calc is working"),
        entry(3, "ToolCall", "calc", 'add({"a": 2, "b": 3})', tool_call_id="c1", tool_name="add",
              payload={"arguments": {"a": 2, "b": 3}}),
        entry(4, "ToolResult", "calc", "add: 5", tool_call_id="c1", tool_name="add",
              payload={"output": "5", "is_error": False, "duration_ms": 1.5}),
        entry(5, "Message", "calc", "the sum is 5"),
    ]


def test_tool_call_and_result_fold_into_one_row():
    t = Transcript()
    for e in turn():
        t.add(e)
    assert [r.kind for r in t.rows] == ["message", "tool", "message"]
    assert t.rows[1].result is not None
    text = t.text()
    assert '  ⚙ add({"a": 2, "b": 3}) → 5' in text
    html = t.html()
    assert html.count("<details") == 1 and "<summary" in html
    assert "1.5 ms" in html


def test_ack_is_a_status_replaced_by_the_reply():
    t = Transcript()
    es = turn()
    t.add(es[0])
    t.add(es[1])
    assert t.status == "calc is working… step 1"
    assert "calc is working… step 1" in t.text()
    t.add(es[2])
    assert t.status == "calc is working… step 2"  # the model takes another step after the tools
    t.add(es[3])
    t.add(es[4])
    assert t.status is None
    assert "working" not in t.text()


def test_error_is_red_and_clears_the_status():
    t = Transcript()
    t.add(entry(1, "Message", "user", "hi"))
    t.add(entry(2, "Ack", "a", "a is working"))
    t.add(entry(3, "Error", "a", "model call failed: boom"))
    assert t.status is None
    assert "chaz-type-error" in t.html()
    assert "✗ a: model call failed: boom" in t.text()


def test_an_mcp_failure_note_during_a_run_keeps_the_working_status():
    # a failed MCP server is noted in the session while the run goes on (server/mcp.py)
    t = Transcript()
    t.add(entry(1, "Message", "user", "hi"))
    t.add(entry(2, "Ack", "a", "a is working"))
    t.add(entry(3, "Error", "system", "MCP server time failed: gone; the run goes on without its tools",
                payload={"mcp_server": "time", "note": True}))
    assert t.status == "a is working… step 1"
    assert "MCP server time failed" in t.text()
    t.add(entry(4, "Message", "a", "done"))
    assert t.status is None


def test_every_agent_and_tool_string_is_escaped():
    es = [
        entry(1, "Message", EVIL, EVIL),
        entry(2, "Ack", EVIL, EVIL),
        entry(3, "ToolCall", EVIL, EVIL, tool_call_id="x", tool_name=EVIL, payload={"arguments": {EVIL: EVIL}}),
        entry(4, "ToolResult", EVIL, EVIL, tool_call_id="x", tool_name=EVIL,
              payload={"output": EVIL, "is_error": True, "duration_ms": EVIL}),
        entry(5, "Directive", EVIL, EVIL),
        entry(6, "Error", EVIL, EVIL),
        entry(7, "Summary", EVIL, EVIL),
        entry(8, "ApprovalRequest", EVIL, EVIL),
    ]
    html = render_html(es, header=EVIL)
    assert "<script" not in html
    assert "&lt;script&gt;" in html
    # text/plain keeps the text as it is
    assert EVIL in render_text(es)


def test_the_html_view_shows_bidi_zero_width_and_ansi_characters_by_name():
    """The lab's cell shows ``<U+202E>``; the ipywidgets HTML view of the same entries does too."""
    hidden = "\u202eand be quick \u2066x\u2069\u200b \x1b[31m"
    es = [
        entry(1, "Message", "me\u202e", hidden),
        entry(2, "ToolCall", "calc\u2067", "", tool_call_id="c", tool_name="ad\u202ed",
              payload={"arguments": {"a\u202e": hidden}}),
        entry(3, "ToolResult", "calc", "", tool_call_id="c", tool_name="ad\u202ed",
              payload={"output": hidden, "is_error": False}),
        entry(4, "Error", "calc", hidden),
    ]
    html = render_html(es, header=hidden)
    assert "&lt;U+202E&gt;and be quick &lt;U+2066&gt;x&lt;U+2069&gt;&lt;U+200B&gt; &lt;U+001B&gt;[31m" in html
    assert "ad&lt;U+202E&gt;d" in html and "me&lt;U+202E&gt;" in html
    assert not any(c in html for c in "\u202e\u2066\u2067\u2069\u200b\x1b")


def test_message_attachments_are_chips_with_their_names_escaped():
    attachments = [{"name": "sales", "type": "DataFrame", "shape": [3, 2]}, {"name": EVIL}, {"nope": 1}, "x"]
    es = [entry(1, "Message", "user", "why so many nulls?", payload={"attachments": attachments})]
    html = render_html(es)
    assert "<span class='chaz-chip' title='DataFrame [3, 2]'>📎 sales</span>" in html
    assert "📎 &lt;script&gt;" in html and "<script" not in html
    assert html.count("class='chaz-chip'") == 2  # items without a name are left out
    assert "📎 sales, " + EVIL in render_text(es)
    assert "class='chaz-chip" not in render_html([entry(1, "Message", "user", "hi")])


def test_a_code_call_unfolds_as_a_numbered_code_block_with_hidden_characters_named():
    code = "a = 1\nprint('\u202e' + '<i>')"
    es = [entry(1, "ToolCall", "ana", "", tool_call_id="k", tool_name="kernel__run",
                payload={"arguments": {"code": code}})]
    html = render_html(es)
    assert "<div class='chaz-label'>code</div><pre class='chaz-code'>" in html
    assert "<span class='chaz-code-no'>2</span>print(&#x27;&lt;U+202E&gt;&#x27; + &#x27;&lt;i&gt;&#x27;)" in html
    assert "\u202e" not in html
    # two arguments, one called code: JSON as for any tool
    es = [entry(1, "ToolCall", "ana", "", tool_call_id="k", tool_name="t",
                payload={"arguments": {"code": "x\u200b", "y": 1}})]
    html = render_html(es)
    assert "chaz-code'" not in html and "<div class='chaz-label'>arguments</div><pre" in html
    assert "x&lt;U+200B&gt;" in html and "\u200b" not in html and "\u200b" not in render_text(es)


class FakeStatus:
    def __init__(self, value="running"):
        self.value = value

    def __call__(self, session_id):
        return self.value


@pytest.fixture
def store():
    from chaz_nb.core.store import SessionStore

    s = SessionStore(":memory:")
    yield s
    s.close()


def test_bundle_has_static_forms_and_the_session_mime(store):
    sid = store.create_session("calc")
    store.append(sid, EntryType.MESSAGE, "user", EVIL)
    view = SessionView(store, sid, status=FakeStatus("idle"))
    data = view.bundle()
    assert set(data) == {"text/plain", "text/html", MIME_TYPE}  # a snapshot: no widget
    mime = data[MIME_TYPE]
    assert mime["version"] == 1
    assert mime["session"] == {"id": sid, "agent": "calc", "kind": "chat", "parent_id": None, "depth": 0}
    assert mime["status"] == "idle"
    assert mime["entries"][0]["type"] == "Message" and mime["entries"][0]["content"] == EVIL
    json.dumps(mime)  # JSON-safe
    assert "<script" not in data["text/html"]
    assert not view.following


def test_live_view_has_a_widget_until_the_session_is_idle(store):
    sid = store.create_session("calc")
    status = FakeStatus("running")
    loop = asyncio.new_event_loop()
    try:
        view = SessionView(store, sid, status=status, loop=loop, follow=True)
        assert view.following and view.widget is not None
        assert WIDGET_MIME in view.bundle()
        n_subscribers = len(store._subscribers)
        for e in turn():
            store.append(sid, e.entry_type, e.sender, e.content, tool_call_id=e.tool_call_id,
                         tool_name=e.tool_name, payload=e.payload)
        loop.run_until_complete(until(lambda: view.transcript.rows, view.on_update, what="the first flush"))
        assert len(view.transcript.rows) == 3
        status.value = "idle"
        # the slow status poll notices
        loop.run_until_complete(until(lambda: not view.following, view.on_update, what="the view to finish"))
        assert not view.following
        assert len(store._subscribers) == n_subscribers - 1
        assert WIDGET_MIME not in view.bundle()  # the final bundle is static only
        assert view.widget is None
    finally:
        loop.close()


def test_close_unsubscribes(store):
    sid = store.create_session("calc")
    before = len(store._subscribers)
    loop = asyncio.new_event_loop()
    try:
        view = SessionView(store, sid, status=FakeStatus("running"), loop=loop, follow=True)
        assert len(store._subscribers) == before + 1
        view.close()
        assert len(store._subscribers) == before
        store.append(sid, EntryType.MESSAGE, "user", "after close")  # no error, no effect
        loop.run_until_complete(past(view.interval))  # a flush the write could have armed has run
        assert view.transcript.rows == []
    finally:
        loop.close()


def test_a_burst_of_1000_entries_a_second_is_batched_and_nothing_is_dropped(store):
    sid = store.create_session("calc")
    loop = asyncio.new_event_loop()
    status = FakeStatus("running")
    try:
        view = SessionView(store, sid, status=status, loop=loop, follow=True)
        assert view.widget is not None  # shown: its comm is open, each flush sends
        async def writer():
            for i in range(1000):
                store.append(sid, EntryType.MESSAGE, "user" if i % 2 else "calc", f"m{i} {EVIL}")
                if i % 10 == 9:
                    await asyncio.sleep(0.01)  # ~1000 entries a second

        t0 = time.monotonic()
        loop.run_until_complete(writer())
        elapsed = time.monotonic() - t0
        loop.run_until_complete(until(lambda: view.stats.entries >= 1000, view.on_update, what="all 1000 entries"))
        assert view.stats.entries == 1000
        assert len(view.transcript.rows) == 1000
        assert [r.entry.content for r in view.transcript.rows] == [f"m{i} {EVIL}" for i in range(1000)]
        # about one flush per 100 ms, not one per entry
        assert view.stats.flushes <= (elapsed + 0.3) / view.interval * 1.5 + 5, (elapsed, view.stats)
        assert view.stats.flushes < 1000 / 10
        # each flush sends one message with only the rows it added (the one widget's model)
        assert 0 < view.stats.widget_sends <= view.stats.flushes
        assert view.stats.max_send_chars < 1000 * 400 / 5
        rendered = "".join(view.widget.chaz_state["rows"])
        assert rendered.count("data-type='Message'") == 1000
        assert "<script" not in rendered
        status.value = "idle"
        view.flush(final=True)
        assert not view.following
    finally:
        loop.close()


def test_writes_from_another_thread_reach_the_view(store):
    sid = store.create_session("calc")
    loop = asyncio.new_event_loop()
    try:
        view = SessionView(store, sid, status=FakeStatus("running"), loop=loop, follow=True)

        def work():
            for i in range(20):
                store.append(sid, EntryType.MESSAGE, "user", f"t{i}")

        th = threading.Thread(target=work)
        th.start()
        th.join()
        loop.run_until_complete(until(lambda: len(view.transcript.rows) >= 20, view.on_update, what="20 rows"))
        assert [r.entry.content for r in view.transcript.rows] == [f"t{i}" for i in range(20)]
    finally:
        loop.close()


def test_after_seq_shows_one_turn_only(store):
    sid = store.create_session("calc")
    store.append(sid, EntryType.MESSAGE, "user", "old")
    store.append(sid, EntryType.MESSAGE, "calc", "old reply")
    store.append(sid, EntryType.MESSAGE, "user", "new")
    view = SessionView(store, sid, after_seq=2)
    assert [r.entry.content for r in view.transcript.rows] == ["new"]
    assert view.text().splitlines()[1:] == ["#3 user: new"]


def gated_call(decision=None):
    """A call that needs approval: ToolCall, ApprovalRequest, then (maybe) the decision and result."""
    es = [
        entry(1, "Message", "user", "ship it"),
        entry(2, "Ack", "ops", ""),
        entry(3, "ToolCall", "ops", "", tool_call_id="c1", tool_name="deploy",
              payload={"arguments": {"target": "prod"}}),
        entry(4, "ApprovalRequest", "ops", "", tool_call_id="c1", tool_name="deploy",
              payload={"request_id": "r1", "agent": "ops", "tool_name": "deploy", "risk_level": "high",
                       "arguments_display": {"target": "prod"}}),
    ]
    if decision:
        es += [
            entry(5, "ApprovalDecision", "user", "", tool_call_id="c1",
                  payload={"request_id": "r1", "decision": decision, "decided_by": "user"}),
            entry(6, "ToolResult", "ops", "", tool_call_id="c1", tool_name="deploy",
                  payload={"output": "deployed prod" if decision == "approve" else "denied",
                           "is_error": decision != "approve"}),
        ]
    return es


def test_a_parked_call_is_one_row_with_one_card_under_it():
    text = render_text(gated_call())
    lines = text.splitlines()
    assert lines[1] == '#3   ⚙ deploy({"target": "prod"}) · waiting for approval'
    assert lines[2].startswith("    ⚠ approval needed: ops wants to run deploy (risk high)")
    assert text.count("deploy (risk high)") == 1 and "asks to run" not in text
    assert "%chaz approve last" in text  # the card says what to do
    html = render_html(gated_call())
    assert html.count("class='chaz-ap'") == 1 and "running…" not in html
    assert html.index("chaz-tool") < html.index("chaz-ap'")


def test_a_decided_call_says_who_approved_it_in_its_row():
    lines = render_text(gated_call("approve")).splitlines()
    assert lines[1] == '#3   ⚙ deploy({"target": "prod"}) · ✓ approved by user → deployed prod'
    assert lines[2:] == ["… ops is working… step 2"]  # no card, no separate approval lines
    denied = render_text(gated_call("deny")).splitlines()[1]
    assert denied == '#3   ⚙ deploy({"target": "prod"}) · ✗ denied by user → ✗ denied'


def test_an_agent_cannot_decide_its_own_call_in_the_view():
    es = gated_call()
    es.append(entry(5, "ApprovalDecision", "ops", "", tool_call_id="c1",
                    payload={"request_id": "r1", "decision": "approve", "decided_by": "ops"}))
    t = Transcript()
    for e in es:
        t.add(e)
    assert t.rows[1].open_request


def test_an_ack_that_answers_several_messages_says_so():
    es = [
        entry(1, "Message", "user", "first"),
        entry(2, "Message", "user", "second"),
        entry(3, "Message", "user", "third"),
        entry(4, "Ack", "calc", "", payload={"answers": [1, 2, 3], "answers_count": 3}),
        entry(5, "Message", "calc", "all three"),
    ]
    text = render_text(es)
    assert "#4   ↳ calc answers 3 messages together" in text.splitlines()
    assert text.splitlines().index("#4   ↳ calc answers 3 messages together") == 3
    assert "answers 3 messages together" in render_html(es)
    one = [entry(1, "Message", "user", "x"), entry(2, "Ack", "calc", "", payload={"answers_count": 1})]
    old = [entry(1, "Message", "user", "x"), entry(2, "Ack", "calc", "", payload={})]
    assert "answers" not in render_text(one) and "answers" not in render_text(old)


def test_a_turn_view_ends_with_where_the_full_log_is(store):
    sid = store.create_session("calc")
    store.append(sid, EntryType.MESSAGE, "user", "hi")
    view = SessionView(store, sid, footer=f"full log: %chaz log {sid}")
    assert view.text().splitlines()[-1] == f"full log: %chaz log {sid}"
    assert f"full log: %chaz log {sid}" in view.html()
    assert view.to_json()["footer"] == f"full log: %chaz log {sid}"


def test_a_handed_over_view_keeps_what_its_output_showed(store, monkeypatch):
    import IPython.display as ipd

    shown = {}
    monkeypatch.setattr(ipd, "display", lambda obj, display_id=None, **kw: shown.__setitem__(display_id, obj))
    monkeypatch.setattr(ipd, "update_display", lambda obj, display_id=None, **kw: shown.__setitem__(display_id, obj))
    sid = store.create_session("calc")
    loop = asyncio.new_event_loop()
    try:
        view = SessionView(store, sid, status=FakeStatus("parked"), loop=loop, follow=True)
        store.append(sid, EntryType.MESSAGE, "user", "go")
        view.flush(final=True)
        view.display()
        before = shown[view.display_id]["text/plain"]
        store.append(sid, EntryType.MESSAGE, "user", "a later cell's entry")  # queued, not shown
        last = view.hand_over()
        assert last == 1 and not view.following and view.widget is None
        data = shown[view.display_id]
        assert WIDGET_MIME not in data and data["text/plain"] == before
        assert "a later cell's entry" not in data["text/plain"]  # it belongs to the later view
        loop.run_until_complete(asyncio.sleep(0.2))
        assert shown[view.display_id]["text/plain"] == before
    finally:
        loop.close()


def fill(store, sid, n, content=lambda i: f"m{i}"):
    from chaz_nb.core.store import NewEntry

    store.append_many([NewEntry(sid, EntryType.MESSAGE, "user", content(i)) for i in range(1, n + 1)])


def test_a_paged_view_shows_the_newest_page_and_says_how_to_see_the_earlier_entries(store):
    sid = store.create_session("calc")
    fill(store, sid, 120)
    view = SessionView(store, sid, status=FakeStatus("idle"), page=50)
    assert [e.seq for e in view.transcript.entries] == list(range(71, 121))
    assert view.earlier == 70 and view.first_seq == 71
    line = f"70 earlier entries: %chaz log {sid} --before 71 (or --all)"
    assert view.text().splitlines()[0] == line
    assert line in view.html()
    mime = view.to_json()
    assert (mime["earlier"], mime["first_seq"]) == (70, 71)
    assert mime["earlier_command"] == f"%chaz log {sid} --before 71"
    assert SessionView(store, sid, page=20).earlier_command() == f"%chaz log {sid} --before 101 --limit 20"
    whole = SessionView(store, sid)  # no page: the whole log, nothing left out
    assert len(whole.transcript.entries) == 120 and whole.earlier == 0 and "earlier" not in whole.to_json()
    assert "earlier entr" not in whole.text()


def test_a_window_before_a_seq_shows_the_page_that_ends_there(store):
    sid = store.create_session("calc")
    fill(store, sid, 120)
    view = SessionView(store, sid, page=50, before_seq=71)
    assert [e.seq for e in view.transcript.entries] == list(range(21, 71))
    assert view.text().splitlines()[0] == f"20 earlier entries: %chaz log {sid} --before 21 (or --all)"
    first = SessionView(store, sid, page=50, before_seq=21)
    assert [e.seq for e in first.transcript.entries] == list(range(1, 21)) and first.earlier == 0


def test_the_show_earlier_button_loads_the_previous_page_into_the_live_view(store):
    sid = store.create_session("calc")
    fill(store, sid, 118, content=lambda i: f"m{i} {EVIL}")
    call = entry(119, "ToolCall", "calc", "add", tool_call_id="c1", tool_name="add", payload={"arguments": {EVIL: 1}})
    result = entry(120, "ToolResult", "calc", "5", tool_call_id="c1", tool_name="add", payload={"output": EVIL})
    for e in (call, result):
        store.append(sid, e.entry_type, e.sender, e.content, tool_call_id=e.tool_call_id,
                     tool_name=e.tool_name, payload=e.payload)
    loop = asyncio.new_event_loop()
    try:
        view = SessionView(store, sid, status=FakeStatus("running"), loop=loop, follow=True, page=1)
        # the page holds only the result: a row of its own until its call is loaded
        assert [r.kind for r in view.transcript.rows] == ["tool"] and view.transcript.rows[0].entry.seq == 120
        state = view.widget.chaz_state  # what the page's one widget draws
        assert "119 earlier entries" in state["earlier"]
        view.frontend_event("earlier")  # the page's "show earlier" button
        assert [e.seq for e in view.transcript.entries] == [119, 120]
        assert len(view.transcript.rows) == 1 and view.transcript.rows[0].result.seq == 120  # folded again
        view.page = 50
        view.frontend_event("earlier")
        assert [e.seq for e in view.transcript.entries] == list(range(69, 121))
        assert "68 earlier entries" in state["earlier"]
        html = "".join(state["rows"])
        assert len(state["rows"]) == len(view.transcript.rows)
        assert "m69 &lt;script&gt;" in html and "<script" not in html
        view.frontend_event("earlier")
        view.frontend_event("earlier")
        assert [e.seq for e in view.transcript.entries] == list(range(1, 121)) and view.earlier == 0
        assert state["earlier"] == ""  # nothing left to load: the row is hidden
        store.append(sid, EntryType.MESSAGE, "calc", "live again")  # live entries still follow
        loop.run_until_complete(until(lambda: len(view.transcript.entries) == 121, view.on_update,
                                      what="the live entry"))
        assert view.transcript.entries[-1].content == "live again"
        view.close()
    finally:
        loop.close()


def test_a_turn_view_pages_only_its_own_part_of_the_log(store):
    sid = store.create_session("calc")
    fill(store, sid, 120)
    short = SessionView(store, sid, after_seq=100, page=50)  # the turn fits in a page
    assert [e.seq for e in short.transcript.entries] == list(range(101, 121)) and short.earlier == 0
    view = SessionView(store, sid, after_seq=10, page=50)
    assert [e.seq for e in view.transcript.entries] == list(range(71, 121)) and view.earlier == 60
    assert (view.to_json()["after_seq"], view.to_json()["earlier"]) == (10, 60)  # the renderer stops there too
    assert view.show_earlier() == 50 and view.earlier == 10
    assert view.show_earlier() == 10 and view.earlier == 0
    assert view.show_earlier() == 0
    assert [e.seq for e in view.transcript.entries] == list(range(11, 121))


def test_a_paged_view_escapes_every_agent_string_in_its_earlier_line_rows_and_widget(store):
    sid = store.create_session(EVIL)
    fill(store, sid, 80, content=lambda i: f"{EVIL} {i}")
    loop = asyncio.new_event_loop()
    try:
        view = SessionView(store, sid, status=FakeStatus("running"), loop=loop, follow=True, page=30,
                           title=EVIL, footer=EVIL)
        view.show_earlier()
        state = view.widget.chaz_state
        values = [*state["rows"], state["earlier"], state["head"], state["footer"], state["tail"]]
        for html in [view.html(), *values]:
            assert "<script" not in html
        assert "&lt;script&gt;" in view.html() and view.html().count("&lt;script&gt;alert") >= 60
        mime = view.to_json()
        assert mime["earlier"] == 20 and mime["earlier_command"] == f"%chaz log {sid} --before 21 --limit 30"
        assert mime["entries"][0]["content"] == f"{EVIL} 21"  # data for the renderer, which sets text only
        view.close()
    finally:
        loop.close()


def test_the_session_json_clips_each_string_so_a_huge_tool_output_does_not_fill_the_notebook(store):
    """The log keeps a tool's whole output (an MCP server may return megabytes); the session
    JSON saved in the notebook (and re-sent with each display update) clips each string, as the
    HTML form and the lab page answers do; the renderer shows 20,000 characters anyway."""
    from chaz_nb.notebook import labcomm

    sid = store.create_session("calc")
    huge = "z" * 900_000  # twice in the entry: within the store's entry limit
    store.append(sid, EntryType.TOOL_RESULT, "calc", huge, tool_call_id="c1", tool_name="t",
                 payload={"output": huge, "is_error": False})
    mime = SessionView(store, sid, status=FakeStatus("idle")).bundle()[MIME_TYPE]
    entry = mime["entries"][0]
    assert len(json.dumps(mime)) < 3 * labcomm.PAGE_TEXT_MAX
    assert entry["content"].startswith("z" * 1000) and entry["content"].endswith("(800000 more characters)")
    assert entry["payload"]["is_error"] is False and entry["payload"]["output"].endswith("more characters)")


# ---------------------------------------------------------------- issue 26 §5: rough edges
def approved_turn(wait_ms=9800.0, ran_ms=6.9):
    """A call a person approved after ``wait_ms``; the ToolResult's duration_ms includes the wait."""
    return [
        entry(1, "Message", "user", "drop rows"),
        entry(2, "ToolCall", "analyst", "drop_rows({})", tool_call_id="c1", tool_name="drop_rows",
              payload={"arguments": {}}),
        entry(3, "ToolResult", "analyst", "drop_rows: done", tool_call_id="c1", tool_name="drop_rows",
              payload={"output": "done", "is_error": False, "duration_ms": wait_ms + ran_ms,
                       "approval_wait_ms": wait_ms, "approval": "approved", "decided_by": "user"}),
    ]


def test_an_approved_call_names_its_run_and_its_wait_apart():
    t = Transcript(agent="analyst")
    for e in approved_turn():
        t.add(e)
    html = t.html()
    assert "<span class='chaz-tool-state'>ok · ran 6.9 ms after 9.8 s waiting for approval</span>" in html
    plain = Transcript(agent="calc")
    for e in turn():
        plain.add(e)
    assert "<span class='chaz-tool-state'>ok · 1.5 ms</span>" in plain.html()  # nobody waited: one time


def test_a_tool_row_does_not_end_with_the_agent_name_and_names_another_caller():
    t = Transcript(agent="analyst")
    for e in approved_turn():
        t.add(e)
    summary = t.html().split("<summary class='chaz-tool-summary'>")[1].split("</summary>")[0]
    assert "analyst" not in summary  # the session's own agent: not repeated at the row's end
    other = Transcript(agent="lead")
    for e in approved_turn():
        other.add(e)
    assert "<span class='chaz-tool-by'>called by analyst</span>" in other.html()


def test_a_cell_view_says_its_count_is_this_cells_and_shares_the_renderers_frame(store):
    sid = store.create_session("calc")
    for e in turn():
        store.append(sid, e.entry_type, e.sender, e.content, tool_call_id=e.tool_call_id,
                     tool_name=e.tool_name, payload=e.payload)
    store.append(sid, EntryType.MESSAGE, "user", "and 4?")
    cell = SessionView(store, sid, status=FakeStatus("idle"), after_seq=5, cell=True)
    data = cell.bundle()
    assert data[MIME_TYPE]["scope"] == "cell"
    assert "<span class='chaz-count'>1 entry in this cell</span>" in data["text/html"]
    whole = SessionView(store, sid, status=FakeStatus("idle")).bundle()
    assert "scope" not in whole[MIME_TYPE]
    # 6 entries shown as 4 rows: the Ack is the status line, the call and its result one row
    assert "<span class='chaz-count'>4 rows (6 entries)</span>" in whole["text/html"]
    # the finished view: the lab renderer's frame and header (chaz-transcript, chaz-header spans)
    assert "<div class='chaz-transcript chaz-s'><div class='chaz-header'><span class='chaz-title'>Session" in (
        whole["text/html"])


def test_the_live_widget_has_the_same_frame_and_header_as_the_finished_view(store):
    sid = store.create_session("calc")
    loop = asyncio.new_event_loop()
    try:
        view = SessionView(store, sid, status=FakeStatus("running"), loop=loop, follow=True, cell=True)
        assert "chaz-session-view" in view.widget._dom_classes  # the frame (.chaz-transcript's look)
        head = view.widget.chaz_state["head"]
        assert "<div class='chaz-header'><span class='chaz-title'>Session" in head
        assert "<span class='chaz-status chaz-status-running'>running</span>" in head
        assert "<span class='chaz-count'>0 entries in this cell</span>" in head
        view.close()
    finally:
        loop.close()


def test_a_finished_view_does_not_say_the_agent_is_working(store):
    sid = store.create_session("calc")
    store.append(sid, EntryType.MESSAGE, "user", "hi")
    store.append(sid, EntryType.ACK, "calc", "calc is working")  # a run whose reply this view never got
    data = SessionView(store, sid, status=FakeStatus("idle")).bundle()
    assert "working" not in data["text/plain"] and "working" not in data["text/html"]


def test_a_cell_views_count_matches_the_rows_it_shows(store):
    """Not "4 entries in this cell" over a view showing 2 rows: the count is of what is shown."""
    sid = store.create_session("calc")
    for e in turn():
        store.append(sid, e.entry_type, e.sender, e.content, tool_call_id=e.tool_call_id,
                     tool_name=e.tool_name, payload=e.payload)
    cell = SessionView(store, sid, status=FakeStatus("idle"), after_seq=1, cell=True)
    data = cell.bundle()
    shown = [line for line in cell.text().splitlines()[1:] if line.strip()]
    assert len(shown) == 2, shown  # the tool row and the reply
    assert "<span class='chaz-count'>2 rows (4 entries) in this cell</span>" in data["text/html"]
    assert data[MIME_TYPE]["count_label"] == "2 rows (4 entries) in this cell"  # what the lab renderer shows


def test_a_run_waiting_for_the_model_library_says_so_until_its_request_leaves(store):
    """The first turn after %load_ext waits seconds for litellm's import: the status line says
    so, and the run's Ack (written as the request leaves) replaces it with "working"."""
    sid = store.create_session("calc")
    store.append(sid, EntryType.MESSAGE, "user", "add 2 and 3")
    loading = [True]
    view = SessionView(store, sid, status=FakeStatus("running"), loading=lambda: loading[0], widget=False)
    assert view.text().splitlines()[-1] == "… loading the model library…"
    assert "<div class='chaz-status-line'>loading the model library…</div>" in view.html()
    loading[0] = False
    store.append(sid, EntryType.ACK, "calc", "calc is working")
    after = SessionView(store, sid, status=FakeStatus("running"), loading=lambda: loading[0], widget=False)
    assert after.text().splitlines()[-1] == "… calc is working… step 1"
    idle = SessionView(store, sid, status=FakeStatus("idle"), loading=lambda: True, widget=False)
    assert "loading the model library" not in idle.text()  # a run that is over waits for nothing
def test_show_earlier_leaves_the_live_widgets_output_alone(store, monkeypatch):
    """Issue 42 #20: JupyterLab draws a widget view again for each update of its output (a new
    view, a blank frame, the text typed in a card's Edit box gone). "show earlier" reaches the
    live widget only; the output's static forms are updated once the widget is gone."""
    import IPython.display

    shown, updates = [], []
    monkeypatch.setattr(IPython.display, "display", lambda data, **kw: shown.append(data))
    monkeypatch.setattr(IPython.display, "update_display", lambda data, **kw: updates.append(data))
    sid = store.create_session("calc")
    fill(store, sid, 30)
    loop = asyncio.new_event_loop()
    try:
        view = SessionView(store, sid, status=FakeStatus("running"), loop=loop, follow=True, page=5)
        view.display()
        assert len(shown) == 1 and WIDGET_MIME in shown[0]
        state = view.widget.chaz_state
        view.frontend_event("earlier")
        assert len(state["rows"]) == 10 and "20 earlier entries" in state["earlier"]  # the widget has the page
        assert updates == []  # and the output was not drawn again
        view.close()
    finally:
        loop.close()
