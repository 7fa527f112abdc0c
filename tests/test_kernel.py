"""The extension in a real kernel (jupyter_client): loop, waiting, widgets, errors, locking."""

from __future__ import annotations

import json
import time

import pytest

from kernel_harness import Kernel
from view_text import rows


TOOLS = '''
import asyncio, chaz_nb

@chaz_nb.tool
async def nap(seconds: float) -> str:
    """Sleep a while."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"

@chaz_nb.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
'''

SLEEPER = (
    "%chaz agent sleeper --model chaz/script --tools nap --script "
    "'[{\"tool\": \"nap\", \"args\": {\"seconds\": SECONDS}}, \"woke: {result}\"]'"
)


def final_update(display_id):
    """Accepts the update that finishes the view ``display_id``: its widget is gone."""
    return lambda m: (m["msg_type"] == "update_display_data"
                      and m["content"]["transient"]["display_id"] == display_id
                      and "application/vnd.jupyter.widget-view+json" not in m["content"]["data"])


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("kernel")
    k = Kernel(str(cwd))
    k.cwd = cwd
    r = k.run("%load_ext chaz_nb")
    assert r.status == "ok", r.outputs
    k.load_result = r
    assert k.run(TOOLS).status == "ok"
    yield k
    k.close()


def test_load_prints_one_line_with_the_database_and_model(kernel):
    r = kernel.load_result
    assert r.stdout == "chaz_nb: sessions in .chaz/sessions.duckdb · agent assistant uses chaz/echo\n"
    assert (kernel.cwd / ".chaz" / "sessions.duckdb").exists()


def test_server_runs_on_the_kernel_loop_and_keeps_working_between_cells(kernel):
    r = kernel.run(
        "import asyncio, threading, chaz_nb\n"
        "from chaz_nb.notebook.extension import current_state\n"
        "print(current_state().loop is asyncio.get_running_loop(), asyncio.get_running_loop().is_running())"
    )
    assert r.stdout == "True True\n"
    for i in range(3):  # one turn per cell, each waits for its reply
        r = kernel.run(f"%chaz @assistant turn {i}")
        assert r.status == "ok", r.outputs
        assert rows(r.texts()[-1])[-2:] == [f"assistant: echo: turn {i}", "full log: %chaz log 1"]
    # (litellm starts a thread of its own at its first use, in the first turn: count after it)
    assert kernel.run("threads_before = threading.active_count()").status == "ok"
    r = kernel.run(
        "%chaz --no-wait @assistant bg\n"
        "tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith('chaz-session-')]\n"
        "print(len(tasks), all(t.get_loop() is asyncio.get_running_loop() for t in tasks))\n"
        "print(threading.active_count() - threads_before)"
    )
    assert r.stdout == "1 True\n0\n"  # a task on the kernel loop; no thread, no second loop


def test_no_wait_run_finishes_while_the_kernel_is_idle(kernel):
    assert kernel.run(SLEEPER.replace("SECONDS", "0.5")).status == "ok"
    r = kernel.run(
        "%chaz --no-wait @sleeper nap please\n"
        "s = chaz_nb.current(); sid = s.current_session('sleeper')\nprint(s.session_status(sid))"
    )
    assert r.stdout == "running\n"
    # the kernel is idle (no cell runs) until the view's final update says the run is over
    kernel.wait_for(final_update(r.of("display_data")[0]["content"]["transient"]["display_id"]))
    # a synchronous cell: it gives the loop no time, so the run must have finished before
    r = kernel.run("print(s.session_status(sid)); print(s.store.latest(sid).content)")
    assert r.stdout == "idle\nwoke: slept 0.5\n"


def test_widget_updates_reach_iopub_as_comm_messages(kernel):
    assert kernel.run(SLEEPER.replace("SECONDS", "0.3")).status == "ok"
    r = kernel.run("%chaz @sleeper wake me")
    opens = r.of("comm_open")
    # the view's one widget: each update is a custom message with the rows it added or changed
    updates = [m["content"]["data"]["content"] for m in r.of("comm_msg")
               if m["content"]["data"].get("method") == "custom"]
    assert opens and updates
    values = " ".join(str(row) for u in updates for row in u.get("rows", {}).get("set", {}).values())
    assert "chaz-tool-name'>nap<" in values  # the tool row, live while the tool sleeps
    # (its result comes with the reply: that flush ends the view, the static form shows it)
    displays = r.of("display_data")
    assert len(displays) == 1
    first = displays[0]["content"]
    assert "application/vnd.jupyter.widget-view+json" in first["data"]
    display_id = first["transient"]["display_id"]
    final = [
        m["content"] for m in r.of("update_display_data") if m["content"]["transient"]["display_id"] == display_id
    ][-1]
    # the final state is static: transcript, html, session data; no widget left behind
    assert "application/vnd.jupyter.widget-view+json" not in final["data"]
    assert rows(final["data"]["text/plain"])[-2] == "sleeper: woke: slept 0.3"  # then the footer
    mime = final["data"]["application/vnd.chaz.session+json"]
    assert mime["version"] == 1 and mime["status"] == "idle"
    assert [e["type"] for e in mime["entries"]] == ["Message", "Ack", "ToolCall", "ToolResult", "Message"]


def test_no_wait_view_is_updated_in_the_background(kernel):
    assert kernel.run(SLEEPER.replace("SECONDS", "0.5")).status == "ok"
    r = kernel.run("%chaz --no-wait @sleeper again")
    display_id = r.of("display_data")[0]["content"]["transient"]["display_id"]
    later = kernel.wait_for(final_update(display_id))
    comm_updates = [m for m in later if m["msg_type"] == "comm_msg"]
    assert comm_updates, "no widget update while the kernel was idle"
    finals = [m for m in later if m["msg_type"] == "update_display_data"
              and m["content"]["transient"]["display_id"] == display_id]
    assert finals and rows(finals[-1]["content"]["data"]["text/plain"])[-2] == "sleeper: woke: slept 0.5"
    assert not [m for m in later if m["msg_type"] == "stream"]  # nothing printed from the background


def test_interrupt_stops_waiting_but_not_the_run(kernel):
    assert kernel.run(SLEEPER.replace("SECONDS", "2.0")).status == "ok"
    msg_id = kernel.send_execute("%chaz @sleeper long nap")
    # the waiting cell's view shows the nap's ToolCall: the run is in the tool
    kernel.wait_for(lambda m: m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "comm_msg"
                    and "chaz-tool-name'>nap<" in str(m["content"]["data"].get("content", {}).get("rows", "")))
    t0 = time.monotonic()
    kernel.km.interrupt_kernel()
    r = kernel.collect(msg_id)
    assert time.monotonic() - t0 < 1.0
    # no error output (issue 26): the view's Stop row says the wait ended and the run goes on
    assert r.status == "ok" and r.error is None and not r.stderr
    notes = [str(m["content"]["data"]["content"]["stop"]["note"]) for m in r.of("comm_msg")
             if "stopped waiting" in str(m["content"]["data"].get("content", {}).get("stop", ""))]
    assert notes and "the run goes on" in notes[-1] and "%chaz wait" in notes[-1]
    assert kernel.run("%chaz wait").status == "ok"  # waits for the run that kept going
    r = kernel.run(
        "sid = s.current_session('sleeper'); print(s.session_status(sid)); "
        "print([e.entry_type.value for e in s.store.entries(sid)][-4:]); print(s.store.latest(sid).content)"
    )
    assert r.stdout == "idle\n['Ack', 'ToolCall', 'ToolResult', 'Message']\nwoke: slept 2.0\n"


def test_origin_records_cell_id_execution_count_and_kernel(kernel):
    r = kernel.run("%chaz @assistant where am I", metadata={"cellId": "cell-1234"})
    assert r.status == "ok"
    r = kernel.run(
        "import json; "
        "e = [x for x in s.store.entries(s.current_session('assistant')) if x.content == 'where am I'][0]\n"
        "print(json.dumps(e.payload['origin']))"
    )
    origin = json.loads(r.stdout)
    assert origin["cell_id"] == "cell-1234"
    assert isinstance(origin["execution_count"], int) and origin["execution_count"] > 1
    cf = kernel.km.connection_file
    import os

    assert origin["kernel_id"] and origin["kernel_id"] in os.path.basename(cf)
    assert "notebook" in origin


BAD = [
    ("%chaz @nobody hi", "UsageError: unknown agent @nobody; known agents: @assistant"),
    ("%chaz frobnicate", "UsageError: unknown sub-command 'frobnicate'; sub-commands: agent, agents,"),
    ("%chaz agent x --model chaz/script --script '[1,'", "UsageError: %chaz agent x: bad --script JSON"),
    ("%%chaz agent x\nmodel = \n", "UsageError: %%chaz agent x: bad TOML: Invalid value"),
    ("%chaz agent x --tools nope", "UsageError: %chaz agent x: no tool 'nope' in this notebook"),
    ("def plain(x: int) -> int:\n    return x\n%chaz agent x --tools plain", None),
]


@pytest.mark.parametrize("code, message", BAD[:5])
def test_bad_inputs_get_their_one_line_message(kernel, code, message):
    r = kernel.run(code)
    assert r.status == "error"
    assert r.stderr.startswith(message), r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not r.of("error")  # no traceback message either


def test_plain_function_is_not_a_tool(kernel):
    assert kernel.run("def plain(x: int) -> int:\n    return x").status == "ok"
    r = kernel.run("%chaz agent x --tools plain")
    assert r.status == "error"
    assert (
        r.stderr
        == "UsageError: %chaz agent x: plain is a plain function, not a chaz_nb tool; decorate it with @chaz_nb.tool\n"
    )


def test_second_kernel_on_the_same_file_falls_back(kernel):
    k2 = Kernel(str(kernel.cwd))
    try:
        r = k2.run("%load_ext chaz_nb\nimport os; pid = os.getpid()")
        assert r.status == "ok", r.outputs
        pid = k2.run("print(pid)").stdout.strip()
        assert r.stdout == (
            f"chaz_nb: .chaz/sessions.duckdb is held by another kernel; this kernel uses "
            f".chaz/sessions-{pid}.duckdb (set CHAZ_DB=postgresql://... to share sessions between notebooks)"
            " · agent assistant uses chaz/echo\n"
        )
        r = k2.run("%chaz @assistant hello from kernel 2")
        assert r.status == "ok" and "assistant: echo: hello from kernel 2" in rows(r.texts()[-1])
    finally:
        k2.close()
    (kernel.cwd / ".chaz").joinpath(f"sessions-{pid}.duckdb").unlink(missing_ok=True)


def test_unload_stops_runs_and_reload_works(kernel):
    assert kernel.run(SLEEPER.replace("SECONDS", "5")).status == "ok"
    r = kernel.run(
        "%chaz --no-wait @sleeper forever\nsid = s.current_session('sleeper')\n"
        "%unload_ext chaz_nb\nprint(s.store.closed, s.is_busy(sid))"
    )
    assert r.status == "ok", r.outputs
    assert r.stdout.endswith("True False\n")
    r = kernel.run(
        "%load_ext chaz_nb\ns = chaz_nb.current()\n"
        "print(s.store.latest(sid).entry_type.value, s.store.latest(sid).content)"
    )
    kind, _, text = r.stdout.splitlines()[-1].partition(" ")
    assert kind == "Error" and text.startswith("interrupted"), r.stdout  # the run's trail is closed
