"""Provider faults: which failed model calls are retried, and the one line a user is shown.

A rate limit (429), a 5xx or a dropped connection is worth another attempt; the wait is what
the provider's ``retry-after`` (or ``retry-after-ms``) asks, at most ``RETRY_AFTER_CAP``
seconds, else an exponential backoff. A timeout is not retried (the agent already waited its
whole ``model_timeout``), nor is any other 4xx. What still fails becomes a ``ProviderError``
whose text names the model, the provider, the address (never ``user:password@``) and the
status, and says what to do; it never carries a key or a header value.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import re
import time
import urllib.parse
from typing import Any

from ..core.redaction import redact_then_cut
from ..core.window import budget_for_window
from ..errors import ProviderError


#: HTTP statuses worth another attempt: rate limits and the provider's own failures
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
#: the longest chaz_nb waits between attempts, whatever ``retry-after`` asks for
RETRY_AFTER_CAP = 30.0
#: first backoff when the provider gives no ``retry-after`` (doubles per attempt)
RETRY_BACKOFF = 0.5


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked to wait (``retry-after-ms`` / ``retry-after``), if it did."""
    for e in _chain(exc):
        for headers in (getattr(getattr(e, "response", None), "headers", None), getattr(e, "headers", None),
                        getattr(e, "litellm_response_headers", None)):
            if not headers:
                continue
            try:
                ms = headers.get("retry-after-ms")
                if ms is not None:
                    return max(0.0, float(ms) / 1000)
                value = headers.get("retry-after")
            except (AttributeError, TypeError, ValueError):
                continue
            if value is None:
                continue
            try:
                return max(0.0, float(value))
            except ValueError:
                try:  # an HTTP date
                    when = email.utils.parsedate_to_datetime(value)
                    return max(0.0, when.timestamp() - time.time())
                except (TypeError, ValueError):
                    continue
    return None


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


#: how a provider's SDK (through litellm) says no key was given: the OpenAI SDK ("Missing
#: credentials ... set the `OPENAI_API_KEY` ... environment variable", older "The api_key client
#: option must be set"), litellm's own checks ("Missing Anthropic API Key"). No request was made.
_NO_KEY = re.compile(r"missing credentials|api_key client option must be set|missing [\w ]*api[ _]key"
                     r"|no (?:api )?key is set", re.IGNORECASE)
#: the environment variable a missing-key message names
_KEY_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9]*_API_KEY\b")


def missing_key_variable(exc: BaseException, provider: str) -> str | None:
    """The environment variable to set when ``exc`` says no key was given (else None): the one
    the message names, or ``PROVIDER_API_KEY``."""
    for e in _chain(exc):
        text = str(getattr(e, "message", None) or e)
        if _NO_KEY.search(text):
            named = _KEY_VARIABLE.search(text)
            return named.group(0) if named else f"{(provider or 'OPENAI').upper()}_API_KEY"
    return None


#: litellm's words for a model string it cannot map to a provider (it raises a 400 of its own)
_NO_PROVIDER = re.compile(r"LLM Provider NOT provided", re.IGNORECASE)


#: how servers refuse a request's tools: llama.cpp ("tools param requires --jinja flag"), Ollama
#: ("... does not support tools"), vLLM ("auto" tool choice requires --enable-auto-tool-choice)
_NO_TOOLS = re.compile(r"tools? param\w* requires|does not support tools|tools? (?:are|is) not supported"
                       r"|tool[_ ]choice\W+requires|enable-auto-tool-choice|tool calling is not supported",
                       re.IGNORECASE)


def classify(exc: BaseException) -> tuple[str, int | None]:
    """``(kind, status)`` of a failed call: missing_key, unknown_model, context_window, timeout,
    connection, rate_limit, auth, http. The first two made no request (status None)."""
    if missing_key_variable(exc, "") is not None:
        # litellm reports the SDK's "no key" as a 500: no request left, another attempt is the same
        return "missing_key", None
    if any(_NO_PROVIDER.search(str(e)) for e in _chain(exc)):
        # litellm's own "400": the model string names no provider, nothing was sent anywhere
        return "unknown_model", None
    names = {type(e).__name__ for e in _chain(exc)}
    if "ContextWindowExceededError" in names:
        # litellm's name for a provider's "too many tokens" answer (llama.cpp, OpenAI, vLLM, ...)
        return "context_window", _status(exc) or 400
    if isinstance(exc, asyncio.TimeoutError) or names & {"Timeout", "APITimeoutError", "ReadTimeout",
                                                         "ConnectTimeout", "TimeoutException"}:
        return "timeout", None
    if names & {"APIConnectionError", "ConnectError", "ReadError", "RemoteProtocolError",
                "ClientPayloadError", "ServerDisconnectedError", "ClientConnectorError", "MidStreamFallbackError"}:
        # litellm reports a dropped connection as a 500: it is not the provider's answer
        return "connection", None
    status = _status(exc)
    if status is not None and status >= 400 and status != 429 and any(_NO_TOOLS.search(str(e)) for e in _chain(exc)):
        # a server that refuses the tools (llama.cpp without --jinja, an Ollama model without
        # tool support): another attempt is refused the same way
        return "tools_unsupported", status
    if status == 429:
        return "rate_limit", status
    if status in (401, 403):
        return "auth", status
    return "http", status


def retryable(kind: str, status: int | None) -> bool:
    # A timeout is not retried: the agent already waited its whole model_timeout.
    return kind in ("connection", "rate_limit") or (kind == "http" and status in RETRY_STATUSES)


_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)?(?:\w+Error:\s*)?(?:\w*Exception\s*-\s*)?")


def _detail(exc: BaseException) -> str:
    """The provider's own words, short: litellm's class-name prefixes taken off."""
    text = " ".join(str(getattr(exc, "message", None) or exc).split())
    text = _PREFIX.sub("", text)
    try:  # Ollama-style bodies: {"error": "..."}
        body = json.loads(text)
        if isinstance(body, dict) and isinstance(body.get("error"), (str, dict)):
            err = body["error"]
            text = err if isinstance(err, str) else str(err.get("message") or err)
    except ValueError:
        pass
    return cut_at_word(text, 200)


#: what a sentence may end with already (its own full stop is not added again)
_ENDS = (".", "!", "?", "…")


def cut_at_word(text: str, limit: int) -> str:
    """``text`` redacted, then cut to at most ``limit`` characters at a word's end (``…`` marks
    a cut); a text without a space near the limit is cut where the limit falls."""
    if len(text) <= limit:
        return redact_then_cut(text, limit)
    body = redact_then_cut(text, limit)[:-1]  # its "…" mark off: put back after the word
    space = body.rfind(" ")
    if space > limit // 2:
        body = body[:space]
    return body.rstrip(" ,;:.-") + "…"


def sentences(head: str, tail: str) -> str:
    """``head`` and ``tail`` as two sentences: one full stop between them, never two
    ("Connection error.. Check ..."), and none after a head that ends with ``…``, ``!`` or ``?``."""
    head = head.rstrip()
    while head.endswith((",", ";", ":")):
        head = head[:-1].rstrip()
    if head.endswith(_ENDS):
        return f"{head} {tail}"
    return f"{head}. {tail}"


def _where(api_base: str | None) -> str:
    if not api_base:
        return ""
    parts = urllib.parse.urlsplit(str(api_base))
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")  # never user:password@
    return f" at {urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, '', ''))}"


#: where a provider's calls go when the agent names no api_base: its environment variables
#: (as litellm reads them), else its public address (other providers: litellm's default)
_DEFAULT_ENDPOINTS = {
    "openai": (("OPENAI_BASE_URL", "OPENAI_API_BASE"), "https://api.openai.com/v1"),
    "anthropic": (("ANTHROPIC_BASE_URL", "ANTHROPIC_API_BASE"), "https://api.anthropic.com"),
}


def endpoint(model: str, provider: str, api_base: str | None, litellm: Any = None) -> str | None:
    """The address a call to ``model`` went to: the agent's ``api_base``, else the provider's
    (from the environment, litellm, or its public address); None where nothing says."""
    if api_base:
        return api_base
    names, default = _DEFAULT_ENDPOINTS.get(provider, ((), None))
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    if litellm is not None:
        try:
            base = litellm.get_llm_provider(model)[3]
        except Exception:  # noqa: BLE001 - describing a failure must not fail itself
            base = None
        if isinstance(base, str) and base:
            return base
    return default


_HINTS = {
    "timeout": "No reply within {timeout:g} s; raise the agent's model_timeout or check the model server",
    "connection": "The connection failed or dropped before the reply was complete; check that the "
                  "server{where} is running, then send the message again",
    "rate_limit": "The provider is rate-limiting this key; wait, then send the message again "
                  "(or give the agent more max_retries)",
    "auth": "The provider refused the key; set the right key in the environment (e.g. OPENAI_API_KEY) "
            "and restart the kernel",
    404: "Check the model name and the agent's api_base",
    "http5": "The provider failed; send the message again later, or use another model",
    "http": "The provider rejected the request; check the model name and the agent's model_options",
    "tools_unsupported": "The server does not take tools, so the agent's tools never reached the model; start it "
                         "so that it does (llama.cpp: --jinja with a chat template that has tools; vLLM: "
                         "--enable-auto-tool-choice), or use the agent without tools",
}


#: how providers put it: llama.cpp ("request (N tokens) exceeds the available context size
#: (M tokens)", "input (N tokens) is larger than the max context size (M tokens)"), OpenAI and
#: vLLM ("maximum context length is M tokens. However, your messages resulted in N tokens")
_SIZES = (
    re.compile(r"(?:request|input) \((?P<used>\d+) tokens\)[^(]*\((?P<window>\d+) tokens\)"),
    re.compile(r"maximum context length is (?P<window>\d+) tokens.*?(?:resulted in|requested) (?P<used>\d+) tokens"),
    re.compile(r"maximum context length is (?P<window>\d+) tokens"),
)


def context_sizes(exc: BaseException, model: str, litellm: Any = None) -> tuple[int | None, int | None]:
    """``(context tokens, window tokens)`` of a context-window refusal: from the provider's
    words, the window else from litellm's model info (None where neither says)."""
    text = " ".join(str(getattr(exc, "message", None) or exc).split())
    used = window = None
    for pattern in _SIZES:
        found = pattern.search(text)
        if found:
            window = int(found["window"])
            used = int(found["used"]) if "used" in found.groupdict() and found["used"] else None
            break
    if window is None and litellm is not None:
        try:
            info = litellm.get_model_info(model)
            window = int(info.get("max_input_tokens") or info.get("max_tokens") or 0) or None
        except Exception:  # noqa: BLE001 - a model litellm does not know: no window to name
            window = None
    return used, window


def _context_error(exc: BaseException, model: str, head: str, litellm: Any, max_tokens: int | None,
                   newest_alone: bool) -> tuple[str, dict[str, Any]]:
    """The message and payload of a context-window refusal (``head``: the model and where)."""
    used, window = context_sizes(exc, model, litellm)
    size = f"{used:,} tokens" if used else "too long"
    over = f", over the model's window of {window:,} tokens" if window else ", over the model's window"
    if newest_alone:
        message = (f"{head} refused the context: this message alone is {size}{over}; shorten it or split it "
                   "into parts (older context is already left out)")
    else:
        budget = budget_for_window(window, max_tokens) if window else None
        fix = (f"The agent's next contexts are kept within {budget:,} tokens (older messages left out); "
               f"to choose the budget: %chaz agent NAME --context-tokens N (N below {window:,}), or summarize "
               "the session: %chaz compact"
               if budget else "Give the agent a smaller budget: %chaz agent NAME --context-tokens N, or "
               "summarize the session: %chaz compact")
        message = f"{head} refused the context: it was {size}{over}. {fix}"
    return message, {"context_tokens": used, "context_window": window}


def provider_error(exc: BaseException, model: str, api_base: str | None, attempts: int,
                   timeout: float, litellm: Any = None, *, max_tokens: int | None = None,
                   newest_alone: bool = False) -> ProviderError:
    """The one-line, key-free account of a failed call: what failed, and what to do.

    A context-window refusal says how big the context was, the model's window and the fix;
    ``newest_alone``: the context held no message but the newest (and system prompts), so only
    shortening it helps. ``max_tokens``: the reply room the agent asks for (its budget's room).
    """
    kind, status = classify(exc)
    provider = getattr(exc, "llm_provider", None) or (model.split("/", 1)[0] if "/" in model else "")
    if not provider and litellm is not None:
        try:
            provider = litellm.get_llm_provider(model)[1]
        except Exception:  # noqa: BLE001 - describing a failure must not fail itself
            provider = ""
    provider = provider or "unknown"
    where = _where(api_base)
    if kind in ("connection", "timeout") and not api_base:
        # the host it tried: a model meant for a local server, with no api_base, went to the
        # provider's public address
        tried = endpoint(model, provider, None, litellm)
        if tried:
            where = _where(tried)
    if kind == "missing_key":
        variable = missing_key_variable(exc, provider) or "OPENAI_API_KEY"
        message = (f"{model} ({provider}{where}): no API key was given, so no request was made; set "
                   f"{variable} in the kernel's environment (%env or os.environ) and send the message again")
        return ProviderError(message, model=model, provider=provider, kind=kind, status=None, attempts=attempts,
                             extra={"variable": variable})
    if kind == "unknown_model":
        message = (f"{model}: litellm cannot tell which provider serves this model, so no request was made; "
                   "write the model as provider/name (e.g. openai/gpt-4o-mini, anthropic/claude-3-5-haiku-latest, "
                   "ollama_chat/llama3.1) or check its spelling")
        return ProviderError(message, model=model, provider=provider, kind=kind, status=None, attempts=attempts)
    if kind == "context_window":
        message, sizes = _context_error(exc, model, f"{model} ({provider}{where})", litellm, max_tokens,
                                        newest_alone)
        return ProviderError(message, model=model, provider=provider, kind=kind, status=status,
                             attempts=attempts, extra=sizes)
    what = {"timeout": f"timed out after {timeout:g} s", "connection": "lost the connection"}.get(
        kind, f"returned HTTP {status}" if status else "failed")
    key: Any = kind
    if kind == "http":
        key = 404 if status == 404 else ("http5" if status and status >= 500 else "http")
    hint = _HINTS[key].format(timeout=timeout, where=where)
    if kind == "connection" and not api_base:
        hint += " (the agent has no api_base: give a local server's URL with --api-base URL)"
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    detail = _detail(exc) if kind not in ("timeout",) else ""
    head = f"{model} ({provider}{where}) {what}{tries}" + (f": {detail}" if detail else "")
    message = sentences(head, hint)
    return ProviderError(message, model=model, provider=provider, kind=kind, status=status, attempts=attempts,
                         head=head)


def stream_broken(error: ProviderError, partial_text: str) -> ProviderError:
    """The failure of a stream after part of the reply reached the user: ``error`` reworded to
    say so, with that text kept (``partial_text``, which the Error entry's payload records)."""
    head = error.head or str(error)
    chars = f"{len(partial_text)} character" + ("" if len(partial_text) == 1 else "s")
    message = sentences(f"the reply stream broke after {chars}: {head}",
                        "The text so far is kept in this entry (payload.partial_text); send the message "
                        "again for a whole reply")
    return ProviderError(message, model=error.model, provider=error.provider, kind=error.kind,
                         status=error.status, attempts=error.attempts, partial_text=partial_text)
