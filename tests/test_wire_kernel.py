"""The four example flows in a real kernel, with agents on the OpenAI wire (the local fixture):
plain reply, tool call, approval, spawn; the key from the environment reaches the server only; a
streamed reply grows on screen (iopub) while the store gets only its final Message."""

from __future__ import annotations

import json

import pytest

from fakes.openai_server import Call, Reply
from chaz_nb.notebook.views.session import MIME_TYPE as SESSION_MIME
from kernel_harness import Kernel
from view_text import rows

KEY = "sk-kernel-planted-0123456789abcdefghij"

SETUP = '''
import chaz_nb

@chaz_nb.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

@chaz_nb.tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy."""
    return f"deployed {target}"
'''


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    from fakes.openai_server import FakeModelServer

    server = FakeModelServer()
    k = Kernel(str(tmp_path_factory.mktemp("kernel")), env={"CHAZ_DB": ":memory:", "OPENAI_API_KEY": KEY})
    base = server.openai_base
    for cell in ("%load_ext chaz_nb", SETUP,
                 f"%chaz agent w --model openai/w --api-base {base} --tools add",
                 f"%chaz agent ops --model openai/ops --api-base {base} --tools deploy",
                 f"%chaz agent boss --model openai/boss --api-base {base} --tools spawn_agent",
                 f"%chaz agent helper --model openai/helper --api-base {base} --tools add"):
        r = k.run(cell, timeout=120)
        assert r.status == "ok", (cell, r.outputs)
    yield k, server
    k.close()
    server.close()


def latest(k: Kernel, agent: str) -> str:
    r = k.run(f"s = chaz_nb.current(); e = s.store.latest(s.current_session('{agent}')); "
              "print(e.entry_type.value, '|', e.content)")
    return r.stdout.strip()


def test_plain_reply_and_tool_call_in_a_kernel(wire):
    k, server = wire
    server.script(Reply("hello from the wire"), model="w")
    r = k.run("%chaz @w hello", timeout=120)
    assert r.status == "ok", r.outputs
    assert latest(k, "w") == "Message | hello from the wire"
    assert any("hello from the wire" in t for t in r.texts())
    server.script(Reply(tool_calls=[Call("add", {"a": 2, "b": 3})]), Reply("2 + 3 = 5"), model="w")
    assert k.run("%chaz @w add 2 and 3", timeout=60).status == "ok"
    assert latest(k, "w") == "Message | 2 + 3 = 5"
    assert server.chat_requests()[-1].body["messages"][-1] == {
        "role": "tool", "tool_call_id": server.chat_requests()[-1].body["messages"][-2]["tool_calls"][0]["id"],
        "content": "5"}


def test_approval_in_a_kernel(wire):
    k, server = wire
    server.script(Reply(tool_calls=[Call("deploy", {"target": "prod"})]), Reply("shipped prod"), model="ops")
    r = k.run("%chaz @ops ship it", timeout=60)
    assert r.status == "ok" and any("%chaz approve last" in t for t in r.texts())  # the card says how
    assert k.run("%chaz approve last").stdout.strip() == "deploy: approve by user"
    assert k.run("%chaz wait", timeout=60).status == "ok"
    assert latest(k, "ops") == "Message | shipped prod"


def test_spawn_in_a_kernel(wire):
    k, server = wire
    server.script(Reply(tool_calls=[Call("spawn_agent", {"agent": "helper", "task": "add 1 and 2"})]),
                  Reply("helper says 3"), model="boss")
    server.script(Reply("3"), model="helper")
    assert k.run("%chaz @boss delegate", timeout=60).status == "ok"
    assert latest(k, "boss") == "Message | helper says 3"
    assert [r.body["model"] for r in server.chat_requests()[-3:]] == ["boss", "helper", "boss"]


def test_the_key_reaches_the_server_and_no_entry(wire):
    k, server = wire
    server.script(Reply("pong"), model="w")
    assert k.run("%chaz @w ping", timeout=60).status == "ok"
    assert {r.headers.get("authorization") for r in server.chat_requests()} == {f"Bearer {KEY}"}
    r = k.run("import json; print(json.dumps(chaz_nb.current().store.execute("
              "'SELECT content, CAST(payload AS VARCHAR) FROM entries'), default=str))")
    assert r.status == "ok" and KEY not in r.stdout and json.loads(r.stdout)
    assert not server.unscripted


def test_a_streamed_reply_grows_on_screen_before_its_message_in_a_kernel(wire):
    k, server = wire
    text = " ".join(f"word{i}" for i in range(14))
    server.script(Reply(text, chunk_delay=0.15), model="w")  # ~2.4 s of streaming

    r = k.run("%chaz @w say fourteen words", timeout=120)

    assert r.status == "ok", r.outputs
    # the display_id updates (static form) show the text so far, growing, before the reply
    updates = [m["content"]["data"] for m in r.of("display_data", "update_display_data")]
    partials = [line[len("w: "):-len(" …")] for d in updates for line in rows(d.get("text/plain", ""))
                if line.startswith("w: word") and line.endswith(" …")]
    assert len(set(partials)) >= 2, partials  # more than one snapshot: it grew
    assert all(text.startswith(p.rstrip()) for p in partials) and len(partials[0]) < len(text)
    assert [len(p) for p in partials] == sorted(len(p) for p in partials)
    streams = [d[SESSION_MIME]["stream"]["text"] for d in updates if "stream" in d.get(SESSION_MIME, {})]
    assert streams and all(text.startswith(s.rstrip()) for s in streams)  # the lab renderer's data
    # the live widget got the partial block too (its one widget's updates carry the HTML)
    widget_values = [str(m["content"]["data"].get("content", {}).get("tail", "")) for m in r.of("comm_msg")]
    assert any("chaz-partial" in v for v in widget_values)
    last = updates[-1]
    assert f"w: {text}" in rows(last["text/plain"]) and "stream" not in last[SESSION_MIME]
    # the store has the reply once, as one Message: the text so far was never an entry
    r = k.run("s = chaz_nb.current(); sid = s.current_session('w'); es = s.store.entries(sid); "
              "i = max(i for i, e in enumerate(es) if e.content == 'say fourteen words'); "
              "print([(e.entry_type.value, e.content) for e in es[i + 1:]])")
    assert r.stdout.strip() == repr([("Ack", "w is working"), ("Message", text)])
