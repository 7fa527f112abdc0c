"""The docs site builds without a warning, and documents every command and public name.

``mkdocs build --strict`` runs here, so the README's test command (what CI runs) fails on a
broken link or anchor in docs/, a page missing from the nav, or an API name mkdocstrings cannot
resolve. The sub-commands are read from the ``%chaz`` dispatcher itself, not from a list kept by
hand, so a new sub-command without docs fails here.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import chaz_nb
from chaz_nb.notebook.magics.core import ChazMagics

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# pages under docs/ include these files whole (pymdownx.snippets), so their text is docs too
INCLUDED = [ROOT / "bench" / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]


def docs_text() -> str:
    pages = sorted(DOCS.rglob("*.md"))
    return "\n".join(p.read_text() for p in [*pages, *INCLUDED])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}"
    return out


def test_the_docs_site_builds_strict(site: Path):
    assert (site / "index.html").is_file()
    assert (site / "reference" / "api" / "index.html").is_file()


def line_subcommands() -> list[str]:
    """``%chaz NAME``: the dispatcher calls the method ``_cmd_NAME`` (core.py and its mixins)."""
    return sorted(name[len("_cmd_"):] for name in dir(ChazMagics) if name.startswith("_cmd_"))


def cell_forms() -> list[str]:
    """``%%chaz NAME``: the words ``ChazMagics._cell`` compares the line's head with."""
    tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(ChazMagics._cell)))
    forms = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "head"
                and isinstance(node.ops[0], ast.Eq) and isinstance(node.comparators[0], ast.Constant)):
            forms.append(node.comparators[0].value)
    return sorted(forms)


def test_the_dispatcher_is_read_not_guessed():
    # a guard on the readers above: they find the sub-commands and cell forms that exist
    assert {"agent", "approve", "sql", "stop", "fork", "mcp"} <= set(line_subcommands())
    assert {"directive", "agent", "sql", "mcp", "approve"} <= set(cell_forms())


def test_every_chaz_subcommand_is_documented():
    text = docs_text()
    missing = [f"%chaz {name}" for name in line_subcommands() if not re.search(rf"%chaz {name}\b", text)]
    missing += [f"%%chaz {name}" for name in cell_forms() if not re.search(rf"%%chaz {name}\b", text)]
    assert not missing, f"not in docs/ (add them to docs/reference/magics.md and their guide page): {missing}"


def test_every_public_name_is_in_the_generated_api_reference(site: Path):
    api = (DOCS / "reference" / "api.md").read_text()
    directives = set(re.findall(r"^::: (\S+)$", api, re.MULTILINE))
    html = (site / "reference" / "api" / "index.html").read_text()
    missing = [name for name in chaz_nb.__all__ if f"chaz_nb.{name}" not in directives]
    assert not missing, f"no '::: chaz_nb.NAME' in docs/reference/api.md for {missing}"
    unrendered = [name for name in chaz_nb.__all__ if f'id="chaz_nb.{name}"' not in html]
    assert not unrendered, f"mkdocstrings rendered no entry for {unrendered}"


LINK = re.compile(r"\]\(([^)#\s]+)(?:#([^)\s]*))?\)")


def anchors(path: Path) -> set[str]:
    """The heading anchors of a Markdown file, as the forge and mkdocs' toc both spell them."""
    found = set()
    prose = FENCE.sub("", path.read_text())  # a "# comment" in a code block is no heading
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", prose, re.MULTILINE):
        slug = re.sub(r"[^\w\s-]", "", heading.lower()).strip()
        found.add(re.sub(r"\s+", "-", slug))
    return found


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "bench/README.md"])
def test_links_outside_the_site_point_to_files_and_headings_that_exist(name: str):
    # mkdocs checks the links of docs/; these files are read on the forge too, where a
    # relative link is a path in the repository
    path = ROOT / name
    broken = []
    for target, anchor in LINK.findall(path.read_text()):
        if "://" in target:
            continue
        linked = path.parent / target
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{name} links to files or headings that do not exist: {broken}"


def test_benchmark_table_rows_are_readable():
    long = [line[:60] for line in (ROOT / "bench" / "README.md").read_text().splitlines() if len(line) > 200]
    assert not long, f"bench/README.md lines over 200 characters (put the details under the table): {long}"


MAGIC_WITH_COMMENT = re.compile(r"^%%?[a-z_]+\b.*\s#\s")
FENCE = re.compile(r"^```.*?$(.*?)^```", re.MULTILINE | re.DOTALL)


def test_no_magic_line_in_the_docs_ends_in_a_comment():
    # IPython hands a line magic the whole rest of the line: `%chaz approve last  # note` is
    # refused and `%chaz @x hi  # note` sends the note to the agent, so a copied example breaks
    found = [
        f"{path.relative_to(ROOT)}: {line}"
        for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md")), *INCLUDED]
        for block in FENCE.findall(path.read_text())
        for line in block.splitlines()
        if MAGIC_WITH_COMMENT.match(line)
    ]
    assert not found, "put the comment on the line above the magic:\n" + "\n".join(found)
