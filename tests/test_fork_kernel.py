"""``%chaz fork``, ``%chaz replay`` and ``%chaz compare`` in a real kernel, on both stores."""

from __future__ import annotations

import time

import pytest

from kernel_harness import Kernel

SETUP = '''
import chaz_nb
calls = []

@chaz_nb.tool
def lookup(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"{city}: sunny (call {len(calls)})"
'''

AGENT = ("%chaz agent analyst --model chaz/script --tools lookup --script "
         "'[{\"tool\": \"lookup\", \"args\": {\"city\": \"Oslo\"}}, "
         "{\"tool\": \"lookup\", \"args\": {\"city\": \"Rome\"}}, \"done: {result}\"]'")
REORDERED = AGENT.replace("agent analyst ", "agent analyst2 ").replace("Oslo", "X").replace("Rome", "Oslo") \
    .replace("X", "Rome")


@pytest.fixture(params=["duckdb", "postgres"])
def kernel(request, tmp_path):
    env = {"CHAZ_DB": ":memory:" if request.param == "duckdb" else request.getfixturevalue("pg_url")}
    k = Kernel(str(tmp_path), env=env)
    try:
        for cell in ("%load_ext chaz_nb", SETUP, AGENT, REORDERED,
                     "%chaz @analyst weather?", "%chaz @analyst again?"):
            r = k.run(cell, timeout=120)
            assert r.status == "ok", r.outputs
        yield k
    finally:
        k.close()


def count(kernel) -> str:
    r = kernel.run("print(len(calls))")
    return r.stdout.strip()


def test_fork_replay_and_compare_in_a_kernel_run_no_tool_again(kernel):
    assert count(kernel) == "4"
    r = kernel.run('%chaz fork 1 --at 7 --say "only Oslo"', timeout=60)
    assert r.status == "ok", r.outputs
    assert r.stdout.startswith("session 2: forked from session 1 at #7 (7 entries copied), agent @analyst")
    assert any("replayed from entry" in t for t in r.texts())
    r = kernel.run("%chaz replay 1 --agent analyst2", timeout=60)
    assert r.status == "ok", r.outputs
    assert "session 3: forked from session 1 at #0" in r.stdout
    assert count(kernel) == "4"  # neither branch ran the tool
    r = kernel.run("%chaz compare 1 3")
    assert r.status == "ok" and "◀ first difference" in r.texts()[0]
    r = kernel.run("%chaz sessions")
    assert "└ 3" in r.stdout and "forked from session 1 at #0" in r.stdout


def test_a_fork_inside_a_run_and_bad_forks_are_one_line_errors_in_a_kernel(kernel):
    r = kernel.run("%chaz fork 1 --at 3")  # between ToolCall #3 and its ToolResult
    assert r.status == "ok" and "1 open run(s)/request(s) closed there as forked" in r.stdout
    for line, words in (("%chaz fork 1 --at 99", "its entries are #1-#14"),
                        ("%chaz fork 42", "there is no session 42"),
                        ("%chaz fork 1 --at x", "--at takes a seq"),
                        ("%chaz fork 1 --agent nobody", "unknown agent 'nobody'")):
        r = kernel.run(line)
        assert r.status == "error" and words in r.stderr and r.stderr.count("\n") == 1, (line, r.stderr)
    r = kernel.run("print(len(chaz_nb.current().store.sessions()), len(chaz_nb.current().store.entries(1)))")
    assert r.stdout.split() == ["2", "14"]  # the failed forks wrote nothing


HANG = '''
import asyncio
gate = asyncio.Event()

@chaz_nb.tool
async def slow(label: str) -> str:
    """Wait for the gate."""
    await gate.wait()
    return "slow " + label
'''
SLOW = ("%chaz agent slowpoke --model chaz/script --tools slow --script "
        "'[{\"tool\": \"slow\", \"args\": {\"label\": \"x\"}}, \"ok: {result}\"]'")


def test_a_fork_while_the_source_runs_in_a_kernel_copies_the_committed_entries_and_closes_the_run(kernel):
    for cell in (HANG, SLOW, "%chaz --no-wait @slowpoke go"):
        assert kernel.run(cell).status == "ok"
    sid = kernel.run("print(chaz_nb.current().current_session('slowpoke'))").stdout.strip()
    kinds = f"print(*[e.entry_type.value for e in chaz_nb.current().store.entries({sid})])"
    deadline = time.monotonic() + 60
    while kernel.run(kinds).stdout.split() != ["Message", "Ack", "ToolCall"]:  # the run is in its tool
        assert time.monotonic() < deadline, kernel.run(kinds).stdout
    r = kernel.run(f"%chaz fork {sid}")
    assert r.status == "ok" and "(3 entries copied; 1 open run(s)/request(s) closed there as forked)" in r.stdout
    assert kernel.run(f"gate.set()\n%chaz wait {sid}").status == "ok"
    assert kernel.run(kinds).stdout.split() == ["Message", "Ack", "ToolCall", "ToolResult", "Message"]
    branch = r.stdout.split(":")[0].split()[1]
    assert kernel.run(kinds.replace(f"({sid})", f"({branch})")).stdout.split() == \
        ["Message", "Ack", "ToolCall", "Ack"]
