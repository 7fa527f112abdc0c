"""chaz_nb: agents that live inside a Jupyter kernel.

``%load_ext chaz_nb`` starts the Server on the kernel's event loop. The core (store, tools,
runtime, server) is importable and usable without IPython. Heavy modules load lazily so that
``import chaz_nb`` and ``%load_ext chaz_nb`` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from .core import logredact as _logredact

# Before any chaz_nb module logs: tracebacks on a kernel's stderr land in the notebook.
_logredact.install()

if TYPE_CHECKING:  # pragma: no cover
    from .server.agents import Agent
    from .core.entries import Entry, EntryType
    from .server import RunHandle, Server
    from .core.store import SessionStore
    from .engine.tools import Tool, ToolRegistry, tool

_LAZY = {
    "Agent": ("server.agents", "Agent"),
    "Entry": ("core.entries", "Entry"),
    "EntryType": ("core.entries", "EntryType"),
    "Server": ("server", "Server"),
    "RunHandle": ("server", "RunHandle"),
    "SessionStore": ("core.store", "SessionStore"),
    "Tool": ("engine.tools", "Tool"),
    "ToolRegistry": ("engine.tools", "ToolRegistry"),
    "tool": ("engine.tools", "tool"),
}

# Written out (not built from _LAZY) so that linters and type checkers see the public names.
__all__ = [
    "Agent",
    "Entry",
    "EntryType",
    "Server",
    "RunHandle",
    "SessionStore",
    "Tool",
    "ToolRegistry",
    "tool",
    "current",
    "ask",
    "load_ipython_extension",
    "unload_ipython_extension",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'chaz_nb' has no attribute {name!r}")


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the prebuilt JupyterLab extension lives (for `jupyter labextension develop`)."""
    return [{"src": "labextension", "dest": "chaz-nb"}]


def load_ipython_extension(ipython: Any) -> None:
    from .notebook import extension

    extension.load_ipython_extension(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .notebook import extension

    extension.unload_ipython_extension(ipython)


def current() -> Server:
    """The Server that ``%load_ext chaz_nb`` started in this kernel."""
    from .notebook import extension

    return extension.current()


async def ask(text: str, **kwargs: Any) -> Any:
    """``await chaz_nb.ask("@NAME text")``: the async form of ``%chaz @NAME text``."""
    from .notebook import extension

    return await extension.ask(text, **kwargs)
