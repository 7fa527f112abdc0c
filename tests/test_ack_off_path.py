"""The run's Ack commits while the model call runs: the run never waits on it (issue 14).

A store whose Ack write is held on an event shows it: the model is called while the Ack has
not landed; a tool runs, and every later entry is written, only once it has; on_write order
is commit order; a run stopped while its Ack is held is still closed once the Ack lands.
"""

import asyncio

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.writer import COMMIT_WINDOW
from chaz_nb.engine.backends import ModelReply, ToolCallRequest
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent

from waiting import until


@pytest.fixture
def store(backend_store):
    return backend_store


def hold_acks(store) -> tuple[asyncio.Event, asyncio.Event]:
    """Make ``store`` hold each run's opening Ack before its commit; (held, release)."""
    held, release = asyncio.Event(), asyncio.Event()

    def opens_a_run(items) -> bool:
        return any(i.entry_type is T.ACK and "trigger_id" in (i.payload or {}) for i in items)

    class HeldAck(type(store)):
        async def write(self, items):
            items = list(items)
            if opens_a_run(items):
                held.set()
                await release.wait()
            return await super().write(items)

        def write_behind(self, items, window=COMMIT_WINDOW):
            items = list(items)
            if not opens_a_run(items):
                return super().write_behind(items, window)
            held.set()
            return asyncio.ensure_future(self.write(items))  # held, whoever hurries it

    store.__class__ = HeldAck
    return held, release


async def test_the_model_is_called_before_the_ack_commits_and_a_tool_only_after(store):
    held, release = hold_acks(store)
    seen: list[int] = []
    store.subscribe(lambda e: seen.append(e.id))
    at_model = asyncio.Event()
    acks_when_tool_ran: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        acks_when_tool_ran.append(sum(1 for e in store.entries(session) if e.entry_type is T.ACK))
        return a + b

    class Backend:
        calls = 0

        async def complete(self, model, messages, tools=None, *, script=None, options=None):
            Backend.calls += 1
            if Backend.calls == 1:
                at_model.set()
                return ModelReply("", [ToolCallRequest("c1", "add", '{"a": 1, "b": 2}')])
            return ModelReply("three")

    server = Server(store, [Agent("assistant", tools=["add"])], ToolRegistry([add]), backend=Backend())
    session = server.new_session("assistant")
    handle = await server.send(session, "go")
    await asyncio.wait_for(at_model.wait(), 30)
    # the model was called while the Ack was held: nothing but the Message is committed
    assert held.is_set()
    assert [e.entry_type for e in store.entries(session)] == [T.MESSAGE]
    release.set()
    reply = await asyncio.wait_for(handle.wait(), 30)
    assert reply is not None and reply.content == "three"
    assert acks_when_tool_ran == [1]  # the tool waited for the Ack
    entries = store.entries(session)
    assert [e.entry_type for e in entries] == [T.MESSAGE, T.ACK, T.TOOL_CALL, T.TOOL_RESULT, T.MESSAGE]
    ack = entries[1]
    assert all(e.payload["run_id"] == ack.id for e in entries[2:])
    assert [e.id for e in entries] == sorted(e.id for e in entries)
    assert seen == [e.id for e in entries]  # on_write order is commit order


async def test_a_run_stopped_while_its_ack_is_held_is_closed_once_the_ack_lands(store):
    held, release = hold_acks(store)
    at_model = asyncio.Event()

    class Stuck:
        async def complete(self, model, messages, tools=None, *, script=None, options=None):
            at_model.set()
            await asyncio.Event().wait()  # never answers: the run is stopped here

    server = Server(store, [Agent("assistant")], backend=Stuck())
    session = server.new_session("assistant")
    handle = await server.send(session, "go")
    await asyncio.wait_for(at_model.wait(), 30)
    assert held.is_set()
    stopped = server.request_stop(session)  # the cancel lands while the Ack is held
    assert [s.run_id for s in stopped] == [None]  # "run starting": its Ack has not landed
    release.set()  # (the run unwinds once its Ack has landed: its closing entry follows it)
    assert await asyncio.wait_for(handle.wait(), 30) is None
    entries = await until(
        lambda: (es := store.entries(session)) and len(es) == 3 and es, store.subscribe, what="the closing Ack"
    )
    opening, closing = entries[1], entries[2]
    assert opening.entry_type is T.ACK and opening.run_id == opening.id
    assert closing.entry_type is T.ACK and closing.payload["status"] == "cancelled"
    assert closing.payload["run_id"] == opening.id


class CountingConnection:
    """A DuckDB connection that counts the statements run on it."""

    def __init__(self, con):
        self.con, self.statements = con, []

    def execute(self, query, *args, **kwargs):
        self.statements.append(query)
        return self.con.execute(query, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.con, name)


def test_a_new_sessions_first_turn_reads_nothing_back(tmp_path):
    """The only writer knows a session it created: its row and its (empty) log, no query."""
    from chaz_nb.core.store import SessionStore, session_from_row

    store = SessionStore(str(tmp_path / "s.duckdb"))
    try:
        sid = store.create_session("assistant", title="t", metadata={"k": [1, "x"]}, ceiling='{"scope": []}')
        store._con = counting = CountingConnection(store._con)
        info = store.session(sid)
        assert store.entries(sid) == []
        assert counting.statements == []
        row = store.execute(f"SELECT {store._session_columns} FROM sessions WHERE id = ?", [sid])[0]
        assert info == session_from_row(row)  # what a read would give
        message = store.append(sid, T.MESSAGE, "user", "hi")
        assert store.entries(sid) == [message]
    finally:
        store.close()
