"""examples/run_notebook.py, the README's first command: it runs a notebook and says where the
executed copy went (by default beside the input, as NAME.out.ipynb, which git ignores)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "run_notebook.py"


def load_script():
    spec = importlib.util.spec_from_file_location("run_notebook", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def notebook(tmp_path):
    def make(*sources: str) -> Path:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        path = tmp_path / "demo.ipynb"
        nbformat.write(nb, str(path))
        return path

    return make


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


def outputs_text(path: Path) -> str:
    nb = nbformat.read(str(path), as_version=4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def test_executed_notebook_is_written_beside_the_input_and_its_path_printed(notebook):
    path = notebook('print("hello from the kernel")')
    out = run(str(path))
    assert out.returncode == 0, out.stderr
    written = path.with_name("demo.out.ipynb")
    assert "hello from the kernel" in outputs_text(written)
    assert out.stdout.rstrip().splitlines()[-1] == f"executed notebook written to {written}"
    assert nbformat.read(str(path), as_version=4).cells[0].outputs == []  # the input is left as it was


def test_a_failing_notebook_is_still_written_and_the_run_fails(notebook, tmp_path):
    path = notebook('print("before")', "1 / 0")
    target = tmp_path / "elsewhere" / "run.ipynb"
    out = run(str(path), "--save", str(target))
    assert out.returncode == 1
    assert "ZeroDivisionError" in out.stderr
    assert "before" in outputs_text(target)
    assert out.stdout.rstrip().splitlines()[-1] == f"executed notebook written to {target}"
    assert not path.with_name("demo.out.ipynb").exists()


def test_no_save_writes_nothing_and_says_so(notebook):
    path = notebook("1 + 1")
    out = run(str(path), "--no-save")
    assert out.returncode == 0, out.stderr
    assert not path.with_name("demo.out.ipynb").exists()
    assert "not written (--no-save)" in out.stdout.rstrip().splitlines()[-1]


def test_the_default_output_is_ignored_by_git():
    if subprocess.run(["git", "rev-parse"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    target = load_script().default_output("notebooks/01_quickstart.ipynb")
    assert target == os.path.join("notebooks", "01_quickstart.out.ipynb")
    assert subprocess.run(["git", "check-ignore", "-q", target], cwd=ROOT).returncode == 0


def test_control_characters_an_agent_wrote_reach_the_terminal_as_text():
    """What each cell shows is printed to the terminal, and a model's reply or a tool's output
    is in it: an escape sequence there (OSC 52 sets the clipboard, others clear the screen or
    retitle the window) reached the terminal as a command. They are printed visibly instead."""
    module = load_script()
    output = {"output_type": "stream", "text": "ok\tfine\n\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\x9b31m\r\x00end\n"}
    shown = module.text_of(output)
    assert not any(c in shown for c in "\x1b\x07\x9b\r\x00")
    assert shown.startswith("ok\tfine\n") and "\\x1b]52;c;" in shown and shown.endswith("end\n")
