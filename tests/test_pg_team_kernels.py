"""Two real kernels on one throw-away PostgreSQL, connected as two persons of a team (roles set
up by ``chaz_nb.core.store.pgteam``): what Bob's kernel cannot see or do of Alice's, in one
line each, and what ``%chaz share`` opens. Waits are on events (a cell's idle status, a view's
iopub messages), as in tests/test_pg_kernels.py.
"""

from __future__ import annotations

import pytest

from kernel_harness import Kernel
from test_pg_kernels import DEPLOY, OPS, messages, ok, rows, session_of
from fakes.postgres import retire_team_role

psycopg = pytest.importorskip("psycopg")


def refused(k: Kernel, code: str, needle: str) -> str:
    """A cell that fails with one line (IPython's UsageError: no traceback) saying ``needle``."""
    r = k.run(code, timeout=60)
    text = (r.stdout + r.stderr + "\n".join(r.texts())).strip()
    assert r.status == "error" or "UsageError" in text, (code, text)
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], (code, text)
    return lines[0]


@pytest.fixture
def team_kernels(pg_url, tmp_path):
    from chaz_nb.core.store.pgteam import set_up_team

    with psycopg.connect(pg_url, autocommit=True) as con:
        for role in ("k_alice", "k_bob"):
            if not con.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                con.execute(f"CREATE ROLE {role} LOGIN")
    set_up_team(pg_url, ["k_alice", "k_bob"])
    started: list[Kernel] = []
    try:
        for role in ("k_alice", "k_bob"):
            cwd = tmp_path / role
            cwd.mkdir()
            k = Kernel(str(cwd), env={"CHAZ_DB": pg_url.replace("chaz@", f"{role}@", 1)})
            started.append(k)
            out = ok(k, "%load_ext chaz_nb")
            assert f"acting as {role} (%chaz whoami)" in out, out
        yield started[0], started[1]
    finally:
        for k in started:
            k.close()
        retire_team_role(pg_url)


def test_bob_cannot_see_decide_or_stop_alices_run_until_she_shares_it(team_kernels, pg_url):
    a, b = team_kernels
    assert ok(b, "%chaz whoami").startswith("you are k_bob on postgresql://")
    ok(a, DEPLOY)
    ok(a, OPS)
    assert "parked" in ok(a, "%chaz @ops ship it")
    sid = session_of(a, "ops")
    before = rows(pg_url, "SELECT id, content FROM entries ORDER BY id")

    # private: not in Bob's %chaz sql, sessions, pending; his log, stop and share are refused
    seen = "%chaz sql -o seen SELECT count(*) AS n FROM entries\nprint('COUNT', list(seen['n']))"
    assert "COUNT [0]" in ok(b, seen)
    assert "COUNT [0]" not in ok(a, seen)
    assert f"  {sid}  " not in ok(b, "%chaz sessions")
    assert "no pending approval requests" in ok(b, "%chaz pending")
    share_hint = f"ask k_alice to `%chaz share {sid} @k_bob --read`"
    refused(b, f"%chaz log {sid}", share_hint)
    refused(b, f"%chaz stop {sid}", share_hint)
    refused(b, f"%chaz share {sid} @k_bob --approve", share_hint)

    # shared to read: Bob follows the run, and still cannot stop it
    assert "they may read it" in ok(a, f"%chaz share {sid} @k_bob")
    assert f"session {sid} · ops · chat · parked" in ok(b, f"%chaz log {sid}")
    refused(b, f"%chaz stop {sid}", f"ask k_alice to `%chaz share {sid} @k_bob --write`")

    # shared to approve: Bob decides, Alice's kernel resumes the run with Bob's name on it
    ok(a, f"%chaz share {sid} @k_bob --approve")
    assert "deploy: approve by user" in ok(b, "%chaz approve last")
    assert "idle" in ok(a, f"%chaz wait {sid}", timeout=90)
    assert messages(pg_url, sid)[-1] == ("ops", "result: deployed prod")
    assert rows(pg_url, "SELECT decided_as FROM approvals WHERE session_id = %s", (sid,)) == [("k_bob",)]
    # nothing Alice wrote is lost or changed
    assert rows(pg_url, "SELECT id, content FROM entries WHERE id <= %s ORDER BY id", (before[-1][0],)) == before
