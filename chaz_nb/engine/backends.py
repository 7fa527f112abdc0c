"""Model backends: the reply types, the ``ModelBackend`` protocol, and ``LiteLLMBackend``.

Every model goes through litellm, the offline ``chaz/*`` models (``offline_models.py``)
included, as a provider of their own. litellm itself is loaded off the loop by
``litellm_loader.py``; this module makes the calls and assembles their replies.

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
import logging
import os
import urllib.parse
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol
from collections.abc import Callable, Sequence

from .faults import (RETRY_AFTER_CAP, RETRY_BACKOFF, ProviderError, classify, provider_error, retry_after,
                     retryable, stream_broken)
# re-exported: litellm's loading is litellm_loader's, these three are this module's API too
from .litellm_loader import litellm_loaded, litellm_module, litellm_ready, start_import, tokenizer_ready
from .offline_models import SCRIPT_KEY, is_offline
from .streaming import StreamAssembly

#: what a streaming call hands each piece of reply text to
DeltaCallback = Callable[[str], None]

__all__ = ["LiteLLMBackend", "ModelBackend", "ModelReply", "ProviderError", "ToolCallRequest", "Usage",
           "litellm_module", "litellm_ready", "refuses_tools", "start_import"]

log = logging.getLogger(__name__)

#: more attempts after a rate limit, a 5xx or a dropped connection (per agent: max_retries)
DEFAULT_RETRIES = 2
#: seconds one model call may take (per agent: model_timeout)
DEFAULT_MODEL_TIMEOUT = 600.0
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

    def loading(self) -> bool:
        """Whether a call would wait for litellm's import now (seconds after ``%load_ext``)."""
        return not litellm_loaded()

    async def refuses_tools(self, model: str) -> bool:
        """Whether litellm's model info says ``model`` takes no tools (see ``refuses_tools``)."""
        return refuses_tools(await litellm_ready(), model)

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
            if _needs_local_key(litellm, model, kwargs):
                kwargs["api_key"] = LOCAL_PLACEHOLDER_KEY
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


#: the key sent to an OpenAI-compatible server on this machine when none is set: such servers
#: (llama.cpp, vLLM, Ollama's /v1) ask for none, but the OpenAI SDK refuses to call without one.
#: A server that does want a key answers 401, which says to set OPENAI_API_KEY.
LOCAL_PLACEHOLDER_KEY = "sk-chaz-local-no-key"
_OPENAI_KEYED = frozenset({"openai", "text-completion-openai", "custom_openai", "openai_like"})
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


def _needs_local_key(litellm: Any, model: str, kwargs: dict[str, Any]) -> bool:
    """Whether a call to a loopback ``api_base`` of an OpenAI-compatible model has no key at all
    (not in ``model_options``, not in the environment): then it gets ``LOCAL_PLACEHOLDER_KEY``."""
    base = kwargs.get("api_base")
    if not base or kwargs.get("api_key") or os.environ.get("OPENAI_API_KEY") or getattr(litellm, "api_key", None):
        return False
    host = (urllib.parse.urlsplit(str(base)).hostname or "").lower()
    if host not in _LOOPBACK and not host.startswith("127."):
        return False
    provider = model.split("/", 1)[0] if "/" in model else ""
    return provider in _OPENAI_KEYED


def refuses_tools(litellm: Any, model: str) -> bool:
    """Whether litellm's model info says ``model`` takes no tools (``supports_function_calling``
    false). A model it does not know is not judged: ``supports_function_calling`` says False for
    any unknown one, a local server's model included."""
    if is_offline(model):
        return False
    cost = getattr(litellm, "model_cost", None) or {}
    info = cost.get(model) or (cost.get(model.split("/", 1)[1]) if "/" in model else None)
    return isinstance(info, dict) and info.get("supports_function_calling") is False


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

