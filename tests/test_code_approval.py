"""What a person approves is every token that runs (issue 41 §1): kernel__run code is masked by
its literals alone on the card (text and HTML), in the Edit box, ``%chaz pending``, the ToolCall
entry and ``tool_calls``; code a mask would hide code with, or too long to show whole, does not
run; the log keeps the code that ran and its sha256 (on DuckDB and on PostgreSQL)."""

from __future__ import annotations

import hashlib
import json

import pytest

from chaz_nb.core.codemask import mask_code, restore_literals
from chaz_nb.core.entries import EntryType as T
from chaz_nb.notebook.views.approval import card_html, card_text, edit_text, request_info
from chaz_nb.server import Server
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent

from waiting import until

EXEC = "RAN=len(chr(82)+chr(65))"  # sets RAN = 2
#: the issue's spelling: a masked literal beside exec could be the code exec runs
EXEC_CALL = "exec(chr(82)+chr(65)+chr(78)+chr(61)+chr(49))"


@pytest.fixture
def store(backend_store):
    return backend_store


def make(store, code, **kw):
    agent = Agent("coder", model="chaz/script", script=[{"tool": "kernel__run", "args": {"code": code}},
                                                        "done: {result}"],
                  tools=list(SAFE_DEFAULT_TOOLS), **kw)
    server = Server(store, [agent])
    ns: dict = {}
    server.add_kernel(ns)
    return server, ns


async def parked(server):
    await until(lambda: server.pending_approvals(), server.store.subscribe, what="a pending approval")
    [request] = server.pending_approvals()
    return request


def sha(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def as_json(value):
    return json.loads(value) if isinstance(value, str) else value


def views_of(server, request) -> dict[str, str]:
    """Every place a person or an auditor reads the code of a parked call."""
    info = request_info(request)
    call = [e for e in server.store.entries(request["session_id"]) if e.entry_type is T.TOOL_CALL][-1]
    [[arguments]] = server.store.execute("SELECT arguments FROM tool_calls ORDER BY call_entry_id DESC LIMIT 1")
    return {
        "card text": card_text(info, None),
        "card html": card_html(info, None),
        "edit box": edit_text(info["arguments_display"]),
        "tool call": call.payload["arguments"]["code"],
        "tool_calls.arguments": as_json(arguments)["code"],
    }


# the whole family of the trick: key names, quoting, separators, spacing, comments, lines
HIDDEN_AFTER = [
    "api_key=0;" + EXEC,
    "token=0;" + EXEC,
    "password = 0 ;" + EXEC,
    "secret=0;" + EXEC,
    "authorization=0;" + EXEC,
    "Authorization = 'x';" + EXEC,
    "x = {'X-Api-Key': 0};" + EXEC,
    "x = {'authorization': 'Bearer abcdefghijklmnopqrstuvwxyz'};" + EXEC,
    "api_key='sk-abcdefghijklmnopqrstuvwx'; " + EXEC + "  # api_key=zzz",
    "API_KEY=0\n" + EXEC,
    "x-api-key: 0\n" + EXEC,
    "x = 1  # X-Api-Key:0;\n" + EXEC,
    "dict(api_key=0);" + EXEC,
]


@pytest.mark.parametrize("code", HIDDEN_AFTER)
async def test_no_view_hides_code_after_a_credential_name(store, code):
    server, ns = make(store, code)
    handle = await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    for where, text in views_of(server, request).items():
        assert "RAN=len(chr(82)+chr(65))" in text, (where, text)  # the code that runs is shown, everywhere
        assert "[REDACTED]" not in text.split("#")[0] or "#" in code, (where, text)
    box = views_of(server, request)["edit box"]
    if mask_code(code).masked:
        # a masked literal the model chose (no secret the kernel holds) never runs unseen: Approve,
        # and an edit that keeps its mark, are refused (tests/test_code_unseen_literals.py)
        for arguments in (None, {"code": box + "\n"}):
            ok, message = server.decide(request["request_id"], "approve", arguments=arguments)
            assert not ok and "a literal you cannot see" in message and "\n" not in message, message
        assert server.decide(request["request_id"], "deny")[0]
        await handle.wait()
        assert "RAN" not in ns
        return
    # an edit that keeps the code: the decision keeps the card's code and the edit, both whole
    ok, message = server.decide(request["request_id"], "approve", arguments={"code": box + "\n"})
    assert ok, message
    await handle.wait()
    [[ran, digest]] = store.execute("SELECT arguments, code_sha256 FROM tool_calls")
    # (the card's comments are redacted as text: an edit of them runs as edited, and is hashed so)
    assert "RAN=len(chr(82)+chr(65))" in as_json(ran)["code"] and digest == sha(restore_literals(box, code) + "\n")
    assert ("#" in code) == (digest != sha(code + "\n"))
    [decision] = [e for e in store.entries(handle.session_id) if e.entry_type is T.APPROVAL_DECISION]
    for kept in (decision.payload["original_arguments"], decision.payload["arguments"]):
        assert "RAN=len(chr(82)+chr(65))" in kept["code"], kept
    [result] = [e for e in store.entries(handle.session_id) if e.entry_type is T.TOOL_RESULT]
    if not code.startswith("x-api-key"):  # (that one is no Python: it fails to compile, as typed)
        assert ns.get("RAN") == 2, result.payload["output"]


@pytest.mark.parametrize("code", [
    "api_key=0;" + EXEC_CALL,                  # the issue's: exec beside a masked literal
    "x = {'X-Api-Key': 0};\n" + EXEC_CALL,
    "hunter2secretvalue9 = 1\n" + EXEC,        # the kernel's secret as a name
    "x = f'Bearer {y} sk-abcdefghijklmnopqrstuvwx'\n" + EXEC,  # in an f-string with a field
    "s = '''api_key=0\n" + EXEC + "'''\nexec(s)",  # a masked string that is code
    "s = 'api_key=1;" + EXEC + "'; exec(s)",
])
async def test_code_a_mask_would_hide_code_in_is_refused_until_edited(store, monkeypatch, code):
    monkeypatch.setenv("SHOP_PASSWORD", "hunter2secretvalue9")
    server, ns = make(store, code)
    handle = await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    shown = views_of(server, request)
    assert "hunter2secretvalue9" not in json.dumps(shown)
    # the card says so in one line, text and HTML
    for where in ("card text", "card html"):
        [line] = [x for x in shown[where].splitlines() if "Approve is refused" in x]
        assert "cannot run as shown" in line and "os.environ" in line, (where, line)
    ok, message = server.decide(request["request_id"], "approve")
    assert not ok and "stays open" in message and "\n" not in message
    ok, message = server.decide(request["request_id"], "approve_all")
    assert not ok and "stays open" in message
    # the shown (masked) code, approved as is, is no edit: refused the same
    assert not server.decide(request["request_id"], "approve", arguments=dict(request["arguments_display"]))[0]
    assert server.pending_approvals() and "RAN" not in ns
    # the person edits it: the secret read from the environment; the edit runs
    edited = "import os\npw = os.environ['SHOP_PASSWORD']\nRAN = 2"
    ok, message = server.decide(request["request_id"], "approve", arguments={"code": edited})
    assert ok, message
    await handle.wait()
    assert ns["RAN"] == 2
    [[ran, proposed, digest, edited_flag]] = store.execute(
        "SELECT arguments, proposed_arguments, code_sha256, edited FROM tool_calls")
    assert as_json(ran) == {"code": edited} and digest == sha(edited) and edited_flag is True
    assert "hunter2secretvalue9" not in json.dumps(as_json(proposed))
    assert "hunter2secretvalue9" not in json.dumps([e.payload for e in store.entries(handle.session_id)])


async def test_a_secret_literal_is_masked_alone_and_the_code_runs_with_it(store, monkeypatch):
    # (each literal is a secret the kernel holds: one the model chose would not run unseen)
    monkeypatch.setenv("SHOP_API_KEY", "k-7f3a9b2c1d0e")
    monkeypatch.setenv("SHOP_TOKEN", "abcdefghijklmnopqrstuvwxyz")
    monkeypatch.setenv("SHOP_PASSWORD", "hunter22")
    code = ("import json\nheaders = {'Authorization': 'abcdefghijklmnopqrstuvwxyz'}\n"
            "key = 'k-7f3a9b2c1d0e'  # the shop's\npassword = \"hunter22\"; RAN = len(key + password)")
    server, ns = make(store, code)
    handle = await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    shown = views_of(server, request)
    for where, text in shown.items():
        assert "abcdefghijklmnop" not in text and "k-7f3a9b2c1d0e" not in text and "hunter22" not in text, where
        assert "RAN = len(key + password)" in text or "RAN = len(key + password)" in text.replace("&#x27;", "'")
    assert shown["tool call"] == ("import json\nheaders = {'Authorization': «REDACTED»}\n"
                                  "key = «REDACTED»  # the shop's\npassword = «REDACTED»; RAN = len(key + password)")
    assert "3 secret literals shown as «REDACTED»" in shown["card text"]
    assert sha(code)[:16] in shown["card text"] and sha(code)[:16] in shown["card html"]
    assert server.decide(request["request_id"], "approve")[0]
    await handle.wait()
    assert ns["RAN"] == len("k-7f3a9b2c1d0e") + 8  # it ran with the real values
    [[digest, proposed_digest]] = store.execute("SELECT code_sha256, NULL FROM tool_calls")
    assert digest == sha(code)
    [call] = [e for e in store.entries(handle.session_id) if e.entry_type is T.TOOL_CALL]
    assert call.payload["code_sha256"] == sha(code) and "«REDACTED»" not in call.content
    assert sha(code)[:12] in call.content  # the entry's text names the code by its hash


async def test_a_line_that_goes_on_past_the_card_is_marked_where_it_goes_on(store):
    code = "x = 1" + " " * 3000 + ";" + EXEC + "\ny = '" + "z" * 400 + "'"
    server, ns = make(store, code)
    await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    shown = views_of(server, request)
    for where in ("card text", "card html"):
        rows = shown[where].splitlines() if where == "card text" else shown[where].split("chaz-code-line")
        [row] = [r for r in rows if "x = 1" in r]
        assert "⟨3,000 blanks⟩" in row and "RAN=len(chr(82)" in row, (where, row)
        assert "↪" in shown[where], where  # the 400-character line goes on, marked
    assert shown["edit box"] == code  # the box holds the code itself
    assert server.decide(request["request_id"], "deny")[0]


async def test_code_longer_than_the_log_keeps_whole_is_refused_before_anyone_is_asked(store):
    store.max_entry_chars = 40_000
    code = "x = 1\n" * 2_000 + EXEC  # 12,000+ characters: over a quarter of the entry limit
    server, ns = make(store, code)
    reply = await (await server.send(server.current_session("coder"), "go")).wait()
    assert not server.pending_approvals() and "RAN" not in ns
    [result] = [e for e in store.entries(reply.session_id) if e.entry_type is T.TOOL_RESULT]
    assert result.payload["is_error"] and "not run: the code is 12," in result.payload["output"]
    assert "\n" not in result.payload["output"] and "send it in smaller parts" in result.payload["output"]
    # an edit that long is refused too, with one line, and the request stays open
    server2, ns2 = make(store, "RAN = 1")
    await server2.send(server2.current_session("coder"), "go")
    request = await parked(server2)
    ok, message = server2.decide(request["request_id"], "approve", arguments={"code": code})
    assert not ok and "edited code refused" in message and "\n" not in message
    assert server2.pending_approvals()
    assert server2.decide(request["request_id"], "deny")[0]


@pytest.fixture(params=["duckdb", "postgres"])
def chaz_on(request, monkeypatch):
    """``%load_ext chaz_nb`` in IPython's test shell on each store; the Server."""
    import chaz_nb
    from chaz_nb.notebook import extension
    from ipython_harness import ip

    monkeypatch.setenv("CHAZ_DB", ":memory:" if request.param == "duckdb" else request.getfixturevalue("pg_url"))
    monkeypatch.delenv("CHAZ_MODEL", raising=False)
    ip.run_line_magic("load_ext", "chaz_nb")
    yield chaz_nb.current()
    if extension._state is not None:
        ip.run_line_magic("unload_ext", "chaz_nb")


@pytest.mark.parametrize("code", [HIDDEN_AFTER[0], HIDDEN_AFTER[4], HIDDEN_AFTER[6], "hunter2secretvalue9 = 1"])
def test_pending_shows_the_code_that_runs(chaz_on, capsys, monkeypatch, code):
    from ipython_harness import ip

    monkeypatch.setenv("SHOP_PASSWORD", "hunter2secretvalue9")
    chaz_on.define_agent(Agent("coder", model="chaz/script", tools=list(SAFE_DEFAULT_TOOLS),
                               script=[{"tool": "kernel__run", "args": {"code": code}}, "done"]), keep=False)
    ip.run_line_magic("chaz", "@coder go")  # returns when the run parks
    capsys.readouterr()
    ip.run_line_magic("chaz", "pending")
    out = capsys.readouterr().out
    assert "hunter2secretvalue9" not in out, out
    if "RAN=len" in code:
        assert "[REDACTED]" not in out, out
        assert "«REDACTED»;RAN=len(chr(82)" in out or "«REDACTED»};RAN=len(chr(82)" in out, out
    else:
        assert "⛔ cannot run as shown (edit it)" in out, out
    ip.run_line_magic("chaz", "deny last")


async def test_after_approve_edited_every_view_shows_the_code_that_ran(store):
    """Issue 42 item 12: the collapsed row, compare and tool_calls.arguments show the edit."""
    from chaz_nb.notebook.views.session import SessionView

    server, ns = make(store, "RAN = 1 # the model's")
    handle = await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    assert server.decide(request["request_id"], "approve", arguments={"code": "RAN = 2 # mine"})[0]
    await handle.wait()
    assert ns["RAN"] == 2
    view = SessionView(store, handle.session_id)
    [row] = [line for line in view.text().splitlines() if "⚙ kernel__run" in line]
    assert "RAN = 2 # mine" in row and "the model's" not in row and "edited" in row, row
    page = view.html()
    summary = page.split("<summary class='chaz-tool-summary'>")[1].split("</summary>")[0]
    assert "RAN = 2 # mine" in summary and "the model" not in summary
    assert "ran as edited by the approver" in page and "proposed by the model" in page and "the model&#x27;s" in page
    [[ran, proposed, edited]] = store.execute("SELECT arguments, proposed_arguments, edited FROM tool_calls")
    assert as_json(ran) == {"code": "RAN = 2 # mine"} and edited is True
    assert as_json(proposed) == {"code": "RAN = 1 # the model's"}
    other = server.new_session("coder")
    comparison = server.compare(handle.session_id, other)
    [call] = comparison.a.calls
    assert "RAN = 2 # mine" in call and "edited by the approver" in call and "the model's" not in call


async def test_an_edit_around_a_masked_literal_keeps_its_real_value(store, monkeypatch):
    monkeypatch.setenv("SHOP_PASSWORD", "hunter22")  # (a secret the kernel holds: it may run masked)
    code = "password = 'hunter22'; RAN = len(password)"
    server, ns = make(store, code)
    handle = await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    box = edit_text(request["arguments_display"])
    assert box == "password = «REDACTED»; RAN = len(password)"
    # a mark removed (or one added) is not the card's: refused in one line, the request open
    for bad in ("password = 'x'; RAN = «REDACTED»«REDACTED»", "RAN = «REDACTED» + «REDACTED»"):
        ok, message = server.decide(request["request_id"], "approve", arguments={"code": bad})
        assert not ok and "keep each mark where it was" in message and "\n" not in message
    ok, message = server.decide(request["request_id"], "approve", arguments={"code": box + " * 2"})
    assert ok, message
    await handle.wait()
    assert ns["RAN"] == 16  # the kept mark ran as the literal it stands for
    [[ran, digest]] = store.execute("SELECT arguments, code_sha256 FROM tool_calls")
    assert as_json(ran) == {"code": box + " * 2"}  # the log masks it again
    assert digest == sha(code + " * 2")
    [decision] = [e for e in store.entries(handle.session_id) if e.entry_type is T.APPROVAL_DECISION]
    assert decision.payload["original_arguments"] == {"code": box}  # masked once, not again
    assert decision.payload["arguments"] == {"code": box + " * 2"}
    assert "hunter22" not in json.dumps([e.payload for e in store.entries(handle.session_id)])
