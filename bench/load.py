"""Load: 50 concurrent sessions x 20 turns, two tool calls a turn, offline model, one loop.

Prints turns per second, p50/p99 latency from Message to reply, the server's own time per
turn (the same turns run first without the server, same loop and concurrency; the
difference in wall time divided by turns is what the server adds), RSS sampled over the run
to show whether memory stays flat, and the store's size.
Target (issue 8): server overhead per turn < 2 ms p50 on this 2-core machine; memory flat.
Run: python bench/load.py [--sessions 50] [--turns 20] [--db file|memory]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import json
import statistics
import tempfile
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from chaz_nb import Agent, Server, SessionStore, ToolRegistry, tool  # noqa: E402
from chaz_nb.engine.backends import litellm_module  # noqa: E402


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


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def bare_turn(litellm) -> None:
    """One turn without the server: the same model calls and tools, nothing recorded."""
    tools = [lookup.schema, add.schema]
    messages = [{"role": "user", "content": "go"}]
    while True:
        resp = await litellm.acompletion(model="chaz/script", messages=messages, tools=tools,
                                         metadata={"chaz_script": SCRIPT})
        msg = resp.choices[0].message
        if not msg.tool_calls:
            return
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in msg.tool_calls]})
        for c in msg.tool_calls:
            fn = {"lookup": lookup, "add": add}[c.function.name]
            out = fn.fn(**json.loads(c.function.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": str(out)})


async def run(sessions: int, turns: int, path: str) -> None:
    litellm = litellm_module()
    store = SessionStore(path)
    server = Server(store, [Agent("loader", model="chaz/script", tools=["lookup", "add"], script=SCRIPT)],
                    ToolRegistry([lookup, add]), max_concurrent_calls=sessions)
    await (await server.send(server.new_session("loader"), "warm up")).wait()  # builds litellm's caches
    await bare_turn(litellm)
    ids = [server.new_session("loader") for _ in range(sessions)]
    n = sessions * turns

    t0 = time.perf_counter()
    await asyncio.gather(*(bare_loop_turns(litellm, turns) for _ in range(sessions)))
    bare_wall = time.perf_counter() - t0

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
    t0 = time.perf_counter()
    await asyncio.gather(*(session_loop(s) for s in ids))
    wall = time.perf_counter() - t0
    sampler.cancel()
    overhead_ms = (wall - bare_wall) / n * 1000
    ms = [x * 1000 for x in latencies]
    print(f"{sessions} sessions x {turns} turns = {n} turns, 3 model calls and 2 tool calls each")
    print(f"through the server: {n / wall:.1f} turns/s (wall {wall:.1f} s); same turns without the server: "
          f"{n / bare_wall:.1f} turns/s (wall {bare_wall:.1f} s)")
    print(f"latency Message -> reply: p50 {pct(ms, 50):.0f} ms, p99 {pct(ms, 99):.0f} ms "
          f"({sessions} sessions share one loop, so a turn waits for the others)")
    verdict = "met" if overhead_ms < 2 else "NOT met"
    print(f"server's own time per turn: {overhead_ms:.2f} ms (target < 2 ms: {verdict})")
    third = max(1, len(memory) // 3)
    print(f"RSS over the run: first third avg {statistics.mean(memory[:third]):.0f} MB, last third avg "
          f"{statistics.mean(memory[-third:]):.0f} MB, peak {max(memory):.0f} MB")
    entries = store.execute("SELECT count(*) FROM entries")[0][0]
    store.close()
    if path != ":memory:":
        size = os.path.getsize(path) + (os.path.getsize(path + ".wal") if os.path.exists(path + ".wal") else 0)
        print(f"store: {entries:,} entries, {size / 1e6:.1f} MB on disk")


async def bare_loop_turns(litellm, turns: int) -> None:
    for _ in range(turns):
        await bare_turn(litellm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--db", choices=["file", "memory"], default="file")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "load.duckdb") if args.db == "file" else ":memory:"
        asyncio.run(run(args.sessions, args.turns, path))


if __name__ == "__main__":
    main()
