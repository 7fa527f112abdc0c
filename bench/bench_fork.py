"""Time a fork of a 50,000-entry session at its end, and a recorded replay step vs a live one.

1. Builds one session of ``--size`` entries (a run-like mix: Message, Ack, ToolCall,
   ToolResult, reply) in a DuckDB file, then times ``store.fork_session`` at its end (the copy
   with ids remapped and the open runs closed, one transaction) beside a plain copy of the same
   rows in the same run (``INSERT INTO entries SELECT ... WHERE session_id = ?`` into a scratch
   table of the same columns). Target: the fork in < 200 ms on DuckDB.
2. A scripted agent (offline ``chaz/script``) makes ``--steps`` tool calls a run; times runs
   whose tools run live against runs of a branch that answers them from the recording, and
   prints the cost per step of each and their ratio.

Each figure is the median of ``--runs`` runs after one warm-up run.

    .venv/bin/python bench/bench_fork.py [--size 50000] [--runs 5] [--steps 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TARGET_MS = 200.0
BATCH = 5000


def build(store, size: int) -> int:
    """A session of ``size`` entries in runs of five: the question, the run's Ack (the run id),
    a tool call and its result, the reply; every run closed, as a finished session's are."""
    from chaz_nb.core.entries import EntryType
    from chaz_nb.core.store import NewEntry

    sid = store.create_session("analyst")
    items: list[NewEntry] = []
    next_id = int(store.execute("SELECT coalesce(max(id), 0) + 1 FROM entries")[0][0])
    question = run = 0
    for i in range(size):
        k = i % 5
        entry_id = next_id + len(items)
        if k == 0:
            question = entry_id
            items.append(NewEntry(sid, EntryType.MESSAGE, "user", f"question {i}"))
        elif k == 1:
            run = entry_id
            items.append(NewEntry(sid, EntryType.ACK, "analyst", "working",
                                  payload={"trigger_id": question, "answers": [question]}))
        elif k == 2:
            items.append(NewEntry(sid, EntryType.TOOL_CALL, "analyst", "lookup", tool_call_id=f"c{i}",
                                  tool_name="lookup", payload={"run_id": run, "arguments": {"city": f"c{i}"}}))
        elif k == 3:
            items.append(NewEntry(sid, EntryType.TOOL_RESULT, "analyst", "lookup: sunny", tool_call_id=f"c{i - 1}",
                                  tool_name="lookup", payload={"run_id": run, "output": "sunny " * 20}))
        else:
            items.append(NewEntry(sid, EntryType.MESSAGE, "analyst", "answer " * 30,
                                  payload={"run_id": run, "steps": 2}))
        if len(items) == BATCH or i == size - 1:
            written = store.append_many(items)
            assert written[0].id == next_id
            next_id += len(items)
            items = []
    return sid


def time_fork(size: int, runs: int) -> tuple[float, float]:
    from chaz_nb.core.store import SessionStore

    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(os.path.join(tmp, "bench.duckdb"))
        sid = build(store, size)
        store.execute("CREATE TABLE scratch AS SELECT * FROM entries WHERE false")
        fork_ms, copy_ms = [], []
        for i in range(runs + 1):
            t = time.perf_counter()
            copy = store.fork_session(sid)
            took = (time.perf_counter() - t) * 1000
            assert copy.copied == size and not copy.closing
            t = time.perf_counter()
            store.execute("INSERT INTO scratch SELECT * FROM entries WHERE session_id = ?", [sid])
            plain = (time.perf_counter() - t) * 1000
            store.execute("DELETE FROM scratch")
            if i:  # the first is the warm-up
                fork_ms.append(took)
                copy_ms.append(plain)
        store.close()
    return statistics.median(fork_ms), statistics.median(copy_ms)


async def time_replay(steps: int, runs: int) -> tuple[float, float]:
    from chaz_nb import tool
    from chaz_nb.core.store import SessionStore
    from chaz_nb.server.agents import Agent
    from chaz_nb.server.facade import Server

    @tool
    def lookup(city: str) -> str:
        """The weather."""
        return f"{city}: sunny"

    script = [{"tool": "lookup", "args": {"city": f"c{i}"}} for i in range(steps)] + ["done"]
    store = SessionStore(":memory:")
    server = Server(store, [Agent("analyst", model="chaz/script", tools=["lookup"], script=script,
                                  max_iterations=steps + 5)], [lookup])
    sid = server.new_session("analyst")
    await (await server.send(sid, "warm up")).wait()
    live, recorded = [], []
    for _ in range(runs):
        t = time.perf_counter()
        await (await server.send(sid, "go")).wait()
        live.append((time.perf_counter() - t) * 1000 / steps)
    source = sid
    for _ in range(runs):
        t = time.perf_counter()
        branch = server.fork_session(source, 0, say="go")
        assert branch.handle is not None
        await branch.handle.wait()
        recorded.append((time.perf_counter() - t) * 1000 / steps)
        assert all(e.payload.get("replayed_from") for e in store.entries(branch.session_id)
                   if e.entry_type.value == "ToolResult")
    await server.stop()
    store.close()
    return statistics.median(live), statistics.median(recorded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    fork_ms, copy_ms = time_fork(args.size, args.runs)
    verdict = "ok" if fork_ms < TARGET_MS else "OVER TARGET"
    print(f"fork of a {args.size:,}-entry session at its end: {fork_ms:.1f} ms "
          f"(target < {TARGET_MS:.0f} ms: {verdict}); a plain copy of the same rows: {copy_ms:.1f} ms "
          f"(fork / plain copy = {fork_ms / copy_ms:.2f})")
    live, recorded = asyncio.run(time_replay(args.steps, args.runs))
    print(f"per tool step ({args.steps} steps a run, offline chaz/script): live {live:.2f} ms, "
          f"recorded replay {recorded:.2f} ms (recorded / live = {recorded / live:.2f})")


if __name__ == "__main__":
    main()
