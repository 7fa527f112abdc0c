"""Real kernels on one throw-away PostgreSQL (tests/fakes/postgres.py): a person acts from any
kernel. Cross-kernel wake, cross-kernel approval, no double reply, lease takeover after
SIGKILL of the serving kernel, four kernels on one session.

Waits are on events: a cell's idle status, a view's iopub messages. The one exception is a
freed lease after SIGKILL: PostgreSQL sends no event when a dead backend's advisory lock goes,
so that is polled in pg_locks within a bounded deadline (``lease_freed``).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from kernel_harness import Kernel

psycopg = pytest.importorskip("psycopg")

DEPLOY = '''
import chaz_nb

@chaz_nb.tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy to a target."""
    return f"deployed {target}"
'''
OPS = (
    '%%chaz agent ops\nmodel = "chaz/script"\ntools = ["deploy"]\napproval_timeout = 600\n'
    'script = [{tool = "deploy", args = {target = "prod"}}, "result: {result}"]'
)


@pytest.fixture
def kernels(pg_url, tmp_path):
    """``kernels(n)``: n kernels on the test database, the extension loaded in each."""
    started: list[Kernel] = []

    def start(n: int) -> list[Kernel]:
        for _ in range(n):
            cwd = tmp_path / f"k{len(started)}"
            cwd.mkdir()
            k = Kernel(str(cwd), env={"CHAZ_DB": pg_url})
            started.append(k)
            r = k.run("%load_ext chaz_nb")
            assert r.status == "ok" and "chaz_nb: sessions in postgresql://" in r.stdout, r.outputs
        return started[-n:]

    try:
        yield start
    finally:
        for k in started:
            k.close()


def ok(k: Kernel, code: str, timeout: float = 60) -> str:
    r = k.run(code, timeout=timeout)
    assert r.status == "ok", (code, r.stdout, r.stderr, r.outputs)
    return r.stdout + "\n".join(r.texts())


def rows(url: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as con:
        return con.execute(query, params).fetchall()


def session_of(k: Kernel, agent: str) -> int:
    return int(ok(k, f"import chaz_nb\nprint(chaz_nb.current().current_session({agent!r}))").strip())


def messages(url: str, sid: int) -> list[tuple[str, str]]:
    return [(s, c) for s, c in rows(url, "SELECT sender, content FROM entries WHERE session_id = %s"
                                         " AND entry_type = 'Message' ORDER BY seq", (sid,))]


def lease_freed(url: str, sid: int, deadline: float = 30.0) -> None:
    """No event tells that a killed kernel's backend has gone: poll its advisory lock away."""
    end = time.monotonic() + deadline
    while rows(url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 7262"
                    " AND objid = %s AND objsubid = 2", (sid,))[0][0]:
        assert time.monotonic() < end, f"the lease on session {sid} was not freed in {deadline:g} s"
        time.sleep(0.05)


def test_a_message_from_another_kernel_wakes_the_serving_one_and_gets_exactly_one_reply(kernels, pg_url):
    a, b = kernels(2)
    assert "echo: hello" in ok(a, "import chaz_nb\n%chaz @assistant hello")
    sid = session_of(a, "assistant")
    used = ok(b, f"%chaz use {sid}")
    assert f"session {sid} is @assistant's current session here" in used
    out = ok(b, "%chaz @assistant from B")  # B does not serve it: A answers, B's cell shows it
    assert "assistant: echo: from B" in out
    out = ok(b, f"%chaz log {sid}")
    assert "echo: hello" in out and "echo: from B" in out
    assert messages(pg_url, sid) == [("user", "hello"), ("assistant", "echo: hello"),
                                     ("user", "from B"), ("assistant", "echo: from B")]
    acks = rows(pg_url, "SELECT count(*) FROM entries WHERE session_id = %s AND entry_type = 'Ack'", (sid,))
    assert acks == [(2,)]  # one run per message, and no second run in B
    r = b.run("%chaz use 999")
    assert r.status == "error" and r.stderr.strip().endswith("there is no session 999; see %chaz sessions")


def test_a_request_parked_in_a_is_approved_from_b_and_a_resumes(kernels, pg_url):
    a, b = kernels(2)
    ok(a, DEPLOY)
    ok(a, OPS)
    out = ok(a, "%chaz @ops ship it")
    assert "parked" in out  # the cell ends when the run waits for a person
    sid = session_of(a, "ops")
    pending = ok(b, "%chaz pending")  # B never ran anything: it reads A's request from the log
    assert "deploy" in pending and f"  {sid}  " in pending and "ops" in pending, pending
    live = ok(b, f"%chaz log {sid}")  # a live view in B of the run parked in A
    assert f"session {sid} · ops · chat · parked" in live and "waiting for approval" in live
    assert "deploy: approve by user" in ok(b, "%chaz approve last")

    def reply_shown(m: dict) -> bool:
        data = m.get("content", {}).get("data", {})
        return m["msg_type"] == "update_display_data" and "ops: result: deployed prod" in data.get("text/plain", "")

    if not any(reply_shown(m) for m in b.background):  # (it may have come while the approve cell ran)
        b.wait_for(reply_shown)  # the view follows A's run to its reply
    out = ok(b, f"%chaz wait {sid}")  # A's run has ended: nothing to wait for
    assert out.strip() == f"session {sid} is idle"
    assert "no pending approval requests" in ok(a, "%chaz pending")
    assert messages(pg_url, sid)[-1] == ("ops", "result: deployed prod")
    errors = rows(pg_url, "SELECT count(*) FROM entries WHERE entry_type = 'Error'")
    assert errors == [(0,)]


def test_lease_takeover_after_sigkill_closes_the_interrupted_run(kernels, pg_url):
    a, b = kernels(2)
    ok(a, DEPLOY)
    ok(a, OPS)
    assert "parked" in ok(a, "%chaz @ops ship it")  # an open run and an open request in A
    sid = session_of(a, "ops")
    ok(b, "%chaz agent ops --model chaz/echo")  # B defines the agent too
    ok(b, f"%chaz use {sid}")
    assert "deploy" in ok(b, "%chaz pending")
    os.kill(a.km.provisioner.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
    a.km.provisioner.process.wait(timeout=30)  # type: ignore[union-attr]
    lease_freed(pg_url, sid)
    out = ok(b, "%chaz @ops after the crash")
    assert "ops: echo: after the crash" in out
    entries = rows(pg_url, "SELECT entry_type, sender, content, payload::text FROM entries WHERE session_id = %s"
                           " ORDER BY seq", (sid,))
    kinds = [e[0] for e in entries]
    assert kinds == ["Message", "Ack", "ToolCall", "ApprovalRequest",  # A's run, parked, then killed
                     "ApprovalDecision", "Error",  # B takes the lease: A's run closed as recovery does
                     "Message", "Ack", "Message"]  # then B writes its trigger and serves it
    assert '"timed_out"' in entries[4][3] and entries[5][2] == "interrupted: kernel stopped"
    assert "no pending approval requests" in ok(b, "%chaz pending")


def test_four_kernels_write_to_one_session_and_each_message_is_answered_once(kernels, pg_url):
    serving, *others = kernels(4)
    ok(serving, "%chaz @assistant start")
    sid = session_of(serving, "assistant")
    for k in others:
        ok(k, f"%chaz use {sid}")
    for turn in range(3):
        for i, k in enumerate(others):
            assert f"assistant: echo: k{i} t{turn}" in ok(k, f"%chaz @assistant k{i} t{turn}")
    said = messages(pg_url, sid)
    asked = [c for s, c in said if s == "user"]
    answered = [c for s, c in said if s == "assistant"]
    assert len(asked) == 1 + 3 * 3 and answered == [f"echo: {c}" for c in asked]
    seqs = [r[0] for r in rows(pg_url, "SELECT seq FROM entries WHERE session_id = %s ORDER BY seq", (sid,))]
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_wait_on_a_run_served_elsewhere_ends_when_the_serving_kernel_dies(kernels, pg_url):
    a, b = kernels(2)
    ok(a, '''
import asyncio
import chaz_nb

@chaz_nb.tool
async def hang() -> str:
    """Wait for ever."""
    await asyncio.Event().wait()
    return "never"
''')
    ok(a, '%%chaz agent slow\nmodel = "chaz/script"\ntools = ["hang"]\nscript = [{tool = "hang", args = {}}, "done"]')
    ok(a, "%chaz --no-wait @slow go")  # A's run hangs in its tool
    sid = session_of(a, "slow")
    ok(b, f"%chaz use {sid}")
    cell = b.send_execute("%chaz @slow are you there?")  # queued behind A's run: B's cell waits
    b.wait_for(lambda m: m["parent_header"].get("msg_id") == cell and m["msg_type"] == "display_data")
    os.kill(a.km.provisioner.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
    r = b.collect(cell, timeout=60)  # the wait ends once A's lease is gone (no hang)
    assert r.status == "ok", r.outputs
    assert f"session {sid} · slow · chat · idle" in "\n".join(r.texts())


HANG = '''
import asyncio
import chaz_nb

@chaz_nb.tool
async def hang() -> str:
    """Wait for ever."""
    await asyncio.Event().wait()
    return "never"
'''
SLOW = '%%chaz agent slow\nmodel = "chaz/script"\ntools = ["hang"]\nscript = [{tool = "hang", args = {}}, "done"]'


def in_its_tool(url: str, sid: int, deadline: float = 60.0) -> None:
    """A's run has called its tool (it hangs there): another process's state, read from the
    table within a bounded deadline, as ``lease_freed`` does (no event reaches the test)."""
    end = time.monotonic() + deadline
    while not rows(url, "SELECT count(*) FROM entries WHERE session_id = %s AND entry_type = 'ToolCall'",
                   (sid,))[0][0]:
        assert time.monotonic() < end, f"session {sid}'s run did not call its tool in {deadline:g} s"
        time.sleep(0.05)


def hanging_run(kernels, pg_url) -> tuple[Any, Any, int]:
    """Two kernels; A serves a session whose run hangs in its tool. (A, B, the session)."""
    a, b = kernels(2)
    ok(a, HANG)
    ok(a, SLOW)
    ok(a, "%chaz --no-wait @slow go")
    sid = session_of(a, "slow")
    in_its_tool(pg_url, sid)  # A's run is in its tool, for ever
    return a, b, sid


def test_a_stop_from_another_kernel_stops_the_run_in_the_kernel_that_serves_it(kernels, pg_url):
    a, b, sid = hanging_run(kernels, pg_url)
    out = ok(b, f"%chaz stop {sid}").strip()  # B does not serve the session: A stops its run
    [(run_id,)] = rows(pg_url, "SELECT id FROM entries WHERE session_id = %s AND entry_type = 'Ack'"
                               " AND run_id = id", (sid,))
    assert out == f"stopped session {sid} (slow, run_id {run_id}, was running, in another kernel)"
    [(content, by)] = rows(pg_url, "SELECT content, payload->>'stopped_by' FROM entries WHERE run_id = %s"
                                   " AND id <> run_id AND entry_type = 'Ack'", (run_id,))
    assert (content, by) == ("slow was stopped by user", "user")
    assert ok(a, f"%chaz wait {sid}").strip() == f"session {sid} is idle"
    assert ok(b, f"%chaz stop {sid}").strip() == f"session {sid} has no run to stop"


def test_a_stop_of_a_run_whose_kernel_died_says_how_it_gets_closed(kernels, pg_url):
    a, b, sid = hanging_run(kernels, pg_url)
    os.kill(a.km.provisioner.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
    a.km.provisioner.process.wait(timeout=30)  # type: ignore[union-attr]
    lease_freed(pg_url, sid)
    r = b.run(f"%chaz stop {sid}")
    assert r.status == "error"
    assert r.stderr.strip().endswith(
        f"%chaz stop: no kernel serves session {sid}: the kernel that ran it is gone and left its run open; "
        "a message to it from a kernel that defines slow closes that run and answers"), r.stderr
