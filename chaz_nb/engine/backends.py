"""Model backends: litellm for every model, with the offline ``chaz/*`` models as a provider.

The offline models are registered with litellm as a custom provider (``CustomLLM``) named
``chaz``, so demos and tests go through the very ``litellm.acompletion`` call that a real
model name (``gpt-4o-mini``, ``ollama_chat/llama3.1``, ...) takes.

litellm is imported in a background thread (``start_import``, which ``%load_ext`` calls;
else the first model call starts it), and the first call awaits that thread: the import
costs seconds, and on the kernel's event loop it would freeze everything else for as long.

Provider faults: a rate limit, a 5xx or a dropped connection gets ``num_retries`` more
attempts (this module's loop; what is retried and how a failure reads: ``faults.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import json
import logging
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol
from collections.abc import Sequence

from .faults import RETRY_AFTER_CAP, RETRY_BACKOFF, ProviderError, classify, provider_error, retry_after, retryable

__all__ = ["LiteLLMBackend", "ModelBackend", "ModelReply", "ProviderError", "ToolCallRequest", "Usage",
           "litellm_module", "litellm_ready", "start_import"]

log = logging.getLogger(__name__)

OFFLINE_PROVIDER = "chaz"
OFFLINE_MODELS = ("chaz/echo", "chaz/script")
#: more attempts after a rate limit, a 5xx or a dropped connection (per agent: max_retries)
DEFAULT_RETRIES = 2
#: seconds one model call may take (per agent: model_timeout)
DEFAULT_MODEL_TIMEOUT = 600.0
#: metadata key that carries an agent's script to the scripted model
SCRIPT_KEY = "chaz_script"
#: metadata key that asks the offline models for a summary (compaction)
TASK_KEY = "chaz_task"
#: metadata key: seconds the offline models wait before answering (simulates network latency)
DELAY_KEY = "chaz_delay"


@dataclass
class ToolCallRequest:
    id: str
    name: str
    arguments: str  # raw JSON text as the model sent it


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        if self.cost_usd is None or other.cost_usd is None:
            self.cost_usd = None
        else:
            self.cost_usd += other.cost_usd

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
        }


@dataclass
class ModelReply:
    content: str
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


class ModelBackend(Protocol):
    """What the runtime needs from a model: one chat completion."""

    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        script: list[Any] | None = None,
        options: dict[str, Any] | None = None,
    ) -> ModelReply: ...


def is_offline(model: str) -> bool:
    return model.startswith(OFFLINE_PROVIDER + "/")


# ------------------------------------------------------------------ litellm
_litellm: Any = None
_import_lock = threading.Lock()  # the import itself, once
_future_lock = threading.Lock()  # the thread that does it, once
_import_future: concurrent.futures.Future[Any] | None = None


def _import_litellm() -> Any:
    """Import litellm once, with the local cost map, and register the offline provider."""
    global _litellm
    with _import_lock:
        if _litellm is None:
            # Without this litellm fetches its price map from the network at import (slow, and
            # it warns on a machine with no network).
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            litellm.suppress_debug_info = True
            handler = _offline_handler_class()()
            if not any(p.get("provider") == OFFLINE_PROVIDER for p in litellm.custom_provider_map):
                litellm.custom_provider_map = [
                    *litellm.custom_provider_map,
                    {"provider": OFFLINE_PROVIDER, "custom_handler": handler},
                ]
            _warm_up(litellm)
            _litellm = litellm
    return _litellm


def _warm_up(litellm: Any) -> None:
    """First-use set-up that litellm and the OpenAI SDK would otherwise do inside the first
    call, on the caller's loop: provider lookup, the price map's first parse, pydantic models
    built lazily on first use (~0.3 s here), the logging set-up, response parsing types.

    A ``mock_response`` call goes through litellm's call path with no network.
    """
    try:
        litellm.get_model_info("gpt-4o-mini")
        litellm.completion(model="openai/chaz-warm-up", api_key="warm-up", mock_response="ok",
                           messages=[{"role": "user", "content": "warm up"}])
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        ChatCompletion.model_validate({
            "id": "w", "object": "chat.completion", "created": 0, "model": "w",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "w", "tool_calls": [
                             {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })
        ChatCompletionChunk.model_validate({
            "id": "w", "object": "chat.completion.chunk", "created": 0, "model": "w",
            "choices": [{"index": 0, "delta": {"content": "w"}, "finish_reason": None}],
        })
    except Exception:  # a warm-up only: the real call reports real problems
        log.debug("litellm warm-up failed", exc_info=True)
    for name in _FIRST_CALL_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # another litellm version may not have it
            log.debug("warm-up import of %s failed", name, exc_info=True)


#: modules litellm 1.110 imports inside its first real HTTP call (found by diffing sys.modules
#: around a first call to the wire fixture); ``default_encoding`` builds the tiktoken
#: tokenizer, the largest of them
_FIRST_CALL_IMPORTS = (
    "litellm._service_logger",
    "litellm.integrations.prometheus_services",
    "litellm.litellm_core_utils.default_encoding",
    "litellm.llms.ollama.chat.transformation",
    "httpcore",
    "h11",
)


def start_import() -> concurrent.futures.Future[Any]:
    """Start importing litellm in a background thread (once); the future gives the module.

    ``%load_ext chaz_nb`` calls this and does not wait: the import takes seconds, and on the
    kernel's loop it would freeze widgets, comms and every other run for that long.
    """
    global _import_future
    with _future_lock:
        if _import_future is None:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()

            def run() -> None:
                try:
                    future.set_result(_import_litellm())
                except BaseException as exc:  # handed to whoever awaits the import
                    future.set_exception(exc)

            threading.Thread(target=run, name="chaz-import-litellm", daemon=True).start()
            _import_future = future
        return _import_future



async def litellm_ready() -> Any:
    """litellm, imported off the event loop (the first call waits here without blocking it)."""
    if _litellm is not None:
        return _litellm
    return await asyncio.wrap_future(start_import())


def litellm_module() -> Any:
    """litellm for synchronous callers (blocks until the import is done; never call on a loop)."""
    if _litellm is not None:
        return _litellm
    return start_import().result()


class LiteLLMBackend:
    """Every model through ``litellm.acompletion``; the backend is chosen by the model string.

    Per call (from ``options``, which the server fills from the Agent): ``timeout`` bounds
    each attempt (enforced here, not only by the HTTP client), ``num_retries`` is how many
    more attempts a rate limit, a 5xx or a dropped connection gets. Retries are this loop's:
    litellm's and the OpenAI SDK's own are switched off so that ``retry-after`` is honoured
    (capped at ``retry_after_cap``) and the attempts are counted in one place.
    """

    def __init__(self, *, retry_after_cap: float = RETRY_AFTER_CAP, backoff: float = RETRY_BACKOFF) -> None:
        self.retry_after_cap = retry_after_cap
        self.backoff = backoff

    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        script: list[Any] | None = None,
        options: dict[str, Any] | None = None,
    ) -> ModelReply:
        litellm = await litellm_ready()
        kwargs: dict[str, Any] = dict(options or {})
        timeout = float(kwargs.pop("timeout", None) or DEFAULT_MODEL_TIMEOUT)
        retries = int(kwargs.pop("num_retries", DEFAULT_RETRIES) or 0)
        kwargs.pop("max_retries", None)
        if tools:
            kwargs["tools"] = list(tools)
        if is_offline(model):
            metadata = dict(kwargs.pop("metadata", None) or {})
            metadata[SCRIPT_KEY] = script
            kwargs["metadata"] = metadata
            retries = 0  # deterministic: another attempt gives the same answer
        else:
            kwargs.update(num_retries=0, max_retries=0, timeout=timeout)
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await asyncio.wait_for(
                    litellm.acompletion(model=model, messages=messages, **kwargs), timeout
                )
                return _reply_from_response(litellm, model, response)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_offline(model) and not isinstance(exc, asyncio.TimeoutError):
                    raise
                kind, status = classify(exc)
                if attempt > retries or not retryable(kind, status):
                    raise provider_error(exc, model, kwargs.get("api_base"), attempt, timeout, litellm) from exc
                asked = retry_after(exc)
                wait = asked if asked is not None else self.backoff * 2 ** (attempt - 1)
                log.info("model call %s failed (%s %s); attempt %d in %.2f s", model, kind, status or "",
                         attempt + 1, min(wait, self.retry_after_cap))
                await asyncio.sleep(min(wait, self.retry_after_cap))


def _reply_from_response(litellm: Any, model: str, response: Any) -> ModelReply:
    message = response.choices[0].message
    calls = [
        ToolCallRequest(
            id=call.id or f"call_{i}",
            name=call.function.name or "",
            arguments=call.function.arguments or "",
        )
        for i, call in enumerate(message.tool_calls or [])
    ]
    usage_obj = getattr(response, "usage", None)
    usage = Usage(
        prompt_tokens=int(getattr(usage_obj, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage_obj, "completion_tokens", 0) or 0),
        cost_usd=0.0 if is_offline(model) else _cost(litellm, model, response),
    )
    return ModelReply(content=message.content or "", tool_calls=calls, usage=usage)


#: models litellm's price map does not know: decided once per model, no more lookups
_UNPRICED: set[str] = set()


def _cost(litellm: Any, model: str, response: Any) -> float | None:
    """The call's price, or None (NULL, not a guess) for a model litellm cannot price.

    ``completion_cost`` of an unmapped model costs ~1-2 ms a call (it searches the price map
    several ways, then raises); that answer does not change within a process, so it is kept.
    """
    if model in _UNPRICED:
        return None
    try:
        return float(litellm.completion_cost(completion_response=response, model=model))
    except Exception as exc:
        if type(exc).__name__ == "ModelNotMappedError" or "not mapped" in str(exc).lower():
            _UNPRICED.add(model)
        return None


# ---------------------------------------------------------- offline models
def approx_tokens(text: str) -> int:
    return math.ceil(len(text) / 4) if text else 0


def last_user_index(messages: Sequence[dict[str, Any]]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


def echo_reply(messages: Sequence[dict[str, Any]]) -> str:
    i = last_user_index(messages)
    text = _text_of(messages[i]) if i >= 0 else ""
    return f"echo: {text}"


def summary_reply(messages: Sequence[dict[str, Any]]) -> str:
    """A deterministic summary: one line per user/assistant message, shortened."""
    lines = []
    for m in messages:
        if m.get("role") in ("user", "assistant"):
            text = " ".join(_text_of(m).split())
            lines.append(f"- {m['role']}: {text[:80]}")
    return "Summary of earlier conversation:\n" + "\n".join(lines[-20:])


def script_step(
    script: Sequence[Any], messages: Sequence[dict[str, Any]], tools_offered: bool
) -> str | list[dict[str, Any]]:
    """What the scripted model says next: a text reply or a list of tool calls.

    The position in the script is the number of assistant turns since the latest user
    message, so each run (which starts at a user-role Message or Directive) plays the script
    from its first step, and the same messages always give the same answer.
    """
    start = last_user_index(messages)
    step = sum(1 for m in messages[start + 1 :] if m.get("role") == "assistant")
    last_result = ""
    for m in reversed(messages):
        if m.get("role") == "tool":
            last_result = _text_of(m)
            break
    items = list(script)
    item = items[step] if step < len(items) else None
    if item is None:
        return last_result
    if isinstance(item, str):
        return item.replace("{result}", last_result)
    calls = item if isinstance(item, list) else [item]
    if not tools_offered:
        # A forced final answer (no tools offered): the next text of the script.
        for later in items[step:]:
            if isinstance(later, str):
                return later.replace("{result}", last_result)
        return last_result
    out = []
    for call in calls:
        if not isinstance(call, dict) or "tool" not in call:
            raise ValueError(
                f"script step {step + 1}: expected a string, {{\"tool\": NAME, \"args\": {{...}}}} "
                f"or a list of those, got {call!r}"
            )
        out.append({"name": call["tool"], "arguments": call.get("args", {})})
    return out


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _offline_handler_class() -> type:
    from litellm import CustomLLM, ModelResponse

    class OfflineModels(CustomLLM):
        """``chaz/echo`` and ``chaz/script``: deterministic models with no network."""

        def _respond(self, model: str, messages: list, optional_params: dict, litellm_params: dict) -> Any:
            metadata = (litellm_params or {}).get("metadata") or {}
            tools_offered = bool(optional_params.get("tools"))
            name = model.split("/", 1)[-1]
            if metadata.get(TASK_KEY) == "summarize":
                result: Any = summary_reply(messages)
            elif name == "echo":
                result = echo_reply(messages)
            elif name == "script":
                result = script_step(metadata.get(SCRIPT_KEY) or [], messages, tools_offered)
            else:
                raise ValueError(
                    f"unknown offline model chaz/{name}; offline models: {', '.join(OFFLINE_MODELS)}"
                )
            prompt = sum(approx_tokens(_text_of(m)) for m in messages)
            if isinstance(result, str):
                message: dict[str, Any] = {"role": "assistant", "content": result}
                finish = "stop"
                completion = approx_tokens(result)
            else:
                base = sum(1 for m in messages if m.get("role") == "assistant")
                tool_calls = [
                    {
                        "id": f"call_{base + 1}_{i + 1}",
                        "type": "function",
                        "function": {
                            "name": c["name"],
                            "arguments": c["arguments"]
                            if isinstance(c["arguments"], str)
                            else json.dumps(c["arguments"]),
                        },
                    }
                    for i, c in enumerate(result)
                ]
                message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
                finish = "tool_calls"
                completion = sum(approx_tokens(t["function"]["arguments"]) + 4 for t in tool_calls)
            return ModelResponse(
                model=model,
                choices=[{"index": 0, "message": message, "finish_reason": finish}],
                usage={
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            )

        def completion(self, model, messages, api_base, custom_prompt_dict, model_response,
                       print_verbose, encoding, api_key, logging_obj, optional_params,
                       acompletion=None, litellm_params=None, logger_fn=None, headers={},
                       timeout=None, client=None):  # noqa: B006 - litellm's signature
            return self._respond(model, messages, optional_params, litellm_params)

        async def acompletion(self, model, messages, api_base, custom_prompt_dict, model_response,
                              print_verbose, encoding, api_key, logging_obj, optional_params,
                              acompletion=None, litellm_params=None, logger_fn=None, headers={},
                              timeout=None, client=None):  # noqa: B006 - litellm's signature
            delay = ((litellm_params or {}).get("metadata") or {}).get(DELAY_KEY)
            if delay:
                await asyncio.sleep(float(delay))
            return self._respond(model, messages, optional_params, litellm_params)

    return OfflineModels
