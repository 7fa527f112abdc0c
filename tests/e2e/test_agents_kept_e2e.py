"""End-to-end: agents survive a kernel restart, and the safe tool default (issue 26 §3, §4).

In JupyterLab (headless Chromium), a notebook loads chaz_nb (sessions in ``.chaz/sessions.duckdb``
under the notebook's folder), defines a user tool (``@chaz_nb.tool``) and ``%chaz agent gpt`` on the
scripted offline model, and talks to @gpt once. The kernel is restarted the way a user does it
(Kernel menu → Restart Kernel…, Restart in the dialog). Then, on screen:

1. the cell that loads the extension again says the agents kept here: ``@gpt``;
2. ``%chaz agents`` lists gpt as ``stored``, in its session of before, with the user tool in the
   "tools not defined here yet" column;
3. the notebook defines the tool again and ``%chaz @gpt`` goes on in the SAME session (the view's
   header shows the session number of before the restart) and the tool runs;
4. an agent defined without ``--tools`` has a confirmation line naming only the safe tools, and its
   call of the user tool is told ``unknown tool 'shout'``;
5. ``%chaz agent gpt --forget``, then ``%chaz @gpt`` is a one-line unknown-agent error.

Screenshots, light and dark, are kept in ``test-artifacts/agents_kept/`` (and, as every e2e shot,
``<tmp_path>/shots``).
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "agents_kept"

TOOL = '''import chaz_nb

@chaz_nb.tool
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper() + "!"
'''
GPT = (
    "%chaz agent gpt --model chaz/script --tools shout --script "
    '\'[{"tool": "shout", "args": {"text": "hi"}}, "said: {result}"]\''
)
PLAIN = (
    '%chaz agent plain --model chaz/script --script \'[{"tool": "shout", "args": {"text": "hi"}}, "got: {result}"]\''
)

# before the restart: 0-3; after it: 4-11
CELLS = [
    "%load_ext chaz_nb",
    TOOL,
    GPT,
    "%chaz @gpt say hi",
    # -- the kernel restarts here --
    "%load_ext chaz_nb",
    "%chaz agents",
    TOOL,  # the notebook defines its tool again: a kept agent keeps its tools by name only
    "%chaz @gpt once more",
    PLAIN,
    "%chaz @plain say hi",
    "%chaz agent gpt --forget",
    "%chaz @gpt still there?",
]
LOAD, AGENTS, TOOL_AGAIN, GPT_AGAIN, PLAIN_DEF, PLAIN_TURN, FORGET, GONE = range(4, 12)


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None}


def _cell(lab, index: int):
    return lab.page.locator(".jp-Notebook .jp-Cell").nth(index)


def _output(lab, index: int) -> str:
    return _cell(lab, index).locator(".jp-OutputArea").inner_text()


def _run_cell(lab, index: int) -> None:
    """Select cell ``index`` and run it (the command ends with the cell's execution), then wait
    until the kernel is idle and the cell has its execution count."""
    lab.page.evaluate(
        "(i) => { const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = i;"
        " return window.jupyterapp.commands.execute('notebook:run-cell'); }",
        index,
    )
    lab.wait_kernel_idle(60)
    lab.page.wait_for_function(
        "(i) => /\\[\\d+\\]/.test(document.querySelectorAll('.jp-Notebook .jp-Cell')[i]"
        ".querySelector('.jp-InputPrompt').textContent)",
        arg=index,
        timeout=30_000,
    )


def _finished_turn(lab, index: int) -> tuple[int, str]:
    """Wait for the finished view of a turn (idle badge); its header's session number and text."""
    view = _cell(lab, index).locator(".chaz-session-output .chaz-transcript")
    view.wait_for(timeout=30_000)
    lab.page.wait_for_function(
        "(i) => { const s = document.querySelectorAll('.jp-Notebook .jp-Cell')[i]"
        ".querySelector('.chaz-session-output .chaz-transcript .chaz-status');"
        " return !!s && s.textContent === 'idle'; }",
        arg=index,
        timeout=30_000,
    )
    title = view.locator(".chaz-header .chaz-title").inner_text()
    match = re.fullmatch(r"Session (\d+)", title.strip())
    assert match, title
    return int(match.group(1)), view.inner_text()


def _restart_from_the_menu(lab) -> None:
    """Kernel → Restart Kernel…, then Restart in the dialog; wait until the new kernel is idle."""
    page = lab.page
    page.evaluate(
        """() => {
            const ctx = window.jupyterapp.shell.currentWidget.sessionContext;
            window.__chazRestart = [];
            ctx.statusChanged.connect((_, status) => window.__chazRestart.push(status));
        }"""
    )
    page.locator(".lm-MenuBar-item", has_text="Kernel").click()
    item = page.locator(".lm-Menu-item", has=page.get_by_text("Restart Kernel…", exact=True))
    item.click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(state="visible", timeout=10_000)
    assert "Restart Kernel?" in dialog.inner_text()
    dialog.locator("button.jp-mod-accept").click()
    dialog.wait_for(state="detached", timeout=10_000)
    # the restart happened (the status went through "restarting"), and the new kernel is ready
    page.wait_for_function(
        "() => { const s = window.__chazRestart; const i = s.indexOf('restarting');"
        " return i >= 0 && s.slice(i).includes('idle'); }",
        timeout=60_000,
    )
    lab.wait_kernel_idle(60)


def _set_theme(lab, name: str, dark: bool) -> None:
    """Switch the theme and wait until its colours are applied (the page background) and the
    splash JupyterLab shows while it loads a theme is gone."""
    lab.command("apputils:change-theme", {"theme": name})
    lab.page.wait_for_function(
        """([name, dark]) => {
            if (document.body.dataset.jpThemeName !== name) { return false; }
            if (document.querySelector('#jupyterlab-splash')) { return false; }
            const bg = getComputedStyle(document.querySelector('.jp-Notebook')).backgroundColor;
            const rgb = (bg.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
            if (rgb.length < 3) { return false; }
            const sum = rgb[0] + rgb[1] + rgb[2];
            return dark ? sum < 3 * 100 : sum > 3 * 180;
        }""",
        arg=[name, dark],
        timeout=30_000,
    )


def _keep(lab, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(lab.shot(f"agents-kept-{name}"), ARTIFACTS / f"{name}.png")


def _columns(table: str) -> dict[str, dict[str, str]]:
    """``%chaz agents``'s table: each agent's row, by column name (columns sliced at the header's
    column starts, as the table aligns them)."""
    lines = [line for line in table.splitlines() if line.strip()]
    header = lines[0]
    names = [m.group(0) for m in re.finditer(r"\S+(?: \S+)*", header)]
    starts = [header.index(n) for n in names]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        if line.startswith("a tool not defined yet"):
            continue
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows[cells[0]] = dict(zip(names, cells, strict=True))
    return rows


def test_agents_and_their_sessions_survive_a_restart_from_the_kernel_menu(lab):
    page = lab.page
    started = time.monotonic()
    page.set_viewport_size({"width": 1200, "height": 1500})
    lab.write_notebook("kept.ipynb", [_code(c) for c in CELLS])
    lab.open("kept.ipynb")

    # before: define the tool and gpt, talk to @gpt once
    for i in range(4):
        _run_cell(lab, i)
    assert "sessions in .chaz/sessions.duckdb" in _output(lab, 0), _output(lab, 0)
    before, text = _finished_turn(lab, 3)
    assert "said: HI!" in text, text
    _keep(lab, "before-restart-light")

    _restart_from_the_menu(lab)

    # 1. the load line names the kept agent
    _run_cell(lab, LOAD)
    loaded = _output(lab, LOAD)
    assert "agents kept here: @gpt (%chaz agents)" in loaded, loaded

    # 2. %chaz agents: gpt is stored, in its session, its tool not defined yet
    _run_cell(lab, AGENTS)
    rows = _columns(_output(lab, AGENTS))
    gpt = rows.get("gpt")
    assert gpt is not None, rows
    assert gpt["model"] == "chaz/script" and gpt["tools"] == "shout", gpt
    assert gpt["from"] == "stored" and gpt["session"] == str(before), gpt
    assert gpt["tools not defined here yet"] == "shout", gpt
    assert rows["assistant"]["from"] == "built-in", rows
    assert "run the cell with its @chaz_nb.tool function" in _output(lab, AGENTS)

    # 3. the tool defined again: @gpt goes on in the same session, and the tool runs
    _run_cell(lab, TOOL_AGAIN)
    _run_cell(lab, GPT_AGAIN)
    after, text = _finished_turn(lab, GPT_AGAIN)
    assert after == before, f"@gpt went on in session {after}, not in its session {before}"
    assert "said: HI!" in text and "unknown tool" not in text, text
    _cell(lab, GPT_AGAIN).scroll_into_view_if_needed()
    _keep(lab, "after-restart-light")

    # 4. no --tools: only the safe tools, not the user's shout (though gpt named it)
    _run_cell(lab, PLAIN_DEF)
    line = _output(lab, PLAIN_DEF)
    assert line.startswith("agent plain: chaz/script, the default tools:"), line
    assert "not your own tools" in line and "shout" not in line, line
    _run_cell(lab, PLAIN_TURN)
    _, text = _finished_turn(lab, PLAIN_TURN)
    assert "got: unknown tool 'shout'" in text, text

    # 5. forget gpt: @gpt is an unknown agent, in one line
    _run_cell(lab, FORGET)
    assert "agent gpt: removed from this kernel and the store" in _output(lab, FORGET), _output(lab, FORGET)
    _run_cell(lab, GONE)
    error = _cell(lab, GONE).locator('[data-mime-type="application/vnd.jupyter.stderr"]')
    error.wait_for(timeout=10_000)
    message = error.inner_text().strip()
    assert "\n" not in message and "Traceback" not in message, message
    assert message.startswith("UsageError: unknown agent @gpt; known agents: @assistant, @plain"), message
    _cell(lab, GONE).scroll_into_view_if_needed()
    _keep(lab, "forgotten-light")

    _set_theme(lab, "JupyterLab Dark", dark=True)
    _keep(lab, "forgotten-dark")
    _cell(lab, AGENTS).scroll_into_view_if_needed()
    _keep(lab, "after-restart-dark")
    _set_theme(lab, "JupyterLab Light", dark=False)

    assert lab.page_errors == [], lab.page_errors
    print(f"\nagents kept e2e: {time.monotonic() - started:.1f} s in the page")
