"""What a person approves is every token that runs (issue 41 §1): kernel__run code is masked by
its literals alone on the card (text and HTML), in the Edit box, ``%chaz pending``, the ToolCall
entry and ``tool_calls``; code a mask would hide code with, or too long to show whole, does not
run; the log keeps the code that ran and its sha256 (on DuckDB and on PostgreSQL)."""

from __future__ import annotations

import hashlib
import json

import pytest

from chaz_nb.core.codemask import MARK
from chaz_nb.core.entries import EntryType as T
from chaz_nb.notebook.views.approval import card_html, card_text, edit_text, request_info
from chaz_nb.server import Server
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent

from waiting import until

EXEC = "exec(chr(82)+chr(65)+chr(78)+chr(61)+chr(49))"  # sets RAN = 1


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
    "f(api_key=0);" + EXEC,
]


@pytest.mark.parametrize("code", HIDDEN_AFTER)
async def test_no_view_hides_code_after_a_credential_name(store, code):
    server, ns = make(store, code)
    handle = await server.send(server.current_session("coder"), "go")
    request = await parked(server)
    for where, text in views_of(server, request).items():
        assert "exec(chr(82)+chr(65)" in text, (where, text)  # the code that runs is shown, everywhere
        assert "[REDACTED]" not in text.split("#")[0] or "#" in code, (where, text)
    ok, message = server.decide(request["request_id"], "approve")
    assert ok, message
    await handle.wait()
    [[ran, digest]] = store.execute("SELECT arguments, code_sha256 FROM tool_calls")
    assert "exec(chr(82)+chr(65)" in as_json(ran)["code"] and digest == sha(code)
