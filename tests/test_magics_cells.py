"""%chaz cells and %chaz export through IPython's test shell: one approved cell goes in a new
cell below (set_next_input); bad input is one line."""

from __future__ import annotations

import json

from ipython_harness import ip, one_line_error

SCRIPT = json.dumps([{"tool": "kernel__run", "args": {"code": "made = 6 * 7"}}, "done"])


def test_one_approved_cell_goes_in_a_new_cell_below(chaz, capsys, monkeypatch):
    ip.run_line_magic("chaz", f"agent coder --model chaz/script --script '{SCRIPT}'")
    ip.run_line_magic("chaz", "@coder make it")  # returns when the run parks
    sid = chaz.current_session("coder")
    ip.run_line_magic("chaz", "approve last")
    ip.run_line_magic("chaz", f"wait {sid}")
    assert ip.user_ns["made"] == 42
    put = []
    monkeypatch.setattr(ip, "set_next_input", lambda text, replace=False: put.append((text, replace)))
    capsys.readouterr()
    ip.run_line_magic("chaz", f"cells {sid}")
    [(text, replace)] = put
    assert not replace and text.startswith("# chaz: written by @coder (chaz/script), approved by you")
    assert text.endswith("made = 6 * 7")
    assert "1 approved cell" in capsys.readouterr().out


def test_bad_input_is_one_line(chaz, capsys, tmp_path):
    one_line_error(capsys, "%chaz cells 999", "no session 999")
    one_line_error(capsys, "%chaz cells 1 2", "takes one SESSION")
    ip.run_line_magic("chaz", "agent echo --model chaz/echo")
    ip.run_line_magic("chaz", "@echo hi")
    one_line_error(capsys, "%chaz export", "--notebook PATH")
    one_line_error(capsys, f"%chaz export --notebook {tmp_path / 'x.txt'}", "not a .ipynb")
    (tmp_path / "there.ipynb").write_text("{}")
    one_line_error(capsys, f"%chaz export --notebook {tmp_path / 'there.ipynb'}", "--force")
    assert (tmp_path / "there.ipynb").read_text() == "{}"  # never lost
    capsys.readouterr()
    ip.run_line_magic("chaz", "cells")
    assert "no approved kernel__run code" in capsys.readouterr().out
    ip.run_line_magic("chaz", f"export --notebook {tmp_path / 'there.ipynb'} --force")
    nb = json.loads((tmp_path / "there.ipynb").read_text())
    assert [c["cell_type"] for c in nb["cells"]] == ["markdown"] * 3  # the title, hi, echo: hi


def test_an_export_shows_agent_text_as_text(chaz, tmp_path):
    ip.run_line_magic("chaz", "agent echo --model chaz/echo")
    ip.run_line_magic("chaz", "@echo <img src=x onerror=alert(1)> \u202eevil")
    ip.run_line_magic("chaz", f"export --notebook {tmp_path / 'e.ipynb'}")
    text = (tmp_path / "e.ipynb").read_text()
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "\u202e" not in json.loads(text)["cells"][1]["source"] and "<U+202E>" not in text  # escaped too
    assert "&lt;U+202E&gt;" in text
