"""%chaz stop through IPython's test shell: a parked run and a running one are stopped from a cell."""

from __future__ import annotations

import pytest

from chaz_nb.core.entries import EntryType

from ipython_harness import ip, one_line_error
from waiting import until


def test_stop_ends_a_parked_run_with_a_cancelled_ack_and_closes_its_request(chaz, parked, capsys):
    ip.run_line_magic("chaz", "stop")
    out = capsys.readouterr().out
    assert out.startswith(f"stopped session {parked} (janitor, run_id ") and "was parked" in out
    assert chaz.session_status(parked) != "parked" and not chaz.is_busy(parked)
    entries = chaz.store.entries(parked)
    [decision] = [e for e in entries if e.entry_type is EntryType.APPROVAL_DECISION]
    assert decision.payload["decision"] == "timed_out"
    assert entries[-1].entry_type is EntryType.ACK and entries[-1].payload["status"] == "cancelled"
    assert not [e for e in entries if e.entry_type is EntryType.TOOL_RESULT and "wiped" in e.content]
    [(status,)] = chaz.store.execute("SELECT status FROM runs WHERE session_id = ?", [parked])
    assert status == "cancelled"
    ip.run_line_magic("chaz", "pending")
    assert capsys.readouterr().out.strip() == "no pending approval requests"


def test_stop_all_and_stop_of_an_idle_session_say_what_they_did(chaz, parked, capsys):
    ip.run_line_magic("chaz", "stop all")
    assert f"stopped session {parked}" in capsys.readouterr().out
    ip.run_line_magic("chaz", f"stop {parked}")
    assert capsys.readouterr().out.strip() == f"session {parked} has no run to stop"
    ip.run_line_magic("chaz", "stop all")
    assert capsys.readouterr().out.strip() == "nothing is running"


def test_the_session_takes_the_next_message_after_a_stop(chaz, parked, capsys):
    ip.run_line_magic("chaz", "stop @janitor")
    ip.run_line_magic("chaz", "agent janitor --model chaz/echo")
    ip.run_line_magic("chaz", "@janitor are you there")
    assert chaz.store.latest(parked).content == "echo: are you there"


@pytest.mark.parametrize(
    ("line", "needle"),
    [("stop 99999", "no session 99999"), ("stop a b", "one SESSION or all"),
     ("stop nope", "SESSION is a session id or @NAME"), ("stop @nobody", "nobody")],
)
def test_bad_stop_lines_are_one_line_errors(chaz, capsys, line, needle):
    one_line_error(capsys, f"%chaz {line}", needle)


def test_the_stop_button_of_a_turns_view_stops_its_parked_run(chaz, parked, capsys):
    from chaz_nb.notebook import extension
    from chaz_nb.notebook.kernel_loop import run_sync

    [view] = [v for v in extension._state.views if v.session_id == parked and v.following]
    assert view.stop_button.visible  # parked on the approval: the run can be stopped
    view.frontend_event("stop")  # the page's Stop button
    run_sync(until(lambda: not chaz.is_busy(parked) and not view.following, chaz.store.subscribe, view.on_update,
                   what="the stopped run's end"), extension._state.loop)
    assert chaz.store.latest(parked).payload["status"] == "cancelled"
    assert not view.stop_button.visible and view.widget is None  # the view ended as its static form
