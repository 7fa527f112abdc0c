"""%chaz mcp add / list / remove and %%chaz mcp through IPython's test shell, with mcp-server-time."""

from __future__ import annotations

import sys

import psutil
import pytest
from IPython.core.error import UsageError

from chaz_nb.core.entries import EntryType

from ipython_harness import ip

TIME = f"{sys.executable} -m mcp_server_time --local-timezone UTC"


def time_servers() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "mcp_server_time" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def test_add_list_and_an_agent_call_approved_with_chaz_approve(chaz, capsys):
    ip.run_line_magic("chaz", f"mcp add time --approval always --timeout 20 --wait -- {TIME}")
    assert "MCP server time: ready, 2 tools" in capsys.readouterr().out
    ip.run_line_magic("chaz", "mcp list")
    out = capsys.readouterr().out
    assert "time  ready  2" in out and "time__get_current_time" in out
    ip.run_line_magic(
        "chaz",
        "agent clock --model chaz/script --tools 'time__*' --script "
        "'[{\"tool\": \"time__get_current_time\", \"args\": {\"timezone\": \"UTC\"}}, \"now: {result}\"]'",
    )
    ip.run_line_magic("chaz", "@clock what time is it?")  # returns when the run parks
    sid = chaz.current_session("clock")
    assert chaz.session_status(sid) == "parked"
    ip.run_line_magic("chaz", "approve last")
    ip.run_line_magic("chaz", f"wait {sid}")
    [reply] = [e for e in chaz.store.entries(sid) if e.entry_type is EntryType.MESSAGE and e.sender == "clock"]
    assert '"timezone": "UTC"' in reply.content
    assert chaz.store.execute("SELECT mcp_server, approval FROM tool_calls") == [("time", "approved")]


def test_cell_form_remove_and_unload_stop_every_process(chaz, capsys):
    ip.run_cell_magic("chaz", "mcp time --wait", f'command = {TIME.split()!r}\napproval = "never"\n'.replace("'", '"'))
    assert "ready" in capsys.readouterr().out
    ip.run_line_magic("chaz", f"mcp add time2 --wait -- {TIME}")
    assert len(time_servers()) == 2
    ip.run_line_magic("chaz", "mcp remove time")
    assert "removed" in capsys.readouterr().out
    assert len(time_servers()) == 1 and "time__get_current_time" not in chaz.tools
    ip.run_line_magic("unload_ext", "chaz_nb")
    assert time_servers() == []  # no orphan in the process table


def test_a_failed_server_is_listed_with_its_reason(chaz, capsys, tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import sys\nprint('no config found', file=sys.stderr)\nsys.exit(2)\n")
    ip.run_line_magic("chaz", f"mcp add crash --wait -- {sys.executable} {script}")
    ip.run_line_magic("chaz", "mcp list")
    out = capsys.readouterr().out
    assert "crash: failed: exited" in out and "no config found" in out


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("mcp add time", "give -- COMMAND ARGS... or --url URL"),
        ("mcp add time --approval sometimes -- x", "invalid choice"),
        ("mcp add time --env NOEQUALS -- x", "--env takes K=V"),
        ("mcp remove nope", "no MCP server named 'nope'"),
        ("mcp frobnicate", "usage: %chaz mcp add NAME"),
    ],
)
def test_bad_lines_are_one_clear_error(chaz, line, message):
    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("chaz", line)
