import os
import subprocess

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


@pytest.fixture(scope="session")
def model_worker():
    """One model worker process (chaz_nb/engine/worker) for the whole run: litellm's import is
    paid once; each test's loop reaches it through a connection of its own. Retries wait 10 ms."""
    from chaz_nb.engine.worker import WorkerBackend

    backend = WorkerBackend(backoff=0.01)
    backend.start()
    yield backend
    backend.close()


@pytest.fixture(params=["in_kernel", "worker"])
def wire_backend(request):
    """The model backend of a wire test, both ways: litellm in this process (``LiteLLMBackend``)
    and in the model worker (``WorkerBackend``, the notebook's default). A test marked
    ``litellm_in_kernel`` patches litellm here, so it runs in-process only."""
    from chaz_nb.engine.backends import LiteLLMBackend

    if request.param == "in_kernel":
        return LiteLLMBackend(backoff=0.01)
    if request.node.get_closest_marker("litellm_in_kernel"):
        pytest.skip("patches litellm in this process; the worker's litellm is another")
    return request.getfixturevalue("model_worker")


@pytest.fixture
def model_server():
    """A model provider on a real 127.0.0.1 socket (OpenAI and Ollama dialects); see tests/fakes."""
    from fakes.openai_server import FakeModelServer

    server = FakeModelServer()
    yield server
    server.close()


@pytest.fixture
def mcp_http():
    """A Streamable HTTP MCP server (the SDK's own) on 127.0.0.1 that wants a bearer token."""
    from fakes.mcp_http_server import McpHttpServer

    server = McpHttpServer(token="tok-8c1f2e9d7a")
    yield server
    server.close()


@pytest.fixture(scope="session")
def pg_cluster():
    """A throw-away PostgreSQL cluster for the whole test run (tests/fakes/postgres.py)."""
    from fakes.postgres import MISSING, PostgresCluster, find_bin

    if find_bin() is None:
        pytest.skip(MISSING)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip('psycopg is not installed: pip install -e ".[postgres]"')
    cluster = PostgresCluster()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster):
    """The URL of a fresh, empty database on the test cluster."""
    return pg_cluster.new_database()


@pytest.fixture(params=["duckdb", "postgres"])
def backend_store(request):
    """A store on each back end: DuckDB in memory, and PostgreSQL on a fresh database."""
    s = SessionStore(":memory:") if request.param == "duckdb" else SessionStore.open(request.getfixturevalue("pg_url"))
    yield s
    s.close()


@pytest.fixture
def parked(chaz, capsys):
    """A janitor run parked on its wipe call (in IPython's test shell); the session id."""
    from ipython_harness import park_janitor

    sid = park_janitor(chaz)
    capsys.readouterr()
    return sid


@pytest.fixture
def repo(tmp_path):
    """A git repository with one commit and one untracked file (for the reference git MCP server)."""
    path = tmp_path / "repo"
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "README").write_text("hello\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    (path / "new.txt").write_text("untracked\n")
    return path


@pytest.fixture(scope="session")
def llama(tmp_path_factory):
    """llama.cpp's llama-server with SmolLM2-135M on 127.0.0.1 (tests/fakes/llama_server.py):
    512 tokens of context per request, two requests at once; skips with the reason where
    `.ci/llama.sh` has not built it (`.ci/run` does, so CI never skips)."""
    from fakes.llama_server import LlamaServer, locate

    found = locate()
    if isinstance(found, str):
        pytest.skip(found)
    server = LlamaServer(*found, tmp_path_factory.mktemp("llama") / "llama-server.log").start()
    yield server
    server.stop()


@pytest.fixture
def llama_log(llama):
    """The server's log lines written during the test, printed (pytest shows them for a failure)."""
    start = llama.log_size()
    yield llama
    print(f"---- llama-server log ({llama.log_path}) ----\n{llama.log_since(start)}")
