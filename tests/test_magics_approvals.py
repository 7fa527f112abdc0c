"""%chaz pending / approve / deny through IPython's test shell, on a run parked on an approval."""

from __future__ import annotations

import json

import pytest

from chaz_nb.core.entries import EntryType

from ipython_harness import ip, one_line_error


def decision_reason(server, sid):
    [decision] = [e for e in server.store.entries(sid) if e.entry_type is EntryType.APPROVAL_DECISION]
    return decision.payload["decision"], decision.payload["reason"]


@pytest.mark.parametrize(
    "line",
    [
        "deny last --reason not today",
        "deny last --reason   not today ",
        'deny last --reason "not today"',
        "deny last --reason='not today'",
        "deny last --reason=not today",
    ],
)
def test_deny_reason_is_the_rest_of_the_line(chaz, parked, line):
    ip.run_line_magic("chaz", line)
    assert decision_reason(chaz, parked) == ("deny", "not today")
    ip.run_line_magic("chaz", f"wait {parked}")
    tool_result = [e for e in chaz.store.entries(parked) if e.entry_type is EntryType.TOOL_RESULT][-1]
    assert "denied by the user: not today" in tool_result.content


def test_deny_reason_may_hold_quotes_and_dashes(chaz, parked):
    ip.run_line_magic("chaz", "deny last --reason don't -- it's --prod")
    assert decision_reason(chaz, parked) == ("deny", "don't -- it's --prod")


def test_deny_by_request_id_with_a_long_reason(chaz, parked):
    [request] = chaz.pending_approvals()
    ip.run_line_magic("chaz", f"deny {request['request_id']} --reason the disk is shared")
    assert decision_reason(chaz, parked) == ("deny", "the disk is shared")


def test_deny_without_a_reason(chaz, parked):
    ip.run_line_magic("chaz", "deny last")
    assert decision_reason(chaz, parked) == ("deny", None)


@pytest.mark.parametrize(
    "cell, needle",
    [
        ("%chaz deny last --reason", "--reason needs a text"),
        ("%chaz deny last --reason=  ", "--reason needs a text"),
        ("%chaz deny --reason not today", "put the request before --reason"),
        ("%chaz deny last other --reason no", "say which request"),
        ("%chaz deny last --fast", "unknown option --fast"),
    ],
)
def test_bad_deny_lines_get_one_line_errors_and_decide_nothing(chaz, parked, capsys, cell, needle):
    one_line_error(capsys, cell, needle)
    assert chaz.session_status(parked) == "parked"
    assert len(chaz.pending_approvals()) == 1


# ------------------------------------------------------------------ approve with edits
def tool_result(server, sid):
    return [e for e in server.store.entries(sid) if e.entry_type is EntryType.TOOL_RESULT][-1]


@pytest.mark.parametrize(
    "line",
    [
        'approve last --args {"path": "/tmp/y"}',
        "approve last --args '{\"path\": \"/tmp/y\"}'",
        'approve last --args={"path": "/tmp/y"}',
    ],
)
def test_approve_with_args_runs_the_tool_with_them(chaz, parked, capsys, line):
    ip.run_line_magic("chaz", line)
    assert "wipe: approve with edited arguments by user" in capsys.readouterr().out
    ip.run_line_magic("chaz", f"wait {parked}")
    result = tool_result(chaz, parked)
    assert result.content == "wipe: wiped /tmp/y" and result.payload["edited"] is True
    [decision] = [e for e in chaz.store.entries(parked) if e.entry_type is EntryType.APPROVAL_DECISION]
    assert decision.payload["original_arguments"] == {"path": "/tmp/x"}
    assert decision.payload["arguments"] == {"path": "/tmp/y"}


@pytest.mark.parametrize(
    "cell, needle",
    [
        ('%chaz approve last --args {"path": 1}', "path: 1 is not of type 'string'"),
        ('%chaz approve last --args {"path": "/", "force": true}', "force"),
        ('%chaz approve last --args {"path": ', "not JSON"),
        ("%chaz approve last --args", "needs the edited arguments"),
        ('%chaz approve all --args {"path": "/"}', "edits one request"),
        ('%chaz approve last --all-calls --args {"path": "/"}', "--all-calls does not go with --args"),
        ("%chaz approve --edit", "say which"),
        ("%chaz approve nope --edit", "no approval request 'nope'"),
    ],
)
def test_a_bad_edit_is_one_line_and_the_request_stays_open(chaz, parked, capsys, cell, needle):
    one_line_error(capsys, cell, needle)
    assert chaz.session_status(parked) == "parked"
    assert len(chaz.pending_approvals()) == 1


def test_edit_opens_the_arguments_in_a_new_cell_that_approves_when_run(chaz, parked, capsys, monkeypatch):
    opened = []
    monkeypatch.setattr(ip, "set_next_input", lambda text, replace=False: opened.append((text, replace)))
    ip.run_line_magic("chaz", "approve last --edit")
    [(text, replace)] = opened
    [request] = chaz.pending_approvals()
    assert not replace and text == f'%%chaz approve {request["request_id"]}\n{{\n  "path": "/tmp/x"\n}}'
    assert "new cell below" in capsys.readouterr().out
    assert chaz.session_status(parked) == "parked"  # nothing decided yet
    ip.run_cell(text.replace("/tmp/x", "/tmp/edited")).raise_error()
    ip.run_line_magic("chaz", f"wait {parked}")
    assert tool_result(chaz, parked).content == "wipe: wiped /tmp/edited"


RUN_TOOL = """
import chaz_nb

@chaz_nb.tool(approval="always")
def run(code: str) -> str:
    '''Run code (one argument, code: shown and edited as code).'''
    return f"ran {code!r}"
"""


def test_a_code_call_opens_as_code_and_the_cell_body_is_the_code(chaz, capsys, monkeypatch):
    ip.run_cell(RUN_TOOL).raise_error()
    script = json.dumps([{"tool": "run", "args": {"code": "x = {1: 2}\nprint($x)"}}, "done: {result}"])
    ip.run_line_magic("chaz", f"agent coder --model chaz/script --tools run --script '{script}'")
    ip.run_line_magic("chaz", "@coder go")
    sid = chaz.current_session("coder")
    opened = []
    monkeypatch.setattr(ip, "set_next_input", lambda text, replace=False: opened.append(text))
    ip.run_line_magic("chaz", "approve last --edit")
    [request] = chaz.pending_approvals()
    assert opened == [f"%%chaz approve {request['request_id']} --code\nx = {{1: 2}}\nprint($x)"]
    # the body is code as written: no {}/$ expansion, IPython's trailing newline dropped
    ip.run_cell(opened[0].replace("1: 2", "1: 3") + "\n").raise_error()
    ip.run_line_magic("chaz", f"wait {sid}")
    assert tool_result(chaz, sid).content == "run: ran 'x = {1: 3}\\nprint($x)'"
