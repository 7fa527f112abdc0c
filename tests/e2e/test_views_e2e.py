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


RELEASE_CELLS = [
    "%env CHAZ_DB=:memory:\n%load_ext chaz_nb",
    CELLS[1],
    CELLS[2],
    "%chaz @calc what is 2 + 3?",
    "%chaz @assistant hello <b>one</b>",
    "%chaz @assistant hello two",
    # the kernel's one shared default Layout and Styles (views/display.py: plain) are not a cell's
    "from ipywidgets.widgets import widget as _w\nfrom chaz_nb.notebook.views.display import _SHARED\n"
    "print('widgets alive:', len(set(map(id, _w._instances.values())) - set(map(id, _SHARED.values()))))",
]


def _turns_show_their_transcripts(page) -> None:
    cells = page.locator(".jp-Cell")
    assert "2 + 3 = 5" in cells.nth(3).inner_text()
    assert "hello <b>one</b>" in cells.nth(4).inner_text()  # escaped: shown as text
    assert "hello two" in cells.nth(5).inner_text()
    body = page.locator(".jp-NotebookPanel").inner_text()
    assert "model not found" not in body and "Error displaying widget" not in body


def test_finished_turns_let_go_of_their_widgets_and_still_show_their_transcripts(lab):
    """Issue 32 §2: a finished turn's cell shows its transcript from the static output (no
    widget view in the page), the kernel holds no widget of it, and after a save and a page
    reload (the kernel still running) the transcripts are the same."""
    page = lab.page
    lab.write_notebook("release.ipynb", [_code(src) for src in RELEASE_CELLS])
    lab.open("release.ipynb")
    lab.run_all()

    cells = page.locator(".jp-Cell")
    _wait(lambda: "widgets alive:" in cells.nth(6).inner_text(), what="the probe cell's output")
    _turns_show_their_transcripts(page)
    for i in (3, 4, 5):
        assert cells.nth(i).locator(".jupyter-widgets").count() == 0, f"cell {i} still shows a widget view"
    assert "widgets alive: 0" in cells.nth(6).inner_text()
    lab.shot("release-live")

    cells.nth(0).click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )
    page.reload()
    page.wait_for_function("() => !!window.jupyterapp", timeout=60_000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=60_000)
    _wait(lambda: "hello two" in page.locator(".jp-Cell").nth(5).inner_text(), what="the reopened notebook")
    page.wait_for_timeout(3000)  # the widget manager gives up on missing models after ~2 s
    lab.shot("release-reloaded")
    _turns_show_their_transcripts(page)

    saved = json.loads((lab.server.root / "release.ipynb").read_text())
    for i, needle in ((3, "2 + 3 = 5"), (4, "hello &lt;b&gt;one&lt;/b&gt;"), (5, "hello two")):
        [out] = [o for o in saved["cells"][i]["outputs"] if o.get("output_type") == "display_data"]
        assert WIDGET_MIME not in out["data"], i
        html = out["data"]["text/html"]
        assert needle in ("".join(html) if isinstance(html, list) else html), i  # (saved as lines)


EARLIER_CELLS = [
    "%env CHAZ_DB=:memory:\n%load_ext chaz_nb\nimport chaz_nb\n\n"
    "@chaz_nb.tool(approval=\"always\", risk=\"high\")\ndef wipe(path: str) -> str:\n"
    "    \"\"\"Delete a path.\"\"\"\n    return f\"wiped {path}\"",
    "%chaz agent ops --model chaz/script --tools wipe --script "
    "'[{\"tool\": \"wipe\", \"args\": {\"path\": \"/tmp/x\"}}, \"done: {result}\"]'",
    # an older part of the log (the agent's own notes: no run starts for them)
    "from chaz_nb.core.entries import EntryType\ns = chaz_nb.current()\nsid = s.current_session('ops')\n"
    "for i in range(30):\n    s.store.append(sid, EntryType.MESSAGE, 'ops', f'old note {i:02d} <i>x</i>')",
    "%chaz @ops wipe it",  # parks on the approval: the session's views stay live
    "%chaz log @ops --limit 5",
]


def test_show_earlier_in_the_live_view_brings_the_older_rows_in_place(lab):
    """The one-widget live view's "show earlier" button (static/session.js, ``earlier``
    event): a click loads the page before the first row shown, in place, escaped."""
    page = lab.page
    lab.write_notebook("earlier.ipynb", [_code(src) for src in EARLIER_CELLS])
    lab.open("earlier.ipynb")
    lab.run_all()
    log = page.locator(".jp-Cell").nth(4)
    view = log.locator(".chaz-session-view")
    view.wait_for(timeout=60_000)
    rows = view.locator(".chaz-row")
    # the newest 5 entries: a note, the person's message, the call (its Ack and request fold in)
    _wait(lambda: rows.count() == 3, what="the log's newest page (5 entries, 3 rows)")
    text = view.inner_text()
    assert "old note 29 <i>x</i>" in text and "old note 24" not in text  # escaped: shown as text
    earlier = view.locator(".chaz-earlier-row")
    assert "29 earlier entries" in earlier.inner_text()
    lab.shot("earlier-before")
    # what a person typed in the card stays through "show earlier": the output is not drawn
    # again (JupyterLab makes a new widget view for each update of an output: issue 42 #20)
    card = view.locator(".chaz-approval-widget")
    card.locator("button.chaz-ap-edit").click()
    editor = card.locator(".chaz-ap-editor textarea")
    editor.click()
    page.keyboard.press("Control+End")
    page.keyboard.type("  # mine")
    typed = editor.input_value()
    assert typed.endswith("# mine")
    view.evaluate("(v) => { v.__chazSame = true; }")

    view.locator(".chaz-earlier-button").click()
    _wait(lambda: rows.count() == 8, what="the earlier page's rows in the live view")
    text = view.inner_text()
    assert "old note 24 <i>x</i>" in text and "old note 23" not in text
    assert text.index("old note 24") < text.index("old note 29") < text.index("wipe it")  # in log order
    assert "24 earlier entries" in earlier.inner_text()
    assert view.locator(".chaz-approval-widget").count() == 1  # the live card is still there, once
    assert view.locator("i").count() == 0  # no agent-written tag became markup
    lab.shot("earlier-after")
    view.locator(".chaz-earlier-button").click()
    _wait(lambda: rows.count() == 13, what="a second click's page")
    assert "old note 19" in view.inner_text() and "19 earlier entries" in earlier.inner_text()
    assert view.evaluate("(v) => v.__chazSame === true")  # the same view, never drawn again
    assert editor.input_value() == typed
