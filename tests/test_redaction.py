import json

import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.core.redaction import REDACTED, redact
from chaz_nb.core.store import SessionStore

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
    for secret in (
        KEY,
        "abcdefghijklmnopqrstuvwxyz012345",
        "dXNlcjpwYXNzd29yZA==",
        "ghp_abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
    ):
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
    data = path.read_bytes() + (
        path.with_suffix(".duckdb.wal").read_bytes() if path.with_suffix(".duckdb.wal").exists() else b""
    )
    assert KEY.encode() not in data
    assert b"[REDACTED]" in data


def test_a_key_set_right_after_another_is_removed_is_masked_at_once(monkeypatch):
    monkeypatch.setenv("FIRST_API_KEY", "first-secret-value-1")
    assert redact("first-secret-value-1") == REDACTED
    monkeypatch.delenv("FIRST_API_KEY")  # as many variables as before: a count misses the swap
    monkeypatch.setenv("SECOND_API_KEY", "second-secret-value-2")
    assert redact("second-secret-value-2") == REDACTED



def test_a_text_found_clean_is_masked_once_a_key_holding_it_is_set(monkeypatch):
    """Clean short texts are remembered (issue 30: most of a turn's strings repeat); a key
    set since then makes the remembered text a secret at once, and no secret is remembered."""
    from chaz_nb.core import redaction

    text = "plain-looking-value-7"
    assert redact(text) == text and redact(text) == text  # the second from the memo
    assert text in redaction._clean[1]
    monkeypatch.setenv("LATE_API_KEY", text)
    assert redact(text) == REDACTED
    assert redact(f"say {text}") == f"say {REDACTED}"
    assert not any(text in kept for kept in redaction._clean[1])
    monkeypatch.delenv("LATE_API_KEY")
    assert redact(text) == text

def test_a_text_checked_against_old_keys_is_not_remembered_as_clean_under_new_ones(monkeypatch):
    """Redaction runs on threads too (log records): a text checked clean against the keys of
    before is not remembered for the keys set while it was being checked, else it would pass
    unmasked from then on."""
    text = "value-set-while-checking-9"

    class SetsAKeyWhileChecked(str):
        def __contains__(self, other: object) -> bool:  # the scan over the old keys
            monkeypatch.setenv("MIDWAY_API_KEY", text)  # meanwhile, on another thread
            from chaz_nb.core import redaction
            redaction._current_secret_values()  # (which that thread's redact refreshed)
            redaction.redact("refresh")
            return str.__contains__(self, other)

    monkeypatch.setenv("EARLIER_API_KEY", "an-earlier-key-value")  # one old key to scan for
    redact("warm")
    redact(SetsAKeyWhileChecked(text))
    assert redact(text) == REDACTED


# --------------------------------------------------------- keys, header names, log records
def test_a_secret_used_as_a_dict_key_is_masked_at_every_depth(store, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    s = store.create_session("a")
    entry = store.append(s, EntryType.TOOL_CALL, "a", "call", payload={
        "arguments": {KEY: "v1", "nested": [{f"prefix {KEY}": {KEY: 2}}]},
    })
    for e in (entry, store.entries(s)[-1]):
        assert KEY not in json.dumps(e.payload)
        args = e.payload["arguments"]
        assert args[REDACTED] == "v1" and args["nested"][0][f"prefix {REDACTED}"] == {REDACTED: 2}


def test_a_payload_of_another_mapping_kind_is_redacted_as_a_dict(store, monkeypatch):
    """The writer takes any mapping as a payload (typed ``Mapping[str, object]``): one that is
    no dict (a read-only view) is redacted and stored as the object it holds, not as its repr."""
    from types import MappingProxyType

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    s = store.create_session("a")
    entry = store.append(s, EntryType.TOOL_CALL, "a", "call", payload=MappingProxyType({
        "arguments": MappingProxyType({"key": KEY, "n": 1}),
    }))
    for e in (entry, store.entries(s)[-1]):
        assert e.payload == {"arguments": {"key": REDACTED, "n": 1}}


def test_session_title_and_metadata_are_redacted(store, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    s = store.create_session("a", title=f"about {KEY}", metadata={KEY: KEY, "x-api-key": "abc"})
    store.update_session_metadata(s, {"note": f"key {KEY}", KEY: 1})
    t = store.create_session("a", metadata={"headers": {"api-key": "short"}})
    assert store.session(s).title == f"about {REDACTED}"
    assert store.session(s).metadata == {"note": f"key {REDACTED}", REDACTED: 1}
    assert store.session(t).metadata == {"headers": {"api-key": REDACTED}}


def test_two_secret_keys_keep_both_values():
    from chaz_nb.core.redaction import redact_data

    other = "sk-test-00000000000000000000000000000000"
    out = redact_data({KEY: 1, other: 2}, lambda t: redact(t, environ={}))
    assert KEY not in str(out) and other not in str(out)
    assert sorted(out.values()) == [1, 2]


@pytest.mark.parametrize(
    "text, secret",
    [
        ("x-api-key: abcdef123456", "abcdef123456"),
        ('{"api-key": "abcdef123456"}', "abcdef123456"),
        ("headers={'X-Goog-Api-Key': 'abcdef123456'}", "abcdef123456"),
        ("X-Auth-Token: abcdef123456", "abcdef123456"),
        ('"x-csrf-token":"abcdef123456"', "abcdef123456"),
    ],
)
def test_values_of_key_and_token_headers_are_masked(text, secret):
    out = redact(text, environ={})
    assert secret not in out and REDACTED in out


def test_values_under_secret_header_names_are_masked_in_data():
    from chaz_nb.core.redaction import redact_data

    data = {"headers": {"x-api-key": "short1", "Authorization": "Basic abc", "x-auth-token": "t0k3n",
                        "api_key": 12345678},
            "max_tokens": 512, "prompt_tokens": 7, "token_budget": "ok"}
    out = redact_data(data, lambda t: redact(t, environ={}))
    assert out["headers"] == {"x-api-key": REDACTED, "Authorization": REDACTED, "x-auth-token": REDACTED,
                              "api_key": REDACTED}
    assert out["max_tokens"] == 512 and out["prompt_tokens"] == 7 and out["token_budget"] == "ok"


def test_chaz_nb_log_records_and_tracebacks_are_redacted(monkeypatch):
    import io
    import logging

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)  # on the module's own logger: sees the record first
    log = logging.getLogger("chaz_nb.server")
    log.addHandler(handler)
    try:
        try:
            raise RuntimeError(f"auth failed for {KEY}")
        except RuntimeError:
            log.exception("run %s failed with %s", 7, {"key": KEY, KEY: "as a key"})
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    assert "run 7 failed" in text and "RuntimeError: auth failed for [REDACTED]" in text
    assert "Traceback" in text and KEY not in text


async def test_the_servers_log_of_a_failed_run_is_redacted(store, monkeypatch, caplog):
    import logging

    from chaz_nb.server.agents import Agent
    from chaz_nb.server import Server

    secret = "zq-custom-secret-value-987654321"
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    server = Server(store, [Agent("a", model="chaz/echo")])

    def broken_executor(ctx):  # a bug inside the run: the server logs its traceback
        raise RuntimeError(f"executor setup failed, token {secret}")

    monkeypatch.setattr(server.port, "make_executor", broken_executor)  # the engine builds each run's executor
    s = server.current_session("a")
    with caplog.at_level(logging.ERROR, logger="chaz_nb"):
        outcome = await (await server.send(s, "hi")).wait()
    assert outcome.entry_type is EntryType.ERROR and secret not in outcome.content
    assert "RuntimeError: executor setup failed, token [REDACTED]" in caplog.text
    assert "Traceback" in caplog.text and secret not in caplog.text


def pieces(secret: str, width: int = 8) -> list[str]:
    """Every run of ``width`` characters of ``secret``: none may show anywhere."""
    return [secret[i:i + width] for i in range(len(secret) - width + 1)]


def test_a_key_in_a_spawned_sessions_ceiling_never_reaches_the_store(backend_store):
    ceiling = json.dumps({"tools": [["add", f"{KEY}*"]], "auto_approve": [], "call_depth": 1, "max_call_depth": 2})
    session = backend_store.create_session("child", "child", ceiling=ceiling)
    [[stored]] = backend_store.execute("SELECT ceiling FROM sessions WHERE id = ?", [session])
    assert KEY not in str(stored) and REDACTED in str(stored)
    assert KEY not in backend_store.session(session).ceiling
    assert json.loads(stored)["tools"][0][0] == "add"  # still the ceiling: only the key is masked


@pytest.mark.parametrize("keep", ["head", "tail"])
def test_redact_then_cut_masks_a_key_that_the_cut_splits(keep):
    from chaz_nb.core.redaction import redact_then_cut

    env_key = "plain-looking-value-0123456789abcdef"
    text = "a" * 90 + env_key + "b" * 90  # the key is 90 characters from either end

    def masked(t):
        return redact(t, {"SERVICE_API_KEY": env_key})

    for limit in range(95, 125):  # every cut through the key
        out = redact_then_cut(text, limit, redact_text=masked, keep=keep)
        assert len(out) <= limit and not any(p in out for p in pieces(env_key)), (limit, out)
