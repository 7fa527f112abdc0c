"""End-to-end: what a JupyterLab user sees of the chaz views, live and after a save.

1. A notebook runs a ``%chaz @calc`` turn and ``%chaz audit`` in a real JupyterLab; the
   audit table is a live ipywidget then.
2. The JupyterLab Dark theme is switched on and screenshotted (the table's grid lines
   follow the theme), then the light theme comes back.
3. The notebook is saved from JupyterLab (Ctrl+S), the kernel is shut down, the tab is
   closed and the saved notebook is reopened: no "Error displaying widget: model not
   found", the audit table and the transcript are there (their static forms), and the file
   on disk holds no widget view for the chaz outputs.

Screenshots: ``<tmp_path>/shots`` and copies in /tmp/chaz_e2e_shots.
"""

from __future__ import annotations

import functools
import json

import pytest
from waiting import poll

pytestmark = pytest.mark.e2e

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

CELLS = [
    "%env CHAZ_DB=:memory:\n%load_ext chaz_nb",
    "import chaz_nb\n\n@chaz_nb.tool\ndef add(a: int, b: int) -> int:\n    \"\"\"Add.\"\"\"\n    return a + b",
    "%chaz agent calc --model chaz/script --tools add --script "
    "'[{\"tool\": \"add\", \"args\": {\"a\": 2, \"b\": 3}}, \"2 + 3 = {result}\"]'",
    "%chaz @calc what is 2 + 3?",
    "%chaz audit",
]


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None, "metadata": {}}


_wait = functools.partial(poll, timeout=30)


def _kernel_id(lab) -> str:
    return lab.page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id"
    )


def _set_theme(lab, name: str) -> None:
    lab.command("apputils:change-theme", {"theme": name})
    lab.page.wait_for_function(
        "(name) => document.body.dataset.jpThemeName === name", arg=name, timeout=30_000
    )
    lab.page.wait_for_timeout(500)  # the theme's CSS is applied after the attribute


def test_saved_notebook_reopens_without_widget_errors(lab):
    page = lab.page
    lab.write_notebook("views.ipynb", [_code(src) for src in CELLS])
    lab.open("views.ipynb")
    lab.run_all()

    cells = page.locator(".jp-Cell")
    # live: the audit table is the ipywidget (its filters are there)
    audit = cells.nth(4)
    audit.locator(".chaz-audit-view").wait_for(timeout=60_000)
    assert "add" in audit.locator(".chaz-audit table").inner_text()
    turn_text = cells.nth(3).inner_text()
    assert "2 + 3 = 5" in turn_text
    lab.shot("views-live-light")

    _set_theme(lab, "JupyterLab Dark")
    lab.shot("views-live-dark")
    grid = page.evaluate(
        """() => {
            const td = document.querySelector('.chaz-audit td');
            return td ? getComputedStyle(td).borderBottomColor : null;
        }"""
    )
    _set_theme(lab, "JupyterLab Light")

    # save from JupyterLab the way a user does
    cells.nth(0).click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    saved = lab.server.root / "views.ipynb"
    _wait(lambda: json.loads(saved.read_text())["cells"][4]["outputs"], what="the save to land")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )

    # shut the kernel down, close the tab, reopen the saved notebook
    kid = _kernel_id(lab)
    page.evaluate(
        "(id) => fetch(`/api/kernels/${id}`, {method: 'DELETE'}).then(r => r.status)", kid
    )
    lab.command("application:close-all")
    page.wait_for_timeout(500)
    lab.open("views.ipynb")
    page.wait_for_timeout(3000)  # the widget manager gives up on missing models after ~2 s
    body = page.locator(".jp-NotebookPanel").inner_text()
    lab.shot("views-reopened")
    assert "model not found" not in body
    assert "Error displaying widget" not in body
    reopened = page.locator(".jp-Cell")
    assert "tool calls · all sessions" in reopened.nth(4).inner_text()
    assert "add" in reopened.nth(4).inner_text()
    assert "2 + 3 = 5" in reopened.nth(3).inner_text()

    nb = json.loads(saved.read_text())
    for i in (3, 4):
        for out in nb["cells"][i]["outputs"]:
            assert WIDGET_MIME not in out.get("data", {}), (i, list(out.get("data", {})))
    # dark theme: the table's grid line is not (near) white
    assert grid is not None
    rgb = [int(x) for x in grid[grid.index("(") + 1 : grid.index(")")].split(",")[:3]]
    assert sum(rgb) < 3 * 160, f"grid line {grid} is bright on the dark theme"
