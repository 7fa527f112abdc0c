"""The shared group-commit writer (core/writer.py): ``write``, ``write_behind``, ``hurry``.

An entry written behind (a run's Ack) is committed within the commit window without anyone
waiting on it, sooner when a ``write`` comes (one transaction, in request order) or when
someone hurries it; closing the store commits whatever is still queued.
"""

import asyncio

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.store import NewEntry, SessionStore
from chaz_nb.errors import StoreError

from waiting import until


@pytest.fixture
def store(backend_store):
    return backend_store


@pytest.fixture
def commits(store):
    """The batches ``append_many`` commits, as lists of entry contents."""
    seen: list[list[str]] = []
    append_many = store.append_many

    def counting(items):
        items = list(items)
        seen.append([i.content for i in items])
        return append_many(items)

    store.append_many = counting
    return seen


def note(session: int, text: str) -> NewEntry:
    return NewEntry(session, T.ACK, "assistant", text)


async def test_an_entry_written_behind_commits_within_the_window_with_no_one_waiting(store, commits):
    session = store.create_session("assistant")
    future = store.write_behind([note(session, "working")])
    await asyncio.sleep(0)
    assert commits == [] and not future.done()  # not at the next loop turn: it waits for company
    entries = await until(lambda: store.entries(session), store.subscribe, what="the entry written behind")
    assert [e.content for e in entries] == ["working"]
    assert [e.content for e in await future] == ["working"]


async def test_a_write_takes_the_entries_queued_behind_into_its_commit_in_request_order(store, commits):
    session = store.create_session("assistant")
    behind = store.write_behind([note(session, "ack")], window=60)
    reply = await store.write_one(session, T.MESSAGE, "assistant", "reply")
    assert commits == [["ack", "reply"]]  # one transaction, the queued entry first
    ack = (await behind)[0]
    assert ack.id < reply.id and ack.seq < reply.seq


async def test_hurry_commits_the_queued_entries_at_the_next_loop_turn(store, commits):
    session = store.create_session("assistant")
    future = store.write_behind([note(session, "ack")], window=60)  # an hour would do as well
    store.hurry()
    entries = await asyncio.wait_for(future, 30)
    assert [e.content for e in entries] == ["ack"] and commits == [["ack"]]


async def test_closing_the_store_commits_a_write_queued_in_the_same_loop_turn(tmp_path):
    path = str(tmp_path / "s.duckdb")
    store = SessionStore(path)
    session = store.create_session("assistant")
    written = asyncio.ensure_future(store.write_one(session, T.MESSAGE, "assistant", "reply"))
    await asyncio.sleep(0)  # the write is queued, its commit due at the next loop turn
    assert not written.done()
    store.close()  # before that turn (a kernel shutting down): the write must not be lost
    assert (await written).content == "reply"
    with SessionStore(path) as reopened:
        assert [e.content for e in reopened.entries(session)] == ["reply"]


async def test_closing_the_store_commits_entries_written_behind(tmp_path):
    path = str(tmp_path / "s.duckdb")
    store = SessionStore(path)
    session = store.create_session("assistant")
    behind = store.write_behind([note(session, "ack")], window=60)
    store.close()
    assert [e.content for e in await behind] == ["ack"]
    with SessionStore(path) as reopened:
        assert [e.content for e in reopened.entries(session)] == ["ack"]


# ------------------------------------------------------------------ entry size
LIMIT = 20_000


def test_a_message_over_the_entry_limit_is_refused_in_one_line_and_nothing_is_lost(store):
    store.max_entry_chars = LIMIT
    s = store.create_session("assistant")
    kept = store.append(s, T.MESSAGE, "user", "before")
    with pytest.raises(StoreError) as refused:
        store.append(s, T.MESSAGE, "user", "x" * (LIMIT + 1))
    message = str(refused.value)
    assert "\n" not in message and message.startswith(
        f"Message of {LIMIT + 1:,} characters is over the entry limit of {LIMIT:,} (CHAZ_MAX_ENTRY_CHARS)")
    assert [e.content for e in store.entries(s)] == [kept.content]
    assert store.append(s, T.MESSAGE, "user", "after").seq == 2  # the store goes on, no gap


async def test_a_tool_output_over_the_entry_limit_is_clipped_saying_by_how_much(store):
    store.max_entry_chars = LIMIT
    s = store.create_session("assistant")
    key = "plain-looking-value-0123456789abcdef"
    output = "o" * (LIMIT // 2 - 10) + key + "p" * 5_000_000  # 5 MB, a key across the clip
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVICE_API_KEY", key)
        [entry] = await store.write([NewEntry(s, T.TOOL_RESULT, "system", output, "c1", "dump",
                                              {"output": output, "is_error": False})])
    stored = [entry.content, entry.payload["output"]]
    for text in stored:
        assert text.startswith("ooo") and "more characters clipped: an entry holds at most 20,000" in text
        assert not any(key[i:i + 8] in text for i in range(len(key) - 7))
    assert sum(len(t) for t in stored) <= LIMIT + 500
    assert store.entries(s)[0].payload["is_error"] is False


def test_the_entry_limit_comes_from_the_environment_or_is_one_line_error(monkeypatch):
    from chaz_nb.core.writer import MAX_ENTRY_CHARS, max_entry_chars

    assert max_entry_chars({}) == MAX_ENTRY_CHARS
    assert max_entry_chars({"CHAZ_MAX_ENTRY_CHARS": "50_000"}) == 50_000
    with pytest.raises(StoreError, match="CHAZ_MAX_ENTRY_CHARS='lots': give the most characters"):
        max_entry_chars({"CHAZ_MAX_ENTRY_CHARS": "lots"})
    monkeypatch.setenv("CHAZ_MAX_ENTRY_CHARS", "30000")
    with SessionStore(":memory:") as opened:
        assert opened.max_entry_chars == 30_000


async def test_a_run_whose_tool_returns_megabytes_goes_on_and_a_huge_message_is_refused(store):
    from chaz_nb.engine.tools import tool
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    @tool
    def dump() -> str:
        """Return a lot."""
        return "d" * 5_000_000

    store.max_entry_chars = LIMIT
    agent = Agent("a", model="chaz/script", script=[{"tool": "dump", "args": {}}, "got it"], tools=["dump"])
    server = Server(store, [agent], [dump])
    s = server.current_session("a")
    assert (await (await server.send(s, "go")).wait()).content == "got it"
    [result] = [e for e in store.entries(s) if e.entry_type is T.TOOL_RESULT]
    output = result.payload["output"]
    assert output.startswith("ddd") and "4,99" in output and "more characters clipped" in output
    with pytest.raises(StoreError, match="over the entry limit"):
        await server.send(s, "y" * (LIMIT + 1))
    assert [e.content for e in store.entries(s) if e.entry_type is T.MESSAGE] == ["go", "got it"]
    await server.stop()


async def test_a_models_reply_over_the_entry_limit_is_clipped_and_the_run_closes(store):
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    store.max_entry_chars = LIMIT
    server = Server(store, [Agent("a", model="chaz/script", script=["y" * (3 * LIMIT)])])
    s = server.current_session("a")
    reply = await (await server.send(s, "go")).wait()
    assert reply.entry_type is T.MESSAGE and reply.content.startswith("yyy")
    assert "more characters clipped: an entry holds at most 20,000" in reply.content
    assert server.session_status(s) == "idle"
    await server.stop()


async def test_flush_when_idle_commits_once_nothing_else_is_ready_to_run(store):
    """A run calls it as its model request leaves: the commit waits while the loop has work
    (a chain of callbacks here, litellm's steps in a run), not for the window (an hour)."""
    sid = store.create_session("a")
    loop = asyncio.get_running_loop()
    left = [5]

    def busy() -> None:  # the loop is not idle while this chain runs
        left[0] -= 1
        if left[0]:
            loop.call_soon(busy)

    future = store.write_behind([NewEntry(sid, T.ACK, "a", "working")], window=3600)
    busy()
    store.flush_when_idle()
    at_commit: list[int] = []
    store.subscribe(lambda e: at_commit.append(left[0]))
    [ack] = await asyncio.wait_for(future, 10)
    assert at_commit == [0] and ack.content == "working"


async def test_undelivered_says_whether_an_entrys_callbacks_are_still_to_come(store):
    sid = store.create_session("a")
    seen: list[tuple[int, bool, bool]] = []

    def on_write(entry) -> None:
        if entry.content == "first":
            second = store.append(sid, T.MESSAGE, "a", "second")  # queued behind this callback
            seen.append((second.id, store.undelivered(second), store.undelivered(entry)))

    store.subscribe(on_write)
    first = store.append(sid, T.MESSAGE, "a", "first")
    [(second_id, second_waits, first_waits)] = seen
    assert second_waits and not first_waits and second_id == first.id + 1
    assert not store.undelivered(store.entry(second_id))


# ------------------------------------------------------- statements joining a commit
def budget_row(budget_id: str, seen: list, failed: list | None = None):
    """A ``join_commit`` source: one row of ``run_budgets`` (a table of both stores)."""
    from chaz_nb.core.store import utcnow
    from chaz_nb.core.writer import Statement

    def source():
        return [Statement(
            "INSERT INTO run_budgets (id, root_agent, max_spawns, max_model_calls, spawns, model_calls, created_at)"
            " VALUES (?, 'a', 1, 1, 0, 0, ?) RETURNING id", [budget_id, utcnow()],
            landed=lambda rows: seen.append([tuple(r) for r in rows]),
            failed=lambda exc: (failed if failed is not None else seen).append(exc))]

    return source


async def test_a_joined_statement_rides_in_the_commit_of_the_entries_written_with_it(store):
    """Issue 30: the store's own rows (a run's budget) go in the entries' transaction, not a
    commit of their own; without ``hurry`` they wait for the entries' commit, and they land
    before the entries' callbacks run."""
    session = store.create_session("assistant")
    commits: list[tuple[list[str], int]] = []
    real = store._commit_with

    def commit_with(items, statements):
        commits.append(([i.content for i in items], len(statements)))
        return real(items, statements)

    store._commit_with = commit_with
    seen: list = []
    at_callback: list = []
    store.subscribe(lambda e: at_callback.append(list(seen)))
    behind = store.write_behind([note(session, "ack")], window=3600)
    store.join_commit(budget_row("entry:1", seen), hurry=False)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert commits == [] and seen == []  # no hurry: it waits with the Ack
    reply = await store.write_one(session, T.MESSAGE, "assistant", "reply")
    assert commits == [(["ack", "reply"], 1)]  # one transaction: both entries and the row
    assert seen == [[("entry:1",)]] and at_callback == [seen, seen]
    assert [e.content for e in await behind] == ["ack"] and reply.content == "reply"
    assert [tuple(r) for r in store.execute("SELECT id FROM run_budgets")] == [("entry:1",)]


async def test_a_statement_the_store_refuses_does_not_sink_the_entries_of_its_commit(store):
    session = store.create_session("assistant")
    seen: list = []
    failed: list = []
    store.join_commit(budget_row("dup", seen))
    await until(lambda: seen, store.subscribe, what="the first row")
    store.join_commit(budget_row("dup", seen, failed), hurry=False)  # the same id: refused
    reply = await store.write_one(session, T.MESSAGE, "assistant", "reply")
    assert reply.content == "reply" and [e.content for e in store.entries(session)] == ["reply"]
    assert len(seen) == 1 and len(failed) == 1 and isinstance(failed[0], StoreError)


async def test_closing_the_store_commits_a_joined_statement(tmp_path):
    path = str(tmp_path / "s.duckdb")
    store = SessionStore(path)
    seen: list = []
    store.join_commit(budget_row("entry:9", seen))
    store.close()
    assert seen == [[("entry:9",)]]
    with SessionStore(path) as reopened:
        assert [tuple(r) for r in reopened.execute("SELECT id FROM run_budgets")] == [("entry:9",)]


async def test_commit_queued_inside_a_commit_waits_so_callbacks_keep_commit_order(store):
    """A statement's ``landed`` (a budget's fallback) asking for the queued entries at once must
    not commit them inside the commit under way: their callbacks would come before its own."""
    from chaz_nb.core.writer import Statement

    session = store.create_session("assistant")
    order: list[str] = []
    store.subscribe(lambda e: order.append(e.content))
    later: list = []

    def landed(rows) -> None:
        later.append(store.write_behind([note(session, "second")], window=3600))
        store.commit_queued()  # refused: a commit is under way

    store.join_commit(lambda: [Statement("SELECT 1", [], landed=landed, failed=lambda exc: None)], hurry=False)
    first = await store.write_one(session, T.MESSAGE, "assistant", "first")
    assert order == ["first"] and not later[0].done()
    store.hurry()
    [second] = await later[0]
    assert order == ["first", "second"] and second.id == first.id + 1
