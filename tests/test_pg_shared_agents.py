"""A shared store is not one person (issue 41 §6): two kernels (two Servers) on one PostgreSQL.

Kernel B redefines a kept agent of kernel A. A's runs of it keep A's tools and auto-approve
list (a wider list, a glob such as ``kernel__*`` or ``*``, ``tools = None``) and send A's key
only to the ``api_base`` A set (B's scheme, host, port, userinfo or ``base_url`` option get
nothing); the session says so in one line, ``%chaz agent NAME --accept`` takes the change.
"""

from __future__ import annotations

import asyncio

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.store import SessionStore
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server.agents import Agent
from chaz_nb.server.facade import Server

from fakes.openai_server import FakeModelServer, Reply

ran: list[str] = []
A_KEY = "sk-kernelA-0123456789abcdefghij"


@pytest.fixture(autouse=True)
def clear_ran():
    ran.clear()


@tool(approval="unless_auto_approved", risk="high")
def danger() -> str:
    """Dangerous."""
    ran.append("danger")
    return "done the dangerous thing"


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@pytest.fixture
async def two(pg_url):
    """Kernels A and B: two Servers that keep agents, on one PostgreSQL database."""
    servers = [Server(SessionStore.open(pg_url), [], ToolRegistry([danger, add]), keep_agents=True,
                      approval_timeout=0.5) for _ in range(2)]
    yield servers
    for server in servers:
        await server.stop()
        server.store.close()


def scripted(name, *steps, **kw):
    return Agent(name, model="chaz/script", script=list(steps), **kw)


DANGER = {"tool": "danger", "args": {}}


def notes(store, sid):
    return [e.content for e in store.entries(sid) if e.entry_type is T.ERROR and e.payload.get("note") == "agent_held"]


@pytest.mark.parametrize("tools,auto", [
    (["add", "danger"], ["danger"]),  # a tool named, and auto-approved
    (["*"], ["*"]),  # globs
    (None, ["d*"]),  # every tool
    (["add", "d?nger"], ["danger"]),
])
async def test_another_kernels_wider_tools_and_auto_approve_do_not_run_here(two, tools, auto):
    a, b = two
    a.define_agent(scripted("gpt", DANGER, "{result}", tools=["add"]))
    b.define_agent(scripted("gpt", DANGER, "{result}", tools=tools, auto_approve=auto))
    a.refresh_agents("gpt")  # what a turn from a cell reads first (a notice does the same)
    sid = a.new_session("gpt")
    await (await a.send(sid, "go")).wait()
    assert ran == []  # before the fix: A ran B's definition, danger auto-approved, in A's namespace
    (result,) = [e for e in a.store.entries(sid) if e.entry_type is T.TOOL_RESULT]
    assert result.content.startswith("danger: unknown tool 'danger'")
    (line,) = notes(a.store, sid)
    assert line.startswith("agent gpt was changed by another kernel; its runs here keep this kernel's tools")
    assert line.endswith("(%chaz agent gpt --accept takes the change)")
    # a second run says nothing more; --accept takes the change
    await (await a.send(sid, "again")).wait()
    assert len(notes(a.store, sid)) == 1
    a.accept_agent("gpt")
    await (await a.send(sid, "accepted")).wait()
    assert ran == ["danger"]


async def test_auto_approve_added_by_another_kernel_still_asks_here(two):
    a, b = two
    a.define_agent(scripted("gpt", DANGER, "{result}", tools=["danger"]))
    b.define_agent(scripted("gpt", DANGER, "{result}", tools=["danger"], auto_approve=["danger"]))
    a.refresh_agents("gpt")
    sid = a.new_session("gpt")
    await (await a.send(sid, "go")).wait()
    assert ran == []
    assert any(e.entry_type is T.APPROVAL_REQUEST for e in a.store.entries(sid))  # asked (and timed out)
    assert "auto-approve list" in notes(a.store, sid)[0]


async def test_a_change_heard_by_notice_is_held_the_same_way(two):
    a, b = two
    heard: asyncio.Queue[str] = asyncio.Queue()
    a.store.on_notice("chaz_agents", heard.put_nowait)
    a.define_agent(scripted("gpt", DANGER, "{result}", tools=["add"]))
    for _ in range(100):  # until A's listener hears the channel (a notice of its own)
        a.store.notify("chaz_agents", "sentinel")
        try:
            while await asyncio.wait_for(heard.get(), 0.2) != "sentinel":
                pass
            break
        except asyncio.TimeoutError:
            continue
    b.define_agent(scripted("gpt", DANGER, "{result}", tools=["kernel__*", "danger"], auto_approve=["*"]))
    while (await asyncio.wait_for(heard.get(), 10)) == "sentinel":
        pass
    assert "gpt" in a.held_agents()
    sid = a.new_session("gpt")
    await (await a.send(sid, "go")).wait()
    assert ran == [] and len(notes(a.store, sid)) == 1


async def test_an_agent_first_defined_by_another_kernel_runs_here_with_no_tools(two):
    a, b = two
    b.define_agent(scripted("helper", DANGER, "{result}", tools=["*"], auto_approve=["*"]))
    a.refresh_agents()
    sid = a.new_session("helper")
    await (await a.send(sid, "go")).wait()
    assert ran == []
    assert notes(a.store, sid)[0].startswith("agent helper was defined by another kernel; here it runs with no tools")


async def test_spawned_children_and_room_turns_of_a_held_agent_are_held_too(two):
    a, b = two
    a.define_agent(scripted("boss", {"tool": "spawn_agent", "args": {"agent": "gpt", "task": "go"}}, "{result}",
                            tools=["spawn_agent", "danger"], auto_approve=["danger"]))
    a.define_agent(scripted("gpt", DANGER, "{result}", tools=["add"]))
    b.define_agent(scripted("gpt", DANGER, "{result}", tools=["*"], auto_approve=["*"]))
    a.refresh_agents("gpt")
    await (await a.send(a.current_session("boss"), "go")).wait()
    await a.wait_idle(30)
    room = a.create_room("lab", ["gpt"])
    await a.rooms.say(room, "@gpt go").wait()
    await a.wait_idle(30)
    assert ran == []


@pytest.mark.parametrize("change", ["port", "host", "userinfo", "base_url", "scheme"])
async def test_this_kernels_key_goes_only_to_the_api_base_it_set(two, change, monkeypatch):
    a, b = two
    monkeypatch.setenv("OPENAI_API_KEY", A_KEY)
    mine, theirs = FakeModelServer(), FakeModelServer()
    try:
        mine.script(*[Reply("from A's server")] * 3)
        theirs.script(*[Reply("from B's server")] * 3)
        port = theirs.port
        b_options: dict = {}
        b_base = {
            "port": f"http://127.0.0.1:{port}/v1",
            "host": f"http://localhost:{port}/v1",
            "userinfo": f"http://b:secret@127.0.0.1:{port}/v1",
            "base_url": None,
            "scheme": f"https://127.0.0.1:{port}/v1",
        }[change]
        if change == "base_url":
            b_options = {"base_url": f"http://127.0.0.1:{port}/v1"}
        a.define_agent(Agent("gpt", model="openai/gpt-4o-mini", api_base=mine.openai_base, tools=[], max_retries=0))
        b.define_agent(Agent("gpt", model="openai/gpt-4o-mini", api_base=b_base, tools=[], max_retries=0,
                             model_options=b_options))
        a.refresh_agents("gpt")
        sid = a.new_session("gpt")
        reply = await (await a.send(sid, "hello")).wait()
        assert theirs.chat_requests() == []  # before the fix: A's key, in A's request, at B's server
        assert reply.content == "from A's server"
        assert mine.chat_requests()[-1].headers["authorization"] == f"Bearer {A_KEY}"
        assert "api_base" in notes(a.store, sid)[0]
    finally:
        mine.close()
        theirs.close()


async def test_a_change_that_widens_nothing_runs_as_stored_and_says_nothing(two):
    a, b = two
    a.define_agent(scripted("gpt", "first", tools=["add", "danger"], auto_approve=["danger"]))
    b.define_agent(scripted("gpt", "second", tools=["add"], auto_approve=[]))  # narrower, a new prompt
    a.refresh_agents("gpt")
    assert a.held_agents() == {}
    sid = a.new_session("gpt")
    reply = await (await a.send(sid, "go")).wait()
    assert reply.content == "second" and notes(a.store, sid) == []


def test_accept_in_the_notebook_and_the_agents_table_say_it_in_one_line(pg_url, monkeypatch, capsys):
    """``%chaz agents`` names a held agent; ``%chaz agent gpt --accept`` takes the change."""
    import chaz_nb
    from ipython_harness import ip, one_line_error

    monkeypatch.setenv("CHAZ_DB", pg_url)
    monkeypatch.delenv("CHAZ_MODEL", raising=False)
    ip.run_line_magic("load_ext", "chaz_nb")
    try:
        ip.run_line_magic("chaz", "agent gpt --model chaz/echo")
        other = Server(SessionStore.open(pg_url), keep_agents=True)
        try:
            other.define_agent(Agent("gpt", model="chaz/echo", tools=["*"], auto_approve=["kernel__run"]))
        finally:
            other.store.close()
        capsys.readouterr()
        ip.run_line_magic("chaz", "agents")
        out = capsys.readouterr().out
        assert ("agent gpt was changed by another kernel; its runs here keep this kernel's tools, auto-approve "
                "list (%chaz agent gpt --accept takes the change)") in out.splitlines()
        ip.run_line_magic("chaz", "agent gpt --accept")
        line = capsys.readouterr().out.strip()
        assert line.startswith("agent gpt (accepted): chaz/echo, every registered tool") and "\n" not in line
        assert chaz_nb.current().agents["gpt"].auto_approve == ["kernel__run"]
        assert one_line_error(capsys, "%chaz agent gpt --accept", "--accept") == (
            "UsageError: %chaz agent gpt --accept: 'gpt' runs here as defined; no other kernel's change of it "
            "is held here (%chaz agents lists the ones that are)")
    finally:
        ip.run_line_magic("unload_ext", "chaz_nb")


@pytest.mark.parametrize("change", ["provider", "output"])
async def test_another_kernel_cannot_move_this_kernels_data_to_another_provider(two, change, monkeypatch):
    """A keeps a local model with the full data policy; B changes only the model to a cloud
    provider's, or only raises the tool output bound: A's runs keep A's (finding 9)."""
    a, b = two
    monkeypatch.setenv("OPENAI_API_KEY", A_KEY)
    mine, theirs = FakeModelServer(), FakeModelServer()
    try:
        mine.script(*[Reply("from the local model")] * 3)
        theirs.script(*[Reply("from the cloud")] * 3)
        a.define_agent(Agent("local", model="ollama_chat/llama3", api_base=mine.ollama_base, tools=[],
                             data="full", max_tool_output=4000, max_retries=0))
        stored = {"provider": {"model": "openai/gpt-4o", "api_base": theirs.openai_base, "max_tool_output": 4000},
                  "output": {"model": "ollama_chat/llama3", "api_base": mine.ollama_base,
                             "max_tool_output": 10_000_000}}[change]
        b.define_agent(Agent("local", tools=[], data="full", max_retries=0, **stored))
        a.refresh_agents("local")
        (line,) = a.held_agents().values()  # before the fix: nothing held, A's data went to B's choice
        assert line.endswith("(%chaz agent local --accept takes the change)")
        assert ("model provider" if change == "provider" else "tool output bound") in line
        runs = a.agents["local"]
        assert (runs.model, runs.max_tool_output) == ("ollama_chat/llama3", 4000)
        sid = a.new_session("local")
        reply = await (await a.send(sid, "hello")).wait()
        assert reply.content == "from the local model" and theirs.chat_requests() == []
        assert mine.chat_requests()[-1].model == "llama3"
        assert notes(a.store, sid) == [line]
    finally:
        mine.close()
        theirs.close()


@pytest.mark.parametrize("change", [{"egress": "allow"}, {"egress_hosts": ["127.0.0.1", "models.example.org"]}])
async def test_another_kernel_cannot_widen_where_this_kernels_data_may_go(two, change):
    """The egress rule (issue 44 §2): B setting ``allow`` or adding a host to A's kept agent is
    held to A's rule and hosts, with the one line."""
    a, b = two
    a.define_agent(scripted("gpt", "first", egress="ask", egress_hosts=["127.0.0.1"]))
    b.define_agent(scripted("gpt", "second", **change))
    a.refresh_agents("gpt")
    held = a.held_agents()
    assert "egress rule" in held["gpt"]
    runs = a.agents["gpt"]
    assert (runs.egress, runs.egress_hosts) == ("ask", ["127.0.0.1"])
