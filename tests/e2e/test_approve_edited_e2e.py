"""End-to-end: approve with edits in JupyterLab (a real kernel, headless Chromium).

A scripted agent's run parks on a code call (``run_code(code)``, shown as code like
``kernel__run``). While the cell shows its waiting approval card, the test clicks Edit in the
card, changes the code and clicks "Approve edited"; the run goes on and parks on ``wipe(path)``,
which is edited in the Chaz sidebar (Edit, new JSON, "Approve edited"; a bad edit first, which
the card refuses in one line and leaves open). Both tools must get the edited arguments. The
finished transcript shows the code calls as code blocks; "Insert as cell below" puts the
edited code in a new cell.

Screenshots: ``<tmp_path>/shots`` and copies in /tmp/chaz_e2e_shots.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from waiting import poll

pytestmark = pytest.mark.e2e

_wait = functools.partial(poll, timeout=60)

TOOLS = '''%load_ext chaz_nb
import json, chaz_nb

@chaz_nb.tool(approval="always", risk="high")
def run_code(code: str) -> str:
    """Run Python code."""
    with open("got.jsonl", "a") as f:
        f.write(json.dumps(["run_code", code]) + "\\n")
    return f"ran {code!r}"

@chaz_nb.tool(approval="always", risk="high")
def wipe(path: str) -> str:
    """Delete a path."""
    with open("got.jsonl", "a") as f:
        f.write(json.dumps(["wipe", path]) + "\\n")
    return f"wiped {path}"
'''

AGENT = '''%%chaz agent coder
model = "chaz/script"
tools = ["run_code", "wipe"]
script = [
  {tool = "run_code", args = {code = "import os\\nos.system('rm -rf <tmp>')"}},
  {tool = "wipe", args = {path = "/"}},
  "done: {result}",
]
'''


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None}


def _got(root: Path) -> list:
    path = root / "got.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_edit_and_approve_edited_from_the_cell_card_and_the_sidebar(lab):
    page = lab.page
    lab.write_notebook("edits.ipynb", [_code(TOOLS), _code(AGENT), _code("%chaz @coder tidy up")])
    lab.open("edits.ipynb")
    lab.run_all(timeout=180)
    waiting = page.locator(".jp-Cell").nth(2)
    card = waiting.locator(".chaz-approval-widget")
    card.wait_for(timeout=60_000)
    # the code shows as code: numbered lines, escaped (the <tmp> is text)
    code_lines = card.locator(".chaz-code .chaz-code-line")
    _wait(lambda: code_lines.count() == 2, what="the code as two numbered lines")
    assert code_lines.nth(1).inner_text().replace("\n", "") == "2os.system('rm -rf <tmp>')"
    lab.shot("edited-card-parked")

    card.locator("button.chaz-ap-edit").click()
    editor = card.locator(".chaz-ap-editor textarea")
    editor.wait_for(state="visible", timeout=10_000)
    assert editor.input_value() == "import os\nos.system('rm -rf <tmp>')"
    editor.fill("print('only looking')")
    lab.shot("edited-card-editing")
    card.locator("button.chaz-ap-approve-edited").click()
    _wait(lambda: _got(lab.server.root)[:1] == [["run_code", "print('only looking')"]],
          what="run_code to get the edited code")
    _wait(lambda: "with edited arguments" in waiting.inner_text(), what="the card to say it was edited")

    # the run parks again on wipe: edit it in the sidebar
    lab.palette("Chaz: show sessions")
    lab.wait_sidebar_status("connected", timeout=60)
    cards = lab.pending_cards()
    _wait(lambda: cards.count() == 1 and cards.first.locator(".chaz-tool-name").inner_text() == "wipe",
          what="the wipe request in the sidebar")
    side = cards.first
    side.locator(".chaz-edit").click()
    box = side.locator(".chaz-edit-box")
    assert json.loads(box.input_value()) == {"path": "/"}
    box.fill('{"path": 7}')
    side.locator(".chaz-approve-edited").click()
    _wait(lambda: "is not of type 'string'" in side.locator(".chaz-card-error").inner_text(),
          what="the refusal of a bad edit")
    assert cards.count() == 1 and _got(lab.server.root) == [["run_code", "print('only looking')"]]
    lab.shot("edited-sidebar-refused")
    box.fill('{"path": "/tmp/cache"}')
    side.locator(".chaz-approve-edited").click()
    _wait(lambda: _got(lab.server.root) == [["run_code", "print('only looking')"], ["wipe", "/tmp/cache"]],
          what="wipe to get the edited path")
    _wait(lambda: cards.count() == 0, what="no pending cards")

    # the finished transcript (the lab renderer's output, not the live widget, whose frame is
    # four .chaz-transcript parts while the run writes its reply): code calls as code blocks,
    # the approver's edit shown
    transcript = waiting.locator(".chaz-session-output .chaz-transcript")
    transcript.wait_for(timeout=60_000)
    _wait(lambda: "done: wiped /tmp/cache" in transcript.inner_text(), what="the reply in the finished transcript")
    outcomes = transcript.locator(".chaz-tool-approval").all_inner_texts()
    assert outcomes == ["approved with edited arguments by user"] * 2
    tool = transcript.locator("details.chaz-tool").first
    tool.locator("summary").click()
    blocks = tool.locator(".chaz-code-block")
    assert blocks.count() == 2  # as edited (what ran), then as the model proposed it
    lab.shot("edited-transcript")
    cells = page.locator(".jp-Cell")
    before = cells.count()
    blocks.nth(0).locator(".chaz-code-insert").click()  # the code that ran comes first
    _wait(lambda: cells.count() == before + 1, what="a new cell")
    new_source = page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.widgets[3].model.sharedModel.getSource()"
    )
    assert new_source == "print('only looking')"
    lab.shot("edited-inserted-cell")
    assert lab.page_errors == []
