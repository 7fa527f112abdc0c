"""How a failed model call is read: the wait a provider asks for, and an address without secrets."""

from __future__ import annotations

import email.utils
import time

import httpx

from chaz_nb.engine.faults import provider_error, retry_after


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
