"""A kernel killed with SIGKILL mid-run loses no committed entry, and reopening heals it."""

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


from chaz_nb.server import Server
from chaz_nb.core.store import SessionStore
from chaz_nb.engine.tools import ToolRegistry

WRITER = Path(__file__).parent / "helpers" / "crash_writer.py"
KILLS = 20


def run_and_kill(path: str, delay: float) -> list[int]:
    """Start the writer, let it work for ``delay`` s, SIGKILL it; return the ids it saw committed."""
    proc = subprocess.Popen([sys.executable, str(WRITER), path], stdout=subprocess.PIPE, text=True)
    seen: list[int] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            line = line.strip()
            if line == "ready":
                ready.set()
            elif line.isdigit():
                seen.append(int(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert ready.wait(60), "writer did not start"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    reader.join(10)
    return seen


def test_sigkill_at_random_points_loses_no_committed_entry(tmp_path):
    rng = random.Random(20261202)
    path = str(tmp_path / "crash.duckdb")
    total_seen = set()
    for attempt in range(KILLS):
        seen = run_and_kill(path, rng.uniform(0.05, 0.6))
        total_seen.update(seen)
        store = SessionStore(path)
        try:
            ids = {r[0] for r in store.execute("SELECT id FROM entries")}
            missing = total_seen - ids
            assert not missing, f"kill {attempt}: committed entries lost: {sorted(missing)[:10]}"
            # seq stays gapless per session
            gaps = store.execute(
                "SELECT session_id FROM entries GROUP BY session_id HAVING max(seq) <> count(*)"
            )
            assert gaps == [], f"kill {attempt}: seq gaps in sessions {gaps}"
            # reopening closes every run and every request left open
            Server(store, [], ToolRegistry())
            statuses = {r[0] for r in store.execute("SELECT DISTINCT status FROM runs")}
            assert statuses <= {"ok", "error", "interrupted"}, statuses
            pending = store.execute("SELECT count(*) FROM approvals WHERE decision = 'pending'")
            assert pending == [(0,)]
        finally:
            store.close()
    assert len(total_seen) > 100  # the writer really wrote between kills
