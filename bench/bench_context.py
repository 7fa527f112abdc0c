"""One turn's cost and peak memory against session length (issue 14: flat in session length).

For each size (1k / 10k / 50k entries by default) a DuckDB file is built with one session of
that many entries (a realistic mix: user and agent Messages, ToolCall/ToolResult pairs, Acks,
~200 characters each), then a fresh subprocess opens it, starts a Server with an offline
``chaz/echo`` agent, runs one turn in a fresh session (litellm's import, out of the figures)
and then turns in the big session: the first (cold: nothing of it in memory) and the median of
the following ones, then the process's peak RSS.

Targets: one turn at 50k within 1.5x of 1k; peak RSS at 50k within 20 MB of 1k.
Run: python bench/bench_context.py [--sizes 1000,10000,50000] [--turns 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def build(path: str, n: int) -> None:
    """A file with one session of ``n`` entries (written in bulk, as the store's own rows)."""
    from chaz_nb import SessionStore

    store = SessionStore(path)
    sid = store.create_session("bot")
    # a turn: user Message, Ack, ToolCall, ToolResult, agent Message (5 entries)
    store.execute(
        """
        INSERT INTO entries (id, session_id, seq, entry_type, sender, content, tool_call_id, tool_name,
                             payload, created_at, run_id)
        SELECT i + 1, ?, i + 1,
               ['Message', 'Ack', 'ToolCall', 'ToolResult', 'Message'][i % 5 + 1],
               CASE WHEN i % 5 = 0 THEN 'user' ELSE 'bot' END,
               CASE i % 5 WHEN 1 THEN 'bot started' ELSE 'entry ' || i || ' ' || repeat('lorem ipsum ', 16) END,
               CASE WHEN i % 5 IN (2, 3) THEN 'call-' || (i // 5) END,
               CASE WHEN i % 5 IN (2, 3) THEN 'lookup' END,
               '{"run_id": ' || (i - i % 5 + 2) || ', "model": "chaz/echo", "prompt_tokens": 1200}',
               now()::TIMESTAMP, i - i % 5 + 2
        FROM range(?) t(i)
        """,
        [sid, n],
    )
    store.close()


def child(path: str, turns: int) -> None:
    """Run in a subprocess: turns in the file's session, then one JSON line of figures."""
    import asyncio

    from chaz_nb import Agent, Server, SessionStore

    async def main() -> dict:
        store = SessionStore(path)
        server = Server(store, [Agent("bot", model="chaz/echo")])
        sid = store.sessions()[0].id
        warm = store.create_session("bot")
        await (await server.send(warm, "warm up")).wait()  # litellm's import, out of the figures
        times = []
        for i in range(turns):
            t0 = time.perf_counter()
            handle = await server.send(sid, f"question {i}")
            await handle.wait()
            times.append((time.perf_counter() - t0) * 1000)
        await server.stop()
        store.close()
        return {"first_ms": times[0], "turn_ms": statistics.median(times[1:]),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

    print(json.dumps(asyncio.run(main())))


def measure(path: str, turns: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", path, "--turns", str(turns)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--turns", type=int, default=7)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.turns)
        return
    import duckdb

    print(f"python {platform.python_version()}, duckdb {duckdb.__version__}, {os.cpu_count()} cores")
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = os.path.join(tmp, f"s{n}.duckdb")
            build(path, n)
            results[n] = r = measure(path, args.turns)
            print(f"{n:>7,} entries: first turn {r['first_ms']:7.1f} ms, turn p50 {r['turn_ms']:7.1f} ms, "
                  f"peak RSS {r['peak_rss_mb']:6.1f} MB")
    small, large = results[min(sizes)], results[max(sizes)]
    ratio = large["turn_ms"] / small["turn_ms"]
    rss = large["peak_rss_mb"] - small["peak_rss_mb"]
    print(f"turn at {max(sizes):,} / {min(sizes):,}: {ratio:.2f}x (target <= 1.5x: "
          f"{'met' if ratio <= 1.5 else 'NOT met'})")
    print(f"peak RSS at {max(sizes):,} - {min(sizes):,}: {rss:+.1f} MB (target <= 20 MB: "
          f"{'met' if rss <= 20 else 'NOT met'})")


if __name__ == "__main__":
    main()
