"""%chaz mcp add / list / remove and %%chaz mcp through IPython's test shell, with mcp-server-time."""

from __future__ import annotations

import json
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


def test_add_list_and_an_agent_call_approved_with_chaz_approve(chaz, capsys, repo):
    ip.run_line_magic("chaz", f"mcp add time --approval never --timeout 20 --wait -- {TIME}")
    assert "MCP server time: ready, 2 tools" in capsys.readouterr().out
    ip.run_line_magic("chaz", f"mcp add git --wait -- {sys.executable} -m mcp_server_git --repository {repo}")
    assert "MCP server git: ready" in capsys.readouterr().out
    ip.run_line_magic("chaz", "mcp list")
    out = capsys.readouterr().out
    assert "time  ready  2" in out and "time__get_current_time" in out and "git__git_status" in out
    script = json.dumps([
        {"tool": "time__get_current_time", "args": {"timezone": "UTC"}},
        {"tool": "git__git_status", "args": {"repo_path": str(repo)}},
        "now: {result}",
    ])
    ip.run_line_magic("chaz", f"agent clock --model chaz/script --tools 'time__*,git__git_status' --script '{script}'")
    ip.run_line_magic("chaz", "@clock what time is it, and what changed?")  # returns when the run parks
    sid = chaz.current_session("clock")
    assert chaz.session_status(sid) == "parked"
    [request] = chaz.pending_approvals()  # the git tool: the time tool's server needs no approval
    assert request["tool_name"] == "git__git_status"
    ip.run_line_magic("chaz", "approve last")
    ip.run_line_magic("chaz", f"wait {sid}")
    [reply] = [e for e in chaz.store.entries(sid) if e.entry_type is EntryType.MESSAGE and e.sender == "clock"]
    assert "new.txt" in reply.content
    assert chaz.store.execute("SELECT tool, mcp_server, approval FROM tool_calls ORDER BY started_at") == [
        ("time__get_current_time", "time", "none"), ("git__git_status", "git", "approved")]


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


def test_every_flag_of_mcp_add_is_in_the_usage():
    from chaz_nb.notebook.magics.mcp import MCP_USAGE, _add_parser

    flags = [opt for action in _add_parser()._actions for opt in action.option_strings if opt.startswith("--")]
    assert {"--url", "--env", "--header", "--risk", "--approval", "--tool-approval", "--sensitive", "--timeout",
            "--start-timeout", "--wait"} <= set(flags)
    for flag in flags:
        if flag != "--help":
            assert flag in MCP_USAGE, flag


def test_sensitive_and_tool_approval_flags(chaz, capsys):
    ip.run_line_magic(
        "chaz", "mcp add time --wait --sensitive timezone,other --tool-approval get_current_time=never "
                f"--risk high --env TZ=UTC --start-timeout 50 -- {TIME}"
    )
    assert "ready" in capsys.readouterr().out
    conn = chaz.mcp.get("time")
    assert (conn.env, conn.risk, conn.start_timeout) == ({"TZ": "UTC"}, "high", 50.0)
    now, convert = chaz.tools.get("time__get_current_time"), chaz.tools.get("time__convert_time")
    assert now.approval == "never" and convert.approval == "unless_auto_approved" and now.risk == "high"
    assert now.sensitive_params == ("timezone",)  # "other" is no parameter of it: not masked there


def test_a_failure_after_the_cell_returned_is_shown_in_that_cell(chaz, monkeypatch, tmp_path):
    import asyncio

    import IPython.display as ipd

    shown: dict[str, str] = {}

    def show(obj, display_id=None, **kw):
        shown[display_id] = obj["text/plain"]

    monkeypatch.setattr(ipd, "display", show)
    monkeypatch.setattr(ipd, "update_display", show)
    script = tmp_path / "crash.py"
    script.write_text("import sys\nprint('no config found', file=sys.stderr)\nsys.exit(2)\n")
    ip.run_line_magic("chaz", f"mcp add crash -- {sys.executable} {script}")  # returns at once
    [(display_id, line)] = shown.items()
    assert line.startswith("MCP server crash: starting")
    from chaz_nb.notebook.kernel_loop import run_sync

    settled = chaz.mcp.get("crash").settled
    run_sync(asyncio.wait_for(settled.wait(), 60), chaz.mcp.port.loop())  # its listeners ran before
    assert shown[display_id].startswith("MCP server crash: failed: exited") and "no config found" in shown[display_id]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("mcp add t --tool-approval get_current_time=sometimes -- x", "--tool-approval takes TOOL=POLICY"),
        ("mcp add t --tool-approval nopolicy -- x", "--tool-approval takes TOOL=POLICY"),
        ("mcp add t --sensitive a,,b -- x", "--sensitive takes parameter names"),
        ("mcp add t --url http://127.0.0.1:9/mcp --header 'Authorization: Bearer s3cr3t-v4lue'",
         "--header takes NAME=VALUE"),
        ("mcp add t --header A=b -- x", "--header is for a --url server"),
    ],
)
def test_bad_flag_values_are_one_clear_error(chaz, capsys, line, message):
    from ipython_harness import one_line_error

    err = one_line_error(capsys, f"%chaz {line}", message)
    assert "s3cr3t" not in err


def test_a_url_server_with_a_header_whose_value_is_never_shown(chaz, capsys, mcp_http):
    token = "tok-8c1f2e9d7a"  # the mcp_http fixture's
    ip.user_ns["TOKEN"] = token  # as the README says: the cell names a variable, not the value
    header = '--header "Authorization=Bearer $TOKEN"'
    ip.run_cell(f"%chaz mcp add docs --url {mcp_http.url} {header} --approval never --wait")
    del ip.user_ns["TOKEN"]
    assert "MCP server docs: ready" in capsys.readouterr().out
    ip.run_cell_magic("chaz", "mcp bad --wait",  # the TOML form: headers = {...}
                      f'url = "{mcp_http.url}"\nheaders = {{Authorization = "Bearer wrong-v4lue"}}\n')
    ip.run_line_magic("chaz", "mcp list")
    out = capsys.readouterr().out
    assert "docs  ready" in out and "docs__whoami" in out and token not in out
    assert "bad: failed" in out and "HTTP 401" in out and "wrong-v4lue" not in out
    ip.run_line_magic(
        "chaz",
        "agent reader --model chaz/script --tools 'docs__*' --script "
        "'[{\"tool\": \"docs__whoami\", \"args\": {}}, \"{result}\"]'",
    )
    ip.run_line_magic("chaz", "@reader who am I?")
    sid = chaz.current_session("reader")
    ip.run_line_magic("chaz", f"wait {sid}")
    entries = chaz.store.entries(sid)
    assert entries[-1].content == "you sent [REDACTED]"
    assert not [e for e in entries if token in e.content or token in str(e.payload)]


def test_ansi_and_bidi_controls_in_a_servers_stderr_are_shown_as_text(chaz, capsys, tmp_path):
    script = tmp_path / "loud.py"
    script.write_text("import sys\nsys.stderr.write('\\x1b[2J\\x1b[31mfatal\\x1b[0m /srv/\\u202etxt.sgol\\n')\n"
                      "sys.exit(2)\n")
    ip.run_line_magic("chaz", f"mcp add loud --wait -- {sys.executable} {script}")
    ip.run_line_magic("chaz", "mcp list")
    out = capsys.readouterr().out
    assert "<U+001B>[31mfatal<U+001B>[0m" in out and "<U+202E>txt.sgol" in out
    assert "\x1b" not in out and "\u202e" not in out
