"""End-to-end: the Chaz sidebar at its default width, and compare's two columns (issue 42 #8, #15).

In JupyterLab, in Chromium, light and dark:

1. an agent defined after the sidebar opened is in its "New chat with" list at once (no
   Refresh: the kernel tells the sidebar when an agent is defined or forgotten), and leaves it
   when forgotten;
2. at the sidebar's default width, "New chat with" stays on one line; a waiting approval's code
   is all visible (long lines wrap, nothing cut at the card's edge); the card's Edit box shows
   every line of the code with no scrolling;
3. ``%chaz compare``'s two columns share the width.

Screenshots go to test-artifacts/ (gitignored) and /tmp/chaz_e2e_shots.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest
from waiting import poll

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
_wait = functools.partial(poll, timeout=60)

LONG = "rows = [r for r in sales.itertuples() if r.region == 'north' and r.revenue > 1_000_000]"
SETUP = '''%env CHAZ_DB=:memory:
%load_ext chaz_nb
import chaz_nb

@chaz_nb.tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b

@chaz_nb.tool(approval="always", risk="high")
def run_code(code: str) -> str:
    """Run Python code."""
    return "ran"
'''
CELLS = [
    SETUP,
    "%chaz agent calc --model chaz/script --tools add --script "
    "'[{\"tool\": \"add\", \"args\": {\"a\": 2, \"b\": 3}}, \"2 + 3 = {result}\"]'",
    "%chaz @calc what is 2 + 3?",
    "%chaz fork 1 --at 1 --say 'and now?'",
    "%chaz compare 1 2",
    '%%chaz agent coder\nmodel = "chaz/script"\ntools = ["run_code"]\n'
    f'script = [{{tool = "run_code", args = {{code = "import pandas as pd\\n{LONG}\\nprint(len(rows))"}}}}, "done"]',
    "%chaz --no-wait @coder tidy up",
    "",
]


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None, "metadata": {}}


def _shot(lab, name: str) -> None:
    path = lab.shot(f"layout-{name}")
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(path, ARTIFACTS / f"sidebar-layout-{name}.png")


def _set_theme(lab, name: str) -> None:
    lab.command("apputils:change-theme", {"theme": name})
    lab.page.wait_for_function("(name) => document.body.dataset.jpThemeName === name", arg=name, timeout=30_000)
    lab.page.wait_for_timeout(300)  # the theme's CSS is applied after the attribute


def _run_in_last_cell(lab, source: str) -> None:
    lab.page.evaluate(
        """(src) => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            const i = nb.widgets.length - 1;
            nb.widgets[i].model.sharedModel.setSource(src);
            nb.activeCellIndex = i;
            void window.jupyterapp.commands.execute('notebook:run-cell');
        }""",
        source,
    )


def _agents(lab) -> list[str]:
    return lab.sidebar.locator(".chaz-new-agent option").all_inner_texts()


def _layout(lab) -> dict:
    """What a person sees of the sidebar's parts, measured in the page."""
    return lab.page.evaluate(
        """() => {
            const side = document.querySelector('#chaz-sidebar');
            const label = side.querySelector('.chaz-new-chat-label');
            const lh = parseFloat(getComputedStyle(label).fontSize) * 1.6;
            const card = side.querySelector('.chaz-card');
            const code = card.querySelector('.chaz-code');
            const cardBox = card.getBoundingClientRect();
            const lines = [...code.querySelectorAll('.chaz-code-line')].map(l => {
                const r = document.createRange();
                r.selectNodeContents(l);
                const b = r.getBoundingClientRect();
                return {right: b.right, text: l.textContent};
            });
            const codeBox = code.getBoundingClientRect();
            const box = card.querySelector('.chaz-edit-box');
            const select = side.querySelector('.chaz-new-agent');
            const canvas = document.createElement('canvas').getContext('2d');
            canvas.font = getComputedStyle(select).font;
            const option = select.options[select.selectedIndex].textContent;
            const inner = side.querySelector('.chaz-new-chat').getBoundingClientRect();
            return {
                width: side.getBoundingClientRect().width,
                labelHeight: label.getBoundingClientRect().height, lineHeight: lh,
                codeScroll: code.scrollWidth - code.clientWidth,
                codeRight: codeBox.right, cardRight: cardBox.right,
                linesCut: lines.filter(l => l.right > codeBox.right + 1).map(l => l.text),
                boxHidden: box.hidden, boxScroll: box.scrollHeight - box.clientHeight,
                boxRows: box.rows,
                selectRoom: select.getBoundingClientRect().width - canvas.measureText(option).width,
                buttonRight: side.querySelector('.chaz-new-chat-button').getBoundingClientRect().right,
                rowRight: inner.right,
            };
        }"""
    )


def test_the_sidebar_at_its_default_width_and_compare(lab):
    page = lab.page
    lab.write_notebook("layout.ipynb", [_code(src) for src in CELLS])
    lab.open("layout.ipynb")
    lab.run_all(timeout=180)
    cells = page.locator(".jp-Notebook .jp-Cell")

    lab.palette("Chaz: show sessions")
    lab.wait_sidebar_status("connected", timeout=60)
    _wait(lambda: _agents(lab) == ["@assistant", "@calc", "@coder"] or len(_agents(lab)) >= 3,
          what="the agents in 'New chat with'")
    before = _agents(lab)

    # 1. an agent defined now reaches the list with no Refresh, and leaves it when forgotten
    _run_in_last_cell(lab, "%chaz agent late --model chaz/echo")
    _wait(lambda: "@late" in _agents(lab), what="@late in 'New chat with' without a Refresh")
    assert sorted(_agents(lab)) == sorted([*before, "@late"])
    _run_in_last_cell(lab, "%chaz agent late --forget")
    _wait(lambda: "@late" not in _agents(lab), what="@late gone from 'New chat with'")

    # 2. the default width: one line for the label, the code all visible, the Edit box whole
    card = lab.pending_cards().first
    card.wait_for(timeout=60_000)
    card.locator(".chaz-edit").click()
    m = _layout(lab)
    assert m["labelHeight"] < m["lineHeight"] * 1.2, m  # "New chat with" on one line
    assert m["selectRoom"] >= 16 and m["buttonRight"] <= m["rowRight"] + 0.5, m  # the name shows, the button too
    assert m["codeScroll"] <= 0 and m["linesCut"] == [], m  # no code line cut or scrolled away
    assert m["codeRight"] <= m["cardRight"], m
    assert not m["boxHidden"] and m["boxScroll"] <= 0, m  # every line of the Edit box shows
    _shot(lab, "light")

    # 3. compare: the two columns share the width
    compare = cells.nth(4).locator(".chaz-compare")
    compare.scroll_into_view_if_needed()
    widths = compare.evaluate("(c) => [...c.querySelectorAll('td')].map(td => td.getBoundingClientRect().width)")
    assert len(widths) == 2 and min(widths) > 0.4 * sum(widths), widths
    _shot(lab, "compare-light")

    _set_theme(lab, "JupyterLab Dark")
    _shot(lab, "compare-dark")
    lab.sidebar.scroll_into_view_if_needed()
    _shot(lab, "dark")
    # (anywidget may report a model it could not initialize: a view closed as it opened)
    assert [e for e in lab.page_errors if "chaz" in e] == []
