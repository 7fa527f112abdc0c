"""What only a shared PostgreSQL store has: several processes writing one log."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest


from chaz_nb.core.audit import VIEWS
from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import SessionStore

from waiting import until


def _python(code: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_migrations_record_and_audit_views_match_duckdbs(pg_url):
    with SessionStore.open(pg_url) as pg, SessionStore(":memory:") as duck:
        assert pg.execute("SELECT name FROM _chaz_migrations ORDER BY name") == \
            duck.execute("SELECT name FROM _chaz_migrations ORDER BY name")
        for view in VIEWS:
            assert pg.sql(f"SELECT * FROM {view}").columns == duck.sql(f"SELECT * FROM {view}").columns


def test_seq_is_gapless_with_four_writer_processes(pg_url):
    with SessionStore.open(pg_url) as store:
        shared = store.create_session("shared")
    writer = f"""
        from chaz_nb.core.store import SessionStore, NewEntry
        s = SessionStore.open({pg_url!r})
        own = s.create_session("own")
        for i in range(40):
            s.append({shared}, "Message", "user", str(i))
            s.append_many([NewEntry(own, "Ack", "a"), NewEntry({shared}, "ToolCall", "a")])
        s.close()
    """
    procs = [_python(writer) for _ in range(4)]
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    with SessionStore.open(pg_url) as store:
        assert [e.seq for e in store.entries(shared)] == list(range(1, 4 * 80 + 1))
        ids = [r[0] for r in store.execute("SELECT id FROM entries ORDER BY id")]
        assert ids == list(range(1, 4 * 120 + 1))


async def test_an_entry_written_by_another_process_reaches_on_write_in_commit_order(pg_url):
    store = SessionStore.open(pg_url)
    try:
        sid = store.create_session("shared")
        seen = []
        store.subscribe(seen.append)
        await asyncio.sleep(0)  # the listener task starts
        store.append(sid, EntryType.MESSAGE, "here", "1")
        other = _python(f"""
            from chaz_nb.core.store import SessionStore
            s = SessionStore.open({pg_url!r})
            for i in range(5):
                s.append({sid}, "Message", "there", str(i))
        """)
        await asyncio.to_thread(other.communicate, timeout=60)
        await until(lambda: len(seen) >= 6, store.subscribe, what="the other process's entries")
        store.append(sid, EntryType.MESSAGE, "here", "2")
        assert [(e.sender, e.seq) for e in seen] == [("here", 1)] + [("there", i) for i in range(2, 7)] + [("here", 7)]
    finally:
        store.close()


def test_a_lease_frees_when_its_holder_is_killed(pg_url):
    with SessionStore.open(pg_url) as store:
        sid = store.create_session("shared")
        holder = _python(f"""
            import sys
            from chaz_nb.core.store import SessionStore
            s = SessionStore.open({pg_url!r})
            print(s.claim({sid}), flush=True)
            sys.stdin.readline()
        """)
        try:
            assert holder.stdout.readline().strip() == "True"
            assert not store.claim(sid) and store.held_elsewhere(sid)
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
        finally:
            if holder.poll() is None:
                holder.kill()

        async def taken() -> bool:
            while not store.claim(sid):
                await asyncio.sleep(0.05)  # the server notices the dead backend within a moment
            return True

        assert asyncio.run(asyncio.wait_for(taken(), 30))
        assert not store.held_elsewhere(sid)


async def test_a_message_from_another_kernel_wakes_the_serving_one_and_is_answered_once(pg_url):
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    first, second = SessionStore.open(pg_url), SessionStore.open(pg_url)
    try:
        serving = Server(first, [Agent("assistant")])
        other = Server(second, [Agent("assistant")])
        sid = serving.current_session("assistant")
        await (await serving.send(sid, "one")).wait()  # the serving kernel holds the lease now
        second.append(sid, EntryType.MESSAGE, "user", "two")  # written in the other kernel
        await until(lambda: [e.content for e in first.entries(sid, types=[EntryType.MESSAGE])][-1:] == ["echo: two"],
                    first.subscribe, what="the reply to two")
        replies = [e.content for e in first.entries(sid, types=[EntryType.MESSAGE]) if e.sender == "assistant"]
        assert replies == ["echo: one", "echo: two"]
        assert len(first.entries(sid, types=[EntryType.ACK])) == 2  # one run each, none in the other kernel
        assert first.held_elsewhere(sid) is False and second.held_elsewhere(sid) is True
        del other
    finally:
        first.close()
        second.close()


def test_chaz_sql_on_postgres_reads_and_the_database_refuses_writes(pg_url):
    import psycopg

    from chaz_nb.core.sqlquery import run_query
    from chaz_nb.errors import SQLRefused

    with SessionStore.open(pg_url) as store:
        sid = store.create_session("alice")
        store.append(sid, EntryType.MESSAGE, "user", "kept")
        result = run_query("SELECT sender, content FROM messages", store)
        assert (result.columns, result.rows) == (["sender", "content"], [("user", "kept")])
        with pytest.raises(SQLRefused):
            run_query("DELETE FROM entries", store)
        with pytest.raises(psycopg.Error, match="read-only"):  # past the parser, the database says no
            store.query_read_only(["WITH d AS (DELETE FROM entries RETURNING id) SELECT count(*) FROM d"])
        assert store.execute("SELECT content FROM entries") == [("kept",)]


def test_a_starting_kernel_leaves_open_work_of_a_live_kernel_alone(pg_url):
    """Start-up recovery closes only what no live kernel holds: on a shared store an open run or
    approval request in a session another kernel serves is that kernel's live work."""
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    live, starting = SessionStore.open(pg_url), SessionStore.open(pg_url)
    try:
        held = live.create_session("held")
        orphan = live.create_session("orphan")
        assert live.claim(held)
        for sid in (held, orphan):
            ack = live.append(sid, EntryType.ACK, "assistant", "")
            live.execute("UPDATE entries SET run_id = id WHERE id = ?", [ack.id])
            live.append(sid, EntryType.APPROVAL_REQUEST, "assistant", "shell?",
                        payload={"request_id": f"r{sid}", "run_id": ack.id})
        server = Server(starting, [Agent("assistant")])
        assert server.recovered == {"runs": 1, "approvals": 1}
        assert [e.entry_type for e in live.entries(held)] == [EntryType.ACK, EntryType.APPROVAL_REQUEST]
        closed = {e.entry_type for e in live.entries(orphan)}
        assert {EntryType.APPROVAL_DECISION, EntryType.ERROR} <= closed
    finally:
        live.close()
        starting.close()
