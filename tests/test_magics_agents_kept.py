"""Agents kept with the sessions, through IPython's test shell (issue 26 §3 and §4): an agent
defined with ``%chaz agent``, ``%%chaz agent`` or ``define_agent`` is back after the extension
loads again on the same database, with its current session; ``%chaz agents`` says where each
comes from and which tools are not defined yet; ``--forget``; the safe default tools."""

from __future__ import annotations

import json

import pytest

import chaz_nb
from chaz_nb.core.entries import EntryType

from ipython_harness import ip, one_line_error

TOOLS = '''
import chaz_nb

@chaz_nb.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
'''

KEY = "sk-proj-4c3b2a1f0e9d8c7b6a59"


@pytest.fixture
def kept(monkeypatch, tmp_path):
    """``%load_ext chaz_nb`` on a database file; ``restart()`` loads it again as a new kernel would."""
    monkeypatch.setenv("CHAZ_DB", str(tmp_path / "sessions.duckdb"))
    monkeypatch.delenv("CHAZ_MODEL", raising=False)
    ip.run_line_magic("load_ext", "chaz_nb")

    def restart() -> chaz_nb.Server:
        ip.run_line_magic("unload_ext", "chaz_nb")
        for name in ("add", "chaz_nb"):  # a new kernel has none of the notebook's objects
            ip.user_ns.pop(name, None)
        ip.run_line_magic("load_ext", "chaz_nb")
        return chaz_nb.current()

    yield restart
    ip.user_ns.pop("add", None)
    if chaz_nb.notebook.extension._state is not None:
        ip.run_line_magic("unload_ext", "chaz_nb")


def agents_table(capsys) -> dict[str, list[str]]:
    capsys.readouterr()
    ip.run_line_magic("chaz", "agents")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:6] == ["agent", "model", "tools", "session", "from", "tools"]
    return {line.split()[0]: line for line in lines[1:] if line and not line.startswith("a tool")}


def test_agents_defined_three_ways_are_back_after_a_restart_with_their_sessions(kept, capsys):
    ip.run_cell(TOOLS).raise_error()
    ip.run_line_magic("chaz", "agent gpt --model chaz/echo --tools add,kernel__* --system 'Be brief.'")
    ip.run_cell_magic("chaz", "agent analyst", 'model = "chaz/echo"\nsystem = "You analyse."\ndata = "schema"\n')
    ip.run_cell("chaz_nb.current().define_agent(chaz_nb.Agent('coder', model='chaz/echo', tools=[]))").raise_error()
    ip.run_line_magic("chaz", "@gpt hello")
    server = chaz_nb.current()
    sid = server.current_session_id("gpt")
    capsys.readouterr()

    server = kept()
    out = capsys.readouterr().out
    assert "agents kept here: @analyst, @coder, @gpt (%chaz agents)" in out
    assert server.agents["analyst"].data == "schema" and server.agents["gpt"].system == "Be brief."
    rows = agents_table(capsys)
    assert rows["gpt"].split() == ["gpt", "chaz/echo", "add,kernel__*", str(sid), "stored", "add"]
    assert rows["assistant"].split()[-2:] == ["built-in", "-"]
    assert "add" not in server.tools  # the tool's code is not kept: the notebook defines it again

    ip.run_cell(TOOLS).raise_error()  # the cell that defines it: the agent has it again
    assert "add" in server.tools
    assert agents_table(capsys)["gpt"].split()[-1] == "-"
    ip.run_line_magic("chaz", "@gpt hello again")
    assert server.current_session_id("gpt") == sid  # goes on where it was
    texts = [e.content for e in server.store.entries(sid, types=[EntryType.MESSAGE]) if e.sender == "user"]
    assert texts == ["hello", "hello again"]
    ip.run_line_magic("chaz", "agent gpt --model chaz/echo --tools add")  # redefined here
    assert agents_table(capsys)["gpt"].split()[4:6] == ["this", "kernel"]


def test_a_service_account_and_a_password_in_api_base_are_not_stored_and_the_line_says_how(kept, capsys):
    pem = "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEF\\n-----END PRIVATE KEY-----\\n"
    capsys.readouterr()
    ip.run_cell_magic("chaz", "agent gem", (
        'model = "vertex_ai/gemini-pro"\napi_base = "https://bob:pw-5f4e3d2c1b@models.example/v1"\n'
        f'[model_options]\nvertex_credentials = \'{{"type": "service_account", "private_key": "{pem}"}}\'\n'))
    out = capsys.readouterr().out
    (line,) = out.splitlines()
    assert line.endswith("(not stored: vertex_credentials (a private key), api_base (a user:password in a URL); "
                         "keys come from the environment: set VERTEXAI_CREDENTIALS (or "
                         "GOOGLE_APPLICATION_CREDENTIALS, a file's path), the provider's key variable "
                         "(e.g. OPENAI_API_KEY))")
    server = chaz_nb.current()
    stored = server.store.execute("SELECT definition FROM agent_definitions WHERE name = 'gem'")[0][0]
    assert "MIIEvQ" not in stored and "pw-5f4e3d2c1b" not in stored
    ip.run_cell("server_agents = repr(chaz_nb.current().agents['gem'])").raise_error()
    shown = ip.user_ns.pop("server_agents")
    assert "MIIEvQ" not in shown and "pw-5f4e3d2c1b" not in shown
    server = kept()
    assert server.agents["gem"].api_base == "https://models.example/v1" and server.agents["gem"].model_options == {}


def test_a_key_in_the_definition_is_not_stored_and_the_line_says_so(kept, capsys):
    capsys.readouterr()
    ip.run_cell_magic(
        "chaz", "agent gpt", f'model = "openai/gpt-4o-mini"\n[model_options]\napi_key = "{KEY}"\ntemperature = 0.1\n'
    )
    out = capsys.readouterr().out
    assert ("(not stored: api_key; keys come from the environment: set the provider's key variable "
            "(e.g. OPENAI_API_KEY))") in out and KEY not in out
    server = chaz_nb.current()
    stored = server.store.execute("SELECT definition FROM agent_definitions WHERE name = 'gpt'")[0][0]
    assert KEY not in stored and json.loads(stored)["model_options"] == {"temperature": 0.1}
    assert server.agents["gpt"].model_options["api_key"] == KEY  # this kernel still has what it was given
    server = kept()
    assert server.agents["gpt"].model_options == {"temperature": 0.1}


def test_forget_removes_an_agent_for_good(kept, capsys):
    ip.run_line_magic("chaz", "agent gpt --model chaz/echo")
    ip.run_line_magic("chaz", "@gpt hi")
    capsys.readouterr()
    ip.run_line_magic("chaz", "agent gpt --forget")
    assert capsys.readouterr().out.strip() == (
        "agent gpt: removed from this kernel and the store; its sessions stay (%chaz sessions)"
    )
    one_line_error(capsys, "%chaz @gpt hi", "unknown agent @gpt")
    kept()
    one_line_error(capsys, "%chaz @gpt hi", "unknown agent @gpt")
    one_line_error(capsys, "%chaz agent gpt --forget", "%chaz agent gpt --forget: no agent 'gpt' here or in the store")
    one_line_error(capsys, "%chaz agent assistant --forget --model x", "takes no other options")
    ip.run_line_magic("chaz", "config model=openai/gpt-4o-mini")  # a kept redefinition of the built-in
    ip.run_line_magic("chaz", "agent assistant --model chaz/echo --system hi")
    capsys.readouterr()
    ip.run_line_magic("chaz", "agent assistant --forget")
    assert "the built-in definition is back" in capsys.readouterr().out
    assert chaz_nb.current().agents["assistant"].system == ""


@pytest.mark.parametrize("line", ["agent --help", "agent gpt --help", "room --help", "sql --help"])
def test_help_of_a_sub_command_prints_its_usage(chaz, capsys, line):
    capsys.readouterr()
    result = ip.run_cell(f"%chaz {line}")
    assert result.error_in_exec is None, result.error_in_exec
    out = capsys.readouterr().out
    assert out.startswith(f"usage: %chaz {line.split()[0]}"), out
    if line.startswith("agent"):
        assert "--forget" in out and "not your own" in out


# ------------------------------------------------------------ safe defaults (issue 26 §4)
CALL_ADD = '\'[{"tool": "add", "args": {"a": 2, "b": 3}}, "got {result}"]\''


def offered(server, name: str) -> set[str]:
    return server.tools.scope(server.agents[name].tools).names


def test_an_agent_without_tools_is_not_offered_a_users_tool_and_with_star_it_is(kept, capsys):
    ip.run_cell(TOOLS).raise_error()
    ip.run_line_magic("chaz", "agent calc --model chaz/echo --tools add")  # add is registered now
    ip.run_line_magic("chaz", f"agent newcomer --model chaz/script --script {CALL_ADD}")
    ip.run_line_magic("chaz", f"agent trusted --model chaz/script --tools '*' --script {CALL_ADD}")
    server = chaz_nb.current()
    assert "add" not in offered(server, "newcomer") and "add" in offered(server, "trusted")
    assert {"kernel__variables", "kernel__run", "spawn_agent"} <= offered(server, "newcomer")
    ip.run_line_magic("chaz", "@newcomer add them")
    ip.run_line_magic("chaz", "@trusted add them")
    results = {
        n: [
            e.content
            for e in server.store.entries(server.current_session_id(n))
            if e.entry_type is EntryType.TOOL_RESULT
        ]
        for n in ("newcomer", "trusted")
    }
    assert results["trusted"] == ["add: 5"]
    assert results["newcomer"][0].startswith("add: unknown tool 'add'; tools available: compact, kernel__cells")
    server = kept()  # and so after a restart: the default is stored as it was given
    ip.run_cell(TOOLS).raise_error()
    assert "add" not in offered(server, "newcomer") and "add" in offered(server, "trusted")


def test_a_kept_agent_whose_tool_is_not_defined_after_a_restart_says_so_when_it_runs(kept, capsys):
    """It ran with no ``add`` and nothing said why: the model was not offered it, the person
    saw a reply that ignored the tool. The run now says, in one line of its session (and so of
    the cell's view), which tool is missing and how to define it; then it goes on."""
    ip.run_cell(TOOLS).raise_error()
    ip.run_line_magic("chaz", f"agent calc --model chaz/script --tools add,kernel__*,mcp_x__* --script {CALL_ADD}")
    ip.run_line_magic("chaz", "@calc add them")
    server = kept()  # a new kernel: the agent is back, its tool's code is not
    ip.run_line_magic("chaz", "@calc add them again")
    sid = server.current_session_id("calc")
    [note] = [e for e in server.store.entries(sid, types=[EntryType.ERROR]) if e.payload.get("note")]
    assert note.content == (
        "@calc's tool add is not defined in this kernel, so this run goes on without it; define it again: "
        "run the cell with its @chaz_nb.tool function (%chaz agents lists what is missing)"
    )
    assert note.payload["missing_tools"] == ["add"] and "\n" not in note.content
    from chaz_nb.notebook.views.session import SessionView

    assert note.content in SessionView(server.store, sid).text()  # the cell's view shows it
    assert server.session_status(sid) == "idle"  # the note closes nothing
    ran = [e.content for e in server.store.entries(sid, types=[EntryType.TOOL_RESULT])]
    assert ran[0] == "add: 5" and ran[1].startswith("add: unknown tool 'add'")
    ip.run_cell(TOOLS).raise_error()  # defined again: the next run has it and says nothing
    ip.run_line_magic("chaz", "@calc and once more")
    notes = [e for e in server.store.entries(sid, types=[EntryType.ERROR]) if e.payload.get("note")]
    assert notes == [note]


def test_an_agents_egress_rule_and_hosts_are_parsed_said_and_kept(kept, capsys):
    """``--egress ask|allow|deny`` and ``--egress-host HOST`` (issue 44 §2): the confirmation
    line says them, and the kept agent has them after a restart; a bad rule is one line."""
    ip.run_line_magic("chaz", "agent scout --model chaz/echo --egress deny --egress-host llm.lan "
                              "--egress-host 127.0.0.1")
    assert "egress deny (always to llm.lan, 127.0.0.1)" in capsys.readouterr().out
    ip.run_cell_magic("chaz", "agent plain", 'model = "chaz/echo"\n')
    assert "egress" not in capsys.readouterr().out  # the default says nothing
    server = kept()
    assert (server.agents["scout"].egress, server.agents["scout"].egress_hosts) == ("deny", ["llm.lan", "127.0.0.1"])
    assert server.agents["plain"].egress == "ask" and server.agents["plain"].egress_hosts == [
        "127.0.0.1", "localhost", "::1"]
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="egress must be one of deny, ask, allow, not 'sometimes'"):
        ip.run_cell_magic("chaz", "agent odd", 'model = "chaz/echo"\negress = "sometimes"\n')
