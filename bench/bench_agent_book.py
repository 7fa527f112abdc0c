"""What keeping agents and their current sessions costs (issue 26 §3), measured in one run.

- a new session: ``server.new_session(name)`` (the session row, then the agent's current
  session recorded in ``agent_sessions``) against ``store.create_session`` alone (what it was
  before), interleaved, median of 100 each;
- loading: building the notebook's Server (``extension.build_server``, what ``%load_ext`` does
  once the store is open) on a store holding 50 kept agents, each with a current session,
  against the same on a store holding none, interleaved, median of 20 each;
- defining an agent: ``define_agent`` (now one upsert of its definition), median of 100;
- what a turn from a cell adds: ``refresh_agents(name)`` (a query on a shared store, nothing
  on DuckDB), median of 100.

Run from the repo root: ``.venv/bin/python bench/bench_agent_book.py`` (``CHAZ_BENCH_PG=URL``
of an empty database adds the same figures on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from chaz_nb.core.store import SessionStore  # noqa: E402
from chaz_nb.notebook.extension import build_server  # noqa: E402
from chaz_nb.server.agents import Agent  # noqa: E402

AGENTS = 50


def interleaved(a: Callable[[], object], b: Callable[[], object], n: int) -> tuple[float, float]:
    """Median ms of ``a`` and of ``b``, run in turns (the machine's noise falls on both)."""
    ta, tb = [], []
    for _ in range(n):
        for fn, times in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(ta), statistics.median(tb)


def measure(full: str, empty: str) -> list[tuple[str, float, float]]:
    loop = asyncio.new_event_loop()
    rows = []
    store = SessionStore.open(full)
    server = build_server(store, loop)
    for i in range(AGENTS):
        server.define_agent(Agent(f"agent{i}", model="chaz/echo", system=f"you are number {i}", tools=["kernel__*"]))
        server.new_session(f"agent{i}")
    before, after = interleaved(lambda: store.create_session("agent0"), lambda: server.new_session("agent0"), 100)
    rows.append(("new session (create_session alone / new_session)", before, after))
    counter = iter(range(10**6))
    times = []
    for _ in range(100):
        t0 = time.perf_counter()
        server.define_agent(Agent("agent1", model="chaz/echo", system=f"v{next(counter)}"))
        times.append((time.perf_counter() - t0) * 1000)
    rows.append(("define agent (one upsert)", 0.0, statistics.median(times)))
    times = []
    for _ in range(100):
        t0 = time.perf_counter()
        server.refresh_agents("agent2")  # what a turn from a cell adds (a query on a shared store)
        times.append((time.perf_counter() - t0) * 1000)
    rows.append(("a turn's read of its agent's row", 0.0, statistics.median(times)))
    loop.run_until_complete(server.stop())
    store.close()

    stores = {path: SessionStore.open(path) for path in (full, empty)}

    def load(path: str) -> Callable[[], None]:
        def run() -> None:
            srv = build_server(stores[path], loop)
            assert len(srv.agents) == (AGENTS + 1 if path == full else 1)
            loop.run_until_complete(srv.stop())

        return run

    before, after = interleaved(load(empty), load(full), 20)
    rows.append((f"build the Server: 0 / {AGENTS} kept agents", before, after))
    for s in stores.values():
        s.close()
    loop.close()
    return rows


def main() -> None:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(("duckdb", measure(os.path.join(tmp, "full.duckdb"), os.path.join(tmp, "empty.duckdb"))))
    if os.environ.get("CHAZ_BENCH_PG"):
        url = os.environ["CHAZ_BENCH_PG"]
        empty = os.environ.get("CHAZ_BENCH_PG_EMPTY", url)
        results.append(("postgresql", measure(url, empty)))
    for where, rows in results:
        print(f"{where}:{'before':>48s} {'after':>9s}")
        for name, before, after in rows:
            print(f"  {name:48s} {before:8.2f} {after:8.2f} ms")


if __name__ == "__main__":
    main()
