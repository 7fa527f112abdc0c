import pytest

from chaz_nb.entries import EntryType
from chaz_nb.redaction import REDACTED, redact
from chaz_nb.store import SessionStore

KEY = "sk-test-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"


@pytest.mark.parametrize(
    "text",
    [
        f"my key is {KEY}",
        "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
        '{"headers": {"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}}',
        "curl -H 'authorization: token ghp_abcdefghijklmnopqrstuvwxyz0123456789'",
        "aws AKIAIOSFODNN7EXAMPLE here",
    ],
)
def test_known_secret_shapes_are_masked(text):
    out = redact(text, environ={})
    assert REDACTED in out
    for secret in (KEY, "abcdefghijklmnopqrstuvwxyz012345", "dXNlcjpwYXNzd29yZA==", "ghp_abcdefghij", "AKIAIOSFODNN7EXAMPLE"):
        assert secret not in out


def test_values_of_key_environment_variables_are_masked():
    env = {"MY_SERVICE_API_KEY": "plain-looking-value-123", "HOME": "/root/not-a-secret"}
    assert redact("x plain-looking-value-123 y /root/not-a-secret", env) == f"x {REDACTED} y /root/not-a-secret"


def test_ordinary_text_is_untouched():
    text = "The token budget is 4096; authorization was approved by the user."
    assert redact(text, environ={}) == text


def test_planted_key_never_reaches_the_database_file(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    path = tmp_path / "s.duckdb"
    store = SessionStore(str(path))
    s = store.create_session("a")
    store.append(s, EntryType.ERROR, "a", f"AuthenticationError: Incorrect API key provided: {KEY}",
                 payload={"detail": {"key": KEY, "list": [KEY]}})
    store.append(s, EntryType.TOOL_RESULT, "a", "env dump", payload={"output": f"OPENAI_API_KEY={KEY}"})
    assert all(KEY not in e.content and KEY not in str(e.payload) for e in store.entries(s))
    store.close()
    data = path.read_bytes() + (path.with_suffix(".duckdb.wal").read_bytes() if path.with_suffix(".duckdb.wal").exists() else b"")
    assert KEY.encode() not in data
    assert b"[REDACTED]" in data
