"""%chaz schedule / room / compact through IPython's test shell (globalipapp), in-memory store."""

from __future__ import annotations

from datetime import timedelta

import pytest

import chaz_nb
from chaz_nb.core.entries import EntryType as T
from chaz_nb.notebook import extension
from chaz_nb.notebook.kernel_loop import run_sync
from chaz_nb.notebook.magics.multi import parse_schedule_add
from chaz_nb.core.store import SessionStore, utcnow

from ipython_harness import ip, one_line_error
from waiting import until as wait_until


def run(cell: str, capsys) -> str:
    capsys.readouterr()
    result = ip.run_cell(cell)
    assert result.error_in_exec is None, result.error_in_exec
    return capsys.readouterr().out


def until(server, predicate, timeout: float = 60.0) -> None:
    """Let the kernel loop run (the scheduler, runs), as a cell that awaits does, until ``predicate``.

    The first run imports litellm on the loop: cold, on a busy machine, that alone takes seconds.
    """
    wait = wait_until(predicate, server.store.subscribe, server.schedules.subscribe, timeout=timeout)
    run_sync(wait, server._get_loop())


def talk(server, session):
    return [(e.entry_type.value, e.sender, e.content) for e in server.store.entries(session)
            if e.entry_type in (T.MESSAGE, T.DIRECTIVE, T.ERROR, T.SUMMARY)]


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    "line, expected",
    [
        ('@bot "*/5 * * * *" check the news', ("bot", "*/5 * * * *", "check the news", None, None)),
        ("@bot '0 9 * * 1-5' it's \"Monday\"", ("bot", "0 9 * * 1-5", "it's \"Monday\"", None, None)),
        ("@bot every 30s ping --fresh", ("bot", "every 30s", "ping", "fresh", None)),
        ("--session 4 @bot in 10m remind me", ("bot", "in 10m", "remind me", 4, None)),
        ("@bot at 2026-12-01T09:00 go --max-fires 1 --session 2", ("bot", "at 2026-12-01T09:00", "go", 2, 1)),
        ("@bot @daily report", ("bot", "@daily", "report", None, None)),
    ],
)
def test_schedule_add_line(line, expected):
    spec = parse_schedule_add(line)
    assert (spec["agent"], spec["trigger"], spec["prompt"], spec["session"], spec["max_fires"]) == expected


# ------------------------------------------------------------------ schedules
def test_schedule_add_list_pause_resume_remove(chaz, capsys):
    out = run('%chaz schedule add @assistant "every 1s" tick', capsys)
    assert out.startswith("added schedule #1 @assistant 'every 1s' -> session 1: 'tick' [enabled, fired 0, next ")
    s = chaz.schedules.get(1)
    assert (s.agent, s.trigger, s.prompt, s.session_id, s.enabled) == ("assistant", "every 1s", "tick", 1, True)
    assert chaz.schedules.running  # started on load
    run("%chaz schedule add @assistant in 1h later --fresh --max-fires 1", capsys)
    assert chaz.schedules.get(2).session_id is None and chaz.schedules.get(2).kind == "once"

    until(chaz, lambda: chaz.schedules.get(1).fire_count >= 2)
    out = run("%chaz schedule pause 1", capsys)
    assert out.strip() == "paused schedule #1 (@assistant 'every 1s'); %chaz schedule resume 1 resumes it"
    fired = chaz.schedules.get(1).fire_count
    due = chaz.schedules.get(1).next_fire_at
    # a witness: once it is dispatched after the paused schedule's due time, the scheduler
    # has passed that time (each pass dispatches every due schedule); then no fire is in flight
    witness = chaz.schedules.add("assistant", "every 0.1s", "witness")
    until(chaz, lambda: any(r[9] is not None and r[9] > due for r in chaz.schedules.fires(witness.id)))
    chaz.schedules.remove(witness.id)
    until(chaz, lambda: all(r[4] != "running" for r in chaz.schedules.fires()))
    assert chaz.schedules.get(1).fire_count == fired  # paused: no more fires
    # the wake prompt is not written: each fire is an Ack (trigger: the schedule) and a reply
    es = chaz.store.entries(1)
    assert T.DIRECTIVE not in {e.entry_type for e in es}
    assert es[0].entry_type is T.ACK and es[0].payload["schedule_id"] == 1
    assert es[1].content == "echo: tick"

    table = run("%chaz schedule list", capsys).splitlines()
    assert table[0].split() == ["id", "agent", "trigger", "target", "state", "fired", "next", "fire", "(UTC)", "prompt"]
    assert table[1].split()[:7] == ["#1", "assistant", "every", "1s", "session", "1", "paused:"]
    assert "fresh" in table[2] and "0/1" in table[2] and "later" in table[2]

    out = run("%chaz schedule resume #1", capsys)
    assert out.startswith("resumed schedule #1 (@assistant 'every 1s'); next fire 20")
    assert chaz.schedules.get(1).enabled
    assert run("%chaz schedule remove 1", capsys).strip() == "removed schedule #1"
    assert [s.id for s in chaz.schedules.list()] == [2]
    run("%chaz schedule remove 2", capsys)
    assert run("%chaz schedule list", capsys).startswith("no schedules")


def test_schedule_errors_are_one_line(chaz, capsys):
    err = one_line_error(capsys, '%chaz schedule add @assistant "61 * * * *" hi', "bad schedule trigger '61 * * * *'")
    assert "minute 61 is out of range 0-59" in err
    one_line_error(capsys, '%chaz schedule add @assistant "* * *" hi', "a cron line has 5 fields")
    one_line_error(capsys, "%chaz schedule add @assistant every soon hi", "is not a duration")
    one_line_error(capsys, "%chaz schedule add @assistant */5 * * * * hi", "put the trigger after @assistant, quoted")
    one_line_error(capsys, '%chaz schedule add @ghost "every 1h" hi', "unknown agent @ghost")
    one_line_error(capsys, '%chaz schedule add "every 1h" hi', "say which agent")
    one_line_error(capsys, '%chaz schedule add @assistant "every 1h"', "write the wake prompt")
    one_line_error(capsys, '%chaz schedule add @assistant "every 1h" hi --fresh --session 1', "not both")
    one_line_error(capsys, '%chaz schedule add @assistant "every 1h" hi --session 99', "no session 99")
    one_line_error(capsys, '%chaz schedule add @assistant "every 1h" hi --max-fires 0', "--max-fires takes a positive")
    one_line_error(
        capsys, '%chaz schedule add --every @assistant "every 1h" hi', "unknown or incomplete option --every"
    )
    one_line_error(capsys, "%chaz schedule pause 7", "no schedule #7; schedules: none")
    one_line_error(capsys, "%chaz schedule pause seven", "ID is a schedule number")
    one_line_error(capsys, "%chaz schedule remove", "usage: %chaz schedule remove ID")
    one_line_error(capsys, "%chaz schedule list all", "takes no arguments")
    one_line_error(capsys, "%chaz schedule snooze 1", "unknown %chaz schedule action 'snooze'")
    assert chaz.schedules.list() == []


def test_a_schedule_kept_from_an_earlier_kernel_fires_after_load(monkeypatch, tmp_path, capsys):
    """Schedules are in the database: the scheduler starts on load, so they fire again."""
    monkeypatch.setenv("CHAZ_DB", str(tmp_path / "s.duckdb"))
    monkeypatch.delenv("CHAZ_MODEL", raising=False)
    ip.run_line_magic("load_ext", "chaz_nb")
    try:
        ip.run_line_magic("chaz", "schedule add @assistant every 0.3s tick")
        ip.run_line_magic("chaz", "agent bot --model chaz/script --script '[\"bot woke\"]'")
        ip.run_line_magic("chaz", "schedule add @bot in 0.2s wake up --fresh")
        first = chaz_nb.current()
        assert first.schedules.running
        ip.run_line_magic("unload_ext", "chaz_nb")  # the kernel goes away before they are due
        assert not first.schedules.running  # Server.stop stops the scheduler
        with SessionStore(str(tmp_path / "s.duckdb")) as db:  # the one-shot came due while it was down
            db.execute("UPDATE schedules SET next_fire_at = ? WHERE id = 2", [utcnow() - timedelta(seconds=1)])
            # bot is kept with the sessions (agent_book.py): drop it, so that the next kernel
            # does not define it until a cell does (a schedule of an agent kept nowhere)
            db.execute("DELETE FROM agent_definitions WHERE name = 'bot'")
        ip.run_line_magic("load_ext", "chaz_nb")
        server = chaz_nb.current()
        assert server.schedules.running
        until(server, lambda: server.schedules.get(1).fire_count >= 1)
        # the one-shot's agent is defined by a cell of the notebook, after the load: the fire
        # waits for it instead of failing (and being removed)
        until(server, lambda: [r for r in server.schedules.fires(2) if r[4] == "skipped"])
        assert [s.id for s in server.schedules.list()] == [1, 2]
        ip.run_line_magic("chaz", "agent bot --model chaz/script --script '[\"bot woke\"]'")
        until(server, lambda: [s.id for s in server.schedules.list()] == [1], timeout=15)
        fires = [r for r in server.schedules.fires(2) if r[4] == "ok"]
        assert len(fires) == 1 and server.store.latest(fires[0][2]).content == "bot woke"
        skipped = [r for r in server.schedules.fires(2) if r[4] == "skipped"]
        assert skipped and skipped[0][5] == "agent 'bot' is not defined in this kernel (yet)"
        server.schedules.pause(1)
        run_sync(server.wait_idle(5), server._get_loop())
    finally:
        ip.run_line_magic("unload_ext", "chaz_nb")


# ------------------------------------------------------------------ rooms
AGENTS = """\
%chaz agent ping --model chaz/script --script '["@pong ping"]'
%chaz agent pong --model chaz/script --script '["@ping pong"]'
%chaz agent quiet --model chaz/script --script '["quiet here"]'
"""


def test_room_creation_and_mention_gated_turns(chaz, capsys):
    run(AGENTS, capsys)
    out = run("%chaz room lab @ping @pong @quiet --budget 3", capsys)
    assert out.strip() == (
        "created room 'lab' (session 1): @ping @pong @quiet, burst budget 3. "
        "%chaz @NAME text now speaks in this room (%chaz room --leave to leave it)"
    )
    state = extension.current_state()
    assert state.room == 1 and chaz.store.session(1).kind == "room"
    # @quiet takes the turn; ping is only mentioned in a person's message to quiet: not woken
    out = run("%chaz @quiet hello, is @ping here?", capsys)
    assert talk(chaz, 1) == [("Message", "user", "hello, is @ping here?"), ("Message", "quiet", "quiet here")]
    first = chaz.store.entries(1)[0]
    assert first.payload["to"] == ["quiet"] and "origin" in first.payload
    assert "room lab · session 1" in out and "quiet: quiet here" in out
    # an agent's reply that mentions another member starts its turn; the magic waits for all
    out = run("%chaz @ping start", capsys)
    assert not chaz.is_busy(1)
    assert talk(chaz, 1)[2:] == [
        ("Message", "user", "start"),
        ("Message", "ping", "@pong ping"),
        ("Message", "pong", "@ping pong"),
        ("Message", "ping", "@pong ping"),
        ("Error", "system", "loop guard: 3 agent messages in a row reached this room's burst budget (3); "
                            "@pong not woken. A message from a person resets it."),
    ]
    assert "✗ system: loop guard" in out
    # a Directive in a room goes to the named member too
    run("%chaz directive @quiet sum up", capsys)
    assert talk(chaz, 1)[-2:] == [("Directive", "user", "sum up"), ("Message", "quiet", "quiet here")]
    # the room list marks the current room
    lines = run("%chaz room", capsys).splitlines()
    assert lines[1].split() == ["1", "lab", "@ping", "@pong", "@quiet", "-", "3", "←", "current"]
    # leave: %chaz @NAME is the agent's own session again
    assert run("%chaz room --leave", capsys).startswith("left room 'lab'")
    assert extension.current_state().room is None
    run("%chaz @quiet alone", capsys)
    own = chaz.current_session("quiet")
    assert own != 1 and talk(chaz, own) == [("Message", "user", "alone"), ("Message", "quiet", "quiet here")]
    # enter it again by name
    assert run("%chaz room lab", capsys).startswith("entered room 'lab' (session 1)")
    assert extension.current_state().room == 1


def test_room_magic_is_answered_by_the_named_member_whatever_the_text_mentions(chaz, capsys):
    run(AGENTS, capsys)
    run("%chaz room lab @ping @quiet", capsys)
    out = run("%chaz @quiet hello, is @ghost here?", capsys)  # a non-member is mentioned
    assert talk(chaz, 1) == [
        ("Message", "user", "hello, is @ghost here?"),
        ("Error", "system", "@ghost is not in this room (members: @ping, @quiet); nobody was woken for it"),
        ("Message", "quiet", "quiet here"),
    ]
    assert "quiet: quiet here" in out
    ack = [e for e in chaz.store.entries(1) if e.entry_type is T.ACK][0]
    assert ack.sender == "quiet" and ack.payload["answers"] == [chaz.store.entries(1)[0].id]
    run("%chaz directive @quiet sum up", capsys)  # mentions nobody: still the named member
    assert talk(chaz, 1)[-2:] == [("Directive", "user", "sum up"), ("Message", "quiet", "quiet here")]


def test_room_host_and_errors_are_one_line(chaz, capsys):
    run(AGENTS, capsys)
    assert run("%chaz room", capsys).startswith("no rooms yet")
    out = run("%chaz room hosted @ping --host quiet", capsys)
    assert out.startswith("created room 'hosted' (session 1): @quiet @ping, host @quiet")
    one_line_error(capsys, "%chaz @assistant hi", "@assistant is not in room 'hosted'; members: @quiet, @ping")
    one_line_error(capsys, "%chaz room lab @ping @ghost", "unknown agent 'ghost'")
    one_line_error(capsys, "%chaz room lab @ping --budget 0", "--budget must be a positive number")
    one_line_error(capsys, "%chaz room lab @ping --budget x", "argument --budget: invalid int value")
    one_line_error(capsys, "%chaz room lab @ping --fast", "unrecognized arguments: --fast")
    one_line_error(capsys, "%chaz room nowhere", "no room 'nowhere'; create it with %chaz room nowhere @a @b")
    one_line_error(capsys, "%chaz room --leave lab", "--leave takes nothing else")
    one_line_error(capsys, "%chaz room lab @p!ng", "@p!ng is not an agent name")
    one_line_error(capsys, "%chaz room --host ping", "--host and --budget need a room NAME")
    assert extension.current_state().room == 1  # the failed commands left the room as it was


# ------------------------------------------------------------------ compact
def test_compact_writes_a_summary_boundary(chaz, capsys):
    run("%chaz @assistant first question", capsys)
    one_line_error(
        capsys,
        "%chaz compact",
        "nothing to compact in session 1: 2 message(s) since the last Summary; compaction needs at least 3",
    )
    run("%chaz @assistant second question", capsys)
    out = run("%chaz compact @assistant", capsys)
    assert out.splitlines()[0] == (
        "session 1: 4 messages (entries #1–#6) summarized in entry #7; later runs start from this Summary "
        "(older entries stay in the log)"
    )
    summary = chaz.store.latest(1)
    assert summary.entry_type is T.SUMMARY and summary.sender == "system" and summary.payload["by"] == "user"
    assert summary.content in out
    log = run("%chaz log 1", capsys)
    assert "— summary: Summary of earlier conversation:" in log
    # just after a Summary there is nothing new to compact
    one_line_error(capsys, "%chaz compact 1", "nothing to compact in session 1: 0 message(s)")
    one_line_error(capsys, "%chaz compact 99", "there is no session 99")
    one_line_error(capsys, "%chaz compact 1 2", "usage: %chaz compact [SESSION]")


def test_compact_a_busy_session_is_refused(chaz, capsys):
    run("%chaz @assistant one", capsys)
    run("%chaz @assistant two", capsys)
    run("%chaz --no-wait @assistant three", capsys)
    one_line_error(capsys, "%chaz compact", "session 1 is running; compact it once the run is over")
    run("%chaz wait", capsys)
    assert run("%chaz compact", capsys).startswith("session 1: 6 messages")


def test_help_lists_the_new_sub_commands(chaz, capsys):
    out = run("%chaz help", capsys)
    for needle in ("%chaz schedule add @NAME", "%chaz schedule list|pause ID|resume ID|remove ID",
                   "%chaz room NAME @a @b", "%chaz room --leave", "%chaz compact [SESSION]"):
        assert needle in out
    from chaz_nb.notebook.magics.usage import USAGE as usage  # the full one-line usage

    assert "schedule add @NAME" in usage and "schedule remove ID" in usage and "compact [SESSION]" in usage
    assert "--max-fires N" in usage and "--budget N" in usage  # the full usage: every sub-command's flags
