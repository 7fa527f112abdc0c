import asyncio

import pytest

from chaz_nb.server.agents import Agent, AgentError
from chaz_nb.core.entries import EntryType as T
from chaz_nb.errors import ServerError
from chaz_nb.server import Server
from chaz_nb.engine.tools import ToolRegistry, tool

from waiting import until


@pytest.fixture
def store(backend_store):
    """Every case on DuckDB and on PostgreSQL (tests/conftest.py's backend_store)."""
    return backend_store


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool
def explode() -> str:
    """Fails."""
    raise ValueError("no such file")


@pytest.fixture
def server(store):
    return Server(
        store,
        [
            Agent("assistant"),
            Agent(
                "calc",
                model="chaz/script",
                tools=["add"],
                script=[{"tool": "add", "args": {"a": 2, "b": 3}}, "sum is {result}"],
            ),
            Agent("quiet", model="chaz/script", script=[""]),
        ],
        ToolRegistry([add, explode]),
    )


def types(store, session_id):
    return [(e.entry_type.value, e.sender) for e in store.entries(session_id)]


async def test_message_runs_agent_and_records_the_turn(server, store):
    s = server.current_session("calc")
    handle = await server.send(s, "add please")
    reply = await handle.wait()
    assert reply.content == "sum is 5" and reply.sender == "calc"
    assert types(store, s) == [
        ("Message", "user"), ("Ack", "calc"), ("ToolCall", "calc"), ("ToolResult", "calc"), ("Message", "calc"),
    ]
    call, result = store.entries(s)[2:4]
    assert call.content == 'add({"a": 2, "b": 3})' and call.payload["arguments"] == {"a": 2, "b": 3}
    assert result.content == "add: 5" and result.payload["output"] == "5" and result.payload["is_error"] is False
    assert call.tool_call_id == result.tool_call_id
    ack = store.entries(s)[1]
    assert {call.payload["run_id"], result.payload["run_id"], reply.payload["run_id"]} == {ack.id}
    assert reply.payload["steps"] == 2 and reply.payload["cost_usd"] == 0.0


async def test_agent_replies_never_retrigger(server, store):
    s = server.current_session("assistant")
    await (await server.send(s, "hi")).wait()
    await server.wait_idle(5)
    assert types(store, s) == [("Message", "user"), ("Ack", "assistant"), ("Message", "assistant")]
    # a Message written by a known agent is ignored
    assert server.post(s, T.MESSAGE, "talking to myself", sender="assistant") is None
    assert not server.is_busy(s)


async def test_directive_from_any_sender_triggers(server, store):
    s = server.current_session("assistant")
    handle = server.post(s, T.DIRECTIVE, "do the thing", sender="calc")
    assert (await handle.wait()).content == "echo: do the thing"


async def test_other_entry_types_are_ignored(server, store):
    s = server.current_session("assistant")
    for etype in (T.ACK, T.ERROR, T.TOOL_CALL, T.TOOL_RESULT, T.SUMMARY, T.APPROVAL_REQUEST, T.APPROVAL_DECISION):
        assert server.post(s, etype, "x", sender="user") is None
    assert not server.is_busy(s)


async def test_message_during_a_run_queues_one_more_run(store):
    from chaz_nb.engine.backends import ModelReply

    gate = asyncio.Event()
    at_model = asyncio.Event()

    class Gated:
        """Echoes the last user message; the first call waits for the gate."""

        calls = 0

        async def complete(self, model, messages, tools=None, *, script=None, options=None):
            Gated.calls += 1
            if Gated.calls == 1:
                at_model.set()
                await gate.wait()
            return ModelReply("echo: " + [m for m in messages if m["role"] == "user"][-1]["content"])

    server = Server(store, [Agent("assistant")], backend=Gated())
    s = server.current_session("assistant")
    first = await server.send(s, "one")
    await asyncio.wait_for(at_model.wait(), 30)  # the first run has read its context and is at the model
    second = await server.send(s, "two")
    third = await server.send(s, "three")
    assert server.session_status(s) == "running"
    gate.set()
    assert (await first.wait()).content == "echo: one"
    follow_up = await second.wait()
    assert follow_up.content == "echo: three"  # one run on the updated context answers both
    assert (await third.wait()) == follow_up
    replies = [e.content for e in store.entries(s) if e.entry_type is T.MESSAGE and e.sender == "assistant"]
    assert replies == ["echo: one", "echo: three"]
    assert Gated.calls == 2
    assert server.session_status(s) == "idle"
    # each run's Ack says which Messages it answers: the follow-up answers two together
    acks = [e.payload for e in store.entries(s) if e.entry_type is T.ACK]
    assert [(a["answers"], a["answers_count"]) for a in acks] == [
        ([first.trigger.id], 1), ([second.trigger.id, third.trigger.id], 2),
    ]
    assert acks[1]["trigger_id"] == third.trigger.id


async def test_every_message_of_a_burst_is_in_exactly_one_ack(store):
    server = Server(store, [Agent("assistant")])
    s = server.current_session("assistant")
    handles = await asyncio.gather(*(server.send(s, f"m{i}") for i in range(200)))
    outcomes = await asyncio.gather(*(h.wait() for h in handles))
    await server.wait_idle(10)
    acks = [e for e in store.entries(s) if e.entry_type is T.ACK]
    answered = [i for a in acks for i in a.payload["answers"]]
    assert sorted(answered) == sorted(h.trigger.id for h in handles)
    assert len(answered) == len(set(answered)) == 200
    by_run = {}
    for ack in acks:
        ids = ack.payload["answers"]
        seqs = [store.entry(i).seq for i in ids]
        assert seqs == sorted(seqs) and ack.payload["answers_count"] == len(ids)
        assert ack.payload["trigger_id"] == ids[-1]  # the run answers on the newest of them
        by_run.update({i: ack.id for i in ids})
    # each Message's handle gets the reply of the run that lists it
    for handle, outcome in zip(handles, outcomes, strict=True):
        assert outcome.payload["run_id"] == by_run[handle.trigger.id]
    assert len(acks) < 200  # a burst is answered together, not one reply per Message


async def test_silent_turn_writes_no_message(server, store):
    s = server.current_session("quiet")
    assert await (await server.send(s, "anything?")).wait() is None
    assert types(store, s) == [("Message", "user"), ("Ack", "quiet"), ("Ack", "quiet")]
    closing = store.latest(s)
    assert closing.payload["status"] == "silent" and closing.payload["run_id"] == store.entries(s)[1].id


async def test_model_error_writes_one_line_error_entry(store):
    server = Server(
        store, [Agent("flaky", model="gpt-4o-mini", model_options={"mock_response": "litellm.InternalServerError"})]
    )
    s = server.current_session("flaky")
    outcome = await (await server.send(s, "hi")).wait()
    assert outcome.entry_type is T.ERROR and outcome.sender == "flaky"
    assert outcome.content.startswith("model call failed:") and "\n" not in outcome.content
    assert [e.entry_type for e in store.entries(s)] == [T.MESSAGE, T.ACK, T.ERROR]


async def test_litellm_model_string_takes_the_same_path(store):
    server = Server(store, [Agent("gpt", model="gpt-4o-mini", model_options={"mock_response": "hello there"})])
    reply = await (await server.send(server.current_session("gpt"), "hi")).wait()
    assert reply.content == "hello there" and reply.payload["model"] == "gpt-4o-mini"


async def test_raising_tool_is_an_error_result_not_a_crash(store):
    server = Server(
        store,
        [Agent("x", model="chaz/script", script=[{"tool": "explode", "args": {}}, "after: {result}"])],
        ToolRegistry([explode]),
    )
    reply = await (await server.send(server.current_session("x"), "go")).wait()
    assert reply.content == "after: ValueError: no such file"
    result = [e for e in store.entries(reply.session_id) if e.entry_type is T.TOOL_RESULT][0]
    assert result.payload["is_error"] is True


@tool
def unwritable() -> str:
    """Returns what the store below refuses."""
    return "refuse-me"


@pytest.fixture
def refuses_marked_text(store):
    """``store`` refuses (any write failure) every entry whose text holds ``refuse-me``; returns
    the store's own redaction, to put back."""
    plain = store.redact

    def refusing(text: str) -> str:
        if "refuse-me" in text:
            raise ValueError("this text cannot be stored")
        return plain(text)

    store.redact = refusing
    return plain


async def test_tool_events_the_store_refuses_leave_an_error_entry_not_a_silent_gap(store, refuses_marked_text):
    """When the store could not write a run's ToolCall/ToolResult (any write failure), the event
    writer only logged it: the tool had run and the session's log showed no sign of the call."""
    server = Server(
        store,
        [Agent("x", model="chaz/script", script=[{"tool": "unwritable", "args": {}}, "done"])],
        ToolRegistry([unwritable]),
    )
    reply = await (await server.send(server.current_session("x"), "go")).wait()
    errors = [e for e in store.entries(reply.session_id) if e.entry_type is T.ERROR]
    assert len(errors) == 1
    assert "could not write" in errors[0].content and "unwritable" in errors[0].content
    assert "this text cannot be stored" in errors[0].content
    assert errors[0].payload["unwritten_run"] == reply.payload["run_id"]  # not the run's end: no run_id


async def test_a_reply_the_store_refuses_closes_the_run_with_an_error_and_releases_the_wait(
    store, refuses_marked_text
):
    """When the store refused the reply (any write failure), the run task died with the
    exception: no closing entry (the runs view said running for good) and ``handle.wait()``
    never returned. The run now ends with an Error that says so, and the next message runs."""
    server = Server(store, [Agent("x", model="chaz/script", script=["refuse-me"])])
    s = server.current_session("x")
    outcome = await asyncio.wait_for((await server.send(s, "go")).wait(), 30)
    assert outcome.entry_type is T.ERROR and outcome.payload["run_id"] is not None
    assert "could not write the reply" in outcome.content and "this text cannot be stored" in outcome.content
    assert store.read("SELECT status FROM runs") == [("error",)]
    store.redact = refuses_marked_text  # its own redaction back: the session is not stuck: the next message is answered
    assert (await asyncio.wait_for((await server.send(s, "again")).wait(), 30)).entry_type is T.MESSAGE


async def test_tool_outside_the_agents_scope_is_refused(store):
    server = Server(
        store,
        [Agent("x", model="chaz/script", tools=["add"], script=[{"tool": "explode", "args": {}}, "{result}"])],
        ToolRegistry([add, explode]),
    )
    reply = await (await server.send(server.current_session("x"), "go")).wait()
    assert reply.content == "unknown tool 'explode'; tools available: add"


async def test_concurrent_model_calls_are_capped(store):
    peak = 0
    active = 0
    full = asyncio.Event()  # as many calls at the model as the cap allows

    class Counting:
        async def complete(self, model, messages, tools=None, *, script=None, options=None):
            nonlocal peak, active
            from chaz_nb.engine.backends import ModelReply
            active += 1
            peak = max(peak, active)
            if active == 3:
                full.set()
            # the calls overlap until the cap is reached, however slow the machine
            await asyncio.wait_for(full.wait(), 30)
            active -= 1
            return ModelReply("ok")

    server = Server(store, [Agent("a")], backend=Counting(), max_concurrent_calls=3)
    handles = [await server.send(server.new_session("a"), str(i)) for i in range(10)]
    await asyncio.gather(*(h.wait() for h in handles))
    assert peak == 3


async def test_stop_cancels_runs_and_records_interruption(store):
    at_model = asyncio.Event()

    class Hang:
        async def complete(self, *a, **k):
            at_model.set()
            await asyncio.Event().wait()  # until cancelled

    server = Server(store, [Agent("a")], backend=Hang())
    s = server.current_session("a")
    handle = await server.send(s, "wait forever")
    await asyncio.wait_for(at_model.wait(), 30)  # the run is in flight, at the model
    await server.stop()
    assert await handle.wait() is None
    assert store.latest(s).entry_type is T.ERROR and "interrupted" in store.latest(s).content
    assert server.post(s, T.MESSAGE, "after stop") is None


async def test_a_run_stopped_once_its_ack_has_landed_is_closed_under_that_run(store):
    class Hang:  # the model call starts before the Ack lands (it is written behind)
        async def complete(self, *a, **k):
            await asyncio.Event().wait()  # until cancelled

    server = Server(store, [Agent("a")], backend=Hang())
    s = server.current_session("a")
    handle = await server.send(s, "hi")
    await until(lambda: store.latest(s).entry_type is T.ACK, store.subscribe, what="the Ack")
    await server.stop()
    assert await handle.wait() is None
    closing = store.latest(s)
    assert (closing.entry_type, closing.content) == (T.ERROR, "interrupted: run cancelled")
    assert closing.payload["run_id"] == store.entries(s)[1].id  # the run the Ack opened is closed


async def test_stop_returns_once_a_run_stopped_before_its_ack_landed_is_closed(store):
    at_model = asyncio.Event()

    class Hang:  # reached while the run's Ack still waits in its commit window
        async def complete(self, *a, **k):
            at_model.set()
            await asyncio.Event().wait()

    server = Server(store, [Agent("a")], backend=Hang())
    s = server.current_session("a")
    handle = await server.send(s, "hi")
    await asyncio.wait_for(at_model.wait(), 30)
    assert [e.entry_type for e in store.entries(s)] == [T.MESSAGE]  # the Ack has not landed
    await server.stop()
    # stop has waited for the Ack and for the entry that closes the run it opened
    message, ack, closing = store.entries(s)
    assert ack.entry_type is T.ACK and ack.run_id == ack.id
    assert (closing.entry_type, closing.content) == (T.ERROR, "interrupted: run cancelled")
    assert closing.payload["run_id"] == ack.id
    assert await handle.wait() is None


def test_bad_agent_definitions_say_what_to_change():
    with pytest.raises(AgentError, match="must start with a letter"):
        Agent("1bad")
    with pytest.raises(AgentError, match="reserved"):
        Agent("user")
    with pytest.raises(AgentError, match="needs a script"):
        Agent("s", model="chaz/script")


def test_unknown_agent_lists_known_names(server):
    with pytest.raises(ServerError, match="unknown agent 'nobody'; known agents: assistant, calc, quiet"):
        server.current_session("nobody")


def test_post_without_a_running_loop_is_a_clear_error(store):
    server = Server(store, [Agent("a")])
    with pytest.raises(ServerError, match="running asyncio event loop"):
        server.post(server.current_session("a"), T.MESSAGE, "hi")
    # refused before the write: nothing half-done is left behind
    assert store.latest(server.current_session("a")) is None


async def test_new_session_starts_fresh_context(server, store):
    first = server.current_session("assistant")
    await (await server.send(first, "remember me")).wait()
    second = server.new_session("assistant")
    assert second != first and server.current_session("assistant") == second


def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def script_agent(tool_name):
    return Agent("calc", model="chaz/script", tools=[tool_name],
                 script=[{"tool": tool_name, "args": {"a": 2, "b": 3}}, "got {result}"])


@pytest.mark.parametrize(
    "tools",
    [
        pytest.param(lambda: [mul, add], id="list of a plain function and a tool"),
        pytest.param(lambda: (mul,), id="tuple"),
        pytest.param(lambda: (t for t in [add, mul]), id="generator"),
        pytest.param(lambda: ToolRegistry([mul]), id="registry"),
    ],
)
async def test_tools_may_be_any_iterable_of_tools_or_functions(store, tools):
    server = Server(store, [script_agent("mul")], tools=tools())
    reply = await (await server.send(server.current_session("calc"), "go")).wait()
    assert reply.content == "got 6"
    assert server.tools.get("mul").parameters["required"] == ["a", "b"]
    assert "spawn_agent" in server.tools


@pytest.mark.parametrize(
    "tools, message",
    [
        (add, "wrap one tool in a list: tools=[add]"),
        (mul, "wrap one tool in a list: tools=[mul]"),
        ("add", "not str"),
        ({"add": add}, "not dict"),
        (42, "not int"),
        ([add, "mul"], "item 1 is 'mul' (str)"),
        ([None], "item 0 is None"),
    ],
)
def test_tools_that_are_not_a_list_of_tools_are_one_clear_type_error(store, tools, message):
    with pytest.raises(TypeError, match="^Server\\(tools=\\.\\.\\.\\) takes") as info:
        Server(store, [Agent("assistant")], tools=tools)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert store.sessions() == []  # nothing was written or subscribed

class _Unprintable:
    def __str__(self):
        raise ValueError("broken __str__")

    __repr__ = __str__


@tool
def unprintable() -> object:
    """Returns a value that cannot be shown as text."""
    return _Unprintable()


async def test_an_unprintable_tool_result_is_that_calls_error_and_the_run_still_replies(store):
    srv = Server(store, [Agent("p", model="chaz/script", tools=["add", "unprintable"],
                               script=[[{"tool": "unprintable", "args": {}}, {"tool": "add", "args": {"a": 1, "b": 2}}],
                                       "done"])],
                 ToolRegistry([add, unprintable]))
    s = srv.current_session("p")
    reply = await (await srv.send(s, "go")).wait()
    assert reply.entry_type is T.MESSAGE and reply.content == "done"
    results = {e.tool_name: e for e in store.entries(s) if e.entry_type is T.TOOL_RESULT}
    assert sorted(results) == ["add", "unprintable"]
    assert results["add"].payload["output"] == "3" and not results["add"].payload["is_error"]
    bad = results["unprintable"].payload
    assert bad["is_error"] and bad["output"].startswith("unprintable returned a _Unprintable that cannot be shown")
    assert not [e for e in store.entries(s) if e.entry_type is T.ERROR]


async def test_an_agents_max_tool_output_clips_what_the_model_is_sent_not_the_log(store):
    from recording import Recording

    @tool
    def dump() -> str:
        """A big output."""
        return "y" * 5000

    backend = Recording()
    agent = Agent("big", model="chaz/script", tools=["dump"], script=[{"tool": "dump"}, "ok"], max_tool_output=300)
    server = Server(store, [agent], ToolRegistry([dump]), backend=backend)
    s = server.current_session("big")
    await (await server.send(s, "go")).wait()
    sent = [m for m in backend.calls[-1][0] if m["role"] == "tool"][0]["content"]
    assert sent.startswith("y" * 300) and "4,700 more characters cut" in sent
    result = [e for e in store.entries(s) if e.entry_type is T.TOOL_RESULT][0]
    assert result.payload["output"] == "y" * 5000  # the audit trail keeps the whole output
    with pytest.raises(AgentError, match="max_tool_output must be a positive integer"):
        Agent("x", max_tool_output=0)
    await server.stop()


def test_an_agents_repr_masks_keys_given_in_its_model_options():
    """``model_options={"api_key": ...}`` (or a credential header) is a key given literally: a
    cell that ends with the Agent, or ``server.agents``, put it in the notebook."""
    agent = Agent("k", model="openai/gpt-x", model_options={
        "api_key": "literal-corp-key-zzz", "temperature": 0.2,
        "extra_headers": {"X-Custom-Auth": "hdr-secret-999", "Authorization": "Bearer abc-123-secret"},
    })
    shown = repr(agent)
    for secret in ("literal-corp-key-zzz", "hdr-secret-999", "abc-123-secret"):
        assert secret not in shown
    assert "'temperature': 0.2" in shown and "model='openai/gpt-x'" in shown and "X-Custom-Auth" in shown
    assert agent.model_options["api_key"] == "literal-corp-key-zzz"  # the call still gets it


@tool
def prints_config() -> str:
    """Prints a config line with a password near the 500-character cut of the ToolResult text."""
    import os

    return "x" * 490 + " pw=" + os.environ["MY_SERVICE_PASSWORD"] + " end"


async def test_a_secret_the_tool_result_text_cuts_in_two_is_not_left_half_shown(store, monkeypatch):
    """The ToolResult's content is the output cut at 500 characters, and the cut came before the
    store's redaction: a password straddling the cut no longer matched, so its first part
    ("pw=Hunte…") was written while the full output in the payload said [REDACTED]."""
    monkeypatch.setenv("MY_SERVICE_PASSWORD", "Hunter2-very-secret-pw")
    server = Server(store, [Agent("x", model="chaz/script", script=[{"tool": "prints_config", "args": {}}, "ok"])],
                    ToolRegistry([prints_config]))
    reply = await (await server.send(server.current_session("x"), "go")).wait()
    [result] = [e for e in store.entries(reply.session_id) if e.entry_type is T.TOOL_RESULT]
    assert "Hunte" not in result.content and "Hunte" not in result.payload["output"]
    assert "pw=[REDA" in result.content  # the mask itself may be cut
