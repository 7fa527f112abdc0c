"""MCP tool servers as a server part (chaz_nb/server/mcp.py), with real servers over stdio.

The reference servers ``mcp-server-time`` and ``mcp-server-git`` (from the package registry)
and the small scripts in tests/fakes/ (one that exits at start, one that never answers, one
whose tools fail in each way a server can).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import psutil
import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.store import SessionStore
from chaz_nb.errors import ServerError
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent

from waiting import until

FAKES = Path(__file__).parent / "fakes"
TIME = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def fake(name: str) -> list[str]:
    return [sys.executable, str(FAKES / f"{name}.py")]


@pytest.fixture
async def server(store):
    s = Server(store)
    yield s
    await s.stop()


def children_running(script: str) -> list[psutil.Process]:
    """This process's live descendants whose command line mentions ``script``."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and any(script in part for part in child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


async def ready(server: Server, name: str):
    conn = await server.mcp.wait_settled(name, timeout=60)
    assert conn.state == "ready", conn.reason
    return conn


def scripted(name: str, script: list, **kw) -> Agent:
    return Agent(name, model="chaz/script", script=script, **kw)


async def parked(server: Server):
    await until(lambda: server.pending_approvals(), server.store.subscribe, what="a pending approval")
    return server.pending_approvals()


async def test_adding_returns_at_once_and_the_tools_join_named_server__tool(server):
    conn = server.add_mcp_server("time", command=TIME)
    assert conn.state == "starting" and "time__get_current_time" not in server.tools
    await ready(server, "time")
    assert {"time__get_current_time", "time__convert_time"} <= set(server.tools.names())
    t = server.tools.get("time__get_current_time")
    assert "timezone" in t.parameters["properties"]  # the server's own input schema
    assert (t.approval, t.risk, t.mcp_server) == ("unless_auto_approved", "medium", "time")
    [status] = server.mcp_servers()
    assert status["state"] == "ready" and "time__convert_time" in status["tools"]


async def test_scoped_agent_calls_time_and_an_approved_git_tool(server, repo):
    server.add_mcp_server("time", command=TIME)
    server.add_mcp_server("git", command=[sys.executable, "-m", "mcp_server_git", "--repository", str(repo)])
    await ready(server, "time")
    await ready(server, "git")
    server.define_agent(scripted(
        "ops",
        [{"tool": "time__get_current_time", "args": {"timezone": "UTC"}},
         {"tool": "git__git_status", "args": {"repo_path": str(repo)}},
         "status: {result}"],
        tools=["time__*", "git__git_status"], auto_approve=["time__*"],
    ))
    assert server.agent("ops").tools == ["time__*", "git__git_status"]
    handle = await server.send(server.current_session("ops"), "what's up?")
    [request] = await parked(server)  # the time tool was auto-approved, the git one is not
    assert request["tool_name"] == "git__git_status"
    ok, _ = server.decide(request["request_id"], "approve")
    assert ok
    reply = await handle.wait()
    assert "new.txt" in reply.content  # the untracked file, as the real server reports it
    rows = server.store.execute(
        "SELECT tool, mcp_server, is_error, approval FROM tool_calls ORDER BY started_at"
    )
    assert [r[:3] for r in rows] == [("time__get_current_time", "time", False), ("git__git_status", "git", False)]
    assert rows[1][3] == "approved"


async def test_python_tools_have_no_mcp_server_in_the_audit(store):
    from chaz_nb.engine.tools import tool

    @tool
    def add(a: int, b: int) -> int:
        return a + b

    server = Server(store, [scripted("calc", [{"tool": "add", "args": {"a": 1, "b": 2}}, "{result}"])], [add])
    reply = await (await server.send(server.current_session("calc"), "go")).wait()
    assert reply.content == "3"
    assert store.execute("SELECT tool, mcp_server FROM tool_calls") == [("add", None)]
    await server.stop()


async def test_a_denied_call_never_reaches_the_server(server, tmp_path):
    calls = tmp_path / "calls.txt"
    server.add_mcp_server("flaky", command=fake("mcp_flaky"), env={"FLAKY_CALLS": str(calls)})
    await ready(server, "flaky")
    server.define_agent(scripted("a", [{"tool": "flaky__echo", "args": {"text": "hi"}}, "got: {result}"]))
    handle = await server.send(server.current_session("a"), "go")
    [request] = await parked(server)
    server.decide(request["request_id"], "deny", reason="not today")
    reply = await handle.wait()
    assert "not today" in reply.content
    assert not calls.exists()  # the server never saw the call
    # out of scope is refused before the server too
    out_of_scope = [{"tool": "flaky__echo", "args": {"text": "x"}}, "{result}"]
    server.define_agent(scripted("b", out_of_scope, tools=["flaky__fail"]))
    reply = await (await server.send(server.current_session("b"), "go")).wait()
    assert "unknown tool 'flaky__echo'" in reply.content
    assert not calls.exists()


async def test_error_results_and_binary_content_reach_the_model_as_text(server):
    server.add_mcp_server("flaky", command=fake("mcp_flaky"), approval="never")
    await ready(server, "flaky")
    server.define_agent(scripted("a", [
        {"tool": "flaky__fail", "args": {"why": "the disk is full"}},
        {"tool": "flaky__picture", "args": {}},
        "{result}",
    ]))
    session = server.current_session("a")
    reply = await (await server.send(session, "go")).wait()
    assert "[image image/png, 4 bytes]" in reply.content and "a note" in reply.content
    results = [e for e in server.store.entries(session) if e.entry_type is T.TOOL_RESULT]
    assert results[0].payload["is_error"] and "the disk is full" in results[0].payload["output"]
    assert not results[1].payload["is_error"]


async def test_sensitive_parameters_are_masked_in_the_log_but_sent_to_the_server(server):
    server.add_mcp_server("flaky", command=fake("mcp_flaky"), approval="never", sensitive_params=["text"])
    await ready(server, "flaky")
    server.define_agent(scripted("a", [{"tool": "flaky__echo", "args": {"text": "s3cret"}}, "ok"]))
    session = server.current_session("a")
    await (await server.send(session, "go")).wait()
    [call] = [e for e in server.store.entries(session) if e.entry_type is T.TOOL_CALL]
    assert "s3cret" not in call.content and call.payload["arguments"]["text"] != "s3cret"
    assert call.payload["mcp_server"] == "flaky"


async def test_a_server_that_exits_at_start_is_failed_with_its_stderr(server):
    server.add_mcp_server("broken", command=fake("mcp_exit_at_start"))
    conn = await server.mcp.wait_settled("broken", timeout=60)
    assert conn.state == "failed"
    assert "exited" in conn.reason and "cannot open the widget database" in conn.reason
    assert not [n for n in server.tools.names() if n.startswith("broken__")]
    await assert_session_goes_on(server)


async def test_a_server_that_hangs_at_start_fails_at_its_start_timeout(server):
    server.add_mcp_server("slow", command=fake("mcp_hang_at_start"), start_timeout=1)
    conn = await server.mcp.wait_settled("slow", timeout=60)
    assert conn.state == "failed" and "did not start within 1 s" in conn.reason
    assert "starting up, slowly" in conn.reason  # its stderr tail
    assert not children_running("mcp_hang_at_start")  # closed when it failed, not left hanging
    await assert_session_goes_on(server)


async def test_a_server_that_dies_mid_call_is_a_tool_error_then_failed(server):
    server.add_mcp_server("flaky", command=fake("mcp_flaky"), approval="never")
    await ready(server, "flaky")
    server.define_agent(scripted("a", [{"tool": "flaky__die", "args": {}}, "after: {result}"]))
    session = server.current_session("a")
    reply = await (await server.send(session, "go")).wait()
    assert "MCP server flaky failed during die" in reply.content
    [result] = [e for e in server.store.entries(session) if e.entry_type is T.TOOL_RESULT]
    assert result.payload["is_error"]
    [status] = server.mcp_servers()
    assert status["state"] == "failed" and "dying on purpose" in status["reason"]
    assert "flaky__echo" not in server.tools
    await assert_session_goes_on(server)


async def assert_session_goes_on(server: Server) -> None:
    """An ordinary run still works on the same server (after a failure)."""
    server.define_agent(scripted("after", ["still here"]))
    reply = await (await server.send(server.current_session("after"), "hi")).wait()
    assert reply.content == "still here"


async def test_remove_and_stop_end_the_server_processes(store):
    server = Server(store)
    server.add_mcp_server("time", command=TIME)
    server.add_mcp_server("flaky", command=fake("mcp_flaky"))
    await ready(server, "time")
    await ready(server, "flaky")
    assert children_running("mcp_server_time") and children_running("mcp_flaky")
    await server.remove_mcp_server("time")
    assert "time__get_current_time" not in server.tools
    assert not children_running("mcp_server_time")
    assert [s["name"] for s in server.mcp_servers()] == ["flaky"]
    await server.stop()
    assert not children_running("mcp_flaky")
    assert server.mcp_servers() == []


async def test_bad_configuration_is_one_clear_error(server):
    with pytest.raises(ServerError, match="either command"):
        server.add_mcp_server("x")
    with pytest.raises(ServerError, match="NAME__TOOL"):
        server.add_mcp_server("a__b", command=TIME)
    with pytest.raises(ServerError, match="approval must be one of"):
        server.add_mcp_server("t", command=TIME, approval="sometimes")
    with pytest.raises(ServerError, match="list of words"):
        server.add_mcp_server("t", command="python -m mcp_server_time")
    with pytest.raises(ServerError, match="no MCP server named 'nope'"):
        server.mcp.remove("nope")
    assert server.mcp_servers() == []


def test_migration_adds_the_mcp_server_column(tmp_path):
    store = SessionStore(str(tmp_path / "s.duckdb"))
    columns = [r[0] for r in store.execute("DESCRIBE tool_calls")]
    store.close()
    assert "mcp_server" in columns


class OfferedTools:
    """A model that records the tools offered at each step and follows a fixed plan of calls."""

    def __init__(self, plan: list[tuple[str, dict] | str]) -> None:
        self.plan = list(plan)
        self.offered: list[list[str]] = []

    async def complete(self, model, messages, tools=None, *, script=None, options=None):
        from chaz_nb.engine.backends import ModelReply, ToolCallRequest

        self.offered.append(sorted(t["function"]["name"] for t in tools or []))
        step = self.plan.pop(0)
        if isinstance(step, str):
            return ModelReply(step)
        name, args = step
        return ModelReply("", [ToolCallRequest(f"c{len(self.offered)}", name, json.dumps(args))])


async def test_a_server_ready_during_a_run_is_offered_from_its_next_step(store):
    """Scopes are rules over the live registry: ``late__*`` admits late__echo once it exists."""
    from chaz_nb.engine.tools import tool

    entered, gate = asyncio.Event(), asyncio.Event()

    @tool
    async def hold() -> str:
        """Wait for the test."""
        entered.set()
        await gate.wait()
        return "held"

    model = OfferedTools([("hold", {}), ("late__echo", {"text": "hi late"}), "done"])
    server = Server(store, [Agent("a", model="any/model", tools=["late__*", "hold"])], [hold], backend=model)
    try:
        handle = await server.send(server.current_session("a"), "go")
        await entered.wait()  # the run is in its first step's tool call
        server.add_mcp_server("late", command=fake("mcp_flaky"), approval="never")
        await ready(server, "late")
        gate.set()
        reply = await handle.wait()
        assert reply.content == "done"
        assert "late__echo" not in model.offered[0] and "late__echo" in model.offered[1]
        assert "hold" in model.offered[1]
        [_, result] = [e for e in store.entries(handle.session_id) if e.entry_type is T.TOOL_RESULT]
        assert result.payload["output"] == "hi late" and not result.payload["is_error"]
    finally:
        await server.stop()


TOKEN = "tok-8c1f2e9d7a"  # the mcp_http fixture's (tests/conftest.py)


async def test_streamable_http_server_with_a_bearer_header_and_the_value_never_shown(mcp_http, server):
    server.add_mcp_server("docs", url=mcp_http.url, headers={"Authorization": f"Bearer {TOKEN}"}, approval="never")
    await ready(server, "docs")
    assert {"docs__echo", "docs__fail"} <= set(server.tools.names())
    [status] = server.mcp_servers()
    assert status["headers"] == {"Authorization": "[REDACTED]"} and TOKEN not in json.dumps(status)
    assert TOKEN not in repr(server.mcp.get("docs"))
    server.define_agent(scripted("a", [
        {"tool": "docs__echo", "args": {"text": "over http"}},
        {"tool": "docs__whoami", "args": {}},
        {"tool": "docs__fail", "args": {"why": "no such page"}},
        "{result}",
    ], tools=["docs__*"]))
    session = server.current_session("a")
    await (await server.send(session, "go")).wait()
    results = [e for e in server.store.entries(session) if e.entry_type is T.TOOL_RESULT]
    assert results[0].payload["output"] == "over http" and not results[0].payload["is_error"]
    assert results[1].payload["output"] == "you sent [REDACTED]"  # the server's echo of the header, masked
    assert results[2].payload["is_error"] and "no such page" in results[2].payload["output"]
    assert TOKEN not in json.dumps([e.payload for e in server.store.entries(session)]) + "".join(
        e.content for e in server.store.entries(session))


async def test_streamable_http_server_refusing_the_credential_is_failed_without_showing_it(mcp_http, server):
    server.add_mcp_server("docs", url=mcp_http.url, headers={"Authorization": "Bearer wrong-value-123"},
                          start_timeout=20)
    conn = await server.mcp.wait_settled("docs", timeout=60)
    assert conn.state == "failed" and "401" in conn.reason, conn.reason
    assert "wrong-value-123" not in json.dumps(server.mcp_servers())
    assert not [n for n in server.tools.names() if n.startswith("docs__")]


def test_what_is_masked_of_a_url_server():
    from chaz_nb.server.mcp import McpServer

    conn = McpServer("docs", url="http://127.0.0.1:1/mcp?api_key=q1w2e3r4t5y6",
                     headers={"Authorization": "Bearer abcd1234", "X-Team-Token": "t0k3n-xyz", "Accept": "text/plain"},
                     env={"GITHUB_TOKEN": "ghx-1234", "TZ": "UTC"})
    assert conn.mask("Bearer abcd1234 / abcd1234 / t0k3n-xyz / ghx-1234 / text/plain / UTC") == (
        "[REDACTED] / [REDACTED] / [REDACTED] / [REDACTED] / text/plain / UTC")
    assert "q1w2e3r4t5y6" not in conn.target
    assert conn.status()["headers"] == dict.fromkeys(("Authorization", "X-Team-Token", "Accept"), "[REDACTED]")


async def test_headers_are_for_url_servers(server):
    with pytest.raises(ServerError, match="headers are for a url"):
        server.add_mcp_server("t", command=TIME, headers={"Authorization": "x"})


async def test_a_run_naming_a_failed_server_is_told_and_goes_on_with_its_other_tools(server):
    from chaz_nb.engine.tools import tool

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    server.tools.register(add)
    server.add_mcp_server("broken", command=fake("mcp_exit_at_start"))
    assert (await server.mcp.wait_settled("broken", timeout=60)).state == "failed"
    server.define_agent(scripted("a", [{"tool": "add", "args": {"a": 2, "b": 3}}, "sum {result}"],
                                 tools=["broken__*", "add"]))
    server.define_agent(scripted("other", ["fine"], tools=["add"]))  # names no broken server: no note
    session = server.current_session("a")
    reply = await (await server.send(session, "go")).wait()
    assert reply.content == "sum 5"
    [note] = [e for e in server.store.entries(session) if e.entry_type is T.ERROR]
    assert note.content.startswith("MCP server broken failed: exited")
    assert "cannot open the widget database" in note.content and note.payload["mcp_server"] == "broken"
    other = server.current_session("other")
    await (await server.send(other, "go")).wait()
    assert not [e for e in server.store.entries(other) if e.entry_type is T.ERROR]


async def test_a_call_over_the_server_timeout_is_a_tool_error_and_keys_in_results_are_redacted(server):
    server.add_mcp_server("flaky", command=fake("mcp_flaky"), approval="never", timeout=1)
    await ready(server, "flaky")
    key = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2"
    server.define_agent(scripted("a", [
        {"tool": "flaky__stall", "args": {}},
        {"tool": "flaky__echo", "args": {"text": f"the key is {key}"}},
        "{result}",
    ]))
    session = server.current_session("a")
    await (await server.send(session, "go")).wait()
    stalled, echoed = [e for e in server.store.entries(session) if e.entry_type is T.TOOL_RESULT]
    assert stalled.payload["is_error"] and "timed out after 1 s" in stalled.payload["output"]
    assert not echoed.payload["is_error"] and echoed.payload["output"] == "the key is [REDACTED]"
    assert server.mcp.get("flaky").state == "ready"  # a slow call does not fail the server


async def test_a_server_still_starting_holds_up_nothing(server):
    """The start runs in its own task: runs go on, and removing it ends the process."""
    conn = server.add_mcp_server("slow", command=fake("mcp_hang_at_start"), start_timeout=120)
    await assert_session_goes_on(server)  # a whole run on the loop while it is starting
    assert conn.state == "starting" and not conn.settled.is_set()
    await server.remove_mcp_server("slow")
    assert conn.state == "stopped" and not children_running("mcp_hang_at_start")


async def test_a_server_name_ending_in_underscore_is_refused_so_no_server_takes_anothers_tool_names(server):
    """``time_``'s tool ``x`` would be ``time___x``: what ``time__*`` (an agent's scope, an
    auto-approve pattern) names, and the same registry name as ``time``'s tool ``_x``, which
    it would replace. With no name ending in ``_`` (and none holding ``__``), ``NAME__`` is one
    server's prefix only."""
    from fnmatch import fnmatchcase

    from chaz_nb.engine.mcp_tools import check_server_name, registry_name

    assert registry_name("time_", "x") == registry_name("time", "_x")  # what the rule prevents
    assert fnmatchcase(registry_name("time_", "x"), "time__*")
    for name in ("time_", "a-_", "_"):
        with pytest.raises(ValueError, match="NAME__TOOL"):
            check_server_name(name)
        with pytest.raises(ServerError, match="NAME__TOOL"):
            server.add_mcp_server(name, command=TIME)
    assert check_server_name("my_time") == "my_time" and check_server_name("_t") == "_t"
    assert server.mcp_servers() == []


def test_credentials_in_a_url_servers_url_are_masked_in_its_target_and_text():
    """Hosted MCP servers often take their key in the URL (``?token=``, ``?key=``, a password
    in ``user:pw@``): ``%chaz mcp list``, the cell's "starting (URL)" line and a failure reason
    show the URL, so those values are masked like a credential header's."""
    from chaz_nb.server.mcp import McpServer

    conn = McpServer("docs", url="https://bob:pa55w0rd-x@mcp.example.invalid/mcp?token=tok-9f8e7d"
                                 "&access_token=acc%2Fess77&key=AIzaKey123&tz=Europe%2FParis")
    target = conn.target
    for secret in ("pa55w0rd-x", "tok-9f8e7d", "acc%2Fess77", "AIzaKey123"):
        assert secret not in target, target
    assert "bob" in target and "tz=Europe%2FParis" in target  # the rest says which server it is
    assert conn.mask("failed: 401 for tok-9f8e7d and acc/ess77") == "failed: 401 for [REDACTED] and [REDACTED]"
    assert conn.status()["target"] == target


@pytest.mark.parametrize("option", ["env", "headers", "tool_approval"])
@pytest.mark.parametrize("value", ["Bearer s3cr3t-v4lue", ["Bearer s3cr3t-v4lue"], {"Authorization": ["s3cr3t-v4lue"]}])
async def test_a_table_option_of_the_wrong_shape_is_one_error_that_never_echoes_the_value(server, option, value):
    """``%%chaz mcp``'s TOML may give ``headers = "Bearer ..."``: a ServerError (the magic's one
    line), not an AttributeError traceback; the value may be a credential, so it is not quoted."""
    with pytest.raises(ServerError, match=f"{option} is a table") as caught:
        server.add_mcp_server("docs", url="http://127.0.0.1:1/mcp", **{option: value})
    assert "s3cr3t" not in str(caught.value)
    assert server.mcp_servers() == []


async def test_a_server_never_replaces_a_tool_it_does_not_own(store):
    """A Python tool whose name a server's tool would take (``flaky__echo``) stays the one
    agents call: the server's tool is left out (a warning says so), and removing the server
    leaves the Python tool registered."""
    from chaz_nb.engine.tools import ToolRegistry, tool

    @tool(name="flaky__echo", approval="always")
    def local_echo(text: str) -> str:
        """The notebook's own echo (needs approval)."""
        return text

    s = Server(store, tools=ToolRegistry([local_echo]))
    try:
        s.add_mcp_server("flaky", command=fake("mcp_flaky"), approval="never")
        conn = await ready(s, "flaky")
        mine = s.tools.get("flaky__echo")
        assert mine.mcp_server is None and mine.approval == "always"
        assert "flaky__echo" not in conn.tools and "flaky__fail" in conn.tools
        await s.remove_mcp_server("flaky")
        assert s.tools.get("flaky__echo") is mine and "flaky__fail" not in s.tools
    finally:
        await s.stop()


async def test_any_failure_of_a_call_is_a_tool_error_with_the_servers_credentials_masked(server):
    """Not only a JSON-RPC error: whatever the client raises during a call (an HTTP error that
    quotes the URL, say) becomes the ToolResult the log keeps, so it is masked the same way."""
    from chaz_nb.errors import ToolError
    from chaz_nb.server.mcp import McpServer

    class Broken:
        async def call_tool(self, *args, **kwargs):
            raise RuntimeError("Client error '502 Bad Gateway' for url "
                               "'https://mcp.example.invalid/mcp?token=tok-9f8e7d' (X-Team-Token: t0k3n-xyz)")

    conn = McpServer("docs", url="https://mcp.example.invalid/mcp?token=tok-9f8e7d",
                     headers={"X-Team-Token": "t0k3n-xyz"})
    conn.state, conn.session = "ready", Broken()
    with pytest.raises(ToolError) as caught:
        await server.mcp._call(conn, "search", {})
    message = str(caught.value)
    assert "tok-9f8e7d" not in message and "t0k3n-xyz" not in message
    assert message.startswith("docs search: RuntimeError: Client error '502 Bad Gateway'")


def test_the_repr_of_a_server_shows_its_target_masked():
    """``server.add_mcp_server(...)`` as a cell's last line puts the repr in the notebook: the
    URL's credentials (and a command's ``--api-key=``) are masked there as in ``%chaz mcp list``."""
    from chaz_nb.server.mcp import McpServer

    conn = McpServer("docs", url="https://bob:pw12345x@mcp.example.invalid/mcp?token=tok-9f8e7d",
                     headers={"Authorization": "Bearer abcdefgh1234"})
    text = repr(conn)
    assert "pw12345x" not in text and "tok-9f8e7d" not in text and "abcdefgh1234" not in text
    assert text.startswith("McpServer(name='docs', state='starting', target='https://bob:[REDACTED]@")
    proc = McpServer("gh", command=["gh-mcp", "--api-key=q1w2e3r4t5y6u7"], env={"GITHUB_TOKEN": "ghx-12345678"})
    assert "q1w2e3r4t5y6u7" not in repr(proc) and "ghx-12345678" not in repr(proc)


def test_only_credential_flags_of_a_command_are_masked():
    from chaz_nb.server.mcp import McpServer

    conn = McpServer("gh", command=["gh-mcp", "--token", "tok-abcdef", "--author", "bob-the-dev",
                                    "--repository", "/srv/repo", "--client-secret=s3cr3t-42"])
    assert conn.target == ("gh-mcp --token [REDACTED] --author bob-the-dev --repository /srv/repo "
                           "--client-secret=[REDACTED]")
    assert conn.mask("bob-the-dev /srv/repo tok-abcdef") == "bob-the-dev /srv/repo [REDACTED]"


STDERR_KEY = "plain-looking-value-0123456789abcdef"


async def test_a_key_that_the_stderr_tail_cuts_in_two_is_masked_whole(server, tmp_path):
    from chaz_nb.server.mcp_stderr import STDERR_TAIL

    script = tmp_path / "leaky.py"
    # the key ends 20 characters inside the kept tail: its first characters fall before the cut
    script.write_text(
        "import os, sys\n"
        "sys.stderr.write('boot ' + os.environ['SERVICE_API_KEY'] + ' ' + 'e' * "
        f"{STDERR_TAIL - 20 - 1} + '\\n')\n"
        "sys.exit(4)\n"
    )
    server.add_mcp_server("leaky", command=[sys.executable, str(script)], env={"SERVICE_API_KEY": STDERR_KEY})
    conn = await server.mcp.wait_settled("leaky", timeout=60)
    assert conn.state == "failed" and "eeee" in conn.reason
    shown = [conn.reason, json.dumps(server.mcp_servers())]
    assert not any(STDERR_KEY[i:i + 8] in text for text in shown for i in range(len(STDERR_KEY) - 7)), conn.reason


async def test_a_server_that_floods_stderr_keeps_a_bounded_tail(server, tmp_path):
    from chaz_nb.server.mcp_stderr import STDERR_KEEP

    script = tmp_path / "flood.py"
    script.write_text(
        "import sys\n"
        "for i in range(20_000):\n"
        "    sys.stderr.write(f'line {i} ' + 'n' * 1000 + '\\n')\n"  # 20 MB
        "sys.stderr.write('the last words\\n')\n"
        "sys.exit(5)\n"
    )
    server.add_mcp_server("flood", command=[sys.executable, str(script)])
    conn = await server.mcp.wait_settled("flood", timeout=60)
    assert conn.state == "failed" and conn.reason.endswith("the last words")
    assert conn.errlog.size() <= STDERR_KEEP and conn.errlog.dropped > 19_000_000
