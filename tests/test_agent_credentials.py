"""Credentials in kept agents are told by what they hold, not only by their name (issue 41 §5):
a service account's JSON, a private key, a URL's user:password, a JSON credential, a bearer
token or a key of this kernel's environment is never stored in ``agent_definitions`` nor
shown by the agent's repr, under any option name, and the person is told in one line."""

from __future__ import annotations

import json

import pytest

from chaz_nb.core.store import SessionStore
from chaz_nb.server.agents import Agent
from chaz_nb.server.facade import Server

PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
PEM = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\n"
SERVICE_ACCOUNT = json.dumps({"type": "service_account", "project_id": "p", "private_key_id": "0a1b2c3d4e",
                              "private_key": PEM, "client_email": "bot@p.iam.gserviceaccount.com"})
PASSWORD = "hunter2-Correct-Horse"
ENV_KEY = "envkey-7d1c9b2a6f5e4d3c"

#: option name -> a value that holds a credential, whatever the name (the family of the trick)
CASES = {
    "vertex_credentials": SERVICE_ACCOUNT,  # JSON text with a private key
    "vertex_project_creds": json.loads(SERVICE_ACCOUNT),  # the same, as a table
    "signing": PEM,  # a bare PEM block
    "oauth": {"client_id": "abc", "client_secret": "s3cr3t-value-123"},  # an OAuth client
    "grant": json.dumps({"refresh_token": "1//0refresh-token-value"}),  # a refresh token, as JSON text
    "nested": {"auth": [{"login": {"password": PASSWORD}}]},  # deep in lists and tables
    "proxy": f"http://bob:{PASSWORD}@proxy.example:3128",  # userinfo in a URL
    "upstream": "https://deploytoken-abcdef@git.example/repo",  # a token as the URL's user
    "extra_auth": f"Bearer {'z' * 32}",  # a bearer token
    "backup": ENV_KEY,  # this kernel's key value (from its environment), under a harmless name
}


@pytest.fixture(params=["duckdb", "postgres"])
def location(request, tmp_path):
    if request.param == "duckdb":
        return str(tmp_path / "sessions.duckdb")
    return request.getfixturevalue("pg_url")


def secrets_in(text: str) -> list[str]:
    return [s for s in (PEM_BODY, PASSWORD, "s3cr3t-value-123", "1//0refresh-token-value", "z" * 32, ENV_KEY,
                        "deploytoken-abcdef", "0a1b2c3d4e") if s in text]


@pytest.mark.parametrize("option", sorted(CASES))
async def test_a_credential_option_is_neither_stored_nor_shown_whatever_its_name(location, option, monkeypatch):
    monkeypatch.setenv("MY_BACKUP_API_KEY", ENV_KEY)
    server = Server(SessionStore.open(location), keep_agents=True)
    try:
        agent = Agent("vertex", model="vertex_ai/gemini-pro", model_options={option: CASES[option], "temperature": 0.3})
        server.define_agent(agent)
        stored = "".join(str(row) for row in server.store.execute("SELECT * FROM agent_definitions"))
        assert secrets_in(stored) == []
        assert json.loads(server.store.execute("SELECT definition FROM agent_definitions")[0][0])["model_options"] \
            == {"temperature": 0.3}  # left out whole, never stored masked
        assert secrets_in(repr(agent)) == [] and secrets_in(repr(server.agents)) == []
        assert server.roster.left_out["vertex"] == (option,)
        note = server.roster.notes["vertex"]
        assert note.startswith(f"not stored: {option} (") and "keys come from the environment: set " in note
        assert "\n" not in note
        assert server.agents["vertex"].model_options[option] == CASES[option]  # this kernel keeps it
    finally:
        await server.stop()
        server.store.close()
    again = Server(SessionStore.open(location), keep_agents=True)
    try:
        assert again.agents["vertex"].model_options == {"temperature": 0.3}
    finally:
        await again.stop()
        again.store.close()


@pytest.mark.parametrize("url", [
    f"https://bob:{PASSWORD}@models.example:8443/v1",
    f"http://{PASSWORD}@models.example/v1",
    f"https://bob:{PASSWORD}@[::1]:8080/v1",
    "https://models.example/v1?api_key=" + "q" * 24,
])
async def test_an_api_base_is_kept_without_its_userinfo_and_shown_without_it(location, url):
    server = Server(SessionStore.open(location), keep_agents=True)
    try:
        agent = Agent("gw", model="openai/gpt-4o-mini", api_base=url)
        server.define_agent(agent)
        stored = "".join(str(row) for row in server.store.execute("SELECT * FROM agent_definitions"))
        assert PASSWORD not in stored and "q" * 24 not in stored
        assert PASSWORD not in repr(agent) and "q" * 24 not in repr(agent)
        assert server.roster.left_out["gw"] == ("api_base",)
        assert server.roster.notes["gw"].startswith("not stored: api_base (a ")
        kept = json.loads(server.store.execute("SELECT definition FROM agent_definitions")[0][0])["api_base"]
        assert kept.startswith(("https://models.example", "http://models.example", "https://[::1]:8080"))
        assert server.agents["gw"].api_base == url  # this kernel keeps what it was given
    finally:
        await server.stop()
        server.store.close()


async def test_ordinary_options_and_urls_are_kept_as_they_are(location):
    server = Server(SessionStore.open(location), keep_agents=True)
    try:
        options = {"temperature": 0.2, "max_tokens": 300, "stop": ["</s>"], "response_format": {"type": "json_object"},
                   "metadata": {"team": "data", "password_policy": "none"}, "seed": 7}
        server.define_agent(Agent("plain", model="openai/gpt-4o-mini", api_base="https://models.example:8443/v1",
                                  model_options=options))
        kept = json.loads(server.store.execute("SELECT definition FROM agent_definitions")[0][0])
        assert kept["model_options"] == options and kept["api_base"] == "https://models.example:8443/v1"
        assert server.roster.left_out["plain"] == () and server.roster.notes["plain"] == ""
    finally:
        await server.stop()
        server.store.close()


async def test_a_private_key_or_a_urls_password_in_the_prompt_or_script_is_masked_where_kept_and_shown(location):
    server = Server(SessionStore.open(location), keep_agents=True)
    try:
        agent = Agent("ops", model="chaz/script", system=f"sign with {PEM} then call http://bob:{PASSWORD}@h/x",
                      script=[f"key {PEM}"])
        server.define_agent(agent)
        stored = "".join(str(row) for row in server.store.execute("SELECT * FROM agent_definitions"))
        assert secrets_in(stored) == [] and secrets_in(repr(agent)) == []
        kept = json.loads(server.store.execute("SELECT definition FROM agent_definitions")[0][0])
        assert kept["system"] == "sign with [REDACTED]\n then call http://[REDACTED]@h/x"
        assert server.agents["ops"].system == agent.system  # this kernel keeps what it was given
    finally:
        await server.stop()
        server.store.close()


DER = PEM_BODY + "Sd1r4m2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvuNMoSfm76oqFvAp8Gy0iz5sxjZmSnX"
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
SIG = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
#: credentials told by their shape alone (an outsider's finding 8): each value's secret part
SHAPES = {
    "sa_b64": (__import__("base64").b64encode(SERVICE_ACCOUNT.encode()).decode(), "0a1b2c3d4e"),
    "der_key": (DER, PEM_BODY),
    "db": (f"admin:{PASSWORD}@db.example:5432/prod", PASSWORD),
    "proxy_rel": (f"//user:{PASSWORD}@proxy.example", PASSWORD),
    "jwt": (JWT, "dozjgNryP4J3jVmNHl0w5N"),
    "google": ("AIzaSyA-1234567890abcdefghijklmnopqrstu", "1234567890abcdefghij"),
    "webhook": ("https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX", "XXXXXXXXXXXX"),
    "azure": (f"https://acct.blob.core.windows.net/c?sv=2021-08-06&sig={SIG}", SIG),
    "login": ({"user": "bob", "pass": PASSWORD}, PASSWORD),
    "pairs": ([["client_secret", "cs-0123456789abcdef"]], "cs-0123456789abcdef"),
}


@pytest.mark.parametrize("option", sorted(SHAPES))
async def test_a_credential_told_by_its_shape_is_neither_stored_nor_shown(location, option):
    value, secret = SHAPES[option]
    server = Server(SessionStore.open(location), keep_agents=True)
    try:
        agent = Agent("x", model="openai/gpt-4o", model_options={option: value, "temperature": 0.3})
        server.define_agent(agent)
        stored = "".join(str(row) for row in server.store.execute("SELECT * FROM agent_definitions"))
        assert secret not in stored and secret not in repr(agent)
        assert server.roster.left_out["x"] == (option,)
        assert server.agents["x"].model_options[option] == value  # this kernel keeps it
    finally:
        await server.stop()
        server.store.close()


async def test_a_signature_in_api_bases_query_and_a_password_in_the_prompt_are_not_kept_or_shown(location):
    server = Server(SessionStore.open(location), keep_agents=True)
    try:
        agent = Agent("az", model="azure/gpt-4o", api_base=f"https://acct.example/v1?sig={SIG}&x=1",
                      system="You are helpful. The db password is hunter2hunter2; the password is required.")
        server.define_agent(agent)
        stored = "".join(str(row) for row in server.store.execute("SELECT * FROM agent_definitions"))
        for text in (stored, repr(agent)):
            assert SIG not in text and "hunter2hunter2" not in text
        kept = json.loads(server.store.execute("SELECT definition FROM agent_definitions")[0][0])
        assert kept["system"] == "You are helpful. The db password is [REDACTED]; the password is required."
        assert server.roster.left_out["az"] == ("api_base",)
    finally:
        await server.stop()
        server.store.close()
