"""Fixtures for end-to-end tests: a JupyterLab server on 127.0.0.1 and headless Chromium.

- JupyterLab runs from this Python (``sys.executable -m jupyterlab``) in a temp root dir,
  loopback only, with an empty token and the XSRF check off, on a random free port, with
  isolated config/data/runtime/settings/workspace dirs.
- The browser is Debian's ``/usr/bin/chromium`` driven by Playwright for Python
  (``playwright install`` is never needed or run).
- If the repo has a built extension (``chaz_nb/labextension``), it is put first on the
  labextensions path (``JUPYTER_PATH``), so the test exercises the current build even
  when an older copy is installed.

Tests are skipped only when chromium or playwright is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS_FOR_LEAD = Path("/tmp/chaz_e2e_shots")
SERVER_START_TIMEOUT = 90


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "e2e: end-to-end browser tests (JupyterLab + headless Chromium)",
    )


def _require_browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium (see .ci/labext.sh)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright (pip) is not installed: pip install playwright")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _labextension_available(env: dict) -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "jupyterlab.labextensions", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    text = out.stdout + out.stderr
    return any("chaz-nb" in line and "enabled" in line for line in text.splitlines())


class LabServer:
    def __init__(self, url: str, root: Path, proc: subprocess.Popen, log: Path, flavor: str = "lab"):
        self.url = url.rstrip("/")
        self.root = root
        self.proc = proc
        self.log = log
        #: "lab" (JupyterLab) or "notebook" (Notebook 7): see ``lab_server``
        self.flavor = flavor

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@pytest.fixture
def lab_server(tmp_path, request):
    """A JupyterLab server serving ``tmp_path / 'root'``; with ``indirect`` param "notebook",
    a Notebook 7 server instead (``@pytest.mark.parametrize("lab_server", ["lab", "notebook"],
    indirect=True)``): the same extension, pages under /notebooks/."""
    flavor = getattr(request, "param", "lab")
    _require_browser()
    if flavor == "notebook":
        pytest.importorskip("notebook", minversion="7", reason="Notebook 7 (pip install 'notebook>=7')")
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        pytest.fail("jupyterlab is not installed in this environment (pip install jupyterlab)")

    root = tmp_path / "root"
    root.mkdir()
    jdirs = tmp_path / "jupyter"
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(jdirs / "config"),
        JUPYTER_DATA_DIR=str(jdirs / "data"),
        JUPYTER_RUNTIME_DIR=str(jdirs / "runtime"),
        JUPYTER_PLATFORM_DIRS="1",
        PYTHONUNBUFFERED="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    env.pop("JUPYTER_TOKEN", None)
    built = REPO / "chaz_nb" / "labextension"
    if (built / "package.json").exists():
        ext_path = tmp_path / "jpath" / "labextensions"
        ext_path.mkdir(parents=True)
        (ext_path / "chaz-nb").symlink_to(built, target_is_directory=True)
        env["JUPYTER_PATH"] = os.pathsep.join(
            p for p in [str(tmp_path / "jpath"), env.get("JUPYTER_PATH", "")] if p
        )
    # The kernel must import this checkout's chaz_nb.
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    if not _labextension_available(env):
        pytest.fail(
            "the chaz-nb JupyterLab extension is neither built in the repo nor installed: "
            "run .ci/labext.sh (or `npm --prefix labextension run build`)"
        )

    # No news prompt / update check: no network, nothing covering the screenshots.
    settings = jdirs / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )

    port = _free_port()
    log = tmp_path / "jupyterlab.log"
    app = "LabApp" if flavor == "lab" else "JupyterNotebookApp"
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab" if flavor == "lab" else "notebook",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True",
        "--ServerApp.allow_remote_access=False",
        f"--ServerApp.root_dir={root}",
        f"--{app}.user_settings_dir={jdirs / 'settings'}",
        f"--{app}.workspaces_dir={jdirs / 'workspaces'}",
        f"--{app}.expose_app_in_browser=True",
    ]
    if flavor == "lab":
        cmd += ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    with log.open("w") as fh:
        proc = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    server = LabServer(url, root, proc, log, flavor)
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while True:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.terminate()
            pytest.fail(f"JupyterLab did not start in {SERVER_START_TIMEOUT}s:\n{server.log_tail()}")
        time.sleep(0.3)
    try:
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class Lab:
    """Drives one JupyterLab page. Helpers are meant to be reused by later tests
    (e.g. running notebooks/02_approvals.ipynb and approving from the sidebar)."""

    def __init__(self, page, server: LabServer, shots: Path):
        self.page = page
        self.server = server
        self.shots = shots
        self.shots.mkdir(parents=True, exist_ok=True)
        self._n = 0

    # -- screenshots ----------------------------------------------------------
    def shot(self, name: str) -> Path:
        self._n += 1
        path = self.shots / f"{self._n:02d}-{name}.png"
        self.page.screenshot(path=str(path))
        SHOTS_FOR_LEAD.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SHOTS_FOR_LEAD / path.name)
        return path

    # -- notebooks --------------------------------------------------------------
    def write_notebook(self, name: str, cells: list[dict]) -> Path:
        nb = {
            "cells": cells,
            "metadata": {
                "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                "language_info": {"name": "python"},
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        for i, cell in enumerate(cells):
            cell.setdefault("id", f"cell-{i}")
            cell.setdefault("metadata", {})
            if cell["cell_type"] == "code":
                cell.setdefault("outputs", [])
                cell.setdefault("execution_count", None)
        path = self.server.root / name
        path.write_text(json.dumps(nb, indent=1))
        return path

    def open(self, path: str) -> None:
        where = "lab/tree" if self.server.flavor == "lab" else "notebooks"
        self.page.goto(f"{self.server.url}/{where}/{path}")
        self.page.wait_for_function("() => !!window.jupyterapp", timeout=60_000)
        self.page.wait_for_selector(".jp-NotebookPanel .jp-Notebook", timeout=60_000)
        self.wait_kernel_idle()

    def kernel_status(self) -> str | None:
        return self.page.evaluate(
            """() => {
                const w = window.jupyterapp.shell.currentWidget;
                const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
                return k ? k.status : null;
            }"""
        )

    def wait_kernel_idle(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.kernel_status() != "idle":
            if time.monotonic() > deadline:
                self.shot("kernel-not-idle")
                raise AssertionError(
                    f"kernel not idle after {timeout}s (status {self.kernel_status()!r})\n"
                    + self.server.log_tail()
                )
            self.page.wait_for_timeout(200)

    def command(self, command_id: str, args: dict | None = None):
        return self.page.evaluate(
            "([id, args]) => window.jupyterapp.commands.execute(id, args)",
            [command_id, args or {}],
        )

    def run_all(self, timeout: float = 120) -> None:
        self.command("notebook:run-all-cells")
        self.page.wait_for_timeout(300)
        self.wait_kernel_idle(timeout)

    def palette(self, label: str) -> None:
        """Run a command the way a user does: open the palette, type, Enter."""
        self.command("apputils:activate-command-palette")
        box = self.page.locator(".lm-CommandPalette-input")
        box.wait_for(state="visible", timeout=10_000)
        box.fill(label)
        item = self.page.locator(".lm-CommandPalette-item", has_text=label).first
        item.wait_for(state="visible", timeout=10_000)
        box.press("Enter")

    # -- Chaz sidebar -----------------------------------------------------------
    @property
    def sidebar(self):
        return self.page.locator("#chaz-sidebar")

    def sidebar_status(self) -> str:
        return self.sidebar.locator(".chaz-panel-status").inner_text()

    def pending_cards(self):
        return self.sidebar.locator(".chaz-card")

    def wait_sidebar_status(self, status: str, timeout: float = 30) -> None:
        self.page.wait_for_selector(
            f'#chaz-sidebar[data-status="{status}"]', timeout=timeout * 1000
        )


@pytest.fixture
def lab(lab_server, tmp_path):
    """A Playwright page on the JupyterLab server, wrapped in ``Lab`` helpers."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            page.set_default_timeout(30_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc) + " @ " + str(exc.stack)))
            helper = Lab(page, lab_server, tmp_path / "shots")
            helper.page_errors = errors
            yield helper
        finally:
            browser.close()
