"""A masked literal never carries code (issue 41 §1, the outsider's finding 1): a literal in
code runs masked only when its value is a secret the kernel itself holds; any other masked
literal (a credential name's value, a key shape, a header value, a URL's password) is still
masked everywhere, but Approve / approve-all / auto-approve are refused until the person edits
it. And a URL's ``user:password@`` is masked on the card, in ``tool_calls`` and in the kernel
tools' outputs (finding 7). On DuckDB and on PostgreSQL."""

from __future__ import annotations

import json

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.notebook.views.approval import edit_text
from chaz_nb.server import Server
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent

from test_code_approval import as_json, make, parked, sha, views_of

HELD = "sk-heldkeyabcdefghijklmnop1234"

#: the outsider's family: a masked literal made code by some visible runner or decoder
TRICKS = [
    "api_key = 'globals().update\\x28HIDDEN=1)'\nimport timeit\ntimeit.timeit(api_key, number=1, globals=globals())",
    "password = 'globals().update\\x28HIDDEN=1)'\nvars(__builtins__)['ex'+'ec'](password)",
    "import sys, pickle\nsecret = b'\\x80\\x04K\\x01.'\nHIDDEN = sys.modules['pick'+'le'].loads(secret)",
    "import subprocess\npassword = 'true'\nsubprocess.call(password, shell=True); HIDDEN = 1",
    "import code\ntoken = 'HIDDEN = 1'\ncode.InteractiveInterpreter(globals()).runsource(token)",
    "import operator\npassword = 'HIDDEN = 1'\noperator.attrgetter('ex'+'ec')(__builtins__)(password)",
    "password = 'HIDDEN = 1'\nｅｘｅｃ(password)",
    "import codecs\nsecret = 'UVQQRA = 1'\nexec(codecs.decode(secret, 'rot13'))",
    "api_key=0;exec(chr(72)+chr(73)+chr(68)+chr(68)+chr(69)+chr(78)+chr(61)+chr(49))",  # the issue's
    "x = {'Authorization': 'HIDDEN = 1'}\nexec(x['Authorization'])",
    "url = 'postgresql://admin:S3cretPW@db.example/x'\nHIDDEN = 1",
]


@pytest.fixture
def store(backend_store):
    return backend_store


@pytest.mark.parametrize("code", TRICKS)
async def test_a_masked_literal_the_kernel_does_not_hold_never_runs_unseen(store, monkeypatch, code):
    monkeypatch.setenv("OPENAI_API_KEY", HELD)
    server, ns = make(store, code)
    handle = await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    shown = views_of(server, request)
    assert "S3cretPW" not in json.dumps(shown)
    for where in ("card text", "card html"):
        [line] = [x for x in shown[where].splitlines() if "Approve is refused" in x]
        assert "a literal you cannot see" in line and "line " in line, (where, line)
    for decision in ("approve", "approve_all"):
        ok, message = server.decide(request["request_id"], decision)
        assert not ok and "stays open" in message and "\n" not in message, message
    # the card's code with its marks, sent back as the edit: the marks stand for no held secret
    box = edit_text(request["arguments_display"])
    ok, message = server.decide(request["request_id"], "approve", arguments={"code": box})
    assert not ok and "a literal you cannot see" in message, message
    assert server.pending_approvals() and "HIDDEN" not in ns
    # the person's edit (the value read from the environment) runs
    ok, message = server.decide(request["request_id"], "approve",
                                arguments={"code": "import os\nkey = os.environ['OPENAI_API_KEY']\nRAN = 1"})
    assert ok, message
    await handle.wait()
    assert ns.get("RAN") == 1 and "HIDDEN" not in ns
    assert "S3cretPW" not in json.dumps([e.payload for e in store.entries(handle.session_id)])


@pytest.mark.parametrize("code", TRICKS[:3])
async def test_auto_approve_refuses_a_literal_the_kernel_does_not_hold(store, code):
    agent = Agent("coder", model="chaz/script", script=[{"tool": "kernel__run", "args": {"code": code}}, "done"],
                  tools=list(SAFE_DEFAULT_TOOLS), auto_approve=["kernel__run"])
    server = Server(store, [agent])
    ns: dict = {}
    server.add_kernel(ns)
    reply = await (await server.send(server.current_session("coder"), "go")).wait()
    assert "HIDDEN" not in ns and not server.pending_approvals()
    [result] = [e for e in store.entries(reply.session_id) if e.entry_type is T.TOOL_RESULT]
    assert result.payload["is_error"] and "a literal you cannot see" in result.payload["output"]


async def test_a_literal_the_kernel_holds_is_masked_and_the_code_runs_with_it(store, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", HELD)
    code = f"api_key = '{HELD}'\nheaders = {{'Authorization': 'Bearer {HELD}'[7:]}}\nRAN = len(api_key)"
    server, ns = make(store, code)
    handle = await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    shown = views_of(server, request)
    for where, text in shown.items():
        assert HELD not in text and "heldkey" not in text, where
    # 'Bearer ...' is not only the held value: the model chose "Bearer " -> refused; so edit it
    ok, message = server.decide(request["request_id"], "approve")
    assert not ok and "a literal you cannot see" in message and "line 2" in message
    box = edit_text(request["arguments_display"])
    # (a literal beside a credential name is masked whatever it is: the person builds the header
    # from a visible one)
    edited = box.replace("headers = {'Authorization': «REDACTED»[7:]}",
                         "bearer = 'Bearer ' + api_key\nheaders = {'Authorization': bearer}")
    ok, message = server.decide(request["request_id"], "approve", arguments={"code": edited})
    assert ok, message
    await handle.wait()
    assert ns["RAN"] == len(HELD) and ns["headers"]["Authorization"] == "Bearer " + HELD
    [[ran, digest]] = store.execute("SELECT arguments, code_sha256 FROM tool_calls")
    assert HELD not in json.dumps(as_json(ran)) and digest == sha(edited.replace("«REDACTED»", repr(HELD), 1))
    assert HELD not in json.dumps([e.payload for e in store.entries(handle.session_id)])


async def test_a_held_secret_alone_runs_without_an_edit(store, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", HELD)
    server, ns = make(store, f"api_key = '{HELD}'\nRAN = len(api_key)")
    handle = await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    assert HELD not in json.dumps(views_of(server, request))
    assert server.decide(request["request_id"], "approve")[0]
    await handle.wait()
    assert ns["RAN"] == len(HELD)


async def test_a_url_password_is_masked_on_the_card_and_in_tool_calls(store):
    code = "url = 'postgresql://admin:S3cretPW@db.example:5432/shop'\nprint(url)"
    server, ns = make(store, code)
    await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    shown = views_of(server, request)
    for where, text in shown.items():
        assert "S3cretPW" not in text, (where, text)
    assert "a literal you cannot see" in shown["card text"]
    [[arguments]] = store.execute("SELECT arguments FROM tool_calls")
    assert "S3cretPW" not in json.dumps(as_json(arguments))
    assert server.decide(request["request_id"], "deny")[0]


# Finding 7: a URL's user:password@ is masked by the core redaction, so everywhere


@pytest.mark.parametrize("text, shown", [
    ("create_engine('postgresql://admin:S3cretPW@db.example:5432/shop')",
     "create_engine('postgresql://admin:[REDACTED]@db.example:5432/shop')"),
    ("redis://:S3cretPW@cache:6379/0", "redis://:[REDACTED]@cache:6379/0"),
    ("mysql+pymysql://u:p@ss:S3cretPW@h/db", "mysql+pymysql://u:[REDACTED]@h/db"),  # a raw @ in it
    ("see https://example.org/a@b and http://host:8080/x", "see https://example.org/a@b and http://host:8080/x"),
])
def test_the_redaction_masks_a_urls_password(text, shown):
    from chaz_nb.core.redaction import redact

    assert redact(text) == shown and redact(shown) == shown


CONN = "postgresql://admin:S3cretPW@db.example:5432/shop"


async def test_a_url_password_is_masked_in_what_the_kernel_tools_send():
    import pandas as pd

    from test_kernel_policy import call, kernel_over

    kernel = kernel_over({"conn": pd.DataFrame({"name": ["shop"], "url": [CONN]})})
    for tool, args in (("kernel__describe", {"name": "conn"}), ("kernel__query", {"sql": "SELECT url FROM conn"}),
                       ("kernel__query", {"sql": "SELECT upper(url) AS u FROM conn"})):
        reply = await call(kernel, tool, **args)
        assert "S3cretPW" not in reply.text and "s3cretpw" not in reply.text.lower(), (tool, reply.text)
        assert "[REDACTED]@" in reply.text, (tool, reply.text)


async def test_a_url_password_never_reaches_the_log(store):
    import pandas as pd

    script = [{"tool": "kernel__query", "args": {"sql": "SELECT url FROM conn"}},
              {"tool": "kernel__describe", "args": {"name": "conn"}}, "done: {result}"]
    agent = Agent("analyst", model="chaz/script", script=script, tools=list(SAFE_DEFAULT_TOOLS))
    server = Server(store, [agent])
    server.add_kernel({"conn": pd.DataFrame({"name": ["shop"], "url": [CONN]})})
    s = server.current_session("analyst")
    await (await server.send(s, f"connect with {CONN}")).wait()
    assert "S3cretPW" not in json.dumps([e.payload for e in store.entries(s)])
    assert "S3cretPW" not in json.dumps([e.content for e in store.entries(s)])
    assert "S3cretPW" not in json.dumps(store.execute("SELECT arguments FROM tool_calls"), default=str)
