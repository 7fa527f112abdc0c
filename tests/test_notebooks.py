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
