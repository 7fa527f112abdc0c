"""``%chaz undo`` in a real kernel (jupyter_client): an agent's approved ``kernel__run`` step is
undone in the notebook's namespace (the very frame back), and after a kernel restart the
before-state is gone, which the undo says in one line."""

from __future__ import annotations

import json

import pytest

from kernel_harness import Kernel

CODE = "top = sales.amount.sum()\nsales = sales * 2"
CODER = ("%chaz agent coder --model chaz/script --auto-approve kernel__run --script '"
         + json.dumps([{"tool": "kernel__run", "args": {"code": CODE}}, "done"]) + "'")


@pytest.fixture
def kernel(tmp_path):
    k = Kernel(str(tmp_path))
    yield k
    k.close()


def ok(k: Kernel, code: str) -> str:
    r = k.run(code)
    assert r.status == "ok", (code, r.error, r.stdout, r.stderr)
    return r.stdout


def test_an_agents_step_is_undone_in_the_kernel_and_a_restart_is_one_line(kernel):
    ok(kernel, "%load_ext chaz_nb")
    ok(kernel, "import chaz_nb\nimport pandas as pd\n"
               "sales = pd.DataFrame({'amount': [1.0, 2.0, 4.0]})\nfirst = id(sales)")
    ok(kernel, CODER)
    ok(kernel, "%chaz @coder go")
    assert ok(kernel, "print(top, sales.amount.tolist(), id(sales) == first)") == "7.0 [2.0, 4.0, 8.0] False\n"
    call = ok(kernel, "print([e.tool_call_id for e in chaz_nb.current().store.entries(1)"
                      " if e.entry_type.value == 'ToolCall'][0])").strip()
    undone = ok(kernel, "%chaz undo")
    assert undone.startswith(f"undid kernel__run {call} (session 1, #") and "put back sales; removed top" in undone
    assert ok(kernel, "print('top' in dir(), sales.amount.tolist(), id(sales) == first)") == \
        "False [1.0, 2.0, 4.0] True\n"

    # a second step, then a restart: the log has it, its objects died with the kernel
    ok(kernel, "%chaz @coder again")
    second = ok(kernel, "print([e.tool_call_id for e in chaz_nb.current().store.entries(1)"
                        " if e.entry_type.value == 'ToolCall'][-1])").strip()
    kernel.km.restart_kernel(now=True)
    kernel.kc.wait_for_ready(timeout=60)
    ok(kernel, "%load_ext chaz_nb")
    r = kernel.run(f"%chaz undo {second}")
    assert r.status == "error" and r.stderr == (
        f"UsageError: %chaz undo: the kernel restarted since tool call {second} ran: its before-state was in the "
        "old kernel's memory and is gone; nothing was changed\n")
