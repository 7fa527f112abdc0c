"""End-to-end: the chat of the "Chaz" sidebar in JupyterLab (a real kernel, headless Chromium).

A scripted agent (``chaz/script``, a word delay so its reply streams) has an empty session.
The test opens the sidebar, clicks the session, types a message (Shift+Enter makes a second
line, Enter sends), sees the Message in the chat, approves the gated call from the card
inline in the chat, watches the reply stream in and land, and checks that ``%chaz log`` in
a cell shows the Message the sidebar wrote; the notice of the approval clears by itself and
the ``Notebook:`` line follows a rename. Notebook 7: the sidebar from View → Left Sidebar.
Screenshots of the chat in the light and the dark theme (and in Notebook 7) go to
``test-artifacts/`` (and, as every e2e shot, ``<tmp_path>/shots``). A Message sent while a
``%chaz @NAME`` cell waits is written and answered before that wait ends (over the kernel's
control channel, chaz_nb/notebook/chat_control.py).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from waiting import poll

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"

_wait = functools.partial(poll, timeout=60)

TOOLS = '''%load_ext chaz_nb
import json, chaz_nb

@chaz_nb.tool(approval="always", risk="high")
def drop_rows(table: str) -> str:
    """Drop the empty rows of a table."""
    with open("dropped.jsonl", "a") as f:
        f.write(json.dumps(table) + "\\n")
    return f"3 empty rows of {table} dropped"
'''

REPLY = ("All tidy now: I looked at every row of the sales table, kept the ones with data, "
         "and the result was: {result}. Anything else?")

AGENT = f'''%%chaz agent analyst
model = "chaz/script"
tools = ["drop_rows"]
model_options = {{metadata = {{chaz_word_delay = 0.08}}}}
script = [
  {{tool = "drop_rows", args = {{table = "sales"}}}},
  "{REPLY}",
]
'''


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None}


def _artifact(lab, name: str) -> None:
    """A screenshot kept in test-artifacts/ (and in the e2e shots)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = lab.shot(name)
    (ARTIFACTS / f"sidebar-chat-{name}.png").write_bytes(path.read_bytes())


def test_chat_in_the_sidebar(lab):
    page = lab.page
    lab.write_notebook(
        "chat.ipynb",
        [_code(TOOLS), _code(AGENT), _code("%chaz new @analyst"), _code("%chaz log @analyst")],
    )
    lab.open("chat.ipynb")
    lab.run_all(timeout=180)
    assert "a fresh session with @analyst" in page.locator(".jp-Cell").nth(2).inner_text()

    lab.palette("Chaz: show sessions")
    lab.wait_sidebar_status("connected", timeout=60)
    session = lab.sidebar.locator(".chaz-session", has=page.locator(".chaz-agent", has_text="analyst"))
    session.wait_for(timeout=30_000)
    sid = int(session.get_attribute("data-session-id"))
    session.click()
    chat = lab.sidebar.locator(".chaz-chat")
    chat.wait_for(state="visible", timeout=10_000)
    _wait(lambda: chat.locator(".chaz-transcript .chaz-title").count() == 1, what="the session's transcript")
    assert chat.locator(".chaz-chat-title").inner_text() == f"#{sid} @analyst"
    assert lab.sidebar.locator(".chaz-session-list").is_hidden()  # the chat has the panel

    box = chat.locator(".chaz-chat-input")
    box.click()
    box.type("please tidy <b>the</b> table")
    box.press("Shift+Enter")
    box.type("\u202eand be quick")
    assert box.input_value() == "please tidy <b>the</b> table\n\u202eand be quick"  # a new line, not sent
    page.wait_for_timeout(300)
    assert chat.locator(".chaz-type-message").count() == 0
    box.press("Enter")
    _wait(lambda: chat.locator(".chaz-type-message").count() >= 1, what="the Message in the chat")
    assert box.input_value() == ""
    message = chat.locator(".chaz-type-message .chaz-content").first.inner_text()
    assert message == "please tidy <b>the</b> table\n<U+202E>and be quick"  # text, the bidi control named
    assert chat.locator(".chaz-type-message b").count() == 0

    # the run parks on drop_rows: its card is in the chat, with Stop
    card = chat.locator(".chaz-chat-approvals .chaz-card")
    _wait(lambda: card.count() == 1, what="the approval card inline in the chat")
    assert card.locator(".chaz-tool-name").inner_text() == "drop_rows"
    assert chat.locator(".chaz-chat-stop").is_visible()
    _artifact(lab, "light-approval")
    card.locator(".chaz-approve").click()

    # the reply streams into the chat, then its entry lands
    chat.locator(".chaz-partial").wait_for(timeout=60_000)
    streamed = chat.locator(".chaz-partial .chaz-content").inner_text()
    final = REPLY.replace("{result}", "3 empty rows of sales dropped")
    assert streamed.strip() and final.startswith(streamed.rstrip()), streamed  # a part of the reply
    _wait(lambda: final in chat.locator(".chaz-entries").inner_text(), what="the whole reply")
    _wait(lambda: chat.locator(".chaz-partial").count() == 0, what="the streamed block to go")
    _wait(lambda: chat.locator(".chaz-transcript .chaz-status").inner_text() == "idle", what="an idle session")
    assert not chat.locator(".chaz-chat-stop").is_visible()
    assert json.loads((lab.server.root / "dropped.jsonl").read_text()) == "sales"
    _artifact(lab, "light")

    # the Message is an entry like any other: %chaz log in a cell shows it
    page.evaluate("() => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = 3; }")
    lab.command("notebook:run-cell")
    page.wait_for_timeout(300)
    lab.wait_kernel_idle(60)
    log_cell = page.locator(".jp-Cell").nth(3)
    _wait(lambda: "please tidy <b>the</b> table" in log_cell.inner_text(), what="the Message in %chaz log")
    assert final in log_cell.inner_text()

    # a notice says what the last click did, then clears (§5: no stale "approve by user" line)
    notice = lab.sidebar.locator(".chaz-panel-notice")
    _wait(lambda: notice.inner_text().strip() == "", timeout=20, what="the notice to clear")

    # the Notebook: line follows a rename
    page.evaluate("() => window.jupyterapp.serviceManager.contents.rename('chat.ipynb', 'renamed.ipynb')")
    _wait(lambda: lab.sidebar.locator(".chaz-panel-target").inner_text() == "Notebook: renamed.ipynb",
          what="the Notebook: line to follow the rename")

    # back to the lists, then the dark theme
    chat.locator(".chaz-chat-back").click()
    assert lab.sidebar.locator(".chaz-session-list").is_visible()
    session.click()
    _wait(lambda: final in chat.locator(".chaz-entries").inner_text(), what="the chat again")
    lab.command("apputils:change-theme", {"theme": "JupyterLab Dark"})
    page.wait_for_function("() => document.body.dataset.jpThemeName === 'JupyterLab Dark'", timeout=20_000)
    page.wait_for_timeout(500)
    _artifact(lab, "dark")
    assert lab.page_errors == []


# ------------------------------------------------- a Message while another cell waits
STORY = " ".join(f"once{i}" for i in range(100))  # 10 s at 0.1 s a word


def _run_cell(lab, index: int) -> None:
    """Run one cell; not awaited (the command's promise ends with the cell)."""
    lab.page.evaluate(
        """(i) => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            nb.activeCellIndex = i;
            void window.jupyterapp.commands.execute('notebook:run-cell');
        }""",
        index,
    )


def test_a_message_sent_while_a_cell_waits_is_written_before_the_wait_ends(lab):
    """The chat's send goes over the control channel (chat_control.py): the box says it was
    sent, the Message and its answer land, all while a ``%chaz @teller`` cell still waits."""
    page = lab.page
    lab.write_notebook("waiting.ipynb", [
        _code("%load_ext chaz_nb\n%chaz agent echo --model chaz/echo\n%chaz new @echo"),
        _code(f'%%chaz agent teller\nmodel = "chaz/script"\nscript = ["{STORY}"]\n'
              "[model_options.metadata]\nchaz_word_delay = 0.1"),
        _code("%chaz @teller tell me a long story"),
    ])
    lab.open("waiting.ipynb")
    for i in (0, 1):
        _run_cell(lab, i)
        page.wait_for_timeout(300)
        lab.wait_kernel_idle(120)
    lab.palette("Chaz: show sessions")
    lab.wait_sidebar_status("connected", timeout=60)
    session = lab.sidebar.locator(".chaz-session", has=page.locator(".chaz-agent", has_text="echo"))
    session.wait_for(timeout=30_000)
    session.click()
    chat = lab.sidebar.locator(".chaz-chat")
    _wait(lambda: chat.locator(".chaz-transcript .chaz-title").count() == 1, what="the echo transcript")

    teller = page.locator(".jp-Notebook .jp-Cell").nth(2)
    _run_cell(lab, 2)
    page.wait_for_function(
        "() => (document.querySelectorAll('.jp-Notebook .jp-Cell')[2].querySelector('.jp-OutputArea')"
        " || {textContent: ''}).textContent.includes('once3 ')",
        timeout=60_000,
    )
    box = chat.locator(".chaz-chat-input")
    box.click()
    box.type("hello while you wait")
    box.press("Enter")
    # sent (not "Sending…"): the box is empty and says nothing, long before the story ends
    page.wait_for_function(
        """() => {
            const chat = document.querySelector('#chaz-sidebar .chaz-chat');
            return chat.querySelector('.chaz-chat-input').value === ''
                && chat.querySelector('.chaz-chat-error').textContent === '';
        }""",
        timeout=5_000,
    )
    reply = chat.locator(".chaz-type-message.chaz-from-agent .chaz-content")
    _wait(lambda: reply.count() == 1 and reply.inner_text() == "echo: hello while you wait", timeout=5,
          what="echo's answer while the teller cell waits")
    # opening another chat goes over control too: the teller's transcript, streaming, at once
    chat.locator(".chaz-chat-back").click()
    lab.sidebar.locator(".chaz-session", has=page.locator(".chaz-agent", has_text="teller")).click()
    _wait(lambda: chat.locator(".chaz-chat-title").inner_text().endswith("@teller")
          and chat.locator(".chaz-transcript .chaz-title").count() == 1, timeout=5, what="the teller's chat")
    # ...and the teller's cell still waits, the page still saying the kernel is busy
    assert teller.locator(".jp-InputPrompt").inner_text().strip().startswith("[*]")
    assert "once99" not in teller.locator(".jp-OutputArea").inner_text()
    assert lab.kernel_status() == "busy"
    _artifact(lab, "sent-while-waiting")
    lab.wait_kernel_idle(60)
    _wait(lambda: "once99" in teller.locator(".jp-OutputArea").inner_text(), what="the story's end")
    assert teller.locator('[data-mime-type="application/vnd.jupyter.stderr"]').count() == 0
    chat.locator(".chaz-chat-back").click()
    session.click()
    _wait(lambda: chat.locator(".chaz-type-message").count() == 2, what="the echo chat again")
    page.wait_for_timeout(500)
    assert chat.locator(".chaz-type-message").count() == 2  # written once, not again by the comm
    assert lab.page_errors == []


# ------------------------------------------------------------------------------ Notebook 7
@pytest.mark.parametrize("lab_server", ["notebook"], indirect=True)
def test_chat_in_the_notebook7_sidebar(lab):
    """Notebook 7: the sidebar from View → Left Sidebar, a message from its box, the reply."""
    nb = lab
    page = nb.page
    nb.write_notebook("nb7.ipynb", [_code("%load_ext chaz_nb\n%chaz agent echo --model chaz/echo\n%chaz new @echo")])
    nb.open("nb7.ipynb")
    nb.run_all(timeout=120)

    # as a user finds it: View → Left Sidebar → the Chaz panel
    page.locator(".lm-MenuBar-itemLabel", has_text="View").click()
    page.locator(".lm-Menu-itemLabel", has_text="Left Sidebar").click()
    page.locator(".lm-Menu-itemLabel", has_text="Chaz").click()
    nb.sidebar.wait_for(state="visible", timeout=20_000)
    nb.wait_sidebar_status("connected", timeout=60)
    session = nb.sidebar.locator(".chaz-session", has=page.locator(".chaz-agent", has_text="echo"))
    session.wait_for(timeout=30_000)
    session.click()
    chat = nb.sidebar.locator(".chaz-chat")
    box = chat.locator(".chaz-chat-input")
    box.click()
    box.type("hello from Notebook 7")
    box.press("Enter")
    reply = chat.locator(".chaz-type-message.chaz-from-agent .chaz-content")
    _wait(lambda: reply.count() == 1 and reply.inner_text() == "echo: hello from Notebook 7",
          what="the reply in the Notebook 7 chat")
    _wait(lambda: chat.locator(".chaz-transcript .chaz-status").inner_text() == "idle", what="an idle session")
    _artifact(nb, "notebook7")
    # Notebook 7.6 itself logs a settings error at start ("reading 'schema'", from notebook_core)
    assert [e for e in nb.page_errors if "chaz" in e.lower()] == []
