"""A durable append on the journal beside the DuckDB file, against the disk's floor (issue 43 §2).

Three ways to make one entry durable, interleaved round robin (the order reversed every other
round) in one run, so the disk's phase and machine noise hit them alike:

- ``floor``: the entry's row as a JSON line, ``write`` + ``fdatasync`` of a plain file;
- ``journal``: ``await store.write_one(...)`` on a DuckDB file store (the default): returns once
  the line is fdatasync'd in ``<db>.journal``; the DuckDB commit follows behind;
- ``duckdb``: the same on a store opened ``journal=False``: each append is its DuckDB commit;
- ``sqlite``: the alternative the issue names, measured, not built: the row as one INSERT of a
  SQLite database in WAL mode with ``synchronous=FULL`` (a durable commit), autocommitted.

Each append is timed from the call to its return, after 5 ms idle (the journal's DuckDB commit
falls in that idle time, as it falls in a model call's wait in a turn). Then a simulated cell:
append, 20 ms wait (a model call), append; what it costs over the 20 ms, for each way.

Run: python bench/bench_journal.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

import duckdb

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import SessionStore

PAYLOAD = {"run_id": 12, "model": "openai/bench", "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
Append = Callable[[], Awaitable[None]]


def floor(path: str) -> Append:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    line = (json.dumps([1, 1, 1, "Message", "bench", "done, the answer is 42", None, None,
                        json.dumps(PAYLOAD), "2026-12-07T22:00:00"]) + "\n").encode()

    async def append() -> None:
        os.write(fd, line)
        os.fdatasync(fd)

    return append


def sqlite_wal(path: str) -> Append:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE entries (id INTEGER PRIMARY KEY, session_id INT, seq INT, entry_type TEXT, "
                "sender TEXT, content TEXT, tool_call_id TEXT, tool_name TEXT, payload TEXT, created_at TEXT)")
    payload = json.dumps(PAYLOAD)
    n = [0]

    async def append() -> None:
        n[0] += 1
        con.execute("INSERT INTO entries VALUES (?, 1, ?, 'Message', 'bench', 'done, the answer is 42', NULL, NULL, ?,"
                    " '2026-12-07T22:00:00')", (n[0], n[0], payload))

    return append


def store_append(store: SessionStore) -> Append:
    sid = store.create_session("bench")

    async def append() -> None:
        await store.write_one(sid, EntryType.MESSAGE, "bench", "done, the answer is 42", payload=PAYLOAD)

    return append


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def measure(cases: dict[str, Append], rounds: int, cell: bool) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            await asyncio.sleep(0.005)  # idle: what is behind (the journal's DuckDB commit) runs here
            start = time.perf_counter()
            await cases[name]()
            if cell:
                await asyncio.sleep(0.020)  # the model call
                await cases[name]()
            times[name].append(time.perf_counter() - start - (0.020 if cell else 0.0))
    return times


async def main(rounds: int) -> None:
    tmp = tempfile.mkdtemp(prefix="bench_journal_")
    journaled = SessionStore(os.path.join(tmp, "journal.duckdb"))
    committed = SessionStore(os.path.join(tmp, "commit.duckdb"), journal=False)
    cases = {"floor": floor(os.path.join(tmp, "floor.jsonl")), "journal": store_append(journaled),
             "duckdb": store_append(committed), "sqlite": sqlite_wal(os.path.join(tmp, "wal.sqlite"))}
    for case in cases.values():  # warm up
        for _ in range(20):
            await case()
    print(f"bench_journal: {platform.machine()}, Python {platform.python_version()}, DuckDB {duckdb.__version__}, "
          f"{rounds} rounds, {tmp}")
    one = await measure(cases, rounds, cell=False)
    print("\none durable append, p50 (p90) ms:")
    for name, samples in one.items():
        q = statistics.quantiles(samples, n=10)
        ratio = p50(samples) / p50(one["floor"])
        print(f"  {name:8s} {p50(samples):6.3f} ({q[8] * 1000:6.3f})   {ratio:5.2f}x the floor")
    cells = await measure(cases, max(rounds // 3, 30), cell=True)
    print("\na simulated cell (append, 20 ms wait, append): ms over the 20 ms, p50")
    for name, samples in cells.items():
        print(f"  {name:8s} +{p50(samples):6.3f}")
    print(f"\njournal append / floor: {p50(one['journal']) / p50(one['floor']):.2f}x (target <= 2x); "
          f"duckdb commit / floor: {p50(one['duckdb']) / p50(one['floor']):.2f}x; "
          f"journal / duckdb: {p50(one['journal']) / p50(one['duckdb']):.2f}x; "
          f"sqlite WAL / floor: {p50(one['sqlite']) / p50(one['floor']):.2f}x")
    journaled.close()
    committed.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300)
    asyncio.run(main(parser.parse_args().rounds))
