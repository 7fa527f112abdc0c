"""Several kernels on one PostgreSQL store: schedules and rooms (issue 16).

Each test runs two servers (or two processes) on one database of the throw-away cluster
(tests/fakes/postgres.py): schedule and fire ids never collide, every kernel lists and fires
the store's schedules and a due tick fires once across kernels, and a room turn runs in one
kernel only.
"""

import subprocess
import sys
import textwrap

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import SessionStore

from waiting import until


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_processes_creating_schedules_at_once_get_distinct_ids(pg_url):
    """ScheduleTable.next_id was max(id) + 1 with no lock: two kernels got the same id and the
    second INSERT OR REPLACE overwrote the first kernel's schedule."""
    code = f"""
        import sys
        from chaz_nb.core.store import SessionStore
        from chaz_nb.server import Server
        from chaz_nb.server.agents import Agent
        store = SessionStore.open({pg_url!r})
        server = Server(store, [Agent("bot")])
        print("ready", flush=True)
        sys.stdin.readline()  # both processes start together
        for i in range(25):
            s = server.schedules.add("bot", "every 1h", f"tick {{i}}", session="fresh")
            fire = server.schedules.table.next_id("schedule_fires")
            print(s.id, fire, flush=True)
        store.close()
    """
    procs = [_python(code) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr and p.stderr.read()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
    pairs = [tuple(map(int, line.split())) for out, _ in outputs for line in out.splitlines()]
    schedule_ids = [a for a, _ in pairs]
    fire_ids = [b for _, b in pairs]
    assert len(set(schedule_ids)) == len(schedule_ids) == 50
    assert len(set(fire_ids)) == len(fire_ids) == 50
    with SessionStore.open(pg_url) as store:
        assert store.execute("SELECT count(*) FROM schedules") == [(50,)]  # nothing overwritten


async def test_a_room_message_runs_one_turn_per_member_across_two_kernels(pg_url):
    """Rooms routed before the lease: both kernels ran the same turns."""
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    first, second = SessionStore.open(pg_url), SessionStore.open(pg_url)
    try:
        def members() -> list:  # replies that mention nobody: the message wakes exactly two turns
            return [Agent(n, model="chaz/script", script=[f"{n} here"]) for n in ("alice", "bob")]

        a = Server(first, members())
        b = Server(second, members())
        room = a.rooms.create("team", ["alice", "bob"])
        seen_by_b: list[int] = []
        second.subscribe(lambda e: seen_by_b.append(e.id))
        trigger = second.append(room, EntryType.MESSAGE, "user", "hello both", payload={"to": ["alice", "bob"]})

        def replies() -> list:
            return [e for e in first.entries(room, types=[EntryType.MESSAGE]) if e.sender != "user"]

        await until(lambda: len(replies()) >= 2, first.subscribe, what="both members' replies")
        last = max(e.id for e in first.entries(room))
        # the other kernel has seen everything up to the replies, so it has routed the trigger
        await until(lambda: seen_by_b and max(seen_by_b) >= last, second.subscribe, what="kernel B to catch up")
        await a.wait_idle(5)
        await b.wait_idle(5)
        assert sorted(e.sender for e in replies()) == ["alice", "bob"]
        acks = first.entries(room, types=[EntryType.ACK])
        assert sorted(ack.payload.get("turn") for ack in acks) == ["alice", "bob"]
        assert {ack.payload.get("trigger_id") for ack in acks} == {trigger.id}
        assert first.held_elsewhere(room) != second.held_elsewhere(room)  # one kernel serves the room
    finally:
        first.close()
        second.close()


async def test_every_kernel_lists_the_stores_schedules_and_a_tick_fires_once(pg_url):
    """Schedules were cached per process: a kernel neither listed nor fired another's."""
    from chaz_nb.server import Server
    from chaz_nb.server.agents import Agent

    first, second = SessionStore.open(pg_url), SessionStore.open(pg_url)
    try:
        a = Server(first, [Agent("bot")])
        b = Server(second, [Agent("bot")])
        a.schedules.start()
        b.schedules.start()
        heard_by_b: list[int] = []
        b.schedules.subscribe(heard_by_b.append)
        recurring = a.schedules.add("bot", "every 0.2s", "tick", session="fresh", max_fires=4)
        # a change in one kernel is a notice to the others (their fire loops wake for it)
        await until(lambda: recurring.id in heard_by_b, b.schedules.subscribe, what="kernel B to hear of it")
        once = b.schedules.add("bot", "in 0.3s", "reminder", session="fresh")
        # each kernel lists both (the `%chaz schedule list` of either notebook)
        assert [s.id for s in a.schedules.list()] == [s.id for s in b.schedules.list()] == [recurring.id, once.id]

        def done() -> bool:
            left = {s.id: s for s in a.schedules.list()}
            return once.id not in left and not left[recurring.id].enabled and all(
                r[4] != "running" for r in a.schedules.fires())

        await until(done, a.schedules.subscribe, b.schedules.subscribe, first.subscribe, what="the fires")
        await a.wait_idle(5)
        await b.wait_idle(5)
        fires = a.schedules.fires()
        ran = [r for r in fires if r[4] != "skipped"]
        by_schedule = {sid: [r for r in ran if r[1] == sid] for sid in (recurring.id, once.id)}
        assert len(by_schedule[once.id]) == 1  # one fire of the one-shot in all
        assert len(by_schedule[recurring.id]) == 4 == b.schedules.get(recurring.id).fire_count
        ticks = [r[9] for r in by_schedule[recurring.id]]
        assert len(set(ticks)) == len(ticks)  # no tick fired twice
        for row in ran:  # one run per fire, in its own session
            acks = first.entries(row[2], types=[EntryType.ACK])
            assert [ack.payload.get("fire_id") for ack in acks] == [row[0]]
        await a.stop()
        await b.stop()
    finally:
        first.close()
        second.close()
