"""The shared group-commit writer (core/writer.py): ``write``, ``write_behind``, ``hurry``.

An entry written behind (a run's Ack) is committed within the commit window without anyone
waiting on it, sooner when a ``write`` comes (one transaction, in request order) or when
someone hurries it; closing the store commits whatever is still queued.
"""

import asyncio

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.store import NewEntry, SessionStore

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
