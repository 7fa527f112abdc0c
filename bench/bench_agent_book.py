"""What keeping agents and their current sessions costs (issue 26 §3).

- a new session: ``server.new_session(name)`` (it now also records the agent's current
  session in ``agent_sessions``), median of 200 on a DuckDB file;
- loading: building the notebook's Server (``extension.build_server``, what ``%load_ext``
  does after opening the store) on a store holding 50 stored agents, each with a current
  session, median of 20;
- defining one agent (``define_agent``: now also one upsert), median of 200.

Run from the repo root: ``.venv/bin/python bench/bench_agent_book.py`` (``CHAZ_BENCH_PG=URL``
adds the same figures on PostgreSQL). On code without the agent book (before issue 26 §3)
the same script measures the same calls, which then store nothing.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from chaz_nb.core.store import SessionStore  # noqa: E402
from chaz_nb.notebook.extension import build_server  # noqa: E402
from chaz_nb.server.agents import Agent  # noqa: E402

AGENTS = 50


def median_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def keep(server, agent: Agent) -> None:
    try:
        server.define_agent(agent, keep=True)
    except TypeError:  # before the agent book: define_agent keeps nothing
        server.define_agent(agent)


def measure(path: str) -> dict[str, float]:
    loop = asyncio.new_event_loop()
    out: dict[str, float] = {}
    store = SessionStore.open(path)
    server = build_server(store, loop)
    for i in range(AGENTS):
        keep(server, Agent(f"agent{i}", model="chaz/echo", system=f"you are number {i}", tools=["kernel__*"]))
        server.new_session(f"agent{i}")
    out["new session"] = median_ms(lambda: server.new_session("agent0"), 200)
    counter = iter(range(10**6))
    out["define agent"] = median_ms(
        lambda: keep(server, Agent("agent1", model="chaz/echo", system=f"v{next(counter)}")), 200)
    loop.run_until_complete(server.stop())
    store.close()

    def load() -> None:
        s = SessionStore.open(path)
        srv = build_server(s, loop)
        loop.run_until_complete(srv.stop())
        s.close()

    def open_only() -> None:
        SessionStore.open(path).close()

    out[f"load, {AGENTS} stored agents"] = median_ms(load, 20)
    out["  of which opening the store"] = median_ms(open_only, 20)
    loop.close()
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = [("duckdb", measure(os.path.join(tmp, "s.duckdb")))]
    if os.environ.get("CHAZ_BENCH_PG"):
        rows.append(("postgresql", measure(os.environ["CHAZ_BENCH_PG"])))
    for where, figures in rows:
        print(f"{where}:")
        for name, ms in figures.items():
            print(f"  {name:34s} {ms:8.2f} ms")


if __name__ == "__main__":
    main()
