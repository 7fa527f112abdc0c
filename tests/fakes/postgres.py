"""A throw-away PostgreSQL cluster for the tests: initdb under a temp folder, a unix socket there.

``initdb`` refuses to run as root, so as root the cluster belongs to the ``postgres`` user
(Debian's package creates it) or, failing that, ``nobody``; the data folder is handed to that
user. The server listens on no TCP port at all (``listen_addresses=''``), only on a socket in
its own folder, and trusts local connections: nothing outside this machine's tests can reach it.
``find_bin()`` is None where PostgreSQL is not installed; the tests skip with that reason.

A cluster outlives a test run that is killed before ``stop()`` (``timeout`` sends SIGTERM,
a CI runner SIGKILL). So each cluster's folder holds an ``owner`` file (the pid and start time
of the process that made it); a new cluster first sweeps the folders whose owner is gone
(stops their postmaster, removes the folder), and a process that made clusters stops them on
SIGTERM and at exit. A folder with no ``owner`` file, or whose owner still runs, is left alone.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

#: why the PostgreSQL tests skip where there is no server binary
MISSING = "PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/postgres.sh does it)"


def find_bin() -> Path | None:
    """The folder with initdb/pg_ctl (newest Debian version first), or None."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
            return user
        except KeyError:
            continue
    return None


PREFIX = "chaz-pg-"
OWNER = "owner"


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), None when there is no such process:
    with the pid it names one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_alive(root: Path) -> bool | None:
    """Whether the process that made the cluster in ``root`` runs; None when unknown (no owner file)."""
    try:
        pid_text, started = (root / OWNER).read_text().split()
    except (OSError, ValueError):
        return None
    return _start_time(int(pid_text)) == started


def sweep_stale(temp_root: str | None = None) -> list[Path]:
    """Stop and remove the clusters whose owner process is gone; the folders removed."""
    swept = []
    for folder in glob.glob(os.path.join(temp_root or tempfile.gettempdir(), PREFIX + "*")):
        root = Path(folder)
        if _owner_alive(root) is not False:
            continue
        data = root / "data"
        if (data / "postmaster.pid").exists() and (bindir := find_bin()) is not None:
            command = [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
            owner = _run_as()
            if owner is not None:
                command = ["runuser", "-u", owner, "--", *command]
            subprocess.run(command, capture_output=True, timeout=60, cwd=root)
        shutil.rmtree(root, ignore_errors=True)
        swept.append(root)
    return swept


_live: list[PostgresCluster] = []
_hooked = False


def _stop_all() -> None:
    for cluster in list(_live):
        cluster.stop()


def _on_sigterm(previous: Any) -> Any:
    def handler(signum: int, frame: Any) -> None:
        _stop_all()
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signal.SIGTERM)  # the default action: end with SIGTERM's status

    return handler


def _hook() -> None:
    """Stop this process's clusters at exit and on SIGTERM (once per process)."""
    global _hooked
    if _hooked:
        return
    _hooked = True
    atexit.register(_stop_all)
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, _on_sigterm(previous))


class PostgresCluster:
    """initdb + pg_ctl start in a temp folder; ``url`` for psycopg; ``stop()`` removes it all."""

    def __init__(self) -> None:
        bindir = find_bin()
        if bindir is None:
            raise RuntimeError(MISSING)
        self.bindir = bindir
        sweep_stale()
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        pid = os.getpid()
        (self.root / OWNER).write_text(f"{pid} {_start_time(pid)}\n")
        self.data = self.root / "data"
        self._stopped = False
        _hook()
        _live.append(self)
        self.user = _run_as()
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        os.chmod(self.root, 0o755)  # the test process (root or not) reaches the socket
        options = f"-c listen_addresses='' -c unix_socket_directories={self.root} -c fsync=off -c max_connections=200"
        try:
            self._pg("initdb", "-D", str(self.data), "-U", "chaz", "--auth=trust", "-E", "UTF8", "--no-sync")
            self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options, "-w", "start")
        except BaseException:
            self.stop()
            raise
        self.url = f"postgresql://chaz@/postgres?host={self.root}"
        self._counter = 0

    def _pg(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stderr.strip() or result.stdout.strip()}")

    def new_database(self) -> str:
        """A fresh empty database on the cluster; its URL."""
        import psycopg

        self._counter += 1
        name = f"chaz_{os.getpid()}_{self._counter}"
        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://chaz@/{name}?host={self.root}"

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            if (self.data / "postmaster.pid").exists():
                self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            if self in _live:
                _live.remove(self)


def retire_team_role(admin_url: str) -> None:
    """Drop the team's group role a test's ``set_up_team`` made: a role is the whole cluster's,
    and while it exists every later test's database counts as a team's (its unknown senders
    confined), so each team test takes it back with it."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as con:
        if con.execute("SELECT 1 FROM pg_roles WHERE rolname = 'chaz_nb_team'").fetchone():
            con.execute("DROP OWNED BY chaz_nb_team")
            con.execute("DROP ROLE chaz_nb_team")
