"""Load: 50 concurrent sessions x 20 turns, two tool calls a turn, offline model, one loop.

Prints turns per second, p50/p99 latency from Message to reply, the server's own time per
turn (the same turns run first without the server, same loop and concurrency; the
difference in wall time divided by turns is what the server adds), RSS sampled over the run
to show whether memory stays flat, and the store's size.
Targets (issues 8 and 30), each printed as a ratio of the same run: server's own time < 2 ms
a turn; throughput >= 0.8x the no-server turns; p99 within 1.5x the no-server p99; memory
flat; the largest kernel-loop stall while the turns run < 50 ms (a heartbeat task that
sleeps 10 ms and records how late it wakes, during both phases).
Both sides make the same model calls: streamed (an Agent's default) or, with ``--whole``,
whole replies (the no-server side did not stream while the server did until issue 30), each
carrying the session's earlier turns as the server's context does. CPU per turn of the loop
thread and of the process is printed for both sides: on a shared machine it moves far less
than wall time.
Run: python bench/load.py [--sessions 50] [--turns 20] [--db file|memory] [--whole] [--max-calls N]

Several kernels on one PostgreSQL store (issue 16): ``--db postgresql://...`` (or ``--db
postgres``: a throw-away cluster from tests/fakes/postgres.py, stopped at the end) runs
``--kernels`` processes (default 4), each with its own Server and ``--sessions`` sessions
(default 25 there) of ``--turns`` turns, all at once on one database. Then it checks the
store: every session has each turn's Message, Ack and reply exactly once, every session's seq
is 1..n with no gap, and entry ids are gapless; and prints turns/s and p50/p99 over all kernels,
then runs the same turns in one kernel on a DuckDB file and prints the ratio (target >= 0.6x).
Run: python bench/load.py --db postgres [--kernels 4] [--sessions 25] [--turns 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import json
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from chaz_nb import Agent, Server, SessionStore, ToolRegistry, tool  # noqa: E402
from chaz_nb.engine.backends import litellm_module  # noqa: E402
from chaz_nb.engine.streaming import StreamAssembly  # noqa: E402


@tool  # async: runs on the loop, no thread hop
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


SCRIPT = [{"tool": "lookup", "args": {"key": "k"}}, {"tool": "add", "args": {"a": 1, "b": 2}}, "done: {result}"]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


class Heartbeat:
    """A task that sleeps ``period`` s and records how late it wakes: the loop's stalls."""

    def __init__(self, period: float = 0.01) -> None:
        self.period, self.stalls = period, [0.0]
        self.task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.period)
            self.stalls.append(time.perf_counter() - t - self.period)

    def stop(self) -> float:
        """The largest stall, in ms."""
        self.task.cancel()
        return max(self.stalls) * 1000


def cpu_times(since: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """CPU seconds of this (the loop's) thread and of the whole process (litellm's threads too)."""
    return time.thread_time() - since[0], time.process_time() - since[1]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def bare_turn(litellm, stream: bool = True, history: list[dict] | None = None, text: str = "go") -> None:
    """One turn without the server: the same model calls and tools, nothing recorded.

    ``stream``: as the server's agent calls the model (``Agent.stream``, the default: streamed,
    the chunks put together as the backend does, with ``StreamAssembly``, the usage read from
    the stream), so both sides make the same calls and the same assembly. ``history``: the
    session's earlier turns, as the server's context has them (each person's message and the
    agent's reply; tool steps are audit only): the calls carry the same messages on both sides
    (until issue 30 this side sent only the current turn, a context 20 turns shorter by the end).
    """
    history = [] if history is None else history
    history.append({"role": "user", "content": text})
    messages = list(history)
    tools = [lookup.schema, add.schema]
    while True:
        if stream:
            assembly = StreamAssembly()
            async for chunk in await litellm.acompletion(
                    model="chaz/script", messages=messages, tools=tools, stream=True, metadata={"chaz_script": SCRIPT}):
                assembly.add(chunk)
            assert assembly.reported_usage() is not None
            calls, reply = assembly.tool_calls(), assembly.partial_text
        else:
            resp = await litellm.acompletion(model="chaz/script", messages=messages, tools=tools,
                                             metadata={"chaz_script": SCRIPT})
            message = resp.choices[0].message
            calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
            reply = message.content or ""
        if not calls:
            history.append({"role": "assistant", "content": reply})
            return
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}}
            for i, name, arguments in calls]})
        for i, name, arguments in calls:
            fn = {"lookup": lookup, "add": add}[name]
            out = await fn.fn(**json.loads(arguments))  # the tools are async def
            messages.append({"role": "tool", "tool_call_id": i, "content": str(out)})


async def run(sessions: int, turns: int, path: str, stream: bool = True, max_calls: int | None = None) -> float:
    """The single-kernel run (DuckDB); prints its figures, returns the served turns/s.

    ``max_calls``: the server's ``max_concurrent_calls`` (default: one a session, every
    session's call in flight at once, as on the no-server side)."""
    litellm = litellm_module()
    store = SessionStore(path)
    server = Server(store, [Agent("loader", model="chaz/script", tools=["lookup", "add"], script=SCRIPT,
                                  stream=stream)],
                    ToolRegistry([lookup, add]), max_concurrent_calls=max_calls or sessions)
    await (await server.send(server.new_session("loader"), "warm up")).wait()  # builds litellm's caches
    await bare_turn(litellm, stream)
    ids = [server.new_session("loader") for _ in range(sessions)]
    n = sessions * turns

    bare_latencies: list[float] = []
    beat = Heartbeat()
    t0, cpu0 = time.perf_counter(), cpu_times()
    await asyncio.gather(*(bare_loop_turns(litellm, turns, bare_latencies, stream) for _ in range(sessions)))
    bare_wall, bare_cpu = time.perf_counter() - t0, cpu_times(cpu0)
    bare_stall = beat.stop()

    latencies: list[float] = []
    memory: list[float] = []

    async def session_loop(session_id: int) -> None:
        for turn in range(turns):
            t = time.perf_counter()
            reply = await (await server.send(session_id, f"turn {turn}")).wait()
            latencies.append(time.perf_counter() - t)
            assert reply is not None and reply.content.startswith("done"), reply

    async def sample_memory() -> None:
        while True:
            memory.append(rss_mb())
            await asyncio.sleep(0.1)

    sampler = asyncio.get_running_loop().create_task(sample_memory())
    beat = Heartbeat()
    t0, cpu0 = time.perf_counter(), cpu_times()
    await asyncio.gather(*(session_loop(s) for s in ids))
    wall, cpu = time.perf_counter() - t0, cpu_times(cpu0)
    stall = beat.stop()
    sampler.cancel()
    overhead_ms = (wall - bare_wall) / n * 1000
    ms = [x * 1000 for x in latencies]
    bare_ms = [x * 1000 for x in bare_latencies]
    ratio = bare_wall / wall
    p99_ratio = pct(ms, 99) / pct(bare_ms, 99)

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print(f"{sessions} sessions x {turns} turns = {n} turns, 3 model calls and 2 tool calls each, "
          f"{'streamed' if stream else 'whole replies'} on both sides; the server's max_concurrent_calls "
          f"{server.max_concurrent_calls}")
    print(f"through the server: {n / wall:.1f} turns/s (wall {wall:.1f} s); same turns without the server: "
          f"{n / bare_wall:.1f} turns/s (wall {bare_wall:.1f} s): "
          f"{ratio:.2f}x (target >= 0.8x: {verdict(ratio >= 0.8)})")
    print(f"latency Message -> reply: p50 {pct(ms, 50):.0f} ms, p99 {pct(ms, 99):.0f} ms; without the server "
          f"p50 {pct(bare_ms, 50):.0f} ms, p99 {pct(bare_ms, 99):.0f} ms: p99 {p99_ratio:.2f}x "
          f"(target <= 1.5x: {verdict(p99_ratio <= 1.5)}; {sessions} sessions share one loop)")
    print(f"server's own time per turn: {overhead_ms:.2f} ms (target < 2 ms: {verdict(overhead_ms < 2)})")
    # CPU seconds hardly move with the machine's load (wall time does): the server's own work
    print(f"CPU per turn, loop thread / whole process: {cpu[0] / n * 1000:.2f} / {cpu[1] / n * 1000:.2f} ms "
          f"through the server, {bare_cpu[0] / n * 1000:.2f} / {bare_cpu[1] / n * 1000:.2f} ms without: the "
          f"server's own {(cpu[0] - bare_cpu[0]) / n * 1000:.2f} / {(cpu[1] - bare_cpu[1]) / n * 1000:.2f} ms")
    print(f"largest kernel-loop stall (10 ms heartbeat): {stall:.1f} ms through the server, {bare_stall:.1f} ms "
          f"without (target < 50 ms: {verdict(stall < 50)})")
    third = max(1, len(memory) // 3)
    print(f"RSS over the run: first third avg {statistics.mean(memory[:third]):.0f} MB, last third avg "
          f"{statistics.mean(memory[-third:]):.0f} MB, peak {max(memory):.0f} MB")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    entries = store.execute("SELECT count(*) FROM entries")[0][0]
    store.close()
    if path != ":memory:":
        size = os.path.getsize(path) + (os.path.getsize(path + ".wal") if os.path.exists(path + ".wal") else 0)
        print(f"store: {entries:,} entries, {size / 1e6:.1f} MB on disk")
    return n / wall


async def bare_loop_turns(litellm, turns: int, latencies: list[float], stream: bool = True) -> None:
    history: list[dict] = []  # one session's turns, as the server's context carries them
    for turn in range(turns):
        t = time.perf_counter()
        await bare_turn(litellm, stream, history, f"turn {turn}")
        latencies.append(time.perf_counter() - t)


# ------------------------------------------------- several kernels on one PostgreSQL store
async def kernel(url: str, sessions: int, turns: int) -> None:
    """One kernel process of the PostgreSQL run: its sessions' turns, timed; a JSON line out."""
    store = SessionStore.open(url)
    server = Server(store, [Agent("loader", model="chaz/script", tools=["lookup", "add"], script=SCRIPT)],
                    ToolRegistry([lookup, add]), max_concurrent_calls=sessions)
    # This kernel serves its sessions: it takes their leases before it writes to them (every
    # kernel defines the agent, so another one could otherwise take a new session's first turn).
    warm = server.new_session("loader")
    ids = [server.new_session("loader") for _ in range(sessions)]
    for sid in [warm, *ids]:
        assert store.claim(sid)
    await (await server.send(warm, "warm up")).wait()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # all kernels at once
    latencies: list[float] = []

    async def session_loop(session_id: int) -> None:
        for turn in range(turns):
            t = time.perf_counter()
            handle = await server.send(session_id, f"turn {turn}")
            reply = await handle.wait()
            latencies.append(time.perf_counter() - t)
            assert reply is not None and reply.content.startswith("done"), reply

    start = time.time()
    await asyncio.gather(*(session_loop(s) for s in ids))
    end = time.time()
    await server.stop()
    store.close()
    print(json.dumps({"sessions": ids, "latencies": latencies, "start": start, "end": end}), flush=True)


def check_store(url: str, sessions: list[int], turns: int) -> int:
    """No entry lost or duplicated, seq gapless, ids gapless; the number of entries checked."""
    store = SessionStore.open(url)
    try:
        ids = [row[0] for row in store.execute("SELECT id FROM entries ORDER BY id")]
        assert ids == list(range(1, len(ids) + 1)), "entry ids have a gap or a duplicate"
        for sid in sessions:
            log = store.entries(sid)
            assert [e.seq for e in log] == list(range(1, len(log) + 1)), f"session {sid}: seq has a gap"
            asked = [e.content for e in log if e.entry_type.value == "Message" and e.sender == "user"]
            assert asked == [f"turn {t}" for t in range(turns)], f"session {sid}: Messages lost or duplicated"
            acks = [e for e in log if e.entry_type.value == "Ack"]
            replies = [e for e in log if e.entry_type.value == "Message" and e.sender == "loader"]
            assert len(acks) == len(replies) == turns, f"session {sid}: {len(acks)} runs, {len(replies)} replies"
            calls = [e for e in log if e.entry_type.value in ("ToolCall", "ToolResult")]
            assert len(calls) == 4 * turns, f"session {sid}: {len(calls)} tool entries"
        return len(ids)
    finally:
        store.close()


def run_postgres(url: str | None, kernels: int, sessions: int, turns: int) -> None:
    cluster = None
    if url is None or url == "postgres":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        from fakes.postgres import PostgresCluster

        cluster = PostgresCluster()
        url = cluster.new_database()
    procs: list[subprocess.Popen] = []
    try:
        command = [sys.executable, os.path.abspath(__file__), "--kernel", url,
                   "--sessions", str(sessions), "--turns", str(turns)]
        procs = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(kernels)]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", "a kernel did not start"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, _ = p.communicate(timeout=1800)
            assert p.returncode == 0, f"a kernel failed ({p.returncode})"
            results.append(json.loads(out.strip().splitlines()[-1]))
        wall = max(r["end"] for r in results) - min(r["start"] for r in results)
        ms = [x * 1000 for r in results for x in r["latencies"]]
        n = kernels * sessions * turns
        checked = check_store(url, [s for r in results for s in r["sessions"]], turns)
        print(f"PostgreSQL {'(throw-away cluster) ' if cluster else ''}{kernels} kernel processes x {sessions} "
              f"sessions x {turns} turns = {n} turns, 3 model calls and 2 tool calls each")
        print(f"all kernels: {n / wall:.1f} turns/s (wall {wall:.1f} s); latency Message -> reply: "
              f"p50 {pct(ms, 50):.0f} ms, p99 {pct(ms, 99):.0f} ms")
        print(f"store checked: {checked:,} entries, none lost or duplicated, every session's seq gapless, ids gapless")
        # the same turns in one kernel on a DuckDB file, right after (the target is a ratio of this run)
        with tempfile.TemporaryDirectory() as tmp:
            print(f"-- the same {n} turns as {kernels * sessions} sessions in one kernel, DuckDB file:")
            duck = asyncio.run(run(kernels * sessions, turns, os.path.join(tmp, "load.duckdb")))
        ratio = (n / wall) / duck
        print(f"PostgreSQL {kernels} kernels against DuckDB one kernel: {ratio:.2f}x "
              f"(target >= 0.6x: {'met' if ratio >= 0.6 else 'NOT met'})")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if cluster is not None:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=None, help="per kernel (default 50; 25 on PostgreSQL)")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--db", default="file", help="file | memory | postgres | postgresql://...")
    parser.add_argument("--kernels", type=int, default=4, help="kernel processes on PostgreSQL")
    parser.add_argument("--whole", action="store_true",
                        help="whole replies on both sides (default: streamed, as an Agent calls by default)")
    parser.add_argument("--max-calls", type=int, default=None,
                        help="the server's max_concurrent_calls (default: one a session)")
    parser.add_argument("--kernel", metavar="URL", help=argparse.SUPPRESS)  # one kernel process of a run
    args = parser.parse_args()
    if args.kernel:
        asyncio.run(kernel(args.kernel, args.sessions, args.turns))
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    if args.db == "postgres" or args.db.startswith(("postgresql://", "postgres://")):
        run_postgres(args.db, args.kernels, args.sessions or 25, args.turns)
        return
    if args.db not in ("file", "memory"):
        parser.error("--db is file, memory, postgres or a postgresql:// URL")
    args.sessions = args.sessions or 50
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "load.duckdb") if args.db == "file" else ":memory:"
        asyncio.run(run(args.sessions, args.turns, path, stream=not args.whole, max_calls=args.max_calls))


if __name__ == "__main__":
    main()
