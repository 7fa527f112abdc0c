"""The offline models go through the real litellm.acompletion call (custom provider)."""

import json

import pytest

from chaz_nb.engine.backends import LiteLLMBackend, ProviderError


@pytest.fixture
def backend():
    return LiteLLMBackend()


async def test_echo_model_echoes_the_last_user_message(backend):
    reply = await backend.complete(
        "chaz/echo",
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "hello"}],
    )
    assert reply.content == "echo: hello"
    assert reply.tool_calls == []
    assert reply.usage.prompt_tokens > 0 and reply.usage.cost_usd == 0.0


async def test_script_model_plays_tool_calls_then_text(backend):
    script = [
        {"tool": "add", "args": {"a": 1}},
        [{"tool": "x", "args": {}}, {"tool": "y", "args": {"k": 2}}],
        "done: {result}",
    ]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "go"}]
    first = await backend.complete("chaz/script", msgs, tools, script=script)
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [("add", {"a": 1})]
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "1", "content": "r1"},
    ]
    second = await backend.complete("chaz/script", msgs, tools, script=script)
    assert [c.name for c in second.tool_calls] == ["x", "y"]
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "2", "content": "r2"},
    ]
    third = await backend.complete("chaz/script", msgs, tools, script=script)
    assert third.content == "done: r2"


async def test_unknown_offline_model_is_a_clear_error(backend):
    with pytest.raises(Exception, match="unknown offline model chaz/nope"):
        await backend.complete("chaz/nope", [{"role": "user", "content": "x"}])


async def test_real_model_name_goes_through_litellm_with_mock_response(backend):
    """A real provider string takes the same path; litellm's own mock stands in for the API."""
    reply = await backend.complete(
        "gpt-4o-mini", [{"role": "user", "content": "hi"}], options={"mock_response": "hello from mock"}
    )
    assert reply.content == "hello from mock"
    assert reply.usage.cost_usd is None or reply.usage.cost_usd >= 0


async def test_transient_errors_are_retried_then_reported_in_one_line(monkeypatch):
    import litellm

    calls = []
    original = litellm.acompletion

    async def spy(*args, **kwargs):
        calls.append((kwargs.get("num_retries"), kwargs.get("max_retries")))
        return await original(*args, **kwargs)

    monkeypatch.setattr(litellm, "acompletion", spy)
    with pytest.raises(ProviderError) as info:
        await LiteLLMBackend(backoff=0.001).complete(
            "gpt-4o-mini", [{"role": "user", "content": "x"}],
            options={"mock_response": "litellm.InternalServerError", "num_retries": 2})
    # three attempts, each with litellm's and the OpenAI SDK's own retries off (ours count)
    assert calls == [(0, 0)] * 3
    assert str(info.value).startswith("gpt-4o-mini (openai) returned HTTP 500 after 3 attempts")
    assert info.value.details() == {"error_kind": "http", "status": 500, "provider": "openai", "attempts": 3}


async def test_offline_models_are_not_retried(backend, monkeypatch):
    import litellm

    calls = []
    original = litellm.acompletion

    async def spy(*args, **kwargs):
        calls.append(kwargs["model"])
        return await original(*args, **kwargs)

    monkeypatch.setattr(litellm, "acompletion", spy)
    with pytest.raises(Exception, match="unknown offline model"):
        await backend.complete("chaz/bogus", [{"role": "user", "content": "x"}], options={"num_retries": 3})
    assert calls == ["chaz/bogus"]
