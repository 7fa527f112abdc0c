"""End-to-end: the text fields the chaz views draw keep their keys from the notebook (issue 42 §1).

A scripted agent's run parks on a code call; its cell shows the live view's approval card. In
JupyterLab and in Notebook 7, in Chromium, by real key presses (no ``fill``):

1. in the card's Edit box, Enter and Shift+Enter add new lines (Shift+Enter does not run the
   ``%chaz @NAME`` cell again: no second Message, no second card, the cell's execution count
   stays), Ctrl+Enter does not run it either, Escape leaves the focus in the box, ArrowUp moves
   the caret in the box (not the notebook's active cell), Ctrl+A / Ctrl+C / Ctrl+V copy and
   paste inside the box; "Approve edited" then runs the code as typed;
2. in the Deny reason field, the same keys stay in the field.

Screenshots (light and dark) go to test-artifacts/ (gitignored) and /tmp/chaz_e2e_shots.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
from waiting import poll

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
_wait = functools.partial(poll, timeout=60)

TOOLS = '''%env CHAZ_DB=:memory:
%load_ext chaz_nb
import json, chaz_nb

@chaz_nb.tool(approval="always", risk="high")
def run_code(code: str) -> str:
    """Run Python code."""
    with open("got.jsonl", "a") as f:
        f.write(json.dumps(["run_code", code]) + "\\n")
    return f"ran {code!r}"
'''

AGENT = '''%%chaz agent coder
model = "chaz/script"
tools = ["run_code"]
script = [
  {tool = "run_code", args = {code = "print('asked')"}},
  "done: {result}",
]
'''

TURN = "%chaz @coder tidy up"
MESSAGES = ("print(sum(r[0] == 'Message' and r[1] != 'coder' for r in chaz_nb.current().store.execute("
            "'SELECT entry_type, sender FROM entries')), 'messages')")


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None, "metadata": {}}


def _got(root: Path) -> list:
    path = root / "got.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _shot(lab, name: str) -> None:
    path = lab.shot(f"keys-{lab.server.flavor}-{name}")
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(path, ARTIFACTS / f"keys-{lab.server.flavor}-{name}.png")


def _set_theme(lab, name: str) -> None:
    lab.command("apputils:change-theme", {"theme": name})
    lab.page.wait_for_function("(name) => document.body.dataset.jpThemeName === name", arg=name, timeout=30_000)
    lab.page.wait_for_timeout(300)  # the theme's CSS is applied after the attribute


def _notebook_state(lab) -> dict:
    """The turn cell's execution count, the active cell and the notebook's mode."""
    return lab.page.evaluate(
        """() => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            return {count: nb.widgets[2].model.executionCount, active: nb.activeCellIndex, mode: nb.mode,
                    cells: nb.widgets.length};
        }"""
    )


@pytest.mark.parametrize("lab_server", ["lab", "notebook"], indirect=True)
def test_the_views_text_fields_keep_their_keys(lab):
    page = lab.page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab.server.url)
    lab.write_notebook("keys.ipynb", [_code(TOOLS), _code(AGENT), _code(TURN), _code("")])
    lab.open("keys.ipynb")
    lab.run_all(timeout=180)
    turn = page.locator(".jp-Notebook .jp-Cell").nth(2)
    card = turn.locator(".chaz-approval-widget")
    card.wait_for(timeout=60_000)
    before = _notebook_state(lab)
    assert before["count"] is not None

    # 1. the Edit box
    card.locator("button.chaz-ap-edit").click()
    editor = card.locator(".chaz-ap-editor textarea")
    editor.wait_for(state="visible", timeout=10_000)
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.type("x = 1")
    page.keyboard.press("Enter")
    page.keyboard.type("y = 2")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("z = 3")
    assert editor.input_value() == "x = 1\ny = 2\nz = 3"
    page.keyboard.press("Control+Enter")  # runs a cell in the notebook; nothing here
    page.keyboard.press("Escape")  # the notebook's command mode; here the box keeps the focus
    assert page.evaluate("() => document.activeElement && document.activeElement.tagName") == "TEXTAREA"
    page.keyboard.press("ArrowUp")  # the caret goes up a line (not the notebook's active cell)
    page.keyboard.type("!")
    assert editor.input_value() in ("x = 1\ny = 2!\nz = 3", "x = 1\ny = 2\n!z = 3"), editor.input_value()
    page.keyboard.press("Control+a")
    page.keyboard.press("Control+c")
    page.keyboard.press("Control+End")
    page.keyboard.press("Enter")
    page.keyboard.press("Control+v")
    text = editor.input_value()
    assert text.count("x = 1") == 2, text  # copied and pasted inside the box
    # no second run of the cell: one card, one Message, the same execution count, no cell added
    after = _notebook_state(lab)
    assert after["count"] == before["count"] and after["cells"] == before["cells"], (before, after)
    assert card.count() == 1
    _shot(lab, "edit-box-typed")

    # 2. the Deny reason field
    reason = card.locator(".chaz-ap-reason")
    reason.click()
    page.keyboard.type("not now")
    page.keyboard.press("Shift+Enter")
    page.keyboard.press("Enter")
    page.keyboard.press("ArrowLeft")
    page.keyboard.type("!")
    page.keyboard.press("Escape")
    assert reason.input_value() == "not no!w"
    assert page.evaluate("() => document.activeElement && document.activeElement.tagName") == "INPUT"
    after = _notebook_state(lab)
    assert after["count"] == before["count"] and after["cells"] == before["cells"], (before, after)
    _set_theme(lab, "JupyterLab Dark")
    _shot(lab, "edit-box-typed-dark")
    _set_theme(lab, "JupyterLab Light")
    reason.fill("")

    # Approve edited runs the code as typed, once
    card.locator("button.chaz-ap-approve-edited").click()
    _wait(lambda: _got(lab.server.root) == [["run_code", text]], what="run_code to get the typed code")
    _wait(lambda: "done: ran" in turn.inner_text(), what="the reply")
    # one Message from the person in the store: the cell ran once
    cells = page.locator(".jp-Notebook .jp-Cell")
    page.evaluate(
        """(src) => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            nb.widgets[3].model.sharedModel.setSource(src);
            nb.activeCellIndex = 3;
            void window.jupyterapp.commands.execute('notebook:run-cell');
        }""",
        MESSAGES,
    )
    out = cells.nth(3).locator(".jp-OutputArea")
    _wait(lambda: "messages" in out.inner_text(), what="the Messages count")
    assert out.inner_text().strip() == "1 messages", out.inner_text()
    assert _got(lab.server.root) == [["run_code", text]]
    assert _notebook_state(lab)["count"] == before["count"]
    assert [e for e in lab.page_errors if lab.server.flavor == "lab" or "chaz" in e] == []
