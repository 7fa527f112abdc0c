"""%chaz / %%chaz through IPython's test shell (globalipapp), with an in-memory store."""

from __future__ import annotations

import re

import pytest
from IPython.core.error import UsageError

import chaz_nb
from chaz_nb.core.entries import EntryType
from chaz_nb.notebook import extension
from chaz_nb.notebook.magics.core import parse_message_line

from ipython_harness import PARK_TOOL, ip, one_line_error


def entries(server, agent):
    return server.store.entries(server.current_session(agent))


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    "line, expected",
    [
        ("@a hello world", ("a", "hello world", True)),
        ("--no-wait @a hello", ("a", "hello", False)),
        ("@a --no-wait it's 'quoted' \"text\"", ("a", "it's 'quoted' \"text\"", False)),
        ("@a   spaced   text ", ("a", "spaced   text", True)),
        ("@a", ("a", "", True)),
    ],
)
def test_message_line_keeps_the_text_verbatim(line, expected):
    assert parse_message_line(line) == expected


def test_bad_option_in_message_line():
    with pytest.raises(UsageError, match="unknown option --fast"):
        parse_message_line("--fast @a hi")


# ------------------------------------------------------------------ load
def test_load_prints_one_line_and_current_returns_the_server(chaz, capsys):
    ip.run_line_magic("unload_ext", "chaz_nb")
    capsys.readouterr()
    ip.run_line_magic("load_ext", "chaz_nb")
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.strip() == "chaz_nb: sessions in :memory: · agent assistant uses chaz/echo"
    server = chaz_nb.current()
    assert server.store.path == ":memory:"
    assert server.agents["assistant"].model == "chaz/echo"


def test_current_without_the_extension_is_a_clear_error():
    with pytest.raises(extension.NotLoadedError, match="%load_ext chaz_nb"):
        chaz_nb.current()


def test_chaz_model_sets_the_default_agent_model(monkeypatch, capsys):
    monkeypatch.setenv("CHAZ_DB", ":memory:")
    monkeypatch.setenv("CHAZ_MODEL", "ollama/llama3.1")
    ip.run_line_magic("load_ext", "chaz_nb")
    try:
        assert "agent assistant uses ollama/llama3.1" in capsys.readouterr().out
        assert chaz_nb.current().agents["assistant"].model == "ollama/llama3.1"
    finally:
        ip.run_line_magic("unload_ext", "chaz_nb")


def test_reload_ext_is_safe(chaz):
    ip.run_line_magic("chaz", "@assistant one")
    ip.run_line_magic("reload_ext", "chaz_nb")
    server = chaz_nb.current()
    assert server is not chaz and chaz.store.closed
    ip.run_line_magic("chaz", "@assistant two")
    assert [e.content for e in entries(server, "assistant")][-1] == "echo: two"


def test_unload_stops_runs_and_closes_the_store(chaz):
    ip.run_line_magic("chaz", "--no-wait @assistant hi")
    assert chaz.is_busy(chaz.current_session("assistant"))
    ip.run_line_magic("unload_ext", "chaz_nb")
    assert chaz.store.closed
    assert "chaz" not in ip.magics_manager.magics["line"]
    ip.run_line_magic("load_ext", "chaz_nb")  # for the fixture's unload


# ------------------------------------------------------------------ turns
def test_message_waits_for_the_reply_and_records_its_origin(chaz):
    ip.run_line_magic("chaz", "@assistant hello there")
    es = entries(chaz, "assistant")
    assert [(e.entry_type.value, e.sender, e.content) for e in es] == [
        ("Message", "user", "hello there"),
        ("Ack", "assistant", "assistant is working"),
        ("Message", "assistant", "echo: hello there"),
    ]
    origin = es[0].payload["origin"]
    assert set(origin) == {"notebook", "cell_id", "execution_count", "kernel_id"}
    assert origin["execution_count"] == ip.execution_count


def test_a_question_mark_at_the_end_is_part_of_the_message(chaz):
    # IPython would read "you?" as a help request on `you`
    ip.run_cell("%chaz @assistant who are you?").raise_error()
    ip.run_cell("x = 1\nif x:\n    %chaz @assistant really??\n").raise_error()
    assert [e.content for e in entries(chaz, "assistant") if e.entry_type is EntryType.MESSAGE] == [
        "who are you?", "echo: who are you?", "really??", "echo: really??"
    ]


def test_question_mark_transform_leaves_other_cells_alone():
    from chaz_nb.notebook.extension import protect_question_marks as t

    assert t(["len?\n"]) == ["len?\n"]
    assert t(["%%chaz @a\n", "%chaz is it?\n"]) == ["%%chaz @a\n", "%chaz is it?\n"]
    assert t(["%chaz @a why?\n"]) == ["get_ipython().run_line_magic('chaz', '@a why?')\n"]
    assert t(["%chaz?"]) == ["%chaz?"]  # help on the magic itself


def test_cell_magic_sends_the_body(chaz):
    ip.run_cell_magic("chaz", "@assistant", "line one\nline two")
    assert entries(chaz, "assistant")[-1].content == "echo: line one\nline two"  # no trailing newline


def test_no_wait_returns_at_once_and_wait_finishes_it(chaz, capsys):
    ip.run_line_magic("chaz", "--no-wait @assistant later")
    sid = chaz.current_session("assistant")
    assert chaz.session_status(sid) == "running"
    ip.run_line_magic("chaz", f"wait {sid}")
    assert chaz.session_status(sid) == "idle"
    assert entries(chaz, "assistant")[-1].content == "echo: later"
    capsys.readouterr()
    ip.run_line_magic("chaz", "wait")
    assert capsys.readouterr().out.strip() == f"session {sid} is idle"


def test_a_run_that_parks_on_an_approval_stops_the_wait(chaz, capsys):
    ip.run_cell(PARK_TOOL).raise_error()
    ip.run_line_magic(
        "chaz",
        "agent janitor --model chaz/script --tools wipe --script "
        "'[{\"tool\": \"wipe\", \"args\": {\"path\": \"/tmp/x\"}}, \"done: {result}\"]'",
    )
    capsys.readouterr()
    ip.run_line_magic("chaz", "@janitor clean up")  # returns: a person must decide
    sid = chaz.current_session("janitor")
    out = capsys.readouterr().out  # the terminal shows the view's text/plain
    assert "· waiting for approval" in out and "is waiting for a person" not in out
    assert chaz.session_status(sid) == "parked"
    [request] = chaz.pending_approvals()
    ok, _ = chaz.decide(request["request_id"], "approve")
    assert ok
    ip.run_line_magic("chaz", f"wait {sid}")
    assert chaz.session_status(sid) == "idle"
    assert chaz.store.latest(sid).content == "done: wiped /tmp/x"


def test_directive(chaz):
    ip.run_line_magic("chaz", "directive @assistant do the thing")
    es = entries(chaz, "assistant")
    assert es[0].entry_type is EntryType.DIRECTIVE and es[0].content == "do the thing"
    assert es[-1].entry_type is EntryType.MESSAGE and es[-1].sender == "assistant"


def test_ask_is_the_async_form(chaz):
    reply = ip.run_cell('import chaz_nb\nr = await chaz_nb.ask("@assistant via ask")', store_history=False)
    reply.raise_error()
    assert ip.user_ns["r"].content == "echo: via ask"


def test_new_starts_a_fresh_session(chaz, capsys):
    ip.run_line_magic("chaz", "@assistant hi")
    first = chaz.current_session("assistant")
    ip.run_line_magic("chaz", "new @assistant")
    assert chaz.current_session("assistant") != first
    assert "a fresh session with @assistant" in capsys.readouterr().out


def test_use_makes_an_existing_session_current_again(chaz, capsys):
    ip.run_line_magic("chaz", "@assistant first")
    first = chaz.current_session("assistant")
    ip.run_line_magic("chaz", "new @assistant")
    capsys.readouterr()
    ip.run_line_magic("chaz", f"use {first}")
    assert capsys.readouterr().out.strip() == (
        f"session {first} is @assistant's current session here (idle): %chaz @assistant TEXT writes there"
    )
    ip.run_line_magic("chaz", "@assistant again")
    assert [e.content for e in chaz.store.entries(first, types=[EntryType.MESSAGE])][-1] == "echo: again"
    room = chaz.create_room("team", ["assistant"])
    for line, error in [
        ("use 999", "%chaz use: there is no session 999; see %chaz sessions"),
        ("use x", "%chaz use: SESSION is a session id, not 'x'; usage: %chaz use SESSION"),
        ("use", "%chaz use: say which session; usage: %chaz use SESSION"),
        (f"use {room}", f"%chaz use: session {room} is a room; enter it with %chaz room NAME"),
    ]:
        with pytest.raises(UsageError) as exc:
            ip.run_line_magic("chaz", line)
        assert str(exc.value) == error
    assert chaz.current_session("assistant") == first
    ghost = chaz.store.create_session("ghost")  # an agent this kernel does not define, served nowhere
    ip.run_line_magic("chaz", f"use {ghost}")
    assert "(@ghost is not defined in this kernel)" in capsys.readouterr().out
    with pytest.raises(UsageError, match=f"no kernel serves session {ghost} now and @ghost is not defined here"):
        ip.run_line_magic("chaz", "@ghost hello")
    assert chaz.store.entries(ghost) == []  # nothing written that nobody would answer


# ------------------------------------------------------------------ agents and tools
TOOLS = '''
import chaz_nb

@chaz_nb.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b

def plain(x: int) -> int:
    return x
'''


def test_agent_line_with_script_and_notebook_tool(chaz, capsys):
    ip.run_cell(TOOLS).raise_error()
    ip.run_line_magic(
        "chaz",
        "agent calc --model chaz/script --tools add --script "
        "'[{\"tool\": \"add\", \"args\": {\"a\": 2, \"b\": 3}}, \"the sum is {result}\"]'",
    )
    assert capsys.readouterr().out.strip() == "agent calc: chaz/script, add"
    ip.run_line_magic("chaz", "@calc what is 2+3?")
    es = entries(chaz, "calc")
    assert [e.entry_type.value for e in es] == ["Message", "Ack", "ToolCall", "ToolResult", "Message"]
    assert es[-1].content == "the sum is 5"


def test_agent_cell_takes_toml_and_spawns_a_child(chaz):
    ip.run_cell(TOOLS).raise_error()
    ip.run_cell_magic(
        "chaz",
        "agent calc",
        'model = "chaz/script"\ntools = ["add"]\n'
        'script = [{tool = "add", args = {a = 2, b = 3}}, "the sum is {result}"]\n',
    )
    ip.run_cell_magic(
        "chaz",
        "agent boss",
        'model = "chaz/script"\nsystem = "You delegate."\ntools = ["spawn_agent", "add"]\nmax_depth = 2\n'
        'script = [{tool = "spawn_agent", args = {agent = "calc", task = "add 2 and 3"}}, "calc says: {result}"]\n',
    )
    boss = chaz.agents["boss"]
    assert boss.system == "You delegate." and boss.max_depth == 2
    ip.run_line_magic("chaz", "@boss go")
    assert entries(chaz, "boss")[-1].content == "calc says: the sum is 5"
    child = [s for s in chaz.store.sessions() if s.kind == "child"]
    assert len(child) == 1 and child[0].agent == "calc" and child[0].depth == 1


def test_agent_tree_budget_from_flags_and_toml(chaz, capsys):
    ip.run_line_magic("chaz", "agent lone --max-spawns 0 --max-model-calls 20")
    assert (chaz.agents["lone"].max_spawns, chaz.agents["lone"].max_model_calls) == (0, 20)
    ip.run_cell_magic("chaz", "agent wide", "max_spawns = 200\nmax_model_calls = 2000\n")
    assert (chaz.agents["wide"].max_spawns, chaz.agents["wide"].max_model_calls) == (200, 2000)
    capsys.readouterr()
    one_line_error(capsys, "%chaz agent x --max-model-calls 0", "max_model_calls must be an integer >= 1")


def test_agents_sessions_log_sql(chaz, capsys):
    ip.run_line_magic("chaz", "@assistant hi")
    capsys.readouterr()
    ip.run_line_magic("chaz", "agents")
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row == ["assistant", "chaz/echo", "default", "1", "built-in", "-"]
    ip.run_line_magic("chaz", "sessions")
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["id", "agent", "kind", "parent", "depth", "entries", "status"]
    assert out[1].split() == ["1", "assistant", "chat", "-", "0", "3", "idle"]
    ip.run_line_magic("chaz", "log")
    assert "assistant: echo: hi" in capsys.readouterr().out
    table = ip.run_line_magic("chaz", "sql SELECT count(*) FROM entries")
    assert table.rows == [(3,)]


def test_config_db_moves_to_another_file(chaz, tmp_path, capsys):
    ip.run_cell(TOOLS).raise_error()
    ip.run_line_magic("chaz", "agent calc --model chaz/echo --tools add")
    path = tmp_path / "other.duckdb"
    capsys.readouterr()
    ip.run_line_magic("chaz", f"config db={path}")
    assert capsys.readouterr().out.strip() == f"chaz_nb: sessions in {path} · agent assistant uses chaz/echo"
    server = chaz_nb.current()
    assert server.store.path == str(path) and chaz.store.closed
    assert "calc" in server.agents and "add" in server.tools  # agents and tools carried over
    ip.run_line_magic("chaz", "@calc hi")
    assert path.exists()


def test_config_model(chaz, capsys):
    capsys.readouterr()
    ip.run_line_magic("chaz", "config model=openai/gpt-4o-mini")
    assert capsys.readouterr().out.strip() == "agent assistant: openai/gpt-4o-mini, " + DEFAULT_TOOLS_LINE
    assert chaz.agents["assistant"].model == "openai/gpt-4o-mini"


DEFAULT_TOOLS_LINE = (
    "the default tools: spawn_agent, spawn_worker, send_message, compact; the kernel's kernel__variables, "
    "kernel__describe, kernel__query, kernel__cells, kernel__run (kernel__run asks you first); not your own "
    "tools (name them with --tools, or --tools '*' for every tool)"
)


def test_agent_without_tools_gets_the_safe_defaults_not_another_agents_tool_and_says_so(chaz, capsys):
    # issue 26 "safe defaults": a tool another agent named (here add) is not handed to a newcomer
    ip.run_cell(TOOLS).raise_error()
    ip.run_line_magic("chaz", "agent calc --model chaz/echo --tools add")  # registers add
    capsys.readouterr()
    ip.run_line_magic("chaz", "agent helper --model chaz/echo")
    assert "add" in chaz.tools
    assert capsys.readouterr().out.strip() == "agent helper: chaz/echo, " + DEFAULT_TOOLS_LINE
    scope = chaz.tools.scope(chaz.agents["helper"].tools).names
    assert "add" not in scope and "schedule_create" not in scope
    assert {"kernel__variables", "kernel__run", "spawn_agent", "compact"} <= scope
    ip.run_line_magic("chaz", "agent everything --model chaz/echo --tools '*'")
    n = len(chaz.tools)
    assert capsys.readouterr().out.strip() == (
        f"agent everything: chaz/echo, every registered tool ({n} now, and any registered later)"
    )
    assert chaz.tools.scope(chaz.agents["everything"].tools).names == set(chaz.tools.names())
    ip.run_line_magic("chaz", "agent loner --model chaz/echo --tools ''")
    assert capsys.readouterr().out.strip() == "agent loner: chaz/echo, no tools"


# ------------------------------------------------------------------ usage
@pytest.mark.parametrize(
    "cell, suggestion",
    [
        ("%chaz agnt x", "did you mean agent?"),
        ("%chaz sesions", "did you mean sessions?"),
        ("%chaz Agents", "did you mean agents?"),
        ("%chaz shedule list", "did you mean schedule?"),
        ("%chaz assistant hello", "did you mean @assistant? (a message starts with @NAME)"),
        ("%chaz asistant hello", "did you mean @assistant?"),
    ],
)
def test_unknown_sub_command_suggests_the_nearest_one(chaz, capsys, cell, suggestion):
    err = one_line_error(capsys, cell, suggestion)
    assert "usage: %chaz @NAME" not in err  # the one hint, not the whole usage
    assert "%chaz help" in err


def test_unknown_sub_command_with_nothing_near_lists_the_sub_commands(chaz, capsys):
    err = one_line_error(capsys, "%chaz xyzzy", "unknown sub-command 'xyzzy'; sub-commands: ")
    for sub in ("agent", "deny", "sql", "room", "help"):
        assert f" {sub}," in err or f" {sub} " in err


def _flags(parser):
    return sorted(o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help"))


def _mentions(text, flag):
    """The flag as a whole word: --max is not in "--max-depth"."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def test_every_flag_a_parser_accepts_is_in_its_usage_and_the_full_usage():
    from chaz_nb.notebook.magics import multi as magics_multi, sql as magics_sql, usage as magics

    parsers = [
        (magics.agent_parser(), magics.agent_parser().usage),
        (magics_sql._sql_parser(), magics_sql.SQL_USAGE),
        (magics_multi._room_parser(), magics_multi.ROOM_USAGE),
    ]
    assert "--approval-timeout" in _flags(parsers[0][0]) and "--max-iterations" in _flags(parsers[0][0])
    for parser, usage in parsers:
        for flag in _flags(parser):
            assert _mentions(usage, flag), (flag, usage)
            assert _mentions(magics.USAGE, flag), flag
    for flag in _flags(magics.agent_parser()):
        assert _mentions(magics.HELP, flag), flag


def test_bare_chaz_prints_a_short_usage_not_an_error(chaz, capsys):
    capsys.readouterr()
    result = ip.run_cell("%chaz")
    assert result.success, result.error_in_exec
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("%chaz @NAME text")
    assert len(out.splitlines()) <= 5 and len(out) < 400 and "%chaz help" in out


def test_help_shows_the_agent_flags(chaz, capsys):
    ip.run_line_magic("chaz", "help")
    out = capsys.readouterr().out
    assert "--approval-timeout S" in out and "--tools '*' gives every tool" in out and "--data" in out


# ------------------------------------------------------------------ one-line errors
def test_bad_inputs_get_one_line_errors(chaz, capsys):
    ip.run_cell(TOOLS).raise_error()
    one_line_error(capsys, "%chaz @nobody hi", "unknown agent @nobody; known agents: @assistant")
    one_line_error(capsys, "%chaz frobnicate", "unknown sub-command 'frobnicate'; sub-commands: agent, agents,")
    one_line_error(capsys, "%chaz @assistant", "nothing to send to @assistant")
    one_line_error(capsys, "%chaz agent x --model chaz/script --script '[1,'", "bad --script JSON")
    one_line_error(capsys, "%chaz agent x --script '{}'", "--script must be a JSON list")
    one_line_error(capsys, "%chaz agent x --tools nope", "no tool 'nope' in this notebook")
    one_line_error(capsys, "%chaz agent x --tools plain", "plain is a plain function, not a chaz_nb tool")
    one_line_error(capsys, "%chaz agent x --bogus 1", "unrecognized arguments: --bogus 1")
    one_line_error(capsys, "%chaz agent x --max-depth lots", "invalid int value")
    one_line_error(capsys, "%chaz agent user", "reserved")
    one_line_error(capsys, "%chaz agent x --model chaz/script", "needs a script")
    one_line_error(capsys, "%%chaz agent x\nmodel = \n", "bad TOML")
    one_line_error(capsys, '%%chaz agent x\ncolour = "red"\n', "unknown key(s) colour")
    one_line_error(capsys, "%%chaz frob\nbody", "unknown %%chaz form 'frob'")
    one_line_error(capsys, "%chaz log 99", "there is no session 99")
    one_line_error(capsys, "%chaz log abc", "SESSION is a session id or @NAME")
    one_line_error(capsys, "%chaz new assistant", "usage: %chaz new @NAME")
    one_line_error(capsys, "%chaz sql SELEC 1", "%chaz sql: Parser Error")
    one_line_error(capsys, "%chaz config colour=red", "unknown key 'colour'")
    one_line_error(capsys, "%chaz config model=chaz/script", "needs a script")
    one_line_error(capsys, "%chaz agent x --system 'unclosed", "cannot parse the line")


def test_magic_without_the_extension_says_how_to_load(chaz, capsys):
    magics = ip.magics_manager.registry["ChazMagics"]
    ip.run_line_magic("unload_ext", "chaz_nb")
    try:
        with pytest.raises(UsageError, match="run %load_ext chaz_nb first"):
            magics.chaz("@assistant hi")
    finally:
        ip.run_line_magic("load_ext", "chaz_nb")


def test_agent_api_base_flag_points_the_agent_at_a_server(chaz, capsys):
    ip.run_line_magic("chaz", "agent local --model openai/qwen --api-base http://127.0.0.1:8000/v1")
    agent = chaz.agents["local"]
    assert agent.api_base == "http://127.0.0.1:8000/v1"
    assert agent.call_options()["api_base"] == "http://127.0.0.1:8000/v1"
    one_line_error(capsys, "%chaz agent bad --model openai/qwen --api-base 127.0.0.1:8000",
                   "api_base must be an http:// or https:// URL")
    ip.run_cell('%%chaz agent toml\nmodel = "ollama_chat/llama3.1"\napi_base = "http://localhost:11434"\n'
                'model_timeout = 120\nmax_retries = 4')
    toml = chaz.agents["toml"]
    assert (toml.api_base, toml.model_timeout, toml.max_retries) == ("http://localhost:11434", 120, 4)


def test_agent_model_timeout_and_retries_flags_reach_the_model_call(chaz, capsys):
    ip.run_line_magic("chaz", "agent slow --model openai/qwen --model-timeout 30 --max-retries 0")
    options = chaz.agents["slow"].call_options()
    assert (options["timeout"], options["num_retries"]) == (30, 0)
    one_line_error(capsys, "%chaz agent bad --model openai/qwen --max-retries 99",
                   "max_retries must be an integer from 0 to 20")


def test_agent_no_stream_flag_turns_streaming_off(chaz):
    ip.run_line_magic("chaz", "agent whole --model openai/qwen --no-stream")
    ip.run_line_magic("chaz", "agent streamed --model openai/qwen")
    assert chaz.agents["whole"].stream is False and chaz.agents["streamed"].stream is True


def test_log_shows_the_newest_page_and_the_command_for_the_earlier_entries(chaz, capsys):
    from chaz_nb.core.store import NewEntry

    session = chaz.new_session("assistant")
    chaz.store.append_many([NewEntry(session, EntryType.MESSAGE, "assistant", f"line {i}") for i in range(1, 131)])
    capsys.readouterr()
    ip.run_line_magic("chaz", f"log {session}")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"80 earlier entries: %chaz log {session} --before 81 (or --all)"
    # each row starts with its seq, what --before and %chaz fork --at take
    assert "#81 assistant: line 81" in out and "#130 assistant: line 130" in out and "#80 assistant: line 80" not in out
    ip.run_line_magic("chaz", f"log {session} --before 81")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"30 earlier entries: %chaz log {session} --before 31 (or --all)"
    assert "#31 assistant: line 31" in out and "#80 assistant: line 80" in out and "#81 assistant: line 81" not in out
    ip.run_line_magic("chaz", f"log {session} --limit 5 --before 6")
    out = capsys.readouterr().out.splitlines()
    assert "earlier" not in out[0] and out[-1] == "#5 assistant: line 5" and "#1 assistant: line 1" in out
    ip.run_line_magic("chaz", f"log {session} --limit 10")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"120 earlier entries: %chaz log {session} --before 121 --limit 10 (or --all)"
    ip.run_line_magic("chaz", "log @assistant --all")
    out = capsys.readouterr().out.splitlines()
    assert "earlier" not in out[0] and "#1 assistant: line 1" in out and "#130 assistant: line 130" in out


@pytest.mark.parametrize(
    "line, needle",
    [
        ("log --limit 0", "--limit takes a whole number of 1 or more, not '0'"),
        ("log --limit ten", "--limit takes a whole number of 1 or more, not 'ten'"),
        ("log --before -3", "--before takes a whole number of 1 or more"),
        ("log --all --limit 5", "--all shows the whole log, so it takes no --limit or --before"),
        ("log 1 2", "unrecognized arguments: 2"),
        ("log --page 2", "unrecognized arguments: --page; usage: %chaz log [SESSION] [--limit N]"),
    ],
)
def test_log_bad_paging_values_get_one_line_errors(chaz, capsys, line, needle):
    ip.run_line_magic("chaz", "@assistant hi")
    one_line_error(capsys, f"%chaz {line}", needle)


def test_wait_looks_back_for_its_trigger_a_page_at_a_time(chaz, monkeypatch):
    from chaz_nb.core.store import NewEntry
    from chaz_nb.notebook.magics import sessions

    session = chaz.new_session("assistant")
    items = [NewEntry(session, EntryType.MESSAGE, "assistant", f"reply {i}") for i in range(1, 451)]
    items[9] = NewEntry(session, EntryType.MESSAGE, "user", "the old trigger")  # seq 10
    chaz.store.append_many(items)
    pages = []
    read_page = chaz.store.read_page
    monkeypatch.setattr(chaz.store, "read_page", lambda *a, **k: pages.append(k) or read_page(*a, **k))
    monkeypatch.setattr(chaz.store, "entries", lambda *a, **k: pytest.fail("read the whole session"))
    assert sessions._last_trigger_seq(chaz, session) == 9
    assert [p["before_seq"] for p in pages] == [None, 251, 51]
    chaz.store.append(session, EntryType.DIRECTIVE, "user", "the new trigger")  # seq 451
    pages.clear()
    assert sessions._last_trigger_seq(chaz, session) == 450 and len(pages) == 1


def test_max_tool_output_from_the_magic_and_toml(chaz):
    from ipython_harness import ip

    ip.run_line_magic("chaz", "agent short --max-tool-output 2000")
    assert chaz.agents["short"].max_tool_output == 2000
    ip.run_cell_magic("chaz", "agent long", "max_tool_output = 90000\n")
    assert chaz.agents["long"].max_tool_output == 90000


def test_with_attaches_a_variables_description_under_the_agents_policy(chaz, capsys):
    ip.run_cell("import pandas as pd\nsales = pd.DataFrame({'region': ['north', 'south'], 'amount': [1.0, 2.0]})")
    ip.run_line_magic("chaz", "agent peek --model chaz/echo --data schema")
    ip.run_line_magic("chaz", "@peek --with sales why so few rows?")
    [message] = [e for e in chaz.store.entries(chaz.current_session("peek")) if e.sender == "user"]
    assert message.content.startswith("why so few rows?") and "--- attached: sales ---" in message.content
    assert "north" not in message.content  # schema: no values
    assert message.payload["egress"]["variables"] == ["sales"] and message.payload["attachments"][0]["name"] == "sales"
    one_line_error(capsys, "%chaz @peek --with sale hi", "nearest: sales")


HOSTILE = "\x1b[8mhidden\x1b[0m \x1b]8;;https://evil.example\x1b\\docs\x1b]8;;\x1b\\ /srv/\u202etxt.sgol"


def assert_shown(text: str, whole: bool = True) -> None:
    """ANSI escapes and bidi controls appear by name, none is left for a terminal to obey."""
    assert "<U+001B>[8mhidden" in text and (not whole or "<U+202E>txt.sgol" in text)
    assert "\x1b" not in text and "\u202e" not in text


def test_ansi_and_bidi_controls_are_shown_as_text_in_log_pending_and_sql(chaz, capsys):
    from chaz_nb.engine.tools import tool
    from chaz_nb.server.agents import Agent

    @tool(approval="always")
    def show(text: str) -> str:
        """Print a text."""
        return text

    chaz.tools.register(show)
    chaz.define_agent(Agent("shower", model="chaz/script", tools=["show"],
                            script=[{"tool": "show", "args": {"text": HOSTILE}}, "{result}"]))
    ip.run_line_magic("chaz", "@shower print it")  # parks on its call
    capsys.readouterr()
    ip.run_line_magic("chaz", "pending")
    assert_shown(capsys.readouterr().out, whole=False)  # (the arguments column is cut)
    ip.run_cell("%chaz approve last\n%chaz wait").raise_error()
    session = chaz.current_session("shower")
    assert chaz.store.latest(session).content == HOSTILE  # stored as written
    capsys.readouterr()
    ip.run_line_magic("chaz", f"log {session}")
    assert_shown(capsys.readouterr().out)
    ip.run_cell(f"%chaz sql SELECT content FROM entries WHERE session_id = {session} AND entry_type = 'Message' "
                "AND sender = 'shower'").raise_error()
    assert_shown(capsys.readouterr().out, whole=False)  # (a cell is cut)


def test_a_message_over_the_entry_limit_is_a_one_line_error_and_nothing_is_written(chaz, capsys):
    chaz.store.max_entry_chars = 20_000
    one_line_error(capsys, "%chaz @assistant " + "x" * 30_000,
                   "is over the entry limit of 20,000 (CHAZ_MAX_ENTRY_CHARS); nothing was written")
    assert entries(chaz, "assistant") == []


def test_config_db_refuses_a_directory_that_does_not_exist(chaz, tmp_path, capsys):
    """A typo in the directory must not make a new, empty store (and move the kernel to it)."""
    path = tmp_path / "not-there" / "sessions.duckdb"
    one_line_error(capsys, f"%chaz config db={path}", f"the directory {tmp_path / 'not-there'} does not exist")
    assert not (tmp_path / "not-there").exists()
    assert chaz_nb.current() is chaz and not chaz.store.closed  # still on the store it had


def test_a_mistyped_flag_gets_the_nearest_one(chaz, capsys):
    one_line_error(capsys, "%chaz agent x --modle chaz/echo", "unrecognized arguments: --modle chaz/echo "
                   "(did you mean --model?)")
    one_line_error(capsys, "%chaz log --limt 3", "(did you mean --limit?)")
    one_line_error(capsys, "%chaz approve 1 --all-call", "unknown option --all-call (did you mean --all-calls?)")
    one_line_error(capsys, "%chaz --no-wiat @assistant hi", "unknown option --no-wiat (did you mean --no-wait?)")


def test_a_toml_error_names_the_line_of_the_cell(chaz, capsys):
    """The error's line is the one a person counts in the cell: the %%chaz line is line 1."""
    cell = '%%chaz agent x\nmodel = "chaz/echo"\ntools = ["a",\nsystem = "hi"\n'
    err = one_line_error(capsys, cell, "bad TOML")
    assert "(at line 4 of the cell," in err, err
