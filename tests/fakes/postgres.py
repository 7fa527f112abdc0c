"""A throw-away PostgreSQL cluster for the tests: initdb under a temp folder, a unix socket there.

``initdb`` refuses to run as root, so as root the cluster belongs to the ``postgres`` user
(Debian's package creates it) or, failing that, ``nobody``; the data folder is handed to that
user. The server listens on no TCP port at all (``listen_addresses=''``), only on a socket in
its own folder, and trusts local connections: nothing outside this machine's tests can reach it.
``find_bin()`` is None where PostgreSQL is not installed; the tests skip with that reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

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


class PostgresCluster:
    """initdb + pg_ctl start in a temp folder; ``url`` for psycopg; ``stop()`` removes it all."""

    def __init__(self) -> None:
        bindir = find_bin()
        if bindir is None:
            raise RuntimeError(MISSING)
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="chaz-pg-"))
        self.data = self.root / "data"
        self.user = _run_as()
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        os.chmod(self.root, 0o755)  # the test process (root or not) reaches the socket
        self._pg("initdb", "-D", str(self.data), "-U", "chaz", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = f"-c listen_addresses='' -c unix_socket_directories={self.root} -c fsync=off -c max_connections=200"
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options, "-w", "start")
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
        try:
            self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
