"""The example notebooks run offline and give their saved outputs (nbval).

The notebooks are checked by ``pytest --nbval notebooks/`` (see ``notebooks/conftest.py``);
this test runs that command, so a plain ``pytest`` checks them too.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_notebooks_pass_nbval(request):
    if getattr(request.config.option, "nbval", False):
        pytest.skip("this run checks the notebooks with --nbval already")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("CHAZ_DB", None)
    env.pop("CHAZ_MODEL", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval", "notebooks/", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_nbval_skips_the_executed_copies_run_notebook_writes(tmp_path):
    # examples/run_notebook.py leaves NAME.out.ipynb beside each notebook it runs; nbval must
    # not check those copies as if they were examples (a stale copy would fail the suite).
    import shutil

    import nbformat

    here = tmp_path / "notebooks"
    here.mkdir()
    for name in ("conftest.py", "nbval_sanitize.cfg"):
        shutil.copy(os.path.join(ROOT, "notebooks", name), here / name)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    nbformat.write(nb, str(here / "example.ipynb"))
    nbformat.write(nb, str(here / "example.out.ipynb"))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--nbval", str(here), "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert "example.ipynb" in out.stdout, out.stdout + out.stderr
    assert "example.out.ipynb" not in out.stdout


@pytest.mark.parametrize("name", ["01_quickstart", "02_approvals", "08_notebook_record"])
def test_notebook_flows_on_postgresql(name, pg_url, tmp_path):
    """The quickstart and approvals notebooks give their saved outputs on a PostgreSQL store.

    The copy's first cell points ``CHAZ_DB`` at a fresh database of the test cluster instead of
    ``:memory:``; its output (the database line, which names the URL) is not compared."""
    import shutil

    import nbformat

    for extra in ("conftest.py", "nbval_sanitize.cfg"):
        shutil.copy(os.path.join(ROOT, "notebooks", extra), tmp_path / extra)
    nb = nbformat.read(os.path.join(ROOT, "notebooks", f"{name}.ipynb"), as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "%env CHAZ_DB=:memory:" in first.source, first.source
    first.source = first.source.replace("%env CHAZ_DB=:memory:", f"%env CHAZ_DB={pg_url}")
    first.metadata.setdefault("tags", []).append("nbval-ignore-output")
    nbformat.write(nb, str(tmp_path / f"{name}.ipynb"))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("CHAZ_DB", None)
    env.pop("CHAZ_MODEL", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval", f"{name}.ipynb", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env,
    )
    assert out.returncode == 0 and " passed" in out.stdout, out.stdout[-4000:] + out.stderr[-2000:]
