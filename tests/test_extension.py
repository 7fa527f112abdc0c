"""The extension's lifecycle pieces: lazy imports, database choice, lock fallback, origin."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from IPython.testing.globalipapp import get_ipython

import chaz_nb
from chaz_nb.notebook import extension

ip = get_ipython()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, cwd: str | None = None, env: dict | None = None) -> str:
    full_env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    full_env.pop("CHAZ_DB", None)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, cwd=cwd, env=full_env, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_load_ext_starts_the_model_worker_and_imports_no_litellm(tmp_path):
    out = run_python(
        """
        import os, sys
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()
        ip.run_line_magic('load_ext', 'chaz_nb')
        import chaz_nb
        backend = chaz_nb.current().backend
        os.kill(backend.pid, 0)  # started by the load: a process of its own
        print('worker:', type(backend).__name__, backend.pid != os.getpid(), 'litellm' in sys.modules)
        """,
        cwd=str(tmp_path),
    )
    assert "worker: WorkerBackend True False" in out.splitlines()


def test_load_ext_imports_litellm_in_a_background_thread_it_does_not_wait_for(tmp_path):
    """With litellm in the kernel (``CHAZ_MODEL_WORKER=0``): imported off the loop."""
    out = run_python(
        """
        import sys, threading, time
        import chaz_nb
        print('after import:', 'litellm' in sys.modules, 'duckdb' in sys.modules)
        from chaz_nb.engine import litellm_loader as loader
        imported_by = []
        release = threading.Event()
        real = loader._import_litellm
        def spy():
            imported_by.append(threading.current_thread().name)
            release.wait(60)  # an import that cannot finish before load_ext returns
            return real()
        loader._import_litellm = spy
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()
        ip.run_line_magic('load_ext', 'chaz_nb')
        print('loaded while importing:', not loader.start_import().done(), 'nest', 'nest_asyncio2' in sys.modules)
        release.set()
        loader.start_import().result(timeout=120)
        print('imported in:', imported_by, 'litellm' in sys.modules)
        """,
        cwd=str(tmp_path), env={"CHAZ_MODEL_WORKER": "0"},
    )
    lines = out.splitlines()
    assert "after import: False False" in lines  # importing chaz_nb imports neither
    assert "loaded while importing: True nest False" in lines  # nest_asyncio2 at the first wait
    assert "imported in: ['chaz-import-litellm'] True" in lines
    assert (tmp_path / ".chaz" / "sessions.duckdb").exists()


def test_default_db_and_model(monkeypatch):
    monkeypatch.delenv("CHAZ_DB", raising=False)
    monkeypatch.delenv("CHAZ_MODEL", raising=False)
    assert extension.default_db() == os.path.join(".chaz", "sessions.duckdb")
    assert extension.default_model() == "chaz/echo"
    monkeypatch.setenv("CHAZ_DB", "/tmp/x.duckdb")
    monkeypatch.setenv("CHAZ_MODEL", "gpt-4o-mini")
    assert extension.default_db() == "/tmp/x.duckdb"
    assert extension.default_model() == "gpt-4o-mini"


@pytest.fixture
def locked_db(tmp_path):
    """A database file held by another process (as another kernel would)."""
    path = tmp_path / "shared.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from chaz_nb.core.store import SessionStore\n"
         f"s = SessionStore({str(path)!r}); print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": ROOT},
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        yield path
    finally:
        holder.kill()
        holder.wait()


def test_a_locked_file_falls_back_to_a_file_of_our_own(locked_db):
    store, note = extension.open_store(str(locked_db))
    try:
        alt = str(locked_db.with_name(f"shared-{os.getpid()}.duckdb"))
        assert store.path == alt
        assert note == (f"{locked_db} is held by another kernel; this kernel uses {alt} "
                        "(set CHAZ_DB=postgresql://... to share sessions between notebooks)")
    finally:
        store.close()


def test_load_ext_on_a_locked_file_says_so_in_one_line(locked_db, monkeypatch, capsys):
    monkeypatch.setenv("CHAZ_DB", str(locked_db))
    ip.run_line_magic("load_ext", "chaz_nb")
    try:
        out = capsys.readouterr().out
        alt = locked_db.with_name(f"shared-{os.getpid()}.duckdb")
        assert out == (
            f"chaz_nb: {locked_db} is held by another kernel; this kernel uses {alt} "
            "(set CHAZ_DB=postgresql://... to share sessions between notebooks) · agent assistant uses chaz/echo\n"
        )
        ip.run_line_magic("chaz", "@assistant still works")
        server = chaz_nb.current()
        assert server.store.latest(server.current_session("assistant")).content == "echo: still works"
    finally:
        ip.run_line_magic("unload_ext", "chaz_nb")


def test_unload_without_load_is_harmless():
    extension.unload_ipython_extension(ip)
    with pytest.raises(extension.NotLoadedError):
        extension.current()


def test_origin_without_a_kernel_has_every_field():
    assert extension.origin(ip).keys() == {"notebook", "cell_id", "execution_count", "kernel_id"}
    assert extension.origin(None) == {
        "notebook": None, "cell_id": None, "execution_count": None, "kernel_id": None
    }


def test_origin_uses_the_jupyter_session_name(monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/analysis.ipynb")
    assert extension.origin(ip)["notebook"] == "/home/me/analysis.ipynb"


def test_ask_without_the_extension_is_a_clear_error():
    import asyncio

    with pytest.raises(extension.NotLoadedError, match="%load_ext chaz_nb"):
        asyncio.run(chaz_nb.ask("@assistant hi"))
