import os

# litellm must never fetch its price map from the network during tests.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from chaz_nb.core.store import SessionStore


@pytest.fixture
def store():
    s = SessionStore(":memory:")
    yield s
    s.close()


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "sessions.duckdb")


@pytest.fixture
def chaz(monkeypatch):
    """``%load_ext chaz_nb`` in IPython's test shell, on an in-memory store; the Server."""
    import chaz_nb
    from chaz_nb.notebook import extension
    from ipython_harness import ip

    monkeypatch.setenv("CHAZ_DB", ":memory:")
    monkeypatch.delenv("CHAZ_MODEL", raising=False)
    ip.run_line_magic("load_ext", "chaz_nb")
    yield chaz_nb.current()
    if extension._state is not None:
        ip.run_line_magic("unload_ext", "chaz_nb")


@pytest.fixture
def model_server():
    """A model provider on a real 127.0.0.1 socket (OpenAI and Ollama dialects); see tests/fakes."""
    from fakes.openai_server import FakeModelServer

    server = FakeModelServer()
    yield server
    server.close()
