"""End-to-end: what a person types in a live card survives the run writing more entries.

JupyterLab draws a NEW widget view each time a cell's output is updated through its
display_id. The live session view used to refresh its output's static forms about once a
second while entries arrived, so a card's Edit box was redrawn empty (and lost the focus: the
next key presses went to the notebook) while the person typed. The view now stops those timed
refreshes once a page drew its widget (session.js sends "shown"); the widget carries the rows.

A scripted agent parks on a code call; a task on the kernel loop writes a Message into the
parked session every 0.2 s while the test types into the Edit box with real key presses. The
typed text is still there, in the same box, and "Approve edited" runs it.

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
import asyncio, json, os, chaz_nb

@chaz_nb.tool(approval="always", risk="high")
def run_code(code: str) -> str:
    """Run Python code."""
    with open("got.jsonl", "a") as f:
        f.write(json.dumps(["run_code", code]) + "\\n")
    return f"ran {code!r}"

async def _ticker():
    # while tick.on exists: one more entry in each parked session every 0.2 s
    n = 0
    while True:
        await asyncio.sleep(0.2)
        if os.path.exists("tick.on"):
            server = chaz_nb.current()
            for sid in server.parked_sessions():
                n += 1
                server.post(sid, "Message", f"tick {n}", sender="coder")

_ticking = asyncio.get_event_loop().create_task(_ticker())
'''

AGENT = '''%%chaz agent coder
model = "chaz/script"
tools = ["run_code"]
script = [
  {tool = "run_code", args = {code = "print('as proposed')"}},
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


def test_typed_edit_survives_entries_written_while_typing(lab):
    page = lab.page
    root = lab.server.root
    lab.write_notebook("drafts.ipynb", [_code(TOOLS), _code(AGENT), _code("%chaz @coder look")])
    lab.open("drafts.ipynb")
    lab.run_all(timeout=180)
    cell = page.locator(".jp-Cell").nth(2)
    card = cell.locator(".chaz-approval-widget")
    card.wait_for(timeout=60_000)
    card.locator("button.chaz-ap-edit").click()
    editor = card.locator(".chaz-ap-editor textarea")
    editor.wait_for(state="visible", timeout=10_000)
    assert editor.input_value() == "print('as proposed')"
    editor.evaluate("e => { e.dataset.mark = 'first'; }")  # the same box afterwards, not a new one

    (root / "tick.on").write_text("")
    ticks = cell.locator(".chaz-session-view")
    _wait(lambda: "tick 2" in ticks.inner_text(), what="the run to write entries")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    typed = "print('kept while the run wrote')"
    half = len(typed) // 2
    page.keyboard.type(typed[:half], delay=60)
    seen = ticks.inner_text().count("tick ")
    # at least two timed refreshes (one a second) would have come while typing on
    _wait(lambda: ticks.inner_text().count("tick ") >= seen + 12, what="more entries while typing")
    page.keyboard.type(typed[half:], delay=60)
    (root / "tick.on").unlink()
    lab.shot("drafts-kept-light")
    assert editor.input_value() == typed
    assert editor.evaluate("e => e.dataset.mark") == "first"
    assert editor.evaluate("e => document.activeElement === e"), "the box lost the focus"
    lab.command("apputils:change-theme", {"theme": "JupyterLab Dark"})
    page.wait_for_selector('body[data-jp-theme-light="false"]', state="attached", timeout=30_000)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=30_000)
    lab.shot("drafts-kept-dark")
    lab.command("apputils:change-theme", {"theme": "JupyterLab Light"})  # the settings may be shared
    assert editor.input_value() == typed

    card.locator("button.chaz-ap-approve-edited").click()
    _wait(lambda: _got(root) == [["run_code", typed]], what="run_code to get the typed code")
    assert lab.page_errors == []
