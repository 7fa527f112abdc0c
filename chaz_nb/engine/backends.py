"""Model backends: litellm for every model, with the offline ``chaz/*`` models as a provider.

The offline models are registered with litellm as a custom provider (``CustomLLM``) named
``chaz``, so demos and tests go through the very ``litellm.acompletion`` call that a real
model name (``gpt-4o-mini``, ``ollama_chat/llama3.1``, ...) takes.

litellm is imported in a background thread (``start_import``, which ``%load_ext`` calls;
else the first model call starts it), and the first call awaits that thread: the import
costs seconds, and on the kernel's event loop it would freeze everything else for as long.

Provider faults: a rate limit, a 5xx or a dropped connection gets ``num_retries`` more
attempts (this module's loop; what is retried and how a failure reads: ``faults.py``).

Streaming: when the caller gives ``on_delta``, the call is made with ``stream=True`` (and
``stream_options={"include_usage": True}`` where the provider takes it) and each piece of
reply text is handed to ``on_delta(text)`` as it arrives; the reply returned is the same
``ModelReply`` a whole response gives (assembly: ``streaming.py``). Retries apply until the
first text delta; a stream that breaks after it is not retried (the user saw part of a reply)
and fails with a ``ProviderError`` whose ``partial_text`` is that text. The offline models
stream too, word by word, through litellm's ``CustomLLM`` streaming hooks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import importlib
import json
import logging
import math
import os
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol
from collections.abc import Callable, Iterator, Sequence

from .faults import (RETRY_AFTER_CAP, RETRY_BACKOFF, ProviderError, classify, provider_error, retry_after,
                     retryable, stream_broken)
from .streaming import StreamAssembly, words

#: what a streaming call hands each piece of reply text to
DeltaCallback = Callable[[str], None]

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
#: metadata key: seconds the offline models wait before each streamed word (none by default)
WORD_DELAY_KEY = "chaz_word_delay"
#: providers litellm takes ``stream_options`` from (the others send usage on their own).
#: Without it a vLLM-style server (``hosted_vllm/``; llama.cpp's too) sends no usage in a
#: stream, and litellm fills in its own estimate instead of the server's counts.
_STREAM_OPTIONS_PROVIDERS = frozenset({"openai", "azure", "text-completion-openai", "openai_like", "custom_openai",
                                       "hosted_vllm"})


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
    """What the runtime needs from a model: one chat completion.

    A backend that can stream says so with a true ``streams`` attribute; only then does the
    runtime pass ``on_delta`` (so a backend without the parameter keeps working).
    """

    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        script: list[Any] | None = None,
        options: dict[str, Any] | None = None,
    ) -> ModelReply: ...


def streams(backend: Any) -> bool:
    """Whether ``backend.complete`` takes ``on_delta`` (see ``ModelBackend``)."""
    return bool(getattr(backend, "streams", False))


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
            _import_and_warm_up()
    return _litellm


def _import_and_warm_up() -> None:
    global _litellm
    with _no_collection():
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
        _price_offline_models(litellm)
        _warm_up(litellm)
        _litellm = litellm


def _price_offline_models(litellm: Any) -> None:
    """The offline models in litellm's price map, at zero (they cost nothing, and their Usage
    says 0.0 already).

    litellm prices every call for its own success logging, on the loop; for a model missing
    from its map it searches the map several ways and raises, ~2-3 ms a call (issue 30:
    about half of an offline streamed call's cost under load). Models of real providers are
    left as they are: a price litellm does not know is not made up.
    """
    zero = {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "cache_creation_input_token_cost": 0.0,
            "cache_read_input_token_cost": 0.0, "litellm_provider": OFFLINE_PROVIDER, "mode": "chat"}
    try:
        litellm.register_model({model: dict(zero) for model in OFFLINE_MODELS})
    except Exception:  # another litellm version: the calls are priced (slowly) as before
        log.debug("could not register the offline models' prices", exc_info=True)


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """No cyclic garbage collection while litellm imports; its objects frozen afterwards.

    The import builds some 3,000 modules' worth of long-lived objects, and every full (gen-2)
    collection it triggers walks all of them while holding the GIL: 100-200 ms each, five or
    six times, with the kernel loop unable to run meanwhile (bench/bench_loop_stall.py
    --why). Those objects live as long as the kernel, so ``gc.freeze()`` moves them out of the
    collector's sight: later full collections (on the loop) do not walk them either.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


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
#: around a first call to the wire fixture). Not its tiktoken tokenizer: see ``tokenizer_ready``;
#: not httpcore / h11 either: litellm's calls go through httpx2 here, and a turn never imported
#: them (~2 MB held for nothing; issue 32)
_FIRST_CALL_IMPORTS = (
    "litellm._service_logger",
    "litellm.integrations.prometheus_services",
    "litellm.llms.ollama.chat.transformation",
)

#: builds litellm's tiktoken tokenizer (cl100k) when imported: ~40 MB held for the kernel's life
TOKENIZER_MODULE = "litellm.litellm_core_utils.default_encoding"
_tokenizer_future: concurrent.futures.Future[None] | None = None


def _start_tokenizer() -> concurrent.futures.Future[None]:
    """Build litellm's tokenizer in a background thread (once); the future says when it is built."""
    global _tokenizer_future
    with _future_lock:
        if _tokenizer_future is None:
            future: concurrent.futures.Future[None] = concurrent.futures.Future()

            def run() -> None:
                try:
                    importlib.import_module(TOKENIZER_MODULE)
                except Exception:  # another litellm version: the call builds what it needs
                    log.debug("building litellm's tokenizer failed", exc_info=True)
                future.set_result(None)

            threading.Thread(target=run, name="chaz-build-tokenizer", daemon=True).start()
            _tokenizer_future = future
        return _tokenizer_future


async def tokenizer_ready() -> None:
    """litellm's tokenizer, built off the loop; awaited before a streamed call.

    litellm 1.110 counts a streamed call's prompt tokens with tiktoken when the stream starts
    (its price estimate of the stream object), whatever the provider reports later; a whole
    reply never needs it. Building it (one 35-50 ms Rust call, ~40 MB) on the loop would stall
    it, and building it in the import's warm-up made every kernel hold it (issue 32, a lean
    kernel: only a kernel that streams holds it).
    """
    future = _tokenizer_future
    if future is not None and future.done():
        return
    await asyncio.shield(asyncio.wrap_future(_start_tokenizer()))


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
                except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the import
                    future.set_exception(exc)

            threading.Thread(target=run, name="chaz-import-litellm", daemon=True).start()
            _import_future = future
        return _import_future



async def litellm_ready() -> Any:
    """litellm, imported off the event loop (the first call waits here without blocking it)."""
    if _litellm is not None:
        return _litellm
    # shielded: a run cancelled while it waits (a stop) must not cancel the one import every
    # run of the process shares (wrap_future passes a cancel on to the thread's future)
    return await asyncio.shield(asyncio.wrap_future(start_import()))


def litellm_module() -> Any:
    """litellm for synchronous callers (blocks until the import is done; never call on a loop)."""
    if _litellm is not None:
        return _litellm
    return start_import().result()


#: set around a model call by whoever wants to know when its request leaves: called once per
#: attempt, from litellm's pre-call log hook (``logger_fn``), as litellm hands the request to the
#: provider's HTTP client; possibly on a worker thread. The server commits the run's Ack then,
#: so that the commit falls while the request is on the wire (server/run.py).
REQUEST_LEAVING: ContextVar[Callable[[], None] | None] = ContextVar("chaz_request_leaving", default=None)


def _on_leaving(leaving: Callable[[], None]) -> Callable[[Any], None]:
    """A ``logger_fn`` that calls ``leaving`` at its first call (litellm calls it again after)."""
    called = False

    def logger_fn(_details: Any) -> None:
        nonlocal called
        if not called:
            called = True
            leaving()

    return logger_fn


class LiteLLMBackend:
    """Every model through ``litellm.acompletion``; the backend is chosen by the model string.

    Per call (from ``options``, which the server fills from the Agent): ``timeout`` bounds
    each attempt (enforced here, not only by the HTTP client), ``num_retries`` is how many
    more attempts a rate limit, a 5xx or a dropped connection gets. Retries are this loop's:
    litellm's and the OpenAI SDK's own are switched off so that ``retry-after`` is honoured
    (capped at ``retry_after_cap``) and the attempts are counted in one place.
    """

    #: ``complete`` takes ``on_delta`` (see ``ModelBackend``)
    streams = True

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
        on_delta: DeltaCallback | None = None,
    ) -> ModelReply:
        """One chat completion; streamed (text to ``on_delta``) when ``on_delta`` is given."""
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
        if on_delta is not None:
            await tokenizer_ready()
            kwargs["stream"] = True
            if _takes_stream_options(litellm, model):
                kwargs["stream_options"] = {"include_usage": True}
        leaving = REQUEST_LEAVING.get()
        attempt = 0
        while True:
            attempt += 1
            assembly = StreamAssembly()
            if leaving is not None and not is_offline(model):
                kwargs["logger_fn"] = _on_leaving(leaving)
            try:
                if on_delta is not None:
                    return await asyncio.wait_for(
                        self._stream(litellm, model, messages, kwargs, assembly, on_delta), timeout)
                response = await asyncio.wait_for(
                    litellm.acompletion(model=model, messages=messages, **kwargs), timeout
                )
                return _reply_from_response(litellm, model, response)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if assembly.partial_text:
                    # The user saw part of this reply: no second attempt, and the text is kept.
                    error = provider_error(exc, model, kwargs.get("api_base"), attempt, timeout, litellm)
                    raise stream_broken(error, assembly.partial_text) from exc
                if is_offline(model) and not isinstance(exc, asyncio.TimeoutError):
                    raise
                kind, status = classify(exc)
                if attempt > retries or not retryable(kind, status):
                    raise provider_error(exc, model, kwargs.get("api_base"), attempt, timeout, litellm,
                                         max_tokens=kwargs.get("max_tokens"),
                                         newest_alone=_newest_alone(messages)) from exc
                asked = retry_after(exc)
                wait = asked if asked is not None else self.backoff * 2 ** (attempt - 1)
                log.info("model call %s failed (%s %s); attempt %d in %.2f s", model, kind, status or "",
                         attempt + 1, min(wait, self.retry_after_cap))
                await asyncio.sleep(min(wait, self.retry_after_cap))


    @staticmethod
    async def _stream(litellm: Any, model: str, messages: list[dict[str, Any]], kwargs: dict[str, Any],
                      assembly: StreamAssembly, on_delta: DeltaCallback) -> ModelReply:
        response = await litellm.acompletion(model=model, messages=messages, **kwargs)
        async for chunk in response:
            text = assembly.add(chunk)
            if text:
                try:
                    on_delta(text)
                except Exception:  # a view's problem must not end the model call
                    log.exception("on_delta callback failed")
        return _reply_from_stream(litellm, model, messages, assembly)


def _newest_alone(messages: Sequence[dict[str, Any]]) -> bool:
    """Whether the context is the newest message and system prompts only (nothing to drop)."""
    return sum(1 for m in messages if m.get("role") != "system") <= 1


def _takes_stream_options(litellm: Any, model: str) -> bool:
    if is_offline(model):
        return False
    try:
        provider = litellm.get_llm_provider(model)[1]
    except Exception:  # noqa: BLE001 - a model litellm cannot place: no stream_options, the call decides
        return False
    return provider in _STREAM_OPTIONS_PROVIDERS


def _reply_from_stream(litellm: Any, model: str, messages: list[dict[str, Any]],
                       assembly: StreamAssembly) -> ModelReply:
    calls = [ToolCallRequest(id=i, name=n, arguments=a) for i, n, a in assembly.tool_calls()]
    usage_obj = assembly.reported_usage()
    free = is_offline(model) or model in _UNPRICED  # no price to work out
    # litellm's whole-response view only where the usage did not come with the stream, or for
    # a priced model's cost (its price needs the whole response): ~3 ms of the loop a call
    built = assembly.built(litellm, messages) if usage_obj is None or not free else None
    if usage_obj is None:
        usage_obj = getattr(built, "usage", None)
    usage = Usage(
        prompt_tokens=int(getattr(usage_obj, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage_obj, "completion_tokens", 0) or 0),
        cost_usd=0.0 if is_offline(model) else (_cost(litellm, model, built) if built is not None else None),
    )
    return ModelReply(content=assembly.partial_text, tool_calls=calls, usage=usage)


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
    except Exception as exc:  # noqa: BLE001 - litellm raises a bare Exception for an unpriced model
        # Models missing from litellm's price map: NULL cost, not a guess, and not asked again.
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

        def _answer(self, model: str, messages: list, optional_params: dict,
                    litellm_params: dict) -> tuple[dict[str, Any], str, dict[str, int]]:
            """The reply message, its finish reason and its usage."""
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
                tool_calls: list[dict[str, Any]] = [
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
            usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
            return message, finish, usage

        def _respond(self, model: str, messages: list, optional_params: dict, litellm_params: dict) -> Any:
            message, finish, usage = self._answer(model, messages, optional_params, litellm_params)
            return ModelResponse(model=model, choices=[{"index": 0, "message": message, "finish_reason": finish}],
                                 usage=usage)

        def _chunks(self, model: str, messages: list, optional_params: dict,
                    litellm_params: dict) -> Iterator[dict[str, Any]]:
            """The same reply as litellm's generic stream chunks: the text word by word, each
            tool call whole, the usage on the last chunk."""
            message, finish, usage = self._answer(model, messages, optional_params, litellm_params)

            def chunk(text: str = "", tool_use: Any = None, last: bool = False) -> dict[str, Any]:
                return {"text": text, "tool_use": tool_use, "is_finished": last, "index": 0,
                        "finish_reason": finish if last else "", "usage": usage if last else None}

            for word in words(message.get("content") or ""):
                yield chunk(word)
            for i, call in enumerate(message.get("tool_calls") or []):
                yield chunk(tool_use={**call, "index": i})
            yield chunk(last=True)

        def completion(self, model, messages, api_base, custom_prompt_dict, model_response,
                       print_verbose, encoding, api_key, logging_obj, optional_params,
                       acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                       timeout=None, client=None):
            return self._respond(model, messages, optional_params, litellm_params)

        async def acompletion(self, model, messages, api_base, custom_prompt_dict, model_response,
                              print_verbose, encoding, api_key, logging_obj, optional_params,
                              acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                              timeout=None, client=None):
            delay = ((litellm_params or {}).get("metadata") or {}).get(DELAY_KEY)
            if delay:
                await asyncio.sleep(float(delay))
            return self._respond(model, messages, optional_params, litellm_params)

        def streaming(self, model, messages, api_base, custom_prompt_dict, model_response,
                      print_verbose, encoding, api_key, logging_obj, optional_params,
                      acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                      timeout=None, client=None):
            delay = float(((litellm_params or {}).get("metadata") or {}).get(WORD_DELAY_KEY) or 0)
            for piece in self._chunks(model, messages, optional_params, litellm_params):
                if delay and piece["text"]:
                    time.sleep(delay)
                yield piece

        async def astreaming(self, model, messages, api_base, custom_prompt_dict, model_response,
                             print_verbose, encoding, api_key, logging_obj, optional_params,
                             acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                             timeout=None, client=None):
            metadata = (litellm_params or {}).get("metadata") or {}
            if metadata.get(DELAY_KEY):
                await asyncio.sleep(float(metadata[DELAY_KEY]))
            word_delay = float(metadata.get(WORD_DELAY_KEY) or 0)
            for piece in self._chunks(model, messages, optional_params, litellm_params):
                if word_delay and piece["text"]:
                    await asyncio.sleep(word_delay)  # only when the agent asks (a demo of streaming)
                yield piece

    return OfflineModels
