"""kernel__run in a real kernel (jupyter_client): the code runs on the kernel's main thread
between cells, never inside a user's cell; its timeout, the kernel's Interrupt, a Stop and
``%chaz stop`` end it with a tool error, and the kernel goes on."""

from __future__ import annotations

import time

import pytest

from kernel_harness import Kernel


def coder(name: str, code: str, auto: bool = True, **fields: object) -> str:
    """A ``%%chaz agent`` cell: a scripted agent whose one step is kernel__run(code)."""
    lines = ['model = "chaz/script"'] + (['auto_approve = ["kernel__run"]'] if auto else [])
    lines += [f"{k} = {v!r}" if not isinstance(v, list) else f"{k} = {v}" for k, v in fields.items()]
    code_toml = code.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    lines.append(f'script = [{{tool = "kernel__run", args = {{code = "{code_toml}"}}}}, "done: {{result}}"]')
    return f"%%chaz agent {name}\n" + "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("kernel_tools")
    k = Kernel(str(cwd))
    k.cwd = cwd
    assert k.run("%load_ext chaz_nb").status == "ok"
    yield k
    k.close()


def test_code_over_its_timeout_is_stopped_and_the_kernel_goes_on(kernel):
    assert kernel.run(coder("looper", "n = 0\nwhile True:\n    n += 1", code_timeout=1.0)).status == "ok"
    started = time.monotonic()
    r = kernel.run("%chaz @looper go", timeout=60)
    assert r.status == "ok" and r.error is None
    assert "over its 1 s timeout" in "\n".join(r.texts())
    assert time.monotonic() - started < 20
    r = kernel.run("print(n > 0, 6 * 7)")
    assert r.stdout == "True 42\n"


def test_the_kernels_interrupt_stops_the_code_not_the_wait(kernel):
    code = "import pathlib, time\npathlib.Path('started').touch()\ntime.sleep(120)"
    assert kernel.run(coder("sleeper", code, code_timeout=300.0)).status == "ok"
    msg_id = kernel.send_execute("%chaz @sleeper go")
    deadline = time.monotonic() + 30
    while not (kernel.cwd / "started").exists():
        assert time.monotonic() < deadline, "the agent's code never started"
        time.sleep(0.05)
    kernel.km.interrupt_kernel()
    r = kernel.collect(msg_id, timeout=60)
    assert r.status == "ok" and r.error is None  # the cell's wait went on to the reply
    text = "\n".join(r.texts())
    assert "interrupted (the kernel's Interrupt)" in text and "the kernel goes on" in text
    assert kernel.run("print('alive')").stdout == "alive\n"


def test_a_stop_off_the_loop_stops_running_code(kernel):
    # what a Stop that reaches the kernel off its loop does (the loop is held by the code)
    kernel.run(
        "import threading, time, chaz_nb\n"
        "def _stop_when_running():\n"
        "    k = chaz_nb.current().kernel\n"
        "    while not k.running:\n"
        "        time.sleep(0.01)\n"
        "    k.stop('stopped by user')\n"
        "threading.Thread(target=_stop_when_running, daemon=True).start()"
    )
    assert kernel.run(coder("spinner", "while True:\n    pass", code_timeout=300.0)).status == "ok"
    r = kernel.run("%chaz @spinner go", timeout=60)
    assert r.status == "ok" and "stopped: the code was stopped by user" in "\n".join(r.texts())


def test_chaz_stop_ends_a_run_whose_code_waits_for_approval_and_the_code_never_runs(kernel):
    assert kernel.run(
        "%%chaz agent asker\nmodel = \"chaz/script\"\n"
        "script = [{tool = \"kernel__run\", args = {code = \"ran_anyway = True\"}}, \"done\"]\n"
    ).status == "ok"
    r = kernel.run("%chaz @asker go")
    assert r.status == "ok"
    assert "kernel__run" in kernel.run("%chaz pending").stdout
    r = kernel.run("%chaz stop")
    assert r.status == "ok" and r.error is None
    assert kernel.run("print('ran_anyway' in globals())").stdout == "False\n"


def test_an_agents_code_never_runs_inside_a_users_cell(kernel):
    kernel.run("log = []")
    code = "log.append('agent-start')\nimport time\ntime.sleep(0.3)\nlog.append('agent-end')"
    assert kernel.run(coder("writer", code, auto=False)).status == "ok"
    assert kernel.run("%chaz --no-wait @writer go").status == "ok"
    # The run parks for approval. An async cell approves it, then awaits: the loop runs while
    # it does, and the agent's code, ready to run, must still wait for the cell's end.
    r = kernel.run(
        "import asyncio, chaz_nb\n"
        "server = chaz_nb.current()\n"
        "while not server.pending_approvals():\n"
        "    await asyncio.sleep(0.05)\n"
        "log.append('user-start')\n"
        "server.decide(server.pending_approvals()[0]['request_id'], 'approve')\n"
        "await asyncio.sleep(1.5)\n"
        "log.append('user-end')"
    )
    assert r.status == "ok", r.outputs
    kernel.run("%chaz wait")
    r = kernel.run("print(log)")
    log = eval(r.stdout)  # noqa: S307 - the test's own list
    assert sorted(log) == sorted(["agent-start", "agent-end", "user-start", "user-end"])
    user = log.index("user-start")
    assert log[user + 1] == "user-end", log  # nothing of the agent's between the user's two lines


def test_a_query_that_builds_a_huge_value_ends_in_one_line_and_the_kernel_neither_grows_nor_ends(kernel):
    """repeat('x', 3e9) grew the kernel by 5.8 GB (a larger one ended it): the query's own
    process holds what it builds now, and dies with it; the kernel goes on at its size."""
    for name, first in (("warm", "SELECT 1 AS x"), ("builder", "SELECT repeat('x', 3000000000) AS s")):
        lines = ['model = "chaz/script"', 'tools = ["kernel__query"]',
                 f"script = [{{tool = \"kernel__query\", args = {{sql = \"{first}\"}}}}, "
                 "{tool = \"kernel__query\", args = {sql = \"SELECT region, amount FROM sales\"}}, \"done: {result}\"]"]
        assert kernel.run(f"%%chaz agent {name}\n" + "\n".join(lines) + "\n").status == "ok"
    r = kernel.run(
        "import pandas as pd\n"
        "sales = pd.DataFrame({'region': ['north'], 'amount': [1.0]})\n"
        "def peak_mb():\n"
        "    return next(int(l.split()[1]) // 1024 for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "with open('/proc/self/clear_refs', 'w') as f:\n"
        "    f.write('5')\n"
        "base = peak_mb()"
    )
    assert r.status == "ok", r.outputs
    # a first run of an agent that queries: the modules and the store's pages it loads are not the query's
    assert "done: region | amount" in "\n".join(kernel.run("%chaz @warm go", timeout=120).texts())
    kernel.run("with open('/proc/self/clear_refs', 'w') as f:\n    f.write('5')\nbase = peak_mb()")
    r = kernel.run("%chaz @builder go", timeout=120)
    assert r.status == "ok" and r.error is None
    assert "done: region | amount\nnorth | 1.0" in "\n".join(r.texts()), r.texts()
    r = kernel.run("import chaz_nb\n"
                   "[e] = [e for e in chaz_nb.current().store.entries(chaz_nb.current().current_session('builder'))"
                   " if e.tool_name == 'kernel__query' and e.payload.get('is_error')]\n"
                   "print(e.payload['output'])\n"
                   "print(peak_mb() - base)")
    assert r.status == "ok", r.outputs
    error, grew = r.stdout.rstrip("\n").split("\n")
    assert error.startswith("Out of Memory Error") and "2048 MB in all" in error, error
    assert int(grew) < 200, f"the kernel grew by {grew} MB"
