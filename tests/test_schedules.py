import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from chaz_nb.server.agents import Agent
from chaz_nb.core.entries import EntryType as T
from chaz_nb.server.schedules import ScheduleError, TriggerError, parse_cron, parse_trigger
from chaz_nb.errors import ServerError
from chaz_nb.server import Server
from chaz_nb.core.store import SessionStore, utcnow
from chaz_nb.engine.tools import ToolRegistry, tool

from waiting import until


@tool(approval="always")
def launch() -> str:
    """Needs a person."""
    return "launched"


def make(store, *agents, **kw):
    return Server(store, list(agents) or [Agent("bot")], ToolRegistry([launch]), **kw)


def log(store, session_id):
    return [(e.entry_type.value, e.sender, e.content) for e in store.entries(session_id)]


async def settled(server, schedule_id):
    """Until no fire of the schedule is in flight (it is counted after its run's last entry)."""
    await until(lambda: all(r["status"] != "running" for r in fire_rows(server, schedule_id)),
                server.schedules.subscribe, what=f"the fires of schedule #{schedule_id} to finish")


def fire_rows(server, schedule_id=None):
    return [dict(zip(("id", "schedule_id", "session_id", "run_id", "status", "reason", "prompt_tokens",
                      "completion_tokens", "cost_usd", "scheduled_for", "started_at", "finished_at"), r, strict=True))
            for r in server.schedules.fires(schedule_id)]


# ------------------------------------------------------------------ triggers
def test_cron_next_tick_five_and_six_fields_utc():
    t = datetime(2026, 12, 2, 10, 7, 30)  # a Wednesday
    assert parse_cron("*/15 * * * *").next_after(t) == datetime(2026, 12, 2, 10, 15)
    assert parse_cron("0 9 * * 1-5").next_after(t) == datetime(2026, 12, 3, 9, 0)
    assert parse_cron("0 9 * * sat,sun").next_after(t) == datetime(2026, 12, 5, 9, 0)
    assert parse_cron("*/10 * * * * *").next_after(t) == datetime(2026, 12, 2, 10, 7, 40)
    assert parse_cron("0 0 1 jan *").next_after(t) == datetime(2027, 1, 1)
    assert parse_cron("@hourly").next_after(t) == datetime(2026, 12, 2, 11, 0)
    assert parse_cron("0 0 29 2 *").next_after(t) == datetime(2028, 2, 29)
    assert parse_cron("0 12 * * 7").next_after(t) == datetime(2026, 12, 6, 12, 0)  # 7 = Sunday


def test_interval_and_one_shot_triggers():
    now = datetime(2026, 12, 2, 10, 0, 0)
    every = parse_trigger("every 30s", now)
    assert (every.kind, every.interval, every.text) == ("interval", 30, "every 30s")
    assert every.first_fire(now) == now + timedelta(seconds=30)
    assert parse_trigger("every 5m").interval == 300 and parse_trigger("every 1h").interval == 3600
    assert parse_trigger("every 250ms").interval == 0.25
    # no back-fill: the tick after a long gap is one interval from now
    assert every.next_fire(now - timedelta(hours=2), now) == now + timedelta(seconds=30)
    once = parse_trigger("in 10m", now)
    assert (
        once.kind == "once" and once.at == now + timedelta(minutes=10) and once.text.startswith("at 2026-12-02T10:10")
    )
    assert parse_trigger("at 2026-12-24T18:00+01:00").at == datetime(2026, 12, 24, 17, 0)
    assert once.next_fire(once.at, now) is None


def test_a_trigger_with_no_fire_is_a_trigger_error_not_a_none_first_fire():
    """``first_fire`` is a time: a trigger built by hand with no fire left (parse_trigger makes
    none such) used to return None, which the schedule stored as "never due" and the agent
    limits check failed on with a TypeError; a cron trigger with no line failed on an attribute."""
    from dataclasses import replace

    from chaz_nb.server.schedules import Trigger

    now = datetime(2026, 12, 2, 10, 0, 0)
    never = Trigger("cron", "0 0 1 1 *", cron=replace(parse_cron("0 0 1 1 *"), months=frozenset()))
    with pytest.raises(TriggerError, match="it never fires"):
        never.first_fire(now)
    with pytest.raises(TriggerError, match="needs its parsed line"):
        Trigger("cron", "0 0 1 1 *").next_fire(now, now)
    with pytest.raises(TriggerError, match="it never fires"):
        Trigger("once", "at nothing").first_fire(now)


@pytest.mark.parametrize(
    "text, what",
    [
        ("*/5 * * *", "a cron line has 5 fields (minute hour day month weekday) or 6 with seconds first, got 4"),
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("* * * foo *", "month field has 'foo', not a number"),
        ("*/0 * * * *", "minute field step '0' must be a positive number"),
        ("0 0 31 2 *", "it never fires"),
        ("every often", "'often' is not a duration"),
        ("at tomorrow", "'tomorrow' is not an ISO date-time"),
        ("", "it is empty"),
    ],
)
def test_bad_trigger_text_is_one_line_saying_what_is_expected(text, what):
    with pytest.raises(TriggerError) as info:
        parse_trigger(text)
    message = str(info.value)
    assert "\n" not in message and what in message
    assert message.startswith("bad schedule trigger") and 'expected a cron line like "*/5 * * * *"' in message
    assert isinstance(info.value, ValueError)


# ------------------------------------------------------------------- fire path
async def test_fire_writes_no_directive_and_records_the_run(store):
    server = make(store)
    s = server.schedules.add("bot", "every 1h", "good morning, check the news")
    fire = await server.fire_agent_schedule(s)
    assert fire.status == "ok" and fire.reply.content == "echo: good morning, check the news"
    session = store.session(s.session_id)
    assert (session.kind, session.agent) == ("schedule", "bot")
    # the wake prompt is input to the run, never an entry: Ack + reply only
    assert [e[0:2] for e in log(store, s.session_id)] == [("Ack", "bot"), ("Message", "bot")]
    assert not [e for e in store.entries(s.session_id) if e.entry_type is T.DIRECTIVE]
    ack = store.entries(s.session_id)[0]
    assert ack.payload["trigger_type"] == "schedule" and ack.payload["schedule_id"] == s.id
    assert ack.payload["wake_prompt"] == "good morning, check the news" and ack.payload["trigger_id"] is None
    row = fire_rows(server, s.id)[0]
    assert row["status"] == "ok" and row["session_id"] == s.session_id and row["run_id"] == ack.id
    assert row["prompt_tokens"] > 0 and row["completion_tokens"] > 0 and row["finished_at"] >= row["started_at"]
    run = store.sql("SELECT trigger_type, schedule_id, status FROM runs WHERE run_id = ?", [ack.id]).fetchall()
    assert run == [("schedule", str(s.id), "ok")]
    assert server.schedules.get(s.id).fire_count == 1


async def test_fresh_target_gets_a_new_session_per_fire_and_pinned_keeps_one(store):
    server = make(store)
    fresh = server.schedules.add("bot", "every 1h", "ping", session="fresh")
    a = await server.fire_agent_schedule(fresh)
    b = await server.fire_agent_schedule(fresh.id)
    assert a.session_id != b.session_id and fresh.session_id is None
    chat = server.current_session("bot")
    pinned = server.schedules.add("bot", "every 1h", "ping", session=chat)
    await server.fire_agent_schedule(pinned)
    await server.fire_agent_schedule(pinned)
    assert [e.entry_type for e in store.entries(chat)] == [T.ACK, T.MESSAGE, T.ACK, T.MESSAGE]


async def test_unattended_fire_denies_tools_that_need_approval(store):
    agent = Agent(
        "ops", model="chaz/script", tools=["launch"], script=[{"tool": "launch", "args": {}}, "result: {result}"]
    )
    server = make(store, agent, approval_timeout=30)
    s = server.schedules.add("ops", "every 1h", "launch it")
    fire = await asyncio.wait_for(server.fire_agent_schedule(s), 5)
    assert "no person to ask" in fire.reply.content


async def test_busy_session_skips_the_fire_and_records_it(store):
    slow = Agent("slow", model_options={"metadata": {"chaz_delay": 0.3}})
    server = make(store, slow)
    chat = server.current_session("slow")
    s = server.schedules.add("slow", "every 1h", "wake", session=chat)
    handle = await server.send(chat, "a long question")
    fire = await server.fire_agent_schedule(s)
    assert fire.status == "skipped" and "busy" in fire.reason
    await handle.wait()
    assert fire_rows(server, s.id)[0]["status"] == "skipped"
    current = server.schedules.get(s.id)
    assert current.fire_count == 0 and current.consecutive_failures == 0
    assert len([e for e in store.entries(chat) if e.entry_type is T.ACK]) == 1  # nothing stacked


async def test_interval_fires_a_few_times_then_pause_stops_it(store):
    server = make(store)
    server.schedules.start()
    s = server.schedules.add("bot", "every 0.1s", "tick")  # the sleeping scheduler wakes for it
    await until(lambda: server.schedules.get(s.id).fire_count >= 3, server.schedules.subscribe)
    server.schedules.pause(s.id)
    await server.wait_idle(2)
    await settled(server, s.id)
    count = server.schedules.get(s.id).fire_count
    # a witness on the same interval: by its second fire the scheduler has passed the paused
    # schedule's due time twice (each pass dispatches every due schedule)
    witness = server.schedules.add("bot", "every 0.1s", "witness")
    await until(lambda: server.schedules.get(witness.id).fire_count >= 2, server.schedules.subscribe)
    server.schedules.remove(witness.id)
    await server.wait_idle(2)
    await settled(server, s.id)
    assert server.schedules.get(s.id).fire_count == count
    assert not server.schedules.get(s.id).enabled
    replies = [e for e in store.entries(s.session_id) if e.entry_type is T.MESSAGE]
    assert len(replies) == count and all(r.content == "echo: tick" for r in replies)
    server.schedules.resume(s.id)
    await until(lambda: server.schedules.get(s.id).fire_count > count, server.schedules.subscribe)
    await server.stop()
    assert not server.schedules.running


async def test_overlapping_interval_fires_are_skipped_not_stacked(store):
    server = make(store, Agent("slow", model_options={"metadata": {"chaz_delay": 0.25}}))
    s = server.schedules.add("slow", "every 0.1s", "tick")
    await until(lambda: server.schedules.get(s.id).fire_count >= 2, server.schedules.subscribe)
    await server.stop()
    statuses = [r["status"] for r in fire_rows(server, s.id)]
    assert "skipped" in statuses and statuses.count("ok") >= 2
    acks = [e for e in store.entries(s.session_id) if e.entry_type is T.ACK and e.payload.get("schedule_id")]
    assert len(acks) == statuses.count("ok") + statuses.count("error")


async def test_max_fires_and_failures_disable_expired_does_not_fire(store):
    # max_retries=0: each failing fire fails at once (retries back off 0.5 s, 1 s, ...)
    broken = Agent("broken", model="gpt-4o-mini", max_retries=0,
                   model_options={"mock_response": "litellm.InternalServerError"})
    server = make(store, Agent("bot"), broken)
    limited = server.schedules.add("bot", "every 0.05s", "tick", max_fires=2)
    failing = server.schedules.add("broken", "every 0.05s", "tick")
    expired = server.schedules.add("bot", "every 0.05s", "tick", expires_at=utcnow() - timedelta(seconds=1))
    await until(lambda: not server.schedules.get(limited.id).enabled and not server.schedules.get(failing.id).enabled
                and not server.schedules.get(expired.id).enabled, server.schedules.subscribe)
    await server.wait_idle(2)
    assert server.schedules.get(limited.id).fire_count == 2
    assert server.schedules.get(limited.id).disabled_reason == "max_fires reached"
    f = server.schedules.get(failing.id)
    # (a fire that started just before the third failure disabled it may still count one more)
    assert f.consecutive_failures in (3, 4) and f.disabled_reason.startswith("3 failures in a row: model call failed")
    # a fire that finds the previous one still running is skipped, not counted as a failure
    statuses = [r["status"] for r in fire_rows(server, failing.id) if r["status"] != "skipped"]
    assert statuses == ["error"] * f.consecutive_failures
    assert server.schedules.get(expired.id).disabled_reason == "expired" and fire_rows(server, expired.id) == []
    await server.stop()


async def test_restart_keeps_schedules_catches_up_one_shot_and_does_not_backfill(db_path):
    store = SessionStore(db_path)
    server = make(store)
    cron = server.schedules.add("bot", "0 9 * * *", "daily report")
    hourly = server.schedules.add("bot", "every 1h", "hourly")
    once = server.schedules.add("bot", "in 0.2s", "one-off reminder", session="fresh")
    await server.stop()  # the kernel goes away before the one-shot is due
    store.close()

    store = SessionStore(db_path)
    # the one-shot came due while the kernel was down
    store.execute("UPDATE schedules SET next_fire_at = ? WHERE id = ?", [utcnow() - timedelta(seconds=1), once.id])
    # pretend the kernel was down for a day: both recurring schedules missed ticks
    store.execute(
        "UPDATE schedules SET next_fire_at = ? WHERE id IN (?, ?)", [utcnow() - timedelta(days=1), cron.id, hourly.id]
    )
    # and a fire was cut off mid-run
    store.execute(
        "INSERT INTO schedule_fires (id, schedule_id, status, started_at) VALUES (50, ?, 'running', ?)",
        [hourly.id, utcnow()],
    )
    server = make(store)
    assert fire_rows(server)[0]["status"] == "error" and fire_rows(server)[0]["reason"] == "interrupted: kernel stopped"
    assert [s.id for s in server.schedules.list()] == [cron.id, hourly.id, once.id]
    assert server.schedules.get(cron.id).trigger == "0 9 * * *"
    server.schedules.start()
    await until(lambda: once.id not in [s.id for s in server.schedules.list()],  # fired, then removed
                server.schedules.subscribe)
    await server.wait_idle(2)
    rows = fire_rows(server)[1:]
    assert [(r["schedule_id"], r["status"]) for r in rows] == [(once.id, "ok")]  # no back-filled ticks
    reply = store.latest(rows[0]["session_id"])
    assert reply.content == "echo: one-off reminder"
    now = utcnow()
    assert server.schedules.get(cron.id).next_fire_at > now
    assert server.schedules.get(hourly.id).next_fire_at > now + timedelta(minutes=59)
    await server.stop()
    store.close()


async def test_schedule_tools_are_scoped_to_the_calling_agent(store):
    planner = Agent("planner", model="chaz/script", tools=["schedule_*"], script=[
        {"tool": "schedule_create", "args": {"trigger": "every 2h", "prompt": "review the plan"}},
        {"tool": "schedule_list", "args": {}},
        {"tool": "schedule_cancel", "args": {"schedule_id": 1}},
        "{result}",
    ])
    server = make(store, planner, Agent("other"))
    server.schedules.add("other", "every 1h", "not yours")  # schedule #1 belongs to "other"
    chat = server.current_session("planner")
    reply = await (await server.send(chat, "plan")).wait()
    assert reply.content == "you have no schedule #1; schedule_list shows yours"
    mine = server.schedules.list("planner")
    assert len(mine) == 1 and mine[0].session_id == chat and mine[0].created_by == "planner"
    results = [e.content for e in store.entries(chat) if e.entry_type is T.TOOL_RESULT]
    assert results[0].startswith("schedule_create: created #2 @planner 'every 2h' -> session")
    assert "review the plan" in results[1]
    assert len(server.schedules.list()) == 2
    bad = Agent("bad", model="chaz/script", tools=["schedule_create"],
                script=[{"tool": "schedule_create", "args": {"trigger": "*/5 * *", "prompt": "x"}}, "{result}"])
    server.define_agent(bad)
    reply = await (await server.send(server.current_session("bad"), "go")).wait()
    assert reply.content.startswith("bad schedule trigger '*/5 * *': a cron line has 5 fields")


def test_python_api_errors_are_clear(store):
    server = make(store)
    with pytest.raises(ServerError, match="unknown agent 'ghost'"):
        server.schedules.add("ghost", "every 1m", "x")
    with pytest.raises(ScheduleError, match="wake prompt"):
        server.schedules.add("bot", "every 1m", " ")
    with pytest.raises(TriggerError, match="bad schedule trigger"):
        server.schedules.add("bot", "every", "x")
    with pytest.raises(ScheduleError, match="no schedule #9"):
        server.schedules.pause(9)
    s = server.schedules.add("bot", "every 1m", "x")  # no running loop: stored, not started
    assert not server.schedules.running
    assert "#1 @bot 'every 1m'" in str(server.schedules.list()[0])
    server.schedules.remove(s.id)
    assert server.schedules.list() == []


def test_a_key_in_a_wake_prompt_never_reaches_the_database_file(db_path, monkeypatch):
    key = "sk-test-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    store = SessionStore(db_path)
    server = make(store)
    s = server.schedules.add("bot", "every 1m", f"check the balance with key {key}")
    assert key not in s.prompt and "[REDACTED]" in s.prompt
    assert store.execute("SELECT prompt FROM schedules") == [(s.prompt,)]
    store.close()
    data = b"".join(p.read_bytes() for p in Path(db_path).parent.glob(Path(db_path).name + "*"))
    assert key.encode() not in data


async def test_a_key_in_a_schedules_ceiling_never_reaches_the_store(backend_store):
    import json

    key = "sk-test-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"
    server = make(backend_store)
    ceiling = json.dumps({"tools": [["add", f"{key}*"]], "auto_approve": [], "call_depth": 1, "max_call_depth": 2})
    s = server.schedules.add("bot", "every 1h", "wake up", created_by="bot", ceiling=ceiling)
    [[stored]] = backend_store.execute("SELECT ceiling FROM schedules WHERE id = ?", [s.id])
    assert key not in str(stored) and "[REDACTED]" in str(stored) and json.loads(stored)["tools"][0][0] == "add"
    assert key not in server.schedules.get(s.id).ceiling
    await server.stop()
