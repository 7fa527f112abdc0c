"""What running each ``kernel__query`` in a forked child costs, and what it saves (issue 41 §2).

The kernel is given a size first (``--kernel-mb``, default 1,000 MB of resident ballast plus
the frames), since a fork copies the page tables of all the kernel maps. Then, each the best
of ``--runs``:

- ``fork``            ``os.fork`` of the kernel, a child that returns at once, reaped
- ``instance``        a fresh locked-down DuckDB instance (what each child opens)
- ``small``           kernel__query over a 3-row frame: in a child / in process
- ``1M rows``         a group-by over a 1,000,000-row frame: in a child / in process
- ``repeat 3e9``      the kernel's peak RSS growth (VmHWM, reset before) for
                      ``SELECT repeat('x', 3000000000)``: in process / in a child
                      (``--skip-in-process`` leaves out the in-process one: ~6 GB, ~40 s)

"In process" is the path the kernel takes where it cannot fork (Windows), and the one every
query took before; ratios are measured in the same run.

    python bench/bench_query_fork.py [--kernel-mb 1000] [--runs 5] [--skip-in-process]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable

import duckdb
import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from chaz_nb.core.store import LOCKED_DOWN  # noqa: E402
from chaz_nb.server.kernel import KernelTools, PlainHost  # noqa: E402
from chaz_nb.server.kernel import query as query_mod  # noqa: E402
from chaz_nb.server.kernel.forked import run_forked  # noqa: E402


def status_mb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith(field + ":"))


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def best_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return min(times)


def big_frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame({"region": rng.choice(np.array(["north", "south", "east", "west"], dtype=object), rows),
                         "amount": rng.random(rows) * 100})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel-mb", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-in-process", action="store_true")
    args = parser.parse_args()

    ballast = np.ones(args.kernel_mb * (1 << 20) // 8)  # resident: every page written
    ns = {"sales": pd.DataFrame({"region": ["north", "south", "north"], "amount": [1.0, 2.0, 4.0]}),
          "big": big_frame(1_000_000), "ballast": ballast}
    kernel = KernelTools(PlainHost(ns))
    tool = next(t for t in kernel.tools if t.name == "kernel__query")
    loop = asyncio.new_event_loop()

    def query(sql: str) -> str:
        reply = loop.run_until_complete(tool.run({"sql": sql}))
        return reply.text

    def in_process(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            query_mod.FORKS = False
            try:
                return fn()
            finally:
                query_mod.FORKS = True
        return run

    small = "SELECT region, amount FROM sales"
    group = "SELECT region, sum(amount) AS total, count(*) AS n FROM big GROUP BY region ORDER BY region"
    assert query(small) == in_process(lambda: query(small))()
    # (sums over 2 threads may differ in their last digits between runs)
    assert query(group).splitlines()[0] == in_process(lambda: query(group))().splitlines()[0] == "region | total | n"
    print(f"kernel RSS {status_mb('VmRSS'):,} MB, {args.runs} runs, best of each, DuckDB {duckdb.__version__}")

    budget = query_mod.QUERY_PROCESS_MEMORY_MB
    fork = best_ms(lambda: run_forked(lambda: None, memory_mb=budget, deadline=10), args.runs)
    config = {**LOCKED_DOWN, **query_mod.QUERY_LIMITS}
    instance = best_ms(lambda: duckdb.connect(":memory:", config=config).close(), args.runs)
    print(f"  fork + reap            {fork:8.1f} ms")
    print(f"  fresh instance         {instance:8.1f} ms")
    for label, sql in (("small (3 rows)", small), ("1M rows group-by", group)):
        forked = best_ms(lambda sql=sql: query(sql), args.runs)
        inproc = best_ms(in_process(lambda sql=sql: query(sql)), args.runs)
        print(f"  {label:<22} {forked:8.1f} ms in a child, {inproc:8.1f} ms in process: "
              f"{forked / inproc:5.2f}x, +{forked - inproc:.1f} ms")

    huge = "SELECT repeat('x', 3000000000) AS s"
    reset_peak()
    base = status_mb("VmHWM")
    started = time.perf_counter()
    text = query(huge)
    forked_grew, forked_s = status_mb("VmHWM") - base, time.perf_counter() - started
    print(f"  repeat 3e9 in a child: kernel peak +{forked_grew:,} MB in {forked_s:.1f} s: {text[:70]!r}")
    if not args.skip_in_process:
        reset_peak()
        base = status_mb("VmHWM")
        started = time.perf_counter()
        text = in_process(lambda: query(huge))()
        grew, took = status_mb("VmHWM") - base, time.perf_counter() - started
        print(f"  repeat 3e9 in process: kernel peak +{grew:,} MB in {took:.1f} s: {text[:70]!r}")
        print(f"  peak growth, in process / in a child: {grew / max(1, forked_grew):,.0f}x")
    loop.close()


if __name__ == "__main__":
    main()
