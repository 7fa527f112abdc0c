"""What keeping a ``kernel__run`` call's before-state for ``%chaz undo`` costs (issue 44 §3),
on an N-row DataFrame (10,000,000 rows by default, two numeric columns), measured in one run:

- ``copy RSS``       RSS a copy-based before-state would take per call: a copy of the frame,
                     whether or not the call touches it (the cost undo must not have)
- ``create held``    RSS the undo record holds after a call that creates a variable from the
                     frame / the frame's size                                       (~0, < 0.05)
- ``rebind held``    RSS the record holds after ``sales = sales * 2`` (the old frame, kept by
                     reference, freed when the record is released) / the frame's size
                     (the price of undoing a rebind: ~1.0, never more)
- ``call cost``      one ``kernel__run`` of ``x = 1`` in a namespace holding the frame, with
                     its undo record kept / without (the snapshots are there either way)
                                                                                     (< 1.2x)
- ``undo``           ``Server.undo`` of the rebind: its time, and whether ``sales`` is the very
                     frame it was (it must be)

    python bench/bench_undo.py [--rows N] [--runs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
import weakref
from types import SimpleNamespace

import numpy as np
import pandas as pd
import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from chaz_nb.core.store import SessionStore  # noqa: E402
from chaz_nb.server import Server  # noqa: E402
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent  # noqa: E402
from chaz_nb.server.kernel import KernelTools, PlainHost  # noqa: E402
from chaz_nb.server.kernel.undo_book import current_call  # noqa: E402
from chaz_nb.server.ports import current_run  # noqa: E402

MB = 1024 * 1024


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame({"amount": rng.random(rows) * 100, "units": rng.integers(0, 50, rows)})


def ran(server: Server, session: int, code: str) -> None:
    """One approved (auto-approved) kernel__run of ``code`` through the server."""
    agent = server.agents["coder"]
    agent.script = [{"tool": "kernel__run", "args": {"code": code}}, "done"]
    asyncio.run(_send(server, session))


async def _send(server: Server, session: int) -> None:
    await (await server.send(session, "go")).wait()


def call_ms(kernel: KernelTools, runs: int, keep: bool) -> float:
    """Best time of ``kernel.run('x = 1')`` with (keep) or without an undo record."""
    ctx = SimpleNamespace(session_id=1, run_id=1, agent=Agent("bench", model="chaz/echo"))
    best = float("inf")
    for i in range(runs * 5):
        run_token = current_run.set(ctx)  # type: ignore[arg-type]  # what KernelTools.run reads of a run
        call_token = current_call.set(f"call_{i}" if keep else None)
        try:
            started = time.perf_counter()
            asyncio.run(kernel.run("x = 1"))
            best = min(best, time.perf_counter() - started)
        finally:
            current_call.reset(call_token)
            current_run.reset(run_token)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    sales = frame(args.rows)
    size = int(sales.memory_usage(index=True, deep=False).sum())
    print(f"frame: {args.rows:,} rows, {size / MB:,.0f} MB")

    # what a copy-based before-state would cost, per call
    before = rss()
    copied = sales.copy(deep=True)
    copy_rss = rss() - before
    del copied
    print(f"copy RSS      {copy_rss / MB:8.1f} MB = {copy_rss / size:.2f}x the frame (per call, touched or not)")

    store = SessionStore(":memory:")
    agent = Agent("coder", model="chaz/script", script=["done"], tools=list(SAFE_DEFAULT_TOOLS),
                  auto_approve=["kernel__run"])
    server = Server(store, [agent])
    ns: dict = {"sales": sales}
    server.add_kernel(ns)
    session = server.current_session("coder")
    original = weakref.ref(sales)  # the bench holds no reference: the record's must be the only one
    del sales

    # a call that creates a variable: the record keeps no object
    ran(server, session, "top = sales.groupby('units').amount.sum()")
    with_record = rss()
    server.release_undo(session)
    create_held = with_record - rss()
    print(f"create held   {create_held / MB:8.1f} MB = {create_held / size:.3f}x the frame (target < 0.05)")

    # a call that rebinds the frame: the record keeps the old one, by reference
    ran(server, session, "sales = sales * 2")
    outcome_started = time.perf_counter()
    outcome = server.undo(session)
    undo_ms = (time.perf_counter() - outcome_started) * 1000
    same = ns["sales"] is original()
    ran(server, session, "sales = sales * 2")  # again, to measure what the record holds
    with_record = rss()
    server.release_undo(session)
    rebind_held = with_record - rss()
    freed = original() is None
    print(f"rebind held   {rebind_held / MB:8.1f} MB = {rebind_held / size:.2f}x the frame "
          "(the old frame, by reference; a copy-based undo holds as much, plus its copy of every variable)")
    print(f"undo          {undo_ms:8.1f} ms; {outcome.describe()}")
    print(f"undone frame is the original object: {same}; freed once the record was released: {freed}")

    kernel = KernelTools(PlainHost({"sales": ns["sales"]}))
    without = call_ms(kernel, args.runs, keep=False)
    kept = call_ms(kernel, args.runs, keep=True)
    print(f"call cost     {kept:8.2f} ms with the record / {without:.2f} ms without = {kept / without:.2f}x "
          "(target < 1.2x)")
    asyncio.run(server.stop())
    store.close()


if __name__ == "__main__":
    main()
