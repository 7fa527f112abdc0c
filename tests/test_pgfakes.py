"""The throw-away PostgreSQL clusters of the tests (tests/fakes/postgres.py) never outlive a killed run."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fakes.postgres import MISSING, find_bin, sweep_stale

pytestmark = pytest.mark.skipif(find_bin() is None, reason=MISSING)

TESTS = Path(__file__).parent


def _cluster_process() -> tuple[subprocess.Popen, Path, int]:
    """A process that starts a cluster and waits; its folder and postmaster pid."""
    code = """
        import sys
        from fakes.postgres import PostgresCluster
        cluster = PostgresCluster()
        print(cluster.root, flush=True)
        sys.stdin.readline()
    """
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=TESTS, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        raise AssertionError(proc.communicate()[1])
    root = Path(line)
    return proc, root, int((root / "data" / "postmaster.pid").read_text().split()[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_cluster_stops_when_its_test_run_gets_sigterm():
    proc, root, postmaster = _cluster_process()
    proc.send_signal(signal.SIGTERM)  # what `timeout` sends
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert not root.exists()
    assert not _alive(postmaster)


def test_a_new_cluster_sweeps_the_one_a_killed_run_left_running():
    proc, root, postmaster = _cluster_process()
    try:
        assert root not in sweep_stale()  # its owner runs: left alone
        proc.kill()  # SIGKILL: no handler runs, the postmaster is left behind
        proc.wait(timeout=60)
        assert root.exists() and _alive(postmaster)
        assert root in sweep_stale()
        assert not root.exists()
        assert not _alive(postmaster)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sweep_stale()
