"""Agents kept with the sessions (server/agent_book.py, issue 26 §3), on DuckDB and PostgreSQL:
a kept agent and its current session come back in a new Server on the same store, never a key;
``forget`` removes one; on a shared store another kernel hears of each change."""

from __future__ import annotations

import asyncio
import json

import pytest

from chaz_nb.core.store import SessionStore
from chaz_nb.server.agent_book import BUILT_IN, HERE, LOCAL, STORED
from chaz_nb.server.agents import Agent
from chaz_nb.server.facade import Server

KEY = "sk-live-9f8e7d6c5b4a39281706"


@pytest.fixture(params=["duckdb", "postgres"])
def location(request, tmp_path):
    """Where a store lives, so a second Server (a restarted kernel) opens the same one."""
    if request.param == "duckdb":
        return str(tmp_path / "sessions.duckdb")
    return request.getfixturevalue("pg_url")


def gpt() -> Agent:
    return Agent(
        "gpt",
        model="openai/gpt-4o-mini",
        system="Be brief.",
        tools=["add", "kernel__*"],
        auto_approve=["add"],
        max_iterations=4,
        data="schema",
        api_base="https://models.example/v1",
        model_options={"temperature": 0.2, "api_key": KEY, "extra_headers": {"Authorization": f"Bearer {KEY}"}},
    )


async def restarted(location: str, *, keep: bool = True) -> Server:
    return Server(SessionStore.open(location), keep_agents=keep)


async def close(server: Server) -> None:
    await server.stop()
    server.store.close()


async def test_a_kept_agent_and_its_current_session_come_back_without_its_key(location, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0a1b2c3d4e5f6a7b")
    first = await restarted(location)
    first.define_agent(gpt())
    assert first.roster.left_out["gpt"] == ("api_key", "extra_headers")
    first.define_agent(Agent("helper", system="token tok-0a1b2c3d4e5f6a7b", tools=[]))
    sid = first.current_session("gpt")
    await close(first)

    second = await restarted(location)
    try:
        back = second.agents["gpt"]
        assert back.model == "openai/gpt-4o-mini" and back.system == "Be brief."
        assert back.tools == ["add", "kernel__*"] and back.auto_approve == ["add"]
        assert back.max_iterations == 4 and back.data == "schema" and back.api_base == "https://models.example/v1"
        assert back.model_options == {"temperature": 0.2}  # the key is not kept: it comes from the environment
        assert second.agents["helper"].system == "token [REDACTED]"
        assert second.current_session_id("gpt") == sid  # %chaz @gpt goes on where it was
        assert second.agents_loaded == ["gpt", "helper"]
        assert second.roster.origin == {"gpt": STORED, "helper": STORED}
        stored = "".join(str(row) for row in second.store.execute("SELECT * FROM agent_definitions"))
        assert KEY not in stored and "tok-0a1b2c3d4e5f6a7b" not in stored and "Bearer" not in stored
    finally:
        await close(second)


async def test_the_current_session_follows_new_and_use(location):
    first = await restarted(location)
    first.define_agent(Agent("gpt"))
    old = first.current_session("gpt")
    fresh = first.new_session("gpt")
    await close(first)
    second = await restarted(location)
    try:
        assert second.current_session_id("gpt") == fresh
        second.use_session(old)
    finally:
        await close(second)
    third = await restarted(location)
    try:
        assert third.current_session_id("gpt") == old
    finally:
        await close(third)


async def test_forget_removes_the_definition_and_a_built_in_falls_back(location):
    first = Server(SessionStore.open(location), agents=[Agent("assistant", model="chaz/echo")], keep_agents=True)
    first.define_agent(Agent("gpt"))
    first.define_agent(Agent("assistant", model="chaz/script", script=["hi"]))  # a user's redefinition
    first.current_session("gpt")
    assert first.roster.origin == {"assistant": HERE, "gpt": HERE}
    await close(first)

    second = Server(SessionStore.open(location), agents=[Agent("assistant", model="chaz/echo")], keep_agents=True)
    try:
        assert second.agents["assistant"].model == "chaz/script"  # the kept one wins over the built-in
        assert "removed from this kernel and the store" in second.forget_agent("gpt")
        assert "built-in definition is back" in second.forget_agent("assistant")
        assert second.agents["assistant"].model == "chaz/echo" and second.roster.origin["assistant"] == BUILT_IN
        assert "gpt" not in second.agents and second.current_session_id("gpt") is None
        with pytest.raises(Exception, match="no agent 'nobody'"):
            second.forget_agent("nobody")
    finally:
        await close(second)
    third = await restarted(location)
    try:
        assert third.agents == {} and third.store.execute("SELECT count(*) FROM agent_sessions")[0][0] == 0
    finally:
        await close(third)


async def test_a_server_that_keeps_nothing_stores_nothing_and_keep_false_is_this_process_only(location):
    plain = await restarted(location, keep=False)
    plain.define_agent(Agent("gpt"))
    plain.current_session("gpt")
    await close(plain)
    keeper = await restarted(location)
    keeper.define_agent(Agent("variant"), keep=False)
    assert keeper.agents_loaded == [] and "gpt" not in keeper.agents
    assert keeper.roster.origin["variant"] == LOCAL
    await close(keeper)
    again = await restarted(location)
    try:
        assert again.agents == {}
    finally:
        await close(again)


async def test_an_unreadable_row_is_skipped_and_said(location):
    first = await restarted(location)
    first.define_agent(Agent("gpt"))
    first.store.execute(
        "UPDATE agent_definitions SET definition = ? WHERE name = 'gpt'",
        [json.dumps({"model": "chaz/echo", "max_iterations": 0})],
    )
    await close(first)
    second = await restarted(location)
    try:
        assert "gpt" not in second.agents
        assert "max_iterations" in second.roster.book.unreadable["gpt"]
    finally:
        await close(second)


async def listening(store: SessionStore, heard: asyncio.Queue[str]) -> None:
    """Until the store's listener hears its channels: a sentinel notice, sent again until it arrives."""
    for _ in range(100):
        store.notify("chaz_agents", "sentinel")
        try:
            while await asyncio.wait_for(heard.get(), 0.2) != "sentinel":
                pass
            return
        except asyncio.TimeoutError:
            continue
    raise AssertionError("the listener never heard its channel")


async def next_change(heard: asyncio.Queue[str]) -> str:
    """The next agent notice (not a sentinel of ``listening``)."""
    while (payload := await asyncio.wait_for(heard.get(), 10)) == "sentinel":
        pass
    return payload


async def test_on_postgresql_the_definitions_are_the_stores_and_other_kernels_hear_of_changes(pg_url):
    a = Server(SessionStore.open(pg_url), keep_agents=True)
    b = Server(SessionStore.open(pg_url), keep_agents=True)
    heard: asyncio.Queue[str] = asyncio.Queue()
    heard_a: asyncio.Queue[str] = asyncio.Queue()
    b.store.on_notice("chaz_agents", heard.put_nowait)  # after b's own book: it has acted by then
    a.store.on_notice("chaz_agents", heard_a.put_nowait)
    try:
        await listening(a.store, heard_a)
        await listening(b.store, heard)
        a.define_agent(gpt())
        await next_change(heard)
        assert b.agents["gpt"].model == "openai/gpt-4o-mini" and b.roster.origin["gpt"] == STORED
        a.define_agent(Agent("gpt", model="chaz/echo"))
        await next_change(heard)
        assert b.agents["gpt"].model == "chaz/echo"
        for _ in range(2):  # a's own two notices
            await next_change(heard_a)
        b.forget_agent("gpt")  # b's own notice is heard too, and ignored by b's book
        await next_change(heard)
        await next_change(heard_a)
        assert "gpt" not in a.agents and "gpt" not in b.agents
        # a process's own keep=False definition is not replaced by the store's
        b.define_agent(Agent("mine", model="chaz/echo", system="b's own"), keep=False)
        a.define_agent(Agent("mine", model="chaz/echo", system="a's"))
        await next_change(heard)
        b.refresh_agents()
        assert b.agents["mine"].system == "b's own" and b.roster.origin["mine"] == LOCAL
        # a notice lost (a listener reconnecting): refresh reads the store
        a.roster.book._tell = lambda name: None
        a.define_agent(Agent("late", model="chaz/echo"))
        assert "late" not in b.agents
        b.refresh_agents()
        assert b.agents["late"].model == "chaz/echo"
    finally:
        await close(a)
        await close(b)


async def test_a_kernels_own_definition_is_not_replaced_by_its_redacted_stored_copy(location):
    """The store keeps a secret-looking string redacted; reading the row back before a turn
    (PostgreSQL) must not swap this kernel's whole definition for that copy (the
    02_approvals notebook's script carries a demo token: its turns changed on PostgreSQL)."""
    server = await restarted(location)
    token = "ghp_demo0000000000000000000000000000000"
    server.define_agent(Agent("ops", model="chaz/script", tools=[], script=[f"token {token}"]))
    server.roster.refresh("ops")
    server.roster.refresh()
    assert server.agents["ops"].script == [f"token {token}"]
    [(text,)] = server.store.execute("SELECT definition FROM agent_definitions WHERE name = 'ops'")
    assert token not in str(text)  # what is stored is redacted
    await close(server)
