"""Agents survive a kernel restart (issue 26 §3), in a real kernel: define, restart, use again,
in the same session; a kept agent's tool comes back when the notebook defines it again."""

from __future__ import annotations

import pytest

from kernel_harness import Kernel

TOOLS = '''
import chaz_nb

@chaz_nb.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
'''

CALC = (
    "%chaz agent calc --model chaz/script --tools add --system 'You add.' --script "
    '\'[{"tool": "add", "args": {"a": 2, "b": 3}}, "sum: {result}"]\''
)


@pytest.fixture
def kernel(tmp_path):
    k = Kernel(str(tmp_path))
    yield k
    k.close()


def restart(k: Kernel) -> None:
    k.km.restart_kernel(now=True)
    k.kc.wait_for_ready(timeout=60)


def ok(k: Kernel, code: str) -> str:
    r = k.run(code)
    assert r.status == "ok", (code, r.error, r.stdout, r.stderr)
    return r.stdout


def test_an_agent_and_its_session_survive_a_kernel_restart(kernel):
    ok(kernel, "%load_ext chaz_nb")
    ok(kernel, TOOLS)
    ok(kernel, CALC)
    ok(kernel, "%chaz @calc add two and three")
    before = ok(kernel, "print(chaz_nb.current().current_session_id('calc'))").strip()

    restart(kernel)
    loaded = ok(kernel, "%load_ext chaz_nb")
    assert "agents kept here: @calc (%chaz agents)" in loaded
    table = ok(kernel, "%chaz agents").splitlines()
    calc = next(line for line in table if line.startswith("calc"))
    assert calc.split() == ["calc", "chaz/script", "add", before, "stored", "add"]
    ok(kernel, TOOLS)  # the notebook defines its tool again: the agent has it
    ok(kernel, "%chaz @calc once more")
    shown = ok(
        kernel,
        "s = chaz_nb.current(); sid = s.current_session_id('calc'); print(sid)\n"
        "print([e.content for e in s.store.entries(sid) if e.entry_type.value == 'ToolResult'])\n"
        "print(s.agents['calc'].system)",
    )
    sid, results, system = shown.splitlines()
    assert sid == before  # the same session: it went on where it was
    assert results == "['add: 5', 'add: 5']"
    assert system == "You add."


def test_on_postgresql_an_agent_defined_in_one_kernel_is_the_stores(pg_url, tmp_path):
    kernels = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            k = Kernel(str(tmp_path / name), {"CHAZ_DB": pg_url})
            kernels.append(k)
            ok(k, "%load_ext chaz_nb")
        a, b = kernels
        ok(a, "%chaz agent gpt --model chaz/echo --system 'Be brief.'")
        gpt = next(line for line in ok(b, "%chaz agents").splitlines() if line.startswith("gpt"))
        assert gpt.split()[:2] == ["gpt", "chaz/echo"] and "stored" in gpt
        ok(b, "%chaz @gpt hi from b")  # B serves it: the definition is the store's
        latest = "import chaz_nb\ns = chaz_nb.current()\nprint(s.store.latest(s.current_session_id('gpt')).content)"
        reply = ok(b, latest)
        assert reply.strip().endswith("hi from b")
        ok(b, "%chaz agent gpt --forget")
        r = a.run("%chaz @gpt still there?")
        assert r.status == "error" and "unknown agent @gpt" in r.stderr, (r.stdout, r.stderr)
    finally:
        for k in kernels:
            k.close()
