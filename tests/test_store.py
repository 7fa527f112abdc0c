import logging
import os

import duckdb
import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store.migrations import MIGRATIONS
from chaz_nb.core.store import NewEntry, SessionStore, StoreError, StoreLockedError


@pytest.fixture
def store(backend_store):
    """These cases run on DuckDB and on PostgreSQL (tests/conftest.py's backend_store)."""
    return backend_store


def duckdb_only(store):
    if getattr(store, "dialect", "duckdb") != "duckdb":
        pytest.skip("DuckDB's in-memory log cache; the PostgreSQL store caches nothing others write")


def test_append_allocates_gapless_seq_per_session(store):
    a = store.create_session("alice")
    b = store.create_session("bob")
    seqs = [store.append(s, EntryType.MESSAGE, "user", str(i)).seq for i, s in enumerate([a, b, a, a, b])]
    assert seqs == [1, 1, 2, 3, 2]
    assert [e.content for e in store.entries(a)] == ["0", "2", "3"]
    assert store.latest(b).content == "4"
    assert store.latest(store.create_session("carol")) is None


def test_entry_round_trips_every_field(store):
    s = store.create_session("alice")
    written = store.append(
        s, EntryType.TOOL_RESULT, "alice", "add: 3", tool_call_id="c1", tool_name="add",
        payload={"output": "3", "is_error": False, "nested": {"x": [1, 2]}},
    )
    read = store.entries(s)[0]
    assert read == written
    assert read.payload["nested"] == {"x": [1, 2]}
    assert store.entry(written.id) == written


def test_sessions_record_agent_kind_parent_and_depth(store):
    parent = store.create_session("alice")
    child = store.create_session("bob", "child", parent_id=parent)
    info = store.session(child)
    assert (info.agent, info.kind, info.parent_id, info.depth) == ("bob", "child", parent, 1)
    assert [s.id for s in store.sessions()] == [parent, child]


def test_unknown_session_is_a_clear_error_and_writes_nothing(store):
    with pytest.raises(StoreError, match="no session 99"):
        store.append(99, EntryType.MESSAGE, "user", "hi")
    with pytest.raises(StoreError, match="no session 42"):
        store.session(42)
    assert store.sql("SELECT count(*) FROM entries").fetchall() == [(0,)]


def test_on_write_callbacks_run_after_commit_in_order(store):
    s = store.create_session("alice")
    seen = []

    def first(entry):
        # The entry is committed before any callback sees it.
        seen.append(("first", entry.seq, store.latest(s).id == entry.id))

    store.subscribe(first)
    store.subscribe(lambda e: seen.append(("second", e.seq, None)))
    store.append(s, EntryType.MESSAGE, "user", "a")
    store.append(s, EntryType.MESSAGE, "user", "b")
    assert seen == [("first", 1, True), ("second", 1, None), ("first", 2, True), ("second", 2, None)]


def test_a_raising_callback_is_logged_and_breaks_nothing(store, caplog):
    s = store.create_session("alice")
    seen = []
    store.subscribe(lambda e: 1 / 0)
    store.subscribe(lambda e: seen.append(e.seq))
    with caplog.at_level(logging.ERROR):
        entry = store.append(s, EntryType.MESSAGE, "user", "still written")
    assert entry.seq == 1 and seen == [1]
    assert "on_write callback" in caplog.text
    assert store.latest(s).content == "still written"


def test_callbacks_that_append_see_entries_in_commit_order(store):
    s = store.create_session("alice")
    order = []

    def reply_once(entry):
        if entry.sender == "user":
            store.append(s, EntryType.ACK, "alice", "working")

    store.subscribe(reply_once)
    store.subscribe(lambda e: order.append(e.seq))
    store.append(s, EntryType.MESSAGE, "user", "hi")
    assert order == [1, 2]


def test_unsubscribe_stops_callbacks(store):
    s = store.create_session("alice")
    seen = []
    unsubscribe = store.subscribe(lambda e: seen.append(e.seq))
    store.append(s, EntryType.MESSAGE, "user", "a")
    unsubscribe()
    unsubscribe()  # twice is harmless
    store.append(s, EntryType.MESSAGE, "user", "b")
    assert seen == [1]


def test_append_many_is_one_transaction(store):
    s = store.create_session("alice")
    batch = store.append_many(
        [NewEntry(s, EntryType.TOOL_CALL, "alice", "a"), NewEntry(s, EntryType.TOOL_RESULT, "alice", "b")]
    )
    assert [e.seq for e in batch] == [1, 2]
    with pytest.raises(StoreError):
        store.append_many([NewEntry(s, EntryType.MESSAGE, "u", "ok"), NewEntry(404, EntryType.MESSAGE, "u", "bad")])
    # nothing of the failed batch is written and seq stays gapless
    assert [e.seq for e in store.entries(s)] == [1, 2]
    assert store.append(s, EntryType.MESSAGE, "user", "next").seq == 3


def test_file_store_survives_reopen_and_continues_seq(db_path):
    with SessionStore(db_path) as first:
        s = first.create_session("alice")
        first.append(s, EntryType.MESSAGE, "user", "one")
    with SessionStore(db_path) as second:
        assert second.append(s, EntryType.MESSAGE, "user", "two").seq == 2
        assert second.create_session("bob") == s + 1
        assert [e.content for e in second.entries(s)] == ["one", "two"]


def test_older_file_is_migrated_in_place(db_path):
    old = SessionStore(db_path, migrations=MIGRATIONS[:1])
    assert old.schema_version == 1
    # the old release wrote sessions without title/metadata
    old._con.execute(
        "INSERT INTO sessions (id, agent, kind, parent_id, depth, created_at) "
        "VALUES (1, 'alice', 'chat', NULL, 0, now()::TIMESTAMP)"
    )
    old._con.execute(
        "INSERT INTO entries VALUES "
        "(1, 1, 1, 'Message', 'user', 'from the old release', NULL, NULL, '{}', now()::TIMESTAMP)"
    )
    old.close()
    with SessionStore(db_path) as new:
        assert new.schema_version == len(MIGRATIONS)
        assert new.entries(1)[0].content == "from the old release"
        assert new.session(1).title is None
        assert new.append(1, EntryType.MESSAGE, "user", "after upgrade").seq == 2
        applied = [r[0] for r in new.sql("SELECT name FROM _chaz_migrations ORDER BY name").fetchall()]
        assert applied == [m.name for m in MIGRATIONS]


def test_a_new_store_builds_the_audit_views_once(db_path, monkeypatch):
    """A new file runs every migration: the views are built in their newest form once (they
    were built by each of the seven steps that change them: ~20 ms each of a first %load_ext)."""
    from chaz_nb.core import audit

    built = []
    real = audit.create_audit_views
    monkeypatch.setattr(audit, "create_audit_views", lambda con: (built.append(1), real(con))[1])
    with SessionStore(db_path) as store:
        assert built == [1]
        views = {r[0] for r in store.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert {"tool_calls", "runs", "approvals", "messages", "branches", "data_egress"} <= views
        assert "forked_from" in {r[0] for r in store.sql("DESCRIBE runs").fetchall()}  # the newest form (013)


def test_each_recorded_step_has_its_views(db_path, monkeypatch):
    """Views are built with the last pending step that changes them, so a file upgraded in two
    goes (003 recorded, then the rest) ends with the newest views, each go building them once."""
    from chaz_nb.core import audit

    built = []
    real = audit.create_audit_views
    monkeypatch.setattr(audit, "create_audit_views", lambda con: (built.append(1), real(con))[1])
    with SessionStore(db_path, migrations=MIGRATIONS[:4]) as old:
        assert "runs" in {r[0] for r in old.sql("SELECT view_name FROM duckdb_views()").fetchall()}
        assert "forked_from" not in {r[0] for r in old.sql("DESCRIBE runs").fetchall()}
    with SessionStore(db_path) as new:
        assert "forked_from" in {r[0] for r in new.sql("DESCRIBE runs").fetchall()}
    with SessionStore(db_path):  # nothing pending: nothing built
        pass
    assert built == [1, 1]


def test_session_ceiling_is_kept_with_the_session_across_reopen(db_path):
    ceiling = '{"tools": ["add"], "auto_approve": [[]], "call_depth": 1, "max_call_depth": 3}'
    with SessionStore(db_path) as first:
        child = first.create_session("child", "child", parent_id=first.create_session("parent"), ceiling=ceiling)
        first.update_session_metadata(child, {"note": "metadata is rewritten whole"})
    with SessionStore(db_path) as second:
        assert second.session(child).ceiling == ceiling
        assert [s.ceiling for s in second.sessions()] == [None, ceiling]
        assert second.sql("SELECT ceiling->>'$.tools[0]' FROM sessions WHERE id = ?", [child]).fetchall() == [("add",)]


def test_read_only_file_of_an_older_schema_reads_sessions_without_a_ceiling(db_path):
    with SessionStore(db_path, migrations=MIGRATIONS[:4]) as old:
        sid = old.create_session("alice")
    with SessionStore(db_path, read_only=True) as reader:
        assert reader.session(sid).ceiling is None and reader.sessions()[0].agent == "alice"


def test_file_from_a_newer_release_is_refused(db_path):
    with SessionStore(db_path):
        pass
    con = duckdb.connect(db_path)
    con.execute("INSERT INTO _chaz_migrations VALUES ('999_future', now()::TIMESTAMP)")
    con.close()
    with pytest.raises(RuntimeError, match="newer chaz_nb"):
        SessionStore(db_path)


def test_sql_queries_the_store(store):
    s = store.create_session("alice")
    store.append(s, EntryType.MESSAGE, "user", "hi", payload={"k": "v"})
    rows = store.sql("SELECT entry_type, json_extract_string(payload, '$.k') FROM entries").fetchall()
    assert rows == [("Message", "v")]


def test_locked_file_gives_a_one_line_error(db_path, tmp_path):
    import subprocess
    import sys
    import textwrap

    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, duckdb
            con = duckdb.connect({db_path!r})
            print("ready", flush=True)
            sys.stdin.readline()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError) as info:
            SessionStore(db_path)
        message = str(info.value)
        assert "\n" not in message and db_path in message and "another" in message
    finally:
        holder.communicate("\n", timeout=30)


def test_closed_store_says_so(store):
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.entries(1)


def test_redaction_applies_before_the_write(tmp_path):
    path = str(tmp_path / "r.duckdb")
    with SessionStore(path, redact=lambda t: t.replace("sk-secret", "[redacted]")) as s:
        sid = s.create_session("alice")
        s.append(sid, EntryType.ERROR, "alice", "bad key sk-secret", payload={"detail": ["sk-secret"]})
        e = s.latest(sid)
        assert "sk-secret" not in e.content and e.payload["detail"] == ["[redacted]"]


def test_cached_logs_match_the_database(store, monkeypatch):
    import chaz_nb.core.store.log_cache as store_module

    duckdb_only(store)
    monkeypatch.setattr(store_module, "LOG_CACHE_SESSIONS", 3)
    monkeypatch.setattr(store_module, "LOG_CACHE_MAX_ENTRIES", 4)
    sessions = [store.create_session(f"a{i}") for i in range(5)]
    for round_ in range(6):
        for s in sessions:
            store.entries(s)  # read (and cache) between writes
            store.append(s, EntryType.MESSAGE, "user", f"{s}-{round_}")
            store.append_many([NewEntry(s, EntryType.ACK, "a", "x"), NewEntry(s, EntryType.TOOL_CALL, "a", "y")])
    for s in sessions:
        from_db = [r[0] for r in store.execute("SELECT seq FROM entries WHERE session_id = ? ORDER BY seq", [s])]
        assert [e.seq for e in store.entries(s)] == from_db == list(range(1, 19))
        assert [e.content for e in store.entries(s, after_seq=15)] == [f"{s}-5", "x", "y"]
        assert [e.seq for e in store.entries(s, types=[EntryType.MESSAGE])] == [1, 4, 7, 10, 13, 16]
    assert len(store._logs) <= 3


@pytest.mark.parametrize(
    "query",
    [
        "DELETE FROM entries",
        "WITH d AS (DELETE FROM entries RETURNING id) SELECT count(*) FROM d",
        "EXPLAIN ANALYZE UPDATE entries SET content = 'changed'",
        "COMMIT",  # ends only its own transaction
    ],
)
def test_read_refuses_writes_in_the_database(store, query):
    s = store.create_session("alice")
    store.append(s, EntryType.MESSAGE, "user", "kept")
    import psycopg

    try:
        store.read(query)
    except duckdb.Error as exc:
        assert "read-only" in str(exc)
    except psycopg.Error as exc:
        assert "read-only" in str(exc) or "READ ONLY" in str(exc) or "COMMIT" in query
    assert store.read("SELECT content FROM entries") == [("kept",)]
    assert store.append(s, EntryType.MESSAGE, "user", "still writable").seq == 2


@pytest.mark.parametrize("path", [":memory:", "file"])
def test_the_store_instance_touches_no_file_and_keeps_its_settings(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    if path == "file":
        path = str(tmp_path / "db" / "s.duckdb")
    with SessionStore(path) as store:
        s = store.create_session("alice")
        store.append(s, EntryType.MESSAGE, "user", "hi")
        for query in ("COPY entries TO 'out.csv'", "EXPORT DATABASE 'exported'", "ATTACH 'new.duckdb' AS n",
                      "SELECT * FROM read_csv('x.csv')", "SET threads = 1", "SET enable_external_access = true"):
            with pytest.raises(
                duckdb.Error, match="disabled by configuration|configuration has been locked|while database is running"
            ):
                store.execute(query)
        assert store.entries(s)[0].content == "hi"
    assert sorted(os.listdir(tmp_path)) == (["db"] if path != ":memory:" else [])
    if path != ":memory:":  # and the store's own file works as before
        with SessionStore(path) as again:
            assert [e.content for e in again.entries(1)] == ["hi"]


def test_read_page_gives_the_newest_entries_in_seq_order_and_pages_back(store):
    s = store.create_session("alice")
    other = store.create_session("bob")
    store.append_many([NewEntry(s, EntryType.MESSAGE, "user", f"m{i}") for i in range(1, 12)])
    store.append(other, EntryType.MESSAGE, "user", "not alice's")
    page = store.read_page(s, limit=4)
    assert [e.seq for e in page] == [8, 9, 10, 11]
    assert [e.content for e in page] == ["m8", "m9", "m10", "m11"]
    assert page[0].seq - 1 == 7  # entries before the page (seqs are gapless from 1)
    back = store.read_page(s, before_seq=page[0].seq, limit=4)
    assert [e.seq for e in back] == [4, 5, 6, 7]
    assert [e.seq for e in store.read_page(s, before_seq=4, limit=4)] == [1, 2, 3]
    assert store.read_page(s, before_seq=1, limit=4) == []
    assert [e.seq for e in store.read_page(s, limit=100)] == list(range(1, 12))
    assert store.read_page(s, limit=0) == []
    assert store.read_page(store.create_session("carol"), limit=5) == []
    assert store.read_page(s, limit=4) == store.entries(s, after_seq=7)


def test_read_page_takes_any_whole_number_limit_or_seq_on_both_back_ends(store):
    """``%chaz log --limit 99999999999999999999`` and a frontend's page request pass their
    numbers through: past a 64-bit integer PostgreSQL refused the LIMIT (bigint out of range)."""
    s = store.create_session("alice")
    store.append_many([NewEntry(s, EntryType.MESSAGE, "user", f"m{i}") for i in range(1, 6)])
    for huge in (2**63, 10**20):
        assert [e.seq for e in store.read_page(s, limit=huge)] == [1, 2, 3, 4, 5]
        assert [e.seq for e in store.read_page(s, before_seq=huge, limit=huge)] == [1, 2, 3, 4, 5]
    assert store.read_page(s, before_seq=-(10**20), limit=3) == []
    assert store.read_page(10**20, limit=10**20) == []


def test_read_page_is_right_across_a_gap_in_the_seqs(store):
    duckdb_only(store)  # the seq-range read; PostgreSQL reads the index backwards
    s = store.create_session("alice")
    store.append_many([NewEntry(s, EntryType.MESSAGE, "user", f"m{i}") for i in range(1, 11)])
    store._con.execute("DELETE FROM entries WHERE session_id = ? AND seq IN (7, 8)", [s])  # not done by chaz_nb
    assert [e.seq for e in store.read_page(s, limit=4)] == [5, 6, 9, 10]
    assert [e.seq for e in store.read_page(s, before_seq=99, limit=3)] == [6, 9, 10]
    assert [e.seq for e in store.read_page(s, before_seq=5, limit=3)] == [2, 3, 4]
    assert [e.seq for e in store.read_page(s, limit=10**20)] == [1, 2, 3, 4, 5, 6, 9, 10]


def test_a_failed_batch_leaves_nothing_written_and_nothing_for_the_next_write(db_path):
    """The rows of a batch that fails are neither in the file nor held back for a later commit
    (a store whose appends are DuckDB commits; the journal's own failure: test_journal.py)."""
    with SessionStore(db_path, journal=False) as store:
        s = store.create_session("alice")
        store.append(s, EntryType.MESSAGE, "user", "one")
        taken = store._next_entry_id  # a row chaz_nb did not write holds the next id
        store._con.execute("INSERT INTO entries (id, session_id, seq, entry_type, sender, created_at) "
                           "VALUES (?, 999, 1, 'Message', 'x', now()::TIMESTAMP)", [taken])
        with pytest.raises(StoreError, match="could not write entry"):
            store.append_many([NewEntry(s, EntryType.MESSAGE, "user", "two"),
                               NewEntry(s, EntryType.MESSAGE, "user", "three")])
        store._con.execute("DELETE FROM entries WHERE id = ?", [taken])
        four = store.append(s, EntryType.MESSAGE, "user", "four")
        assert (four.id, four.seq) == (taken, 2)
        assert store.execute("SELECT content FROM entries ORDER BY id") == [("one",), ("four",)]
    with SessionStore(db_path) as again:
        assert [e.content for e in again.entries(s)] == ["one", "four"]


def test_text_utf8_cannot_carry_is_stored_with_a_stand_in_not_refused(store):
    """A tool, MCP server or model can hand back a lone surrogate (JSON's ``"\\ud800"``) or a NUL;
    DuckDB refused the surrogate and PostgreSQL both, so the ToolResult or reply was never
    written and its run hung with no closing entry. Each is stored as U+FFFD instead."""
    s = store.create_session("alice")
    entry = store.append(
        s, EntryType.TOOL_RESULT, "ag\ud800ent", "out\ud800put \x00 end",
        tool_call_id="call\udfff", tool_name="t\ud800",
        payload={"output": "x\udfffy\x00", "k\ud800": ["\ud83d"], "n": 1},
    )
    for got in (entry, store.entries(s)[-1]):
        nul = "\ufffd" if getattr(store, "dialect", "duckdb") == "postgresql" else "\x00"  # PostgreSQL text has no NUL
        assert got.content == f"out\ufffdput {nul} end"
        assert got.sender == "ag\ufffdent"
        assert (got.tool_call_id, got.tool_name) == ("call\ufffd", "t\ufffd")
        assert got.payload["k\ufffd"] == ["\ufffd"]
        assert got.payload["output"].startswith("x\ufffdy")
    assert store.append(s, EntryType.MESSAGE, "user", "next").seq == entry.seq + 1


def test_a_key_the_model_gives_as_a_tool_name_or_call_id_is_redacted(store, monkeypatch):
    """The model names the tool it calls: one that had read a key (a tool's raw output reaches
    the model) could call a tool named after it, and the ToolCall/ToolResult tool_name column,
    the tool_calls view and the audit table kept the key while their content said [REDACTED]."""
    monkeypatch.setenv("OPENAI_API_KEY", "zq9-secret-value-123456")
    s = store.create_session("alice")
    store.append(s, EntryType.TOOL_CALL, "alice", "x", tool_name="zq9-secret-value-123456",
                 tool_call_id="sk-proj-ABCDEFGHIJKLMNOPQRSTUV")
    rows = store.read("SELECT tool_name, tool_call_id FROM entries")
    assert rows == [("[REDACTED]", "[REDACTED]")]
    assert store.read("SELECT tool FROM tool_calls") == [("[REDACTED]",)]


def test_nan_and_infinity_in_a_payload_are_written_as_text_on_both_back_ends(store):
    """Python's json reads ``NaN``/``Infinity`` in a model's tool arguments; PostgreSQL's jsonb
    refused them, so the ToolCall (and the ToolResult beside it) was never written while the
    tool ran. Both stores write such a number as its text, as JSON has no other spelling."""
    s = store.create_session("alice")
    entry = store.append(s, EntryType.TOOL_CALL, "alice", "echo(...)", tool_name="echo",
                         payload={"arguments": {"x": float("nan"), "y": [float("inf"), -float("inf")], "z": 1.5}})
    for got in (entry, store.entries(s)[-1]):
        assert got.payload["arguments"] == {"x": "NaN", "y": ["Infinity", "-Infinity"], "z": 1.5}
    assert store.read("SELECT count(*) FROM tool_calls") == [(1,)]
