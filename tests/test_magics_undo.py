"""``%chaz undo`` in IPython's test shell (globalipapp): an agent's approved ``kernel__run`` step
undone in the notebook's own namespace, every refusal one line that changes nothing, and the
usage and help that name it."""

from __future__ import annotations

import json

from chaz_nb.notebook.magics.core import HELP, USAGE

from ipython_harness import ip, one_line_error


def coder(*codes: str) -> None:
    script = json.dumps([{"tool": "kernel__run", "args": {"code": c}} for c in codes] + ["done"])
    ip.run_line_magic("chaz", f"agent coder --model chaz/script --auto-approve kernel__run --script '{script}'")


def test_undo_puts_back_the_notebooks_variables_and_says_what_it_did(chaz, capsys):
    ip.run_cell("import pandas as pd\nsales = pd.DataFrame({'amount': [1.0, 2.0, 4.0]})\nkeep = sales").raise_error()
    coder("top = sales.amount.sum()\nsales = sales.head(1)")
    ip.run_line_magic("chaz", "@coder go")
    ns = ip.user_ns
    assert ns["top"] == 7.0 and ns["sales"] is not ns["keep"]
    sid = chaz.current_session("coder")
    [call] = [e.tool_call_id for e in chaz.store.entries(sid) if e.entry_type.value == "ToolCall"]
    capsys.readouterr()
    ip.run_cell("%chaz undo").raise_error()
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"undid kernel__run {call} (session {sid}, #") and out.endswith("put back sales; removed top")
    assert "top" not in ns and ns["sales"] is ns["keep"]  # the very frame, not a copy
    rows = chaz.store.execute("SELECT variable, change, undo_of FROM variable_changes WHERE undo_of IS NOT NULL"
                              " ORDER BY variable")
    assert rows == [("sales", "changed", call), ("top", "deleted", call)]
    # twice: one line, nothing changed
    ns["top"] = "mine"
    one_line_error(capsys, f"%chaz undo {call}", f"%chaz undo: tool call {call} was already undone")
    assert ns["top"] == "mine"


def test_an_in_place_change_is_named_and_refused_then_partial_goes_on(chaz, capsys):
    ip.run_cell("import pandas as pd\nframe = pd.DataFrame({'a': [1, 2]})").raise_error()
    coder('frame["a"] = frame["a"] * 10\nn = 1')
    ip.run_line_magic("chaz", "@coder go")
    err = one_line_error(capsys, "%chaz undo", "cannot undo frame (changed in place); nothing was changed "
                                               "(--partial puts back the rest)")
    assert err.startswith("UsageError: %chaz undo: tool call ")
    assert ip.user_ns["n"] == 1
    ip.run_cell("%chaz undo --partial").raise_error()
    assert "n" not in ip.user_ns and ip.user_ns["frame"]["a"].tolist() == [10, 20]


def test_bad_undo_lines_are_one_line(chaz, capsys):
    one_line_error(capsys, "%chaz undo", "%chaz undo: no session yet")
    one_line_error(capsys, "%chaz undo call_x", "%chaz undo: there is no tool call 'call_x'")
    one_line_error(capsys, "%chaz undo --frobnicate", "--frobnicate")
    one_line_error(capsys, "%chaz undo x --release", "%chaz undo --release takes only --session")


def test_undo_is_in_the_usage_and_the_help():
    assert "undo [TOOL_CALL] [--session SESSION] [--partial] [--force] [--release]" in USAGE
    assert "%chaz undo [TOOL_CALL]" in HELP
