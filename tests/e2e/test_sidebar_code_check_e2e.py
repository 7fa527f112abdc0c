"""End-to-end: the sidebar's card for code a mask could hide, and the finished tool row.

A scripted agent's code call has a secret outside a string literal (masking it would hide
code), and a line with 3,000 blanks in it. The Chaz sidebar's card says "⛔ Approve is refused:
…" as the cell's card does, its Approve is disabled, and the blanks show as their count. The
person edits the code and approves the edit; the finished output (JupyterLab's renderer)
shows the code that ran first, the model's under "proposed by the model", and each row starts
with its entry's seq.

Screenshots (light and dark): ``<tmp_path>/shots`` and copies in /tmp/chaz_e2e_shots.
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
        f.write(json.dumps(code) + "\\n")
    return "ran"
'''

AGENT = '''%%chaz agent coder
model = "chaz/script"
tools = ["run_code"]
script = [
  {tool = "run_code", args = {code = "x = sk-abcdefghijklmnopqrstuvw\\ny = 1''' + " " * 3000 + ''';print(y)"}},
  "done: {result}",
]
'''


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None}


def _got(root: Path) -> list:
    path = root / "got.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _themed(lab, name: str) -> None:
    """A light and a dark screenshot of the page as it is."""
    lab.shot(f"{name}-light")
    lab.command("apputils:change-theme", {"theme": "JupyterLab Dark"})
    lab.page.wait_for_selector('body[data-jp-theme-light="false"]', state="attached", timeout=30_000)
    lab.page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=30_000)
    lab.shot(f"{name}-dark")
    lab.command("apputils:change-theme", {"theme": "JupyterLab Light"})
    lab.page.wait_for_selector('body[data-jp-theme-light="true"]', state="attached", timeout=30_000)
    lab.page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=30_000)


def test_sidebar_card_refuses_approve_and_the_finished_row_shows_the_code_that_ran(lab):
    page = lab.page
    lab.write_notebook("check.ipynb", [_code(TOOLS), _code(AGENT), _code("%chaz @coder go")])
    lab.open("check.ipynb")
    lab.run_all(timeout=180)
    lab.palette("Chaz: show sessions")
    lab.wait_sidebar_status("connected", timeout=60)
    cards = lab.pending_cards()
    _wait(lambda: cards.count() == 1, what="the request in the sidebar")
    card = cards.first
    refused = card.locator(".chaz-card-refused")
    _wait(lambda: refused.count() == 1, what="the refused line")
    assert refused.inner_text().startswith("⛔ Approve is refused: line 1: a secret outside a string literal")
    assert card.locator(".chaz-approve").is_disabled()
    lines = card.locator(".chaz-code .chaz-code-line").all_inner_texts()
    assert [line.replace("\n", "") for line in lines][1] == "2y = 1⟨3,000 blanks⟩;print(y)"
    card.scroll_into_view_if_needed()
    _themed(lab, "sidebar-code-refused")

    card.locator(".chaz-edit").click()
    card.locator(".chaz-edit-box").fill("print('fixed')")
    card.locator(".chaz-approve-edited").click()
    _wait(lambda: _got(lab.server.root) == ["print('fixed')"], what="the edited code to run")

    cell = page.locator(".jp-Cell").nth(2)
    transcript = cell.locator(".chaz-session-output .chaz-transcript")
    transcript.wait_for(timeout=60_000)
    _wait(lambda: "done: ran" in transcript.inner_text(), what="the finished output")
    tool = transcript.locator("details.chaz-tool").first
    assert tool.locator("summary .chaz-seq").inner_text().startswith("#")
    tool.locator("summary").click()
    labels = tool.locator(".chaz-label").all_inner_texts()
    assert labels[:2] == ["ran as edited by the approver", "proposed by the model"]
    first = tool.locator(".chaz-code-block").first.locator(".chaz-code-line").all_inner_texts()
    assert [line.replace("\n", "") for line in first] == ["1print('fixed')"]
    heads = transcript.locator(".chaz-entry-head .chaz-seq").all_inner_texts()
    assert heads and heads[0] == "#1"
    tool.scroll_into_view_if_needed()
    _themed(lab, "renderer-ran-as-edited")
    assert lab.page_errors == []
