"""%chaz pending / approve / deny through IPython's test shell, on a run parked on an approval."""

from __future__ import annotations

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
