"""What a team's row-level security costs per turn (issue 46): 4 kernel processes on one
PostgreSQL, as ``bench/load.py --db postgres`` runs them, twice in the same run on a
throw-away cluster: once every kernel as the same role (nobody confined: the policies pass
at their first test), once each kernel as a person of a team (``core/store/pgteam.py``:
every read and write of the store goes through the policies). Prints turns/s, p50/p99 of
Message -> reply for both, and the difference per turn; then checks both stores (every
turn's entries once, seq and ids gapless) as the administrator.

Run: python bench/bench_team.py [--kernels 4] [--sessions 10] [--turns 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

from load import check_store, pct  # noqa: E402


def run_kernels(urls: list[str], sessions: int, turns: int) -> tuple[float, list[float], list[int]]:
    """One ``load.py --kernel`` process per URL, all started at once: wall s, latencies ms, sessions."""
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "load.py"), "--kernel", url, "--sessions",
                               str(sessions), "--turns", str(turns)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for url in urls]
    try:
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
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    return wall, [x * 1000 for r in results for x in r["latencies"]], [s for r in results for s in r["sessions"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=10, help="per kernel")
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    import psycopg
    from fakes.postgres import PostgresCluster

    from chaz_nb.core.store.pgteam import set_up_team

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.1f}")
    cluster = PostgresCluster()
    try:
        plain = cluster.new_database()
        team = cluster.new_database()
        roles = [f"bench_person{i}" for i in range(args.kernels)]
        with psycopg.connect(team, autocommit=True) as con:
            for role in roles:
                con.execute(f"CREATE ROLE {role} LOGIN")
        set_up_team(team, roles)
        n = args.kernels * args.sessions * args.turns
        figures = {}
        for label, urls, admin in (
            ("one role (nobody confined)", [plain] * args.kernels, plain),
            ("a team (each kernel a person)", [team.replace("chaz@", f"{r}@", 1) for r in roles], team),
        ):
            wall, ms, sessions = run_kernels(urls, args.sessions, args.turns)
            checked = check_store(admin, sessions, args.turns)
            figures[label] = (wall, ms)
            print(f"{label}: {n / wall:.1f} turns/s (wall {wall:.1f} s); Message -> reply p50 {pct(ms, 50):.0f} ms, "
                  f"p99 {pct(ms, 99):.0f} ms; store checked: {checked:,} entries")
        (w1, m1), (w2, m2) = figures.values()
        print(f"{args.kernels} kernels x {args.sessions} sessions x {args.turns} turns = {n} turns: the policies cost "
              f"{(w2 - w1) / n * 1000 * args.kernels:+.2f} ms of kernel time a turn ({w2 / w1:.2f}x wall), "
              f"p50 latency {pct(m2, 50) - pct(m1, 50):+.0f} ms")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
