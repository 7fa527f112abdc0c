"""End-to-end: the rough edges of issue 26 §5, as a user sees them in JupyterLab (Chromium).

A scripted agent's run parks on an approval (``drop_rows``). While the cell waits, the live view
(ipywidgets) is checked for the finished view's frame and header, and the cell's and the
sidebar's Approve buttons for one colour (``--chaz-approve-color``). Approve is clicked in the
cell; the finished transcript (the lab renderer) must then show the tool row's run and approval
wait apart ("ran … after … waiting for approval"), no agent name at the row's end, no
"is working" Ack under the idle badge, a count that says "in this cell", and sit where the live
view sat (no jump). ``%chaz sql`` over the 18 columns of ``tool_calls`` must keep every cell on
one line, scroll sideways and show formatted floats; ``%chaz audit``'s cells do not wrap.
The message's right-to-left override is shown as ``<U+202E>`` in the finished transcript.
Light and dark screenshots are kept in ``test-artifacts/rough_edges/``.
"""

from __future__ import annotations

import functools
import re
import shutil
from pathlib import Path

import pytest
from waiting import poll

pytestmark = pytest.mark.e2e

#: the header's count: "4 entries in this cell", or "2 rows (4 entries) in this cell" where
#: the view shows fewer rows than the cell wrote entries
COUNT = r"\d+ (entries|rows \(\d+ entries\)) in this cell"

_wait = functools.partial(poll, timeout=60)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "rough_edges"

TOOLS = '''%load_ext chaz_nb
import chaz_nb

@chaz_nb.tool(approval="always", risk="high")
def drop_rows(table: str) -> str:
    """Drop the empty rows of a table."""
    return f"dropped 3 empty rows of {table}"
'''

AGENT = '''%%chaz agent analyst
model = "chaz/script"
tools = ["drop_rows"]
script = [
  {tool = "drop_rows", args = {table = "sales"}},
  "done: {result}",
]
'''

SQL = "%chaz sql SELECT *, 6.9099999999998545::DOUBLE AS raw_float FROM tool_calls"

#: the message holds a right-to-left override: the cell shows it by name, never reversed
ASK = "%chaz @analyst tidy the sales table \u202eand be quick"

CELLS = [TOOLS, AGENT, ASK, SQL, "%chaz audit"]

#: the frame and header of a view (the live one: .chaz-session-view; the finished one: .chaz-transcript)
LOOK = """([cell, frameSel]) => {
    const root = document.querySelectorAll('.jp-Cell')[cell];
    const frame = root.querySelector(frameSel);
    const header = frame && frame.querySelector('.chaz-header');
    if (!frame || !header) { return null; }
    const f = getComputedStyle(frame), h = getComputedStyle(header);
    const out = root.querySelector('.jp-OutputArea-output');
    return {
        border: `${f.borderTopWidth} ${f.borderTopStyle} ${f.borderTopColor}`,
        radius: f.borderTopLeftRadius,
        padding: `${f.paddingTop} ${f.paddingLeft}`,
        header: `${h.display} ${h.borderBottomWidth} ${h.borderBottomStyle} ${h.fontFamily} ${h.fontSize}`,
        title: header.querySelector('.chaz-title').textContent,
        titleWeight: getComputedStyle(header.querySelector('.chaz-title')).fontWeight,
        agent: header.querySelector('.chaz-agent').textContent,
        status: header.querySelector('.chaz-status').textContent,
        count: header.querySelector('.chaz-count').textContent,
        args: [...root.querySelectorAll('.chaz-tool-args')].map(n => n.textContent),
        headerTop: Math.round(header.getBoundingClientRect().top - out.getBoundingClientRect().top),
        frameLeft: Math.round(frame.getBoundingClientRect().left - out.getBoundingClientRect().left),
    };
}"""


#: the resolved --chaz-approve-color, and the background of the cell's and the sidebar's Approve
COLOURS = """() => {
    const probe = document.createElement('div');
    probe.style.backgroundColor = 'var(--chaz-approve-color)';
    document.body.appendChild(probe);
    const want = getComputedStyle(probe).backgroundColor;
    probe.remove();
    const bg = sel => getComputedStyle(document.querySelector(sel)).backgroundColor;
    return {want, cell: bg('.jp-Cell button.chaz-ap-approve'), side: bg('#chaz-sidebar button.chaz-approve')};
}"""


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None}


def _run_cell(lab, index: int, timeout: float = 120) -> None:
    lab.page.evaluate(
        "(i) => { const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = i;"
        " return window.jupyterapp.commands.execute('notebook:run-cell'); }",
        index,
    )
    lab.page.wait_for_timeout(300)
    lab.wait_kernel_idle(timeout)


def _keep(lab, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(lab.shot(name), ARTIFACTS / f"{name}.png")


def _set_theme(lab, name: str) -> None:
    lab.command("apputils:change-theme", {"theme": name})
    lab.page.wait_for_function(
        "(name) => document.body.dataset.jpThemeName === name", arg=name, timeout=30_000
    )
    lab.page.wait_for_timeout(500)  # the theme's CSS is applied after the attribute


def _rgb(css: str) -> list[int]:
    return [int(float(x)) for x in re.findall(r"[\d.]+", css)[:3]]


def test_the_rough_edges_are_gone(lab):
    page = lab.page
    page.set_viewport_size({"width": 1100, "height": 900})
    lab.write_notebook("edges.ipynb", [_code(c) for c in CELLS])
    lab.open("edges.ipynb")
    for i in range(3):
        _run_cell(lab, i, timeout=180)
    cells = page.locator(".jp-Cell")
    turn = cells.nth(2)
    turn.locator(".chaz-approval-widget").wait_for(timeout=60_000)

    # 9. the live view: the finished view's frame and header
    live = page.evaluate(LOOK, [2, ".chaz-session-view"])
    assert live is not None, "the live view has no .chaz-header"
    assert live["status"] == "parked" and live["title"].startswith("Session ") and live["agent"] == "analyst"
    assert re.fullmatch(COUNT, live["count"]), live["count"]
    # the cell's Approve is not cut ("Appro…"): its label fits its button
    approve = turn.locator("button.chaz-ap-approve")
    assert approve.evaluate("b => b.scrollWidth <= b.clientWidth + 1"), approve.evaluate("b => b.outerHTML")
    _keep(lab, "live-parked-light")

    # 5. Approve: one colour in the cell and in the sidebar, --chaz-approve-color
    lab.palette("Chaz: show sessions")
    lab.wait_sidebar_status("connected", timeout=60)
    _wait(lambda: lab.pending_cards().count() == 1, what="the request in the sidebar")
    colours = page.evaluate(COLOURS)
    assert colours["cell"] == colours["side"] == colours["want"], colours
    assert colours["want"] not in ("rgba(0, 0, 0, 0)", "")
    _keep(lab, "approve-colour-cell-and-sidebar-light")
    _set_theme(lab, "JupyterLab Dark")  # the live view and both Approve buttons in the dark theme
    dark_colours = page.evaluate(COLOURS)
    assert dark_colours["cell"] == dark_colours["side"] == dark_colours["want"], dark_colours
    _keep(lab, "live-parked-dark")
    _set_theme(lab, "JupyterLab Light")

    turn.locator("button.chaz-ap-approve").click()
    finished = turn.locator(".chaz-session-output .chaz-transcript")
    finished.wait_for(timeout=60_000)
    _wait(lambda: "done: dropped 3 empty rows of sales" in finished.inner_text(), what="the reply")
    _wait(lambda: finished.locator(".chaz-status").inner_text() == "idle", what="the idle badge")

    # 9. same frame and header, where the live view had it (the cell does not jump)
    done = page.evaluate(LOOK, [2, ".chaz-session-output .chaz-transcript"])
    keys = ("border", "radius", "padding", "header", "title", "titleWeight", "agent", "headerTop", "frameLeft", "args")
    for key in keys:
        assert done[key] == live[key], (key, live[key], done[key])

    # 1. the run and the wait for approval, named apart
    state = finished.locator(".chaz-tool-state").inner_text()
    assert re.fullmatch(r"ok · ran [\d.]+ (ms|s) after [\d.]+ (ms|s|min \d+ s) waiting for approval", state), state
    # 4. no agent name at the tool row's end
    summary = finished.locator("details.chaz-tool summary").inner_text()
    assert "analyst" not in summary, summary
    # 3. an ended Ack is not "working"
    assert "is working" not in finished.inner_text()
    # control characters in what a person wrote are shown as text, not obeyed (reversed)
    asked = finished.locator(".chaz-type-message .chaz-content").first.inner_text()
    assert asked == "tidy the sales table <U+202E>and be quick", asked
    assert "\u202e" not in finished.inner_text()
    # 6. the count says what it counts
    assert re.fullmatch(COUNT, finished.locator(".chaz-count").inner_text())
    _keep(lab, "finished-light")

    # 2. %chaz sql: no wrapping inside cells, sideways scroll, formatted floats
    _run_cell(lab, 3)
    _run_cell(lab, 4)
    sql = cells.nth(3).locator(".chaz-sql")
    sql.wait_for(timeout=60_000)
    table = page.evaluate(
        """() => {
            const box = document.querySelectorAll('.jp-Cell')[3].querySelector('.chaz-sql');
            const cells = [...box.querySelectorAll('th, td')];
            const heads = [...box.querySelectorAll('thead th')].map(th => th.getBoundingClientRect().height);
            return {
                columns: heads.length,
                wraps: cells.filter(c => getComputedStyle(c).whiteSpace !== 'nowrap').length,
                headHeights: [Math.min(...heads), Math.max(...heads)],
                scrolls: box.scrollWidth > box.clientWidth,
                overflowX: getComputedStyle(box).overflowX,
            };
        }"""
    )
    assert table["columns"] >= 16 and table["wraps"] == 0, table
    assert table["headHeights"][1] - table["headHeights"][0] < 2, table  # every name on one line
    assert table["scrolls"] and table["overflowX"] == "auto", table
    text = sql.inner_text()
    assert "6.91" in text and "6.9099999999998545" not in text
    assert not re.search(r"\d\.\d{8,}", text), "a float shown raw"
    audit = cells.nth(4).locator(".chaz-audit table")
    audit.wait_for(timeout=60_000)
    assert page.evaluate(
        "() => [...document.querySelectorAll('.jp-Cell')[4].querySelectorAll('.chaz-audit td')]"
        ".every(td => getComputedStyle(td).whiteSpace === 'nowrap')"
    )

    # the dark theme: theme variables only (light text, no white frames)
    _set_theme(lab, "JupyterLab Dark")
    dark = page.evaluate(
        """() => {
            const t = document.querySelectorAll('.jp-Cell')[2].querySelector('.chaz-transcript');
            const th = document.querySelector('.chaz-sql thead th');
            return {text: getComputedStyle(t).color, border: getComputedStyle(t).borderTopColor,
                    head: getComputedStyle(th).backgroundColor};
        }"""
    )
    assert sum(_rgb(dark["text"])) > 3 * 150, dark
    assert sum(_rgb(dark["border"])) < 3 * 160, dark
    assert sum(_rgb(dark["head"])) < 3 * 100, dark
    page.set_viewport_size({"width": 1100, "height": 1400})  # the whole notebook in one picture
    turn.scroll_into_view_if_needed()
    _keep(lab, "finished-sql-audit-dark")
    _set_theme(lab, "JupyterLab Light")
    _keep(lab, "finished-sql-audit-light")
    assert lab.page_errors == []
