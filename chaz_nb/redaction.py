"""Secret redaction: API keys and Authorization values never reach the session database.

Applied by the store to every string of every entry before it is written, so a key that a
tool prints, an exception message quotes, or a model echoes is masked at write time.
"""

from __future__ import annotations

import os
import re
import time

REDACTED = "[REDACTED]"

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
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), REDACTED),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"), REDACTED),
]
MIN_SECRET_LENGTH = 8


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of key-like environment variables, longest first (so prefixes cannot leak)."""
    env = os.environ if environ is None else environ
    values = {
        value
        for name, value in env.items()
        if value and len(value) >= MIN_SECRET_LENGTH and (name in KNOWN_KEY_VARS or _SECRET_NAME.search(name))
    }
    return sorted(values, key=len, reverse=True)


_cache: tuple[float, int, list[str]] = (0.0, -1, [])
CACHE_SECONDS = 0.5


def _current_secret_values() -> list[str]:
    # Scanning os.environ costs ~0.3 ms; every string of every entry is redacted, so the
    # scan is reused for half a second (the shape patterns below need no environment).
    global _cache
    now = time.monotonic()
    if now - _cache[0] > CACHE_SECONDS or len(os.environ) != _cache[1]:
        _cache = (now, len(os.environ), secret_values())
    return _cache[2]


def redact(text: str, environ: dict[str, str] | None = None) -> str:
    """``text`` with secret values and Authorization credentials replaced by [REDACTED]."""
    if not text:
        return text
    values = secret_values(environ) if environ is not None else _current_secret_values()
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
