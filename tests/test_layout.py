"""The package's shape: the public API, the layers, and no reaching into private names.

Each check walks the AST of every module under chaz_nb/ (imports at any depth, including
function-level and TYPE_CHECKING imports), so a layering break cannot hide in a function.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import chaz_nb

PACKAGE = pathlib.Path(chaz_nb.__file__).parent
LAYERS = {"core": {"engine", "server", "notebook"}, "engine": {"server", "notebook"}}


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "labextension" not in p.parts)


def _dotted(path: pathlib.Path) -> list[str]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(path: pathlib.Path) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, names) of every import in the module."""
    here = _dotted(path)
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module, [a.name for a in node.names]))
    return found


def _where(path: pathlib.Path, line: int) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{line}"


def test_the_public_api_is_what_the_readme_names():
    assert chaz_nb.__all__ == [
        "Agent", "Entry", "EntryType", "Server", "RunHandle", "SessionStore", "Tool", "ToolRegistry",
        "tool", "current", "ask", "load_ipython_extension", "unload_ipython_extension",
    ]
    for name in chaz_nb.__all__:
        assert getattr(chaz_nb, name) is not None


def test_only_the_notebook_layer_imports_ipython_or_ipywidgets():
    found = [
        f"{_where(path, line)} imports {module}"
        for path in _modules() if "notebook" not in _dotted(path)
        for line, module, _ in _imports(path)
        if module.split(".")[0] in ("IPython", "ipywidgets", "ipykernel")
    ]
    assert found == []


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_lower_layer_imports_nothing_from_the_layers_above(layer):
    above = LAYERS[layer]
    modules = [path for path in _modules() if _dotted(path)[1:2] == [layer]]
    assert len(modules) > 1, f"chaz_nb/{layer}/ holds the {layer} layer's modules"
    found = [
        f"{_where(path, line)} imports {module}"
        for path in modules
        for line, module, _ in _imports(path)
        if module.split(".")[0] == "chaz_nb" and module.split(".")[1:2] and module.split(".")[1] in above
    ]
    assert found == []


def test_no_module_imports_a_private_name_of_another_module():
    found = [
        f"{_where(path, line)} imports {name} from {module}"
        for path in _modules()
        for line, module, names in _imports(path)
        if module.startswith("chaz_nb")
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert found == []


def test_no_module_reaches_into_a_private_attribute_of_another_object():
    """``self.port._states`` or ``ctx.port._x``: a collaborator's private state, not its interface."""
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            owner = node.value
            # one level on a name (self._x, or a stdlib object's) is the owner's own business;
            # two levels (a.b._x) reach through an attribute into someone else's object
            if isinstance(owner, ast.Attribute) and not owner.attr.startswith("_"):
                found.append(f"{_where(path, node.lineno)} {ast.unparse(node)}")
    assert found == []


def _cycles(modules: dict[str, set[str]]) -> list[list[str]]:
    """The import circles among ``modules`` (module -> the modules it imports), each once."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(modules.get(node, ())):
            if nxt in path:
                circle = path[path.index(nxt):]
                if frozenset(circle) not in done:
                    done.add(frozenset(circle))
                    found.append(circle)
            elif len(path) < 12:
                visit(nxt, [*path, nxt])

    for start in sorted(modules):
        visit(start, [start])
    return found


def test_the_core_modules_import_each_other_in_no_circle():
    """The stores above all: the contract (core/store/base.py) is imported, never the other store."""
    core = {".".join(_dotted(p)): p for p in _modules() if _dotted(p)[:2] == ["chaz_nb", "core"]}
    graph = {name: {m for _, m, _ in _imports(path) if m in core and m != name and path.name != "__init__.py"}
             for name, path in core.items()}
    assert _cycles(graph) == []


def test_no_code_asks_a_store_what_it_is_by_getattr():
    """A shared store's leases and notices are a declared capability (``SharedSessions``): code
    asks ``isinstance``, never ``getattr(store, ...)`` or a ``shares_sessions`` flag."""
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            asks = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and bool(node.args) and "store" in ast.unparse(node.args[0])
            if asks or (isinstance(node, ast.Attribute) and node.attr == "shares_sessions"):
                found.append(f"{_where(path, node.lineno)} {ast.unparse(node)}")
    assert found == []


#: what the notebook layer may import from core/: pure helpers over entries and text (no store,
#: no connection); everything else it reaches through the server package's public names
NOTEBOOK_CORE = {"chaz_nb.core.entries", "chaz_nb.core.controls", "chaz_nb.core.redaction"}


def test_the_notebook_layer_reaches_the_server_only_through_the_facade():
    """The notebook imports ``chaz_nb.server`` (``Server``, ``Agent`` and the value types and
    helpers its ``__init__`` names) and core's pure helpers, never a server or core module."""
    from chaz_nb import server

    found = []
    for path in _modules():
        if _dotted(path)[1:2] != ["notebook"]:
            continue
        for line, module, names in _imports(path):
            parts = module.split(".")
            if parts[:2] == ["chaz_nb", "server"]:
                bad = len(parts) > 2 or [n for n in names if n not in server.__all__]
            else:
                bad = parts[:2] == ["chaz_nb", "core"] and module not in NOTEBOOK_CORE
            if bad:
                found.append(f"{_where(path, line)} imports {module} {names}")
    assert found == []
