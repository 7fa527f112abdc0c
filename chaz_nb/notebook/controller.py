"""The per-kernel state of chaz_nb (``ExtensionState``) and the helpers the magics share with
the extension: the defaults, where a cell's write comes from (``origin``), the current state.

extension.py (loading, the store and server, the sidebar) and the magics both import this
module; neither imports the other's internals, so the notebook layer has no import circle.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

from ..errors import NotLoadedError

DEFAULT_DB = os.path.join(".chaz", "sessions.duckdb")
DEFAULT_AGENT = "assistant"
DEFAULT_MODEL = "chaz/echo"


@dataclass
class ExtensionState:
    """What the extension holds for one kernel."""

    shell: Any
    loop: Any
    server: Any
    db_line: str
    magics: Any = None
    unregister_comm: Callable[[], None] | None = None
    #: removes the Stop handlers of the kernel's control channel (stop_control.py)
    unregister_stop: Callable[[], None] | None = None
    last_session: int | None = None
    views: list[Any] = field(default_factory=list)
    room: int | None = None  # the current room (%chaz room): %chaz @NAME speaks there
    #: ``%chaz config db=PATH``: move this kernel to another database (set by the extension)
    reopen: Callable[[str], str] | None = None

    @property
    def store(self) -> Any:
        return self.server.store


_state: ExtensionState | None = None


def set_state(state: ExtensionState | None) -> None:
    """The state of the loaded extension (None once it is unloaded)."""
    global _state
    _state = state


def loaded_state() -> ExtensionState | None:
    """The state, or None when the extension is not loaded."""
    return _state


def default_model() -> str:
    return os.environ.get("CHAZ_MODEL", "").strip() or DEFAULT_MODEL


def default_db() -> str:
    return os.environ.get("CHAZ_DB", "").strip() or DEFAULT_DB


def current_state() -> ExtensionState:
    if _state is None:
        raise NotLoadedError("chaz_nb is not loaded in this kernel; run %load_ext chaz_nb first")
    return _state


def current() -> Any:
    """The Server that ``%load_ext chaz_nb`` started in this kernel."""
    return current_state().server


def origin(shell: Any = None) -> dict[str, Any]:
    """Where a write from a cell comes from: notebook path, cell id, execution count, kernel.

    Unknown fields are ``None`` (nbclient, for one, sends no cell id).
    """
    shell = shell if shell is not None else (_state.shell if _state is not None else None)
    out: dict[str, Any] = {
        "notebook": None,
        "cell_id": None,
        "execution_count": None,
        "kernel_id": None,
    }
    if shell is None:
        return out
    out["execution_count"] = getattr(shell, "execution_count", None)
    ns = getattr(shell, "user_ns", {}) or {}
    out["notebook"] = (
        ns.get("__vsc_ipynb_file__")
        or ns.get("__session__")
        or os.environ.get("JPY_SESSION_NAME")
        or None
    )
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        try:
            parent = kernel.get_parent("shell") or {}
        except Exception:  # noqa: BLE001 - origin metadata is best effort; never fail a magic
            parent = {}
        meta = parent.get("metadata") or {}
        out["cell_id"] = meta.get("cellId") or (parent.get("content") or {}).get("cell_id")
        try:
            from ipykernel.connect import get_connection_file

            name = os.path.splitext(os.path.basename(get_connection_file()))[0]
            out["kernel_id"] = name[len("kernel-") :] if name.startswith("kernel-") else name
        except Exception:  # noqa: BLE001 - origin metadata is best effort; never fail a magic
            pass
    return out
