"""How a failed model call is read: the wait a provider asks for, and an address without secrets."""

from __future__ import annotations

import email.utils
import re
import time

import httpx
import pytest

from chaz_nb.engine.faults import provider_error, retry_after, stream_broken


def failed(status: int, headers: dict[str, str]) -> Exception:
    exc = Exception(f"HTTP {status}")
    exc.status_code = status
    exc.response = httpx.Response(status, headers=headers)
    return exc


def test_retry_after_reads_milliseconds_seconds_and_http_dates():
    assert retry_after(failed(429, {"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert retry_after(failed(429, {"retry-after": "1.5"})) == 1.5
    later = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 15 < retry_after(failed(429, {"retry-after": later})) <= 20
    assert retry_after(failed(500, {})) is None


def test_retry_after_is_found_on_a_wrapped_cause():
    outer = RuntimeError("wrapped")
    outer.__cause__ = failed(429, {"retry-after": "3"})
    assert retry_after(outer) == 3.0


def test_error_text_never_shows_credentials_in_the_address():
    err = provider_error(failed(503, {}), "openai/x", "https://user:hunter2pass@llm.example.com:8443/v1", 3, 600)
    assert "hunter2pass" not in str(err) and "user" not in str(err)
    assert "openai/x (openai at https://llm.example.com:8443/v1) returned HTTP 503 after 3 attempts" in str(err)
    assert err.details() == {"error_kind": "http", "status": 503, "provider": "openai", "attempts": 3}


def test_a_secret_the_provider_quotes_where_its_words_are_cut_is_not_left_half_shown(monkeypatch):
    """The provider's words are cut at 200 characters before the store's redaction: a key that
    the error quotes across the cut no longer matched and its first part reached the Error."""
    monkeypatch.setenv("MY_GATEWAY_TOKEN", "gw-Hunter2-very-secret-token")
    exc = RuntimeError("x" * 185 + " token gw-Hunter2-very-secret-token was refused")
    text = str(provider_error(exc, "openai/gpt-x", None, 1, 30.0))
    assert "Hunter" not in text and "gw-Hun" not in text


class APIConnectionError(Exception):
    """litellm's name for a connection that failed (classify reads the class name)."""


def test_a_connection_error_names_the_host_it_tried_even_with_no_api_base(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    text = str(provider_error(APIConnectionError("Connection error"), "openai/smol", None, 3, 600))
    assert text.startswith("openai/smol (openai at https://api.openai.com/v1) lost the connection after 3 attempts")
    assert "check that the server at https://api.openai.com/v1 is running" in text
    assert "give a local server's URL with --api-base URL" in text
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    text = str(provider_error(APIConnectionError("Connection error"), "openai/smol", None, 1, 600))
    assert text.startswith("openai/smol (openai at http://127.0.0.1:9/v1) lost the connection")
    # with the agent's api_base: that address, as before
    text = str(provider_error(APIConnectionError("Connection error"), "openai/smol", "http://localhost:8080/v1", 1,
                              600))
    assert text.startswith("openai/smol (openai at http://localhost:8080/v1) lost the connection")
    assert "--api-base" not in text
# ------------------------------------------------------------- the one line a user reads
class BadRequestError(Exception):
    status_code = 400




class Timeout(Exception):
    pass


class ContextWindowExceededError(Exception):
    status_code = 400


def _named(cls: type[Exception], text: str, status: int | None = None) -> Exception:
    exc = cls(text)
    if status is not None:
        exc.status_code = status
    return exc


LONG = ("The server could not parse the request because the field messages contains an element whose "
        "content is neither a string nor a list of parts, which the specification requires for every "
        "message of the conversation sent to this endpoint today")

FAILURES = {
    "connection": _named(APIConnectionError, "litellm.InternalServerError: OpenAIException - Connection error."),
    "http 500 ending in a full stop": _named(Exception, "OpenAIException - Internal error.", 500),
    "http 404 ending in !": _named(Exception, "The model `fake` does not exist!", 404),
    "http 400 ending in ?": _named(Exception, "did you mean gpt-4o?", 400),
    "http 400 ending in a colon": _named(Exception, "bad request:", 400),
    "rate limit": _named(Exception, "Slow down.", 429),
    "auth": _named(Exception, "Incorrect API key provided.", 401),
    "long words": _named(Exception, LONG, 400),
    "timeout": _named(Timeout, "Request timed out."),
    "missing key": _named(Exception, "Missing credentials. Please pass an `api_key`, or set the `OPENAI_API_KEY` "
                                     "environment variable.", 500),
    "unknown model": _named(BadRequestError, "litellm.BadRequestError: LLM Provider NOT provided. Pass in the LLM "
                                             "provider you are trying to call. You passed model=gpt-nope\n Pass model "
                                             "as E.g. For 'Huggingface' inference endpoints ...", 400),
    "context window": _named(ContextWindowExceededError, "maximum context length is 4096 tokens. However, your "
                                                         "messages resulted in 5000 tokens."),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_no_error_line_has_doubled_punctuation(case):
    """"Connection error.. Check ...": whatever the provider's words end with, one mark between
    them and the hint; and a streamed reply that broke reads the same way."""
    err = provider_error(FAILURES[case], "openai/x", "http://127.0.0.1:8080/v1", 2, 30.0)
    for text in (str(err), str(stream_broken(err, "partial"))):
        assert not re.search(r"[.!?…:;,]\s*[.!?:;,]", text.replace("e.g.", "eg")), text
        assert "\n" not in text


def test_a_long_provider_text_is_cut_at_a_word_end():
    text = str(provider_error(FAILURES["long words"], "openai/x", None, 1, 30.0))
    cut = text.split(": ", 1)[1].split("…")[0]
    assert "…" in text and LONG.startswith(cut) and LONG[len(cut)] == " ", text


def test_an_unknown_model_says_no_request_was_made():
    err = provider_error(FAILURES["unknown model"], "gpt-nope", None, 1, 30.0)
    assert "HTTP 400" not in str(err) and "no request was made" in str(err)
    assert "provider/name (e.g. openai/gpt-4o-mini" in str(err)
    assert err.details()["error_kind"] == "unknown_model" and err.details()["status"] is None
