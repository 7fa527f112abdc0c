"""End-to-end: approved agent code lands in the notebook as cells (issue 44 §1), in JupyterLab
and Notebook 7.

A scripted agent builds ``top`` through two ``kernel__run`` calls, asked from a cell with
``%chaz --no-wait @coder``; the first is approved as proposed and the second edited, both from
the Chaz sidebar (clicks, typing). Each lands as a code cell below the asking cell, marked (its
``# chaz:`` line, its ``chaz`` metadata), with the outputs the code produced, not run again.
The notebook is saved (Ctrl+S), the kernel restarted from the Kernel menu and Run All run: the
inserted cells rebuild ``top`` with the same value. Reopened, the cells keep their metadata.

Screenshots: ``<tmp_path>/shots`` and copies in /tmp/chaz_e2e_shots.
"""

from __future__ import annotations

import functools
import json

import pytest
from waiting import poll

from test_agents_kept_e2e import _restart_from_the_menu

pytestmark = pytest.mark.e2e

_wait = functools.partial(poll, timeout=90)

FIRST = 'sales = [3, 4, 5]\ntop = max(sales) * 10\nprint("top is", top)\ntop'
SECOND = "top = top + 1"
EDITED = "top = top + 7"

AGENT = '''%%chaz agent coder
model = "chaz/script"
script = [
  {tool = "kernel__run", args = {code = ''' + json.dumps(FIRST) + '''}},
  {tool = "kernel__run", args = {code = ''' + json.dumps(SECOND) + '''}},
  "done: {result}",
]
'''
SHOW = 'print("TOP", globals().get("top"))'


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None}


CELLS_JS = """() => window.jupyterapp.shell.currentWidget.content.model.sharedModel.cells.map(c => ({
    id: c.id, source: c.getSource(), chaz: c.getMetadata('chaz') || null,
    outputs: c.cell_type === 'code' ? c.toJSON().outputs : [], count: c.execution_count ?? null}))"""


def _cells(lab) -> list[dict]:
    return lab.page.evaluate(CELLS_JS)


def _open_sidebar(lab) -> None:
    page = lab.page
    if lab.server.flavor == "lab":
        lab.palette("Chaz: show sessions")
    else:  # Notebook 7: View → Left Sidebar → Chaz, as a user finds it
        page.locator(".lm-MenuBar-itemLabel", has_text="View").click()
        page.locator(".lm-Menu-itemLabel", has_text="Left Sidebar").click()
        page.locator(".lm-Menu-itemLabel", has_text="Chaz").click()
        lab.sidebar.wait_for(state="visible", timeout=20_000)
    lab.wait_sidebar_status("connected", timeout=60)


@pytest.mark.parametrize("lab_server", ["lab", "notebook"], indirect=True)
def test_approved_code_becomes_marked_cells_that_run_all_reproduces(lab):
    page = lab.page
    lab.write_notebook("cells.ipynb", [_code("%load_ext chaz_nb"), _code(AGENT),
                                       _code("%chaz --no-wait @coder build top"), _code(SHOW)])
    lab.open("cells.ipynb")
    lab.run_all(timeout=180)
    _open_sidebar(lab)

    cards = lab.pending_cards()
    _wait(lambda: cards.count() == 1, what="the first kernel__run waiting")
    cards.first.locator("button.chaz-approve").click()
    _wait(lambda: len([c for c in _cells(lab) if c["chaz"]]) == 1, what="the first approved cell")
    _wait(lambda: cards.count() == 1, what="the second kernel__run waiting")
    card = cards.first
    card.locator("button.chaz-edit").click()
    box = card.locator(".chaz-edit-box")
    box.wait_for(state="visible", timeout=10_000)
    box.fill(EDITED)  # a code call is edited as code
    card.locator("button.chaz-approve-edited").click()
    _wait(lambda: len([c for c in _cells(lab) if c["chaz"]]) == 2, what="the edited cell")

    cells = _cells(lab)
    # below the asking cell, in order, before the cell that was next
    assert [c["id"] for c in cells][:3] == ["cell-0", "cell-1", "cell-2"] and cells[-1]["id"] == "cell-3"
    first, second = cells[3], cells[4]
    assert first["chaz"]["agent"] == "coder" and first["chaz"]["model"] == "chaz/script"
    assert first["chaz"]["approved_by"] == "user" and first["chaz"]["edited"] is False
    assert second["chaz"]["edited"] is True and second["chaz"]["tool_call"] != first["chaz"]["tool_call"]
    assert first["source"].startswith("# chaz: written by @coder (chaz/script), approved by you")
    assert second["source"].startswith("# chaz: written by @coder (chaz/script), edited and approved by you")
    assert first["source"].endswith(FIRST) and second["source"].endswith(EDITED)
    # the outputs as produced, and not run again (no execution count)
    assert first["outputs"][0]["text"] == "top is 50\n" and first["count"] is None
    # on screen: the mark a person reads, and the output
    shown = page.locator(".jp-Cell").nth(3)
    _wait(lambda: "# chaz: written by @coder" in shown.inner_text() and "top is 50" in shown.inner_text(),
          what="the inserted cell on screen")
    lab.shot(f"agent-cells-{lab.server.flavor}-inserted")

    # save as a user does, restart from the Kernel menu, Run All
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Control+s")
    _wait(lambda: "chaz" in json.dumps(json.loads((lab.server.root / "cells.ipynb").read_text())["cells"][3]
                                       .get("metadata", {})), what="the saved notebook")
    _restart_from_the_menu(lab)
    lab.run_all(timeout=180)
    last = page.locator(".jp-Cell").last
    _wait(lambda: "TOP 57" in last.inner_text(), what="Run All to rebuild top")
    lab.shot(f"agent-cells-{lab.server.flavor}-run-all")

    # reopen: the cells keep their metadata (from the file, in the page)
    saved = json.loads((lab.server.root / "cells.ipynb").read_text())
    assert [c["metadata"]["chaz"]["edited"] for c in saved["cells"] if "chaz" in c["metadata"]] == [False, True]
    lab.command("docmanager:save")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    lab.open("cells.ipynb")  # a new page: the notebook read from the file again
    reopened = [c for c in _cells(lab) if c["chaz"]]
    assert [c["chaz"]["code_sha256"] for c in reopened] == [first["chaz"]["code_sha256"], second["chaz"]["code_sha256"]]
    # (Notebook 7.6 itself logs a settings error at start, from notebook_core)
    assert [e for e in lab.page_errors if lab.server.flavor == "lab" or "chaz" in e.lower()] == []


def test_a_sidebar_chat_run_lands_at_the_end_of_the_notebook(lab):
    """Asked from the sidebar chat (no cell asked): the approved code goes at the notebook's end."""
    page = lab.page
    lab.write_notebook("chat-cells.ipynb", [_code("%load_ext chaz_nb"), _code(AGENT), _code("%chaz new @coder"),
                                            _code(SHOW)])
    lab.open("chat-cells.ipynb")
    lab.run_all(timeout=180)
    _open_sidebar(lab)
    session = lab.sidebar.locator(".chaz-session", has=page.locator(".chaz-agent", has_text="coder"))
    session.wait_for(timeout=30_000)
    session.click()
    chat = lab.sidebar.locator(".chaz-chat")
    box = chat.locator(".chaz-chat-input")
    box.click()
    box.type("build top")
    box.press("Enter")
    card = chat.locator(".chaz-chat-approvals .chaz-card")
    _wait(lambda: card.count() == 1, what="the first kernel__run card in the chat")
    card.locator(".chaz-approve").click()
    _wait(lambda: len([c for c in _cells(lab) if c["chaz"]]) == 1, what="the first cell")
    _wait(lambda: card.count() == 1, what="the second kernel__run card in the chat")
    card.locator(".chaz-approve").click()
    _wait(lambda: len([c for c in _cells(lab) if c["chaz"]]) == 2, what="the second cell")
    cells = _cells(lab)
    assert [c["id"] for c in cells[:4]] == ["cell-0", "cell-1", "cell-2", "cell-3"]  # after every cell
    assert [c["chaz"]["edited"] for c in cells[4:]] == [False, False]
    assert cells[4]["source"].endswith(FIRST) and cells[5]["source"].endswith(SECOND)
    lab.shot("agent-cells-chat")
    assert lab.page_errors == []
