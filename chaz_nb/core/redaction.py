"""Secret redaction: API keys and Authorization values never reach the session database.

Applied by the store to every string of every entry before it is written, so a key that a
tool prints, an exception message quotes, or a model echoes is masked at write time.

What counts as a secret: the value of any environment variable named like a key
(``KNOWN_KEY_VARS``, or ending in API_KEY, SECRET, TOKEN, PASSWORD, ACCESS_KEY), the shapes of
provider keys (``sk-...``, ``AKIA...``, ``ghp_...``, ``xox.-...``), and the value after a
credential header name (``Authorization``, ``x-api-key``, ``api-key``, ``*-token``), and the
password of a URL's userinfo (``postgresql://admin:[REDACTED]@host``). In
structured data (``redact_data``) dict keys go through the same ``redact`` as values, at every
depth, and the value under a credential header name is masked whole. Log records of chaz_nb
get the same treatment (``chaz_nb.core.logredact``).
"""

from __future__ import annotations

import json
import os
import re
from typing import overload
from collections.abc import Callable, Container, Mapping

from .entries import JsonObject, JSONValue

REDACTED = "[REDACTED]"
#: a secret literal masked in code (core/codemask.py): no Python, so it stands for that literal alone
CODE_MARK = "«REDACTED»"

#: Provider key variables litellm reads (and the generic shapes below catch the rest).
KNOWN_KEY_VARS = (
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_API_KEY", "AZURE_OPENAI_API_KEY", "GEMINI_API_KEY",
    "GOOGLE_API_KEY", "VERTEXAI_CREDENTIALS", "MISTRAL_API_KEY", "COHERE_API_KEY", "CO_API_KEY",
    "GROQ_API_KEY", "TOGETHERAI_API_KEY", "TOGETHER_API_KEY", "REPLICATE_API_KEY", "REPLICATE_API_TOKEN",
    "HUGGINGFACE_API_KEY", "HF_TOKEN", "OPENROUTER_API_KEY", "DEEPSEEK_API_KEY", "XAI_API_KEY",
    "PERPLEXITYAI_API_KEY", "FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY", "ANYSCALE_API_KEY",
    "DEEPINFRA_API_KEY", "AI21_API_KEY", "NLP_CLOUD_API_KEY", "ALEPH_ALPHA_API_KEY", "VOYAGE_API_KEY",
    "CLOUDFLARE_API_KEY", "DATABRICKS_API_KEY", "WATSONX_API_KEY", "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "LITELLM_API_KEY", "LITELLM_MASTER_KEY",
    "CEREBRAS_API_KEY", "SAMBANOVA_API_KEY", "NVIDIA_NIM_API_KEY", "OLLAMA_API_KEY",
)
_SECRET_NAME = re.compile(r"(API_KEY|APIKEY|SECRET|TOKEN|PASSWORD|ACCESS_KEY)(_ID)?$", re.IGNORECASE)
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization: Bearer abc / "authorization": "Basic abc" (keeps the header, masks the value)
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token)\s+)?)[^\s\"',}]+"),
     r"\1" + REDACTED),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{12,}"), r"\1" + REDACTED),
    # the password of a URL's userinfo (up to its last @: a raw @ in it): scheme://user:[REDACTED]@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s?#@:\"'`]*:)[^/\s?#\"'`]+@"), r"\1" + REDACTED + "@"),
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), REDACTED),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"), REDACTED),
]
MIN_SECRET_LENGTH = 8

# Header (or field) names whose value is a credential: x-api-key, api-key, api_key,
# X-Goog-Api-Key, x-auth-token, x-csrf-token, Authorization. Not max_tokens or token_budget.
_KEY_HEADER = r"(?:[A-Za-z0-9]+[-_])*api[-_]?key|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*-token"
_CREDENTIAL_FIELD = re.compile(rf"(?i)(?:{_KEY_HEADER}|(?:proxy-)?authorization)")
# x-api-key: abc / "api-key": "abc" / 'X-Auth-Token': 'abc' (keeps the name, masks the value;
# Authorization has its own pattern above, which keeps the scheme). It costs as much as the
# other patterns together, so it runs only on text that has "key" or "-token" in it.
_KEY_HEADER_VALUE = (
    re.compile(rf"(?i)(?<![A-Za-z0-9_-])((?:{_KEY_HEADER})[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED\])[^\s\"',}}]+"),
    r"\1" + REDACTED,
)


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of key-like environment variables, longest first (so prefixes cannot leak)."""
    env = os.environ if environ is None else environ
    values = {
        value
        for name, value in env.items()
        if value and len(value) >= MIN_SECRET_LENGTH and (name in KNOWN_KEY_VARS or _SECRET_NAME.search(name))
    }
    return sorted(values, key=len, reverse=True)


_cache: tuple[dict[object, object], list[str]] | None = None


def _current_secret_values() -> list[str]:
    # Scanning os.environ costs ~0.3 ms and every string of every entry and log record is
    # redacted, so the scan is reused while the environment is unchanged. Comparing with a
    # snapshot costs ~1 µs and sees every change (a count or a timer misses a swapped key).
    global _cache
    data = getattr(os.environ, "_data", None)
    if data is None:  # not CPython's os.environ: scan each time
        return secret_values()
    if _cache is None or _cache[0] != data:
        _cache = (dict(data), secret_values())
    return _cache[1]


#: Short texts found to hold no secret under the secret values they were checked against (the
#: list object ``_current_secret_values`` returns, replaced when the environment changes). A
#: turn redacts ~50 strings, most of them repeats (payload keys, senders, tool names, short
#: results) at six regex passes each; a set lookup skips those. Only clean texts are kept, so
#: the set holds no secret; it is bounded and starts over when full.
_clean: tuple[list[str] | None, set[str]] = (None, set())
_CLEAN_MAX_CHARS, _CLEAN_MAX_TEXTS = 256, 8192


def held_secret_values() -> list[str]:
    """The secret values the kernel itself holds (key-named environment variables' values),
    longest first: the only values a masked literal in code may stand for (core/codemask.py)."""
    return list(_current_secret_values())


def redact(text: str, environ: dict[str, str] | None = None) -> str:
    """``text`` with secret values and Authorization credentials replaced by [REDACTED]."""
    global _clean
    if not text:
        return text
    values = secret_values(environ) if environ is not None else _current_secret_values()
    memo = environ is None and len(text) <= _CLEAN_MAX_CHARS
    clean: set[str] = set()
    if memo:
        # One read of the pair: the set kept below is the one of the values checked against,
        # even when another thread starts a new pair (new keys) meanwhile.
        clean_for, clean = _clean
        if clean_for is not values or len(clean) >= _CLEAN_MAX_TEXTS:
            clean = set()
            _clean = (values, clean)
        elif text in clean:
            return text
    original = text
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    lowered = text.lower()
    if "key" in lowered or "-token" in lowered:
        text = _KEY_HEADER_VALUE[0].sub(_KEY_HEADER_VALUE[1], text)
    if memo and text == original:
        clean.add(text)
    return text


def redact_shapes(text: str, environ: dict[str, str] | None = None) -> str:
    """``text`` with the secret values the kernel knows (key-like environment variables) and
    the shapes of provider keys masked, without the rules that read a name before a value
    (``Authorization:``, ``api_key=``): what can be masked in code outside its literals
    (core/codemask.py), where those rules would swallow the code after the name."""
    if not text:
        return text
    values = secret_values(environ) if environ is not None else _current_secret_values()
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS[1:]:
        text = pattern.sub(replacement, text)
    return text


def is_secret_name(name: str) -> bool:
    """Whether an environment variable called ``name`` holds a key (its value is masked)."""
    return name in KNOWN_KEY_VARS or bool(_SECRET_NAME.search(name))


def is_credential_field(name: str) -> bool:
    """Whether a header or field called ``name`` holds a credential (its value is masked)."""
    return bool(_CREDENTIAL_FIELD.fullmatch(name))


CodeText = Callable[[str], str]


@overload
def redact_data(value: str, redact_text: Callable[[str], str] = redact, code: CodeText | None = None) -> str: ...
@overload
def redact_data(
    value: Mapping[str, JSONValue], redact_text: Callable[[str], str] = redact, code: CodeText | None = None,
) -> JsonObject: ...
@overload
def redact_data(
    value: Mapping[str, object], redact_text: Callable[[str], str] = redact, code: CodeText | None = None,
) -> Mapping[str, object]: ...
@overload
def redact_data(value: object, redact_text: Callable[[str], str] = redact, code: CodeText | None = None) -> object: ...


def redact_data(value: object, redact_text: Callable[[str], str] = redact, code: CodeText | None = None) -> object:
    """``value`` (JSON-like data) with every string redacted: dict keys as well as values.

    The value under a credential name (``x-api-key``, ``Authorization``...) is masked whole;
    two keys that redact to the same text keep both values (``[REDACTED]``, ``[REDACTED]#2``).
    ``code``: how the code of a code call's arguments (exactly ``{"code": TEXT}``, at any
    depth) is masked instead (``codemask.mask_code``: literals alone, never a code token).
    """
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        if code is not None and list(value) == ["code"] and isinstance(value["code"], str):
            return {"code": code(value["code"])}
        out: dict[object, object] = {}
        for key, item in value.items():
            if isinstance(key, str):
                if is_credential_field(key) and item is not None and not isinstance(item, (bool, dict, list, tuple)):
                    item = REDACTED
                key = _unique(redact_text(key), out)
            out[key] = redact_data(item, redact_text, code)
        return out
    if isinstance(value, (list, tuple)):
        return [redact_data(v, redact_text, code) for v in value]
    if isinstance(value, Mapping):  # another kind of mapping (the checks above keep a dict's path short)
        return redact_data(dict(value), redact_text, code)
    return value


def redact_json_text(text: str, redact_text: Callable[[str], str] = redact) -> str:
    """JSON ``text`` with every string in it redacted (``redact_data``); unchanged when nothing
    is secret. Text that is not JSON is redacted as text."""
    try:
        value = json.loads(text)
    except ValueError:
        return redact_text(text)
    redacted = redact_data(value, redact_text)
    return text if redacted == value else json.dumps(redacted, ensure_ascii=False)


def _unique(key: str, taken: Container[object]) -> str:
    if key not in taken:
        return key
    n = 2
    while f"{key}#{n}" in taken:
        n += 1
    return f"{key}#{n}"


#: characters past a cut that are redacted with the kept part (the longest secret a cut may split)
CUT_MARGIN = 4_096


def redact_then_cut(
    text: str,
    limit: int,
    *,
    redact_text: Callable[[str], str] = redact,
    keep: str = "head",
    note: Callable[[int], str] | None = None,
) -> str:
    """``text`` redacted, then cut to at most ``limit`` characters: the one order that is safe.

    A secret cut in two first no longer matches any redaction, so most of it would leak (a key's
    first 290 characters in a 300-character reason). ``keep`` is ``"head"`` (the start, a mark at
    the end) or ``"tail"`` (the end, a mark at the start); ``note(n)`` is the mark, given about
    how many characters were cut (``…`` by default). Only ``limit + CUT_MARGIN`` characters are
    redacted, so a 50 MB text costs what a small one does: a secret that the margin's edge
    splits lies beyond the cut and is dropped with it.
    """
    if len(text) <= limit:
        return redact_text(text)
    cut = len(text) - limit
    mark = note(cut) if note is not None else "…"
    room = max(0, limit - len(mark))
    if keep == "tail":
        part = redact_text(text[-(limit + CUT_MARGIN):])
        return mark + (part[len(part) - room:] if room else "")
    part = redact_text(text[: limit + CUT_MARGIN])
    return part[:room] + mark
