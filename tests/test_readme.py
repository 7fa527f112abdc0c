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
