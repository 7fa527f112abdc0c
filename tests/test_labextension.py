"""The JupyterLab extension (labextension/) and its packaging.

- the npm package version equals the Python package version;
- the prebuilt extension in chaz_nb/labextension is complete and current;
- the installed copy (share/jupyter/labextensions/chaz-nb) is what `jupyter labextension
  list` reports as enabled;
- the TypeScript sources never put strings into the DOM as HTML.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
LABEXT = REPO / "labextension"
BUILT = REPO / "chaz_nb" / "labextension"
EXT_NAME = "chaz-nb"


def skip_unless_ci(reason: str) -> None:
    """Skip on a developer machine; on CI (which installs everything) a missing piece fails."""
    if os.environ.get("CI"):
        pytest.fail(f"on CI: {reason}")
    pytest.skip(reason)


def _package_json() -> dict:
    return json.loads((LABEXT / "package.json").read_text())


def _pyproject_version() -> str:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return data["project"]["version"]


def test_versions_match():
    pkg = _package_json()
    assert pkg["name"] == EXT_NAME
    assert pkg["version"] == _pyproject_version(), (
        "labextension/package.json version must equal pyproject.toml's [project] version"
    )


def test_installed_metadata_version_matches():
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("chaz_nb")
    except PackageNotFoundError:
        pytest.skip("chaz_nb is not installed (pip install -e .)")
    assert installed == _package_json()["version"]


def test_sources_never_inject_html():
    pattern = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|dangerouslySetInnerHTML|document\.write")
    offenders = []
    for path in sorted((LABEXT / "src").rglob("*.ts")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//", 1)[0].strip()
            if code.startswith(("*", "/*")):
                continue  # comment
            if pattern.search(code):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == [], "agent/tool strings must go through textContent:\n" + "\n".join(offenders)


def test_lockfile_present_and_core_meta_pinned():
    lock = json.loads((LABEXT / "package-lock.json").read_text())
    assert lock["packages"][""]["name"] == EXT_NAME
    dev = _package_json()["devDependencies"]
    # Without core-meta the builder tries to download JupyterLab's core metadata.
    assert "@jupyterlab/core-meta" in dev
    assert "node_modules/@jupyterlab/core-meta" in lock["packages"]


def _check_built(path: Path) -> dict:
    pkg = json.loads((path / "package.json").read_text())
    assert pkg["name"] == EXT_NAME
    assert pkg["version"] == _package_json()["version"]
    build = pkg["jupyterlab"]["_build"]
    assert build["extension"] == "./extension"
    assert build["mimeExtension"] == "./mimeExtension"
    assert (path / build["load"]).is_file()
    assert (path / "static" / "style.js").is_file()
    return pkg


def test_prebuilt_extension_in_repo():
    if not (BUILT / "package.json").exists():
        skip_unless_ci("labextension not built: run .ci/labext.sh (or `npm --prefix labextension run build`)")
    _check_built(BUILT)


def _jupyter_labextension_list() -> str:
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        pytest.skip("jupyterlab is not installed: `jupyter labextension list` is not available")
    out = subprocess.run(
        [sys.executable, "-m", "jupyterlab.labextensions", "list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the list goes to stderr (logging) in JupyterLab 4
    return re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)


def test_installed_extension_is_enabled():
    from jupyter_core.paths import jupyter_path

    installed = [Path(p) / EXT_NAME for p in jupyter_path("labextensions")]
    installed = [p for p in installed if (p / "package.json").exists()]
    if not installed:
        skip_unless_ci(
            "chaz-nb is not installed in any share/jupyter/labextensions: build it "
            "(.ci/labext.sh) and `pip install .` with labextension/PYPROJECT_SNIPPET.md applied"
        )
    _check_built(installed[0])
    listing = _jupyter_labextension_list()
    lines = [line for line in listing.splitlines() if EXT_NAME in line]
    assert lines, listing
    assert re.search(rf"{EXT_NAME} v{re.escape(_package_json()['version'])} enabled\s+OK", lines[0]), lines[0]


def test_renderer_and_sidebar_unit_tests_pass():
    """The jest suite of labextension/ (renderer formatting, escaping, sidebar)."""
    npm = shutil.which("npm")
    if npm is None or not (LABEXT / "node_modules").exists():
        skip_unless_ci("npm or labextension/node_modules missing: `pip install -e .` or .ci/labext.sh installs them")
    out = subprocess.run([npm, "test", "--silent"], cwd=LABEXT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
