"""The README's first two commands are the ones CI runs; keep them in step."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands():
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text())


def test_ci_runs_exactly_the_readme_test_command():
    commands = readme_commands()
    assert len(commands) >= 2, "README must start with the main-job command and the test command"
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()


def test_readme_main_job_is_a_single_fresh_machine_command():
    main = readme_commands()[0]
    assert main.startswith("python3 -m venv .venv") and "pip install" in main


def test_readme_says_where_the_quickstart_writes_the_executed_notebook():
    import importlib.util

    main = readme_commands()[0]
    notebook = re.search(r"run_notebook\.py (\S+\.ipynb)", main).group(1)
    spec = importlib.util.spec_from_file_location("run_notebook", ROOT / "examples" / "run_notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert f"`{module.default_output(notebook)}`" in (ROOT / "README.md").read_text()


def tour_cells() -> list[str]:
    """The cells of the README's tour ("In a notebook"): the Python block whole, then each line
    of the magics block as a cell of its own."""
    section = (ROOT / "README.md").read_text().split("## In a notebook", 1)[1].split("\n## ", 1)[0]
    python = re.search(r"```python\n(.+?)\n```", section, re.S).group(1)
    magics = re.search(r"```\n(%chaz.+?)\n```", section, re.S).group(1)
    return [python, *(line for line in magics.splitlines() if not line.startswith("#"))]


def test_the_readme_tour_runs_as_written(chaz, capsys):
    from ipython_harness import ip

    cells = tour_cells()
    expected = re.search(r"^# the reply: (.+)$", (ROOT / "README.md").read_text(), re.MULTILINE).group(1)
    for cell in cells:
        result = ip.run_cell(cell)
        assert result.error_in_exec is None, f"README tour cell failed: {cell!r}: {result.error_in_exec!r}"
    assert expected in capsys.readouterr().out
