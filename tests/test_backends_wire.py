"""Agents on real provider wire protocols: litellm's OpenAI and ollama_chat providers over a
127.0.0.1 socket (tests/fakes/openai_server.py), through the real Server.

What a user of a hosted or local model sees: replies, tool calls (parallel too), approvals,
spawned children, and each provider fault ending in one Error entry that says what failed and
what to do, after bounded retries, with the session usable afterwards.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from fakes.openai_server import Call, DropMidStream, RateLimit, Reply, ServerError, Slow
from chaz_nb.server.agents import Agent, AgentError
from chaz_nb.engine.backends import LiteLLMBackend
from chaz_nb.core.entries import EntryType as T
from chaz_nb.server import Server
from chaz_nb.engine.tools import ToolRegistry, tool
from waiting import until

KEY = "sk-wire-planted-0123456789abcdefghijklmn"

ran: list[tuple[str, str]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy to a target."""
    ran.append(("deploy", target))
    return f"deployed {target}"


@pytest.fixture(autouse=True)
def planted_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    ran.clear()


@pytest.fixture
def make(store, model_server, wire_backend):
    """A Server whose agents talk to the wire fixture, litellm in this process or in the model
    worker (``wire_backend``); retries wait 10 ms, not 0.5 s."""

    def build(*agents: Agent, backend: LiteLLMBackend | None = None) -> Server:
        return Server(store, list(agents), ToolRegistry([add, deploy]), backend=backend or wire_backend)

    return build


def wire_agent(name: str, base: str, model: str = "openai/fake", **kw) -> Agent:
    return Agent(name, model=model, api_base=base, **kw)


def kinds(store, session_id):
    return [e.entry_type.value for e in store.entries(session_id)]


def all_text(store) -> str:
    rows = store.execute("SELECT content, CAST(payload AS VARCHAR) FROM entries")
    return json.dumps(rows, default=str)


def written(store, entry_type: T) -> asyncio.Future:
    """A future resolved by the first entry of ``entry_type`` written from now on."""
    future = asyncio.get_running_loop().create_future()

    def on_write(entry):
        if entry.entry_type is entry_type and not future.done():
            future.set_result(entry)

    unsubscribe = store.subscribe(on_write)
    future.add_done_callback(lambda _: unsubscribe())
    return future


# ------------------------------------------------------------------ flows
async def test_plain_reply_comes_over_the_openai_wire(make, store, model_server):
    model_server.script(Reply("hello from the wire", prompt_tokens=21, completion_tokens=4))
    server = make(wire_agent("w", model_server.openai_base, system="Be brief."))
    s = server.current_session("w")
    reply = await (await server.send(s, "hi there")).wait()
    assert reply.entry_type is T.MESSAGE and reply.content == "hello from the wire"
    assert kinds(store, s) == ["Message", "Ack", "Message"]
    assert (reply.payload["prompt_tokens"], reply.payload["completion_tokens"]) == (21, 4)
    assert reply.payload["cost_usd"] is None  # a model litellm cannot price: NULL, not an error
    [req] = model_server.chat_requests()
    assert req.path == "/v1/chat/completions" and req.body["model"] == "fake"
    assert req.body["messages"] == [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "hi there"}]
    assert not model_server.unscripted


@pytest.mark.litellm_in_kernel
async def test_price_lookup_of_an_unpriced_model_happens_once(make, store, model_server, monkeypatch):
    from chaz_nb.engine import backends

    litellm = backends.litellm_module()
    lookups: list[str] = []
    real = litellm.completion_cost

    def counting(*args, **kwargs):
        lookups.append(kwargs.get("model"))
        return real(*args, **kwargs)

    monkeypatch.setattr(litellm, "completion_cost", counting)
    model = "openai/unpriced-once"
    model_server.script(Reply("one"), Reply("two"), Reply("three"))
    server = make(wire_agent("w", model_server.openai_base, model=model))
    s = server.current_session("w")
    for text in ("a", "b", "c"):
        reply = await (await server.send(s, text)).wait()
        assert reply.payload["cost_usd"] is None
    # ours: decided on the first reply, never asked again (with streaming on, litellm's own
    # stream logging also calls completion_cost, with no model argument: not ours to stop)
    assert [m for m in lookups if m is not None] == [model]


async def test_planted_key_reaches_the_server_but_no_entry(make, store, model_server):
    model_server.script(Reply(f"you sent {KEY}"), ServerError(500, f"bad header Authorization: Bearer {KEY}"))
    server = make(wire_agent("w", model_server.openai_base, max_retries=0))
    s = server.current_session("w")
    await (await server.send(s, f"my key is {KEY}")).wait()
    error = await (await server.send(s, "again")).wait()
    assert error.entry_type is T.ERROR
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in model_server.chat_requests())
    text = all_text(store)
    assert KEY not in text and "[REDACTED]" in text


async def test_tool_calls_in_parallel_over_the_wire(make, store, model_server):
    model_server.script(
        Reply(tool_calls=[Call("add", {"a": 2, "b": 3}), Call("add", {"a": 4, "b": 5})]),
        Reply("the sums are 5 and 9"),
    )
    server = make(wire_agent("calc", model_server.openai_base, tools=["add"]))
    s = server.current_session("calc")
    reply = await (await server.send(s, "add twice")).wait()
    assert reply.content == "the sums are 5 and 9"
    assert kinds(store, s) == ["Message", "Ack", "ToolCall", "ToolCall", "ToolResult", "ToolResult", "Message"]
    first, second = model_server.chat_requests()
    assert first.body["tools"][0]["function"]["name"] == "add"
    sent = second.body["messages"]
    assert [c["function"]["arguments"] for c in sent[-3]["tool_calls"]] == ['{"a": 2, "b": 3}', '{"a": 4, "b": 5}']
    assert [(m["role"], m["content"]) for m in sent[-2:]] == [("tool", "5"), ("tool", "9")]
    assert [m["tool_call_id"] for m in sent[-2:]] == [c["id"] for c in sent[-3]["tool_calls"]]
    assert reply.payload["steps"] == 2 and reply.payload["prompt_tokens"] == 22


async def test_approval_parks_a_wire_run_until_approved(make, store, model_server):
    model_server.script(Reply(tool_calls=[Call("deploy", {"target": "prod"})]), Reply("shipped"))
    server = make(wire_agent("ops", model_server.openai_base, tools=["deploy"]))
    s = server.current_session("ops")
    asked = written(store, T.APPROVAL_REQUEST)
    handle = await server.send(s, "ship it")
    await asked
    assert server.session_status(s) == "parked" and ran == []
    assert len(model_server.chat_requests()) == 1  # the model waits with the run
    [req] = server.pending_approvals()
    assert server.decide(req["request_id"], "approve")[0]
    reply = await handle.wait()
    assert reply.content == "shipped" and ran == [("deploy", "prod")]
    assert model_server.chat_requests()[1].body["messages"][-1]["content"] == "deployed prod"


async def test_spawned_child_runs_on_its_own_wire_model(make, store, model_server):
    model_server.script(
        Reply(tool_calls=[Call("spawn_agent", {"agent": "child", "task": "add 2 and 3"})]),
        Reply("parent: the child says 5"),
        model="parent-model",
    )
    model_server.script(Reply(tool_calls=[Call("add", {"a": 2, "b": 3})]), Reply("5"), model="child-model")
    server = make(
        wire_agent("parent", model_server.openai_base, model="openai/parent-model", tools=["spawn_agent"]),
        wire_agent("child", model_server.openai_base, model="openai/child-model", tools=["add"]),
    )
    p = server.current_session("parent")
    reply = await (await server.send(p, "delegate")).wait()
    assert reply.content == "parent: the child says 5"
    [child] = [x for x in store.sessions() if x.parent_id == p]
    assert kinds(store, child.id) == ["Directive", "Ack", "ToolCall", "ToolResult", "Message"]
    assert [r.body["model"] for r in model_server.chat_requests()] == [
        "parent-model", "child-model", "child-model", "parent-model"]
    assert model_server.pending() == 0


async def test_ollama_chat_dialect_with_a_tool_call(make, store, model_server):
    model_server.script(Reply(tool_calls=[Call("add", {"a": 1, "b": 2})]), Reply("three"))
    server = make(wire_agent("local", model_server.ollama_base, model="ollama_chat/llama3.1", tools=["add"]))
    s = server.current_session("local")
    reply = await (await server.send(s, "1 + 2?")).wait()
    assert reply.content == "three"
    assert kinds(store, s) == ["Message", "Ack", "ToolCall", "ToolResult", "Message"]
    first, second = model_server.chat_requests()
    assert first.path == "/api/chat" and first.body["model"] == "llama3.1"
    assert second.body["messages"][-1]["role"] == "tool" and second.body["messages"][-1]["content"] == "3"
    assert reply.payload["prompt_tokens"] == 22


def test_api_base_must_be_a_url():
    with pytest.raises(AgentError, match="api_base must be an http"):
        Agent("w", model="openai/x", api_base="localhost:8000")
    with pytest.raises(AgentError, match="max_retries"):
        Agent("w", model="openai/x", max_retries=-1)
    with pytest.raises(AgentError, match="model_timeout"):
        Agent("w", model="openai/x", model_timeout=0)


def test_a_model_call_may_take_600_s_unless_the_agent_says_otherwise():
    assert Agent("w", model="openai/x").call_options()["timeout"] == 600
    assert Agent("w", model="openai/x", model_timeout=30).call_options()["timeout"] == 30


# ------------------------------------------------------------------ faults
async def test_rate_limit_is_retried_after_what_retry_after_asks(make, store, model_server):
    model_server.script(RateLimit(retry_after=0.3), Reply("made it"))
    server = make(wire_agent("w", model_server.openai_base))
    s = server.current_session("w")
    reply = await (await server.send(s, "hi")).wait()
    assert reply.content == "made it"
    first, second = model_server.chat_requests()
    assert second.at - first.at >= 0.3  # not the 10 ms backoff: the provider's retry-after
    assert kinds(store, s) == ["Message", "Ack", "Message"]  # a retry that worked leaves no trace


async def test_retry_after_wait_is_capped(store, model_server, make, wire_backend):
    if not isinstance(wire_backend, LiteLLMBackend):
        pytest.skip("the cap is LiteLLMBackend's, the same code in the worker (a worker of its own costs an import)")
    model_server.script(RateLimit(retry_after=60), Reply("made it"))
    server = make(wire_agent("w", model_server.openai_base), backend=LiteLLMBackend(retry_after_cap=0.05))
    reply = await asyncio.wait_for((await server.send(server.current_session("w"), "hi")).wait(), 20)
    assert reply.content == "made it"


async def test_rate_limit_past_the_retries_is_one_error_and_the_session_goes_on(make, store, model_server):
    model_server.script(RateLimit(0.01), RateLimit(0.01), Reply("back again"))
    server = make(wire_agent("w", model_server.openai_base, max_retries=1))
    s = server.current_session("w")
    error = await (await server.send(s, "hi")).wait()
    assert len(model_server.chat_requests()) == 2  # one try + max_retries
    assert error.entry_type is T.ERROR
    assert "openai/fake (openai at http://127.0.0.1:" in error.content
    assert "HTTP 429 after 2 attempts" in error.content and "wait, then send the message again" in error.content
    assert "\n" not in error.content
    assert (error.payload["status"], error.payload["attempts"], error.payload["provider"]) == (429, 2, "openai")
    assert kinds(store, s) == ["Message", "Ack", "Error"]
    reply = await (await server.send(s, "and now?")).wait()
    assert reply.content == "back again"


async def test_server_error_is_retried_then_reported(make, store, model_server):
    model_server.script(ServerError(500), ServerError(503), ServerError(500))
    server = make(wire_agent("w", model_server.openai_base))  # default: 2 retries
    error = await (await server.send(server.current_session("w"), "hi")).wait()
    assert len(model_server.chat_requests()) == 3
    assert "HTTP 500 after 3 attempts" in error.content and "The provider failed" in error.content
    assert error.payload["error_kind"] == "http"


async def test_client_error_is_not_retried(make, store, model_server):
    model_server.script(ServerError(404, "The model `fake` does not exist"))
    server = make(wire_agent("w", model_server.openai_base))
    error = await (await server.send(server.current_session("w"), "hi")).wait()
    assert len(model_server.chat_requests()) == 1
    assert "HTTP 404" in error.content and "does not exist" in error.content
    assert "Check the model name and the agent's api_base" in error.content


async def test_dropped_connection_is_retried(make, store, model_server):
    # dropped before any reply text (the role chunk only): nothing was shown, so it is retried
    model_server.script(DropMidStream(after_chunks=1), Reply("second try"))
    server = make(wire_agent("w", model_server.openai_base))
    reply = await (await server.send(server.current_session("w"), "hi")).wait()
    assert reply.content == "second try" and len(model_server.chat_requests()) == 2


async def test_dropped_connection_past_the_retries_says_so(make, store, model_server):
    model_server.script(DropMidStream(after_chunks=1), Reply("next message"))
    server = make(wire_agent("w", model_server.openai_base, max_retries=0))
    s = server.current_session("w")
    error = await (await server.send(s, "hi")).wait()
    assert error.entry_type is T.ERROR and "lost the connection" in error.content
    assert "check that the server at http://127.0.0.1:" in error.content
    assert error.payload["error_kind"] == "connection" and error.payload["status"] is None
    assert (await (await server.send(s, "again")).wait()).content == "next message"


async def test_slow_reply_hits_the_agents_timeout_and_is_not_retried(make, store, model_server):
    model_server.script(Slow(30), Reply("on time"))
    server = make(wire_agent("w", model_server.openai_base, model_timeout=0.3))
    s = server.current_session("w")
    error = await asyncio.wait_for((await server.send(s, "hi")).wait(), 10)
    assert error.entry_type is T.ERROR
    assert "timed out after 0.3 s" in error.content and "raise the agent's model_timeout" in error.content
    assert len(model_server.chat_requests()) == 1
    assert (await (await server.send(s, "again")).wait()).content == "on time"


async def test_malformed_tool_call_json_goes_back_to_the_model(make, store, model_server):
    model_server.script(Reply(tool_calls=[Call("add", raw='{"a": 2, "b":')]), Reply("sorry, let me answer: 5"))
    server = make(wire_agent("calc", model_server.openai_base, tools=["add"]))
    s = server.current_session("calc")
    reply = await (await server.send(s, "add")).wait()
    assert reply.content == "sorry, let me answer: 5"
    call, result = store.entries(s)[2:4]
    assert call.entry_type is T.TOOL_CALL and call.payload["arguments"] == '{"a": 2, "b":'
    assert result.payload["is_error"] is True and "not valid JSON" in result.payload["output"]
    assert "not valid JSON" in model_server.chat_requests()[1].body["messages"][-1]["content"]


# ------------------------------------------------------------------ keys
async def test_a_missing_key_is_one_line_naming_the_variable_and_no_retries(make, store, monkeypatch):
    """After a kernel restart OPENAI_API_KEY is gone: the Error names it, nothing is retried,
    and it does not read as the provider's HTTP 500."""
    monkeypatch.delenv("OPENAI_API_KEY")
    server = make(wire_agent("w", "https://llm.example.invalid/v1"))
    error = await asyncio.wait_for((await server.send(server.current_session("w"), "hi")).wait(), 20)
    assert error.entry_type is T.ERROR and "\n" not in error.content
    assert "set OPENAI_API_KEY" in error.content and "(%env or os.environ)" in error.content
    assert "HTTP 500" not in error.content and "attempts" not in error.content and "later" not in error.content
    assert (error.payload["error_kind"], error.payload["attempts"]) == ("missing_key", 1)


async def test_a_server_on_this_machine_needs_no_key(make, store, model_server, monkeypatch):
    """llama.cpp or vLLM on 127.0.0.1 asks for no key: an agent there works with none set."""
    monkeypatch.delenv("OPENAI_API_KEY")
    model_server.script(Reply("local hello"))
    server = make(wire_agent("w", model_server.openai_base))
    reply = await (await server.send(server.current_session("w"), "hi")).wait()
    assert reply.content == "local hello"
    [req] = model_server.chat_requests()
    assert req.headers["authorization"] == "Bearer sk-chaz-local-no-key"


# ------------------------------------------------------------------ tools the model cannot take
async def test_a_server_that_refuses_the_tools_says_they_never_reached_the_model(make, store, model_server):
    model_server.script(ServerError(500, "tools param requires --jinja flag"))
    server = make(wire_agent("w", model_server.openai_base, tools=["add"]))
    error = await (await server.send(server.current_session("w"), "add 2 and 3")).wait()
    assert len(model_server.chat_requests()) == 1  # refused the same way every time: not retried
    assert error.entry_type is T.ERROR and "tools never reached the model" in error.content
    assert "--jinja" in error.content and error.payload["error_kind"] == "tools_unsupported"


@pytest.mark.litellm_in_kernel
async def test_a_model_that_takes_no_tools_is_noted_once_in_its_session(make, store, model_server, monkeypatch):
    """litellm's model info says the model calls no tools: the session says so, once."""
    from chaz_nb.engine.backends import litellm_ready

    litellm = await litellm_ready()
    monkeypatch.setitem(litellm.model_cost, "openai/fake",
                        {"litellm_provider": "openai", "mode": "chat", "supports_function_calling": False})
    model_server.script(Reply("it is 5, I think"), Reply("and 9"))
    server = make(wire_agent("w", model_server.openai_base, tools=["add"]))
    s = server.current_session("w")
    assert (await (await server.send(s, "add 2 and 3")).wait()).content == "it is 5, I think"
    await until(lambda: any(e.entry_type is T.ERROR for e in store.entries(s)), store.subscribe,
                what="the note")
    assert (await (await server.send(s, "add 4 and 5")).wait()).content == "and 9"
    [note] = [e for e in store.entries(s) if e.entry_type is T.ERROR]
    assert note.payload["note"] is True and "does not take tools" in note.content and "openai/fake" in note.content
    assert all(r.body.get("tools") for r in model_server.chat_requests())  # still offered: the note says why


async def test_a_model_litellm_does_not_know_gets_no_note(make, store, model_server):
    model_server.script(Reply("hi"))
    server = make(wire_agent("w", model_server.openai_base, tools=["add"]))
    s = server.current_session("w")
    await (await server.send(s, "hi")).wait()
    assert [e.entry_type.value for e in store.entries(s)] == ["Message", "Ack", "Message"]


async def test_a_server_whose_template_leaves_out_the_tools_is_noted_once(make, store, model_server):
    """llama.cpp takes the tools with a template that drops them; its /props says so: noted once."""
    model_server.props = {"chat_template_caps": {"supports_tools": False, "supports_tool_calls": False}}
    model_server.script(Reply("the total is 42"), Reply("and 7"), Reply("hello"))
    server = make(wire_agent("w", model_server.openai_base, tools=["add"]))
    s = server.current_session("w")
    assert (await (await server.send(s, "total of sales?")).wait()).content == "the total is 42"
    await until(lambda: any(e.entry_type is T.ERROR for e in store.entries(s)), store.subscribe, what="the note")
    assert (await (await server.send(s, "and returns?")).wait()).content == "and 7"
    other = server.new_session("w")
    assert (await (await server.send(other, "hi")).wait()).content == "hello"
    await until(lambda: any(e.entry_type is T.ERROR for e in store.entries(other)), store.subscribe,
                what="the other session's note")
    [note] = [e for e in store.entries(s) if e.entry_type is T.ERROR]
    assert note.payload["note"] is True and "\n" not in note.content
    assert f"127.0.0.1:{model_server.port}" in note.content and "takes no tools" in note.content
    asked = model_server.props_requests
    assert len(asked) == 1 and "authorization" not in asked[0].headers  # once per server, no key sent
    assert [e.entry_type.value for e in store.entries(s)].count("Message") == 4  # the runs went on


@pytest.mark.parametrize("props, says", [
    ({"chat_template_caps": {"supports_tools": False}}, False),
    ({"chat_template_caps": {"supports_tools": True}}, True),
    (None, None),  # a 404: another kind of server
    ({"chat_template_caps": {"supports_tools": "no"}}, None),
    ({"build_info": "b1"}, None),
])
def test_what_a_servers_props_say_of_its_template(model_server, props, says):
    from chaz_nb.server.template_caps import template_takes_tools

    model_server.props = props
    assert template_takes_tools(model_server.openai_base) is says


def test_a_server_that_does_not_answer_says_nothing_of_its_template():
    import socket

    from chaz_nb.server.template_caps import template_takes_tools

    with socket.socket() as listening:  # accepts (the backlog) and never answers
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        assert template_takes_tools(f"http://user:pw@127.0.0.1:{port}/v1", timeout=0.2) is None
    assert template_takes_tools("ftp://127.0.0.1/v1") is None
