"""Loading litellm: imported once in a background thread, warmed up, its tokenizer built apart.

litellm is imported in a background thread (``start_import``, which ``%load_ext`` calls;
else the first model call starts it), and the first call awaits that thread: the import
costs seconds, and on the kernel's event loop it would freeze everything else for as long.
The import registers the offline ``chaz/*`` models (``offline_models.py``) as a provider and
does litellm's first-call set-up (``_warm_up``); litellm's tokenizer is built only when the
first streamed call needs it (``tokenizer_ready``). The module state (the imported module, the
import's and the tokenizer's futures) lives here and nowhere else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import importlib
import logging
import os
import threading
from typing import Any
from collections.abc import Iterator

from .offline_models import OFFLINE_MODELS, OFFLINE_PROVIDER, offline_handler_class

__all__ = ["TOKENIZER_MODULE", "litellm_loaded", "litellm_module", "litellm_ready", "start_import", "tokenizer_ready"]

log = logging.getLogger(__name__)

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
        handler = offline_handler_class()()
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


def litellm_loaded() -> bool:
    """Whether litellm is imported and warmed up (a model call need not wait for it)."""
    return _litellm is not None


def litellm_module() -> Any:
    """litellm for synchronous callers (blocks until the import is done; never call on a loop)."""
    if _litellm is not None:
        return _litellm
    return start_import().result()

