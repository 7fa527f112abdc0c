"""The lint and type gates run as tests, so the README's one test command (what CI runs) runs them.

``ruff check`` and ``mypy chaz_nb`` use their config in pyproject.toml; a finding fails the
test with the tool's own output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_ruff_finds_nothing():
    result = run("ruff", "check", "chaz_nb", "tests", "bench", "examples")
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"


def test_mypy_finds_no_type_errors():
    result = run("mypy", "chaz_nb")
    assert result.returncode == 0, f"mypy chaz_nb found errors:\n{result.stdout}{result.stderr}"
