"""The server layer: the ``Server`` façade, the run engine, the port its parts use, the parts.

The notebook layer reaches the server only through this package's public names (``__all__``,
tests/test_layout.py): ``Server`` and ``RunHandle``, the agent definitions, the value types the
façade returns, and the few helpers a surface shows or runs with. Each loads lazily
(``from chaz_nb.server import Server``), so importing a part's module, or
``chaz_nb.server.agents``, does not import every part.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..core.sqlquery import DEFAULT_MAX_ROWS, run_query
    from ..core.store import SessionInfo, SessionStore
    from .agents import DEFAULT_DATA_ROWS, LOCAL_HOSTS, KERNEL_DEFAULT_TOOLS, SAFE_DEFAULT_TOOLS, SESSION_TOOLS, Agent
    from .cells import ApprovedCode
    from .compare import Comparison, RunSummary, Side
    from .facade import RunHandle, Server
    from .fork import forked_label
    from .kernel.describe import safe_repr
    from .kernel.run import CellOutput, record_exception, run_source
    from .mcp import McpServer
    from .remote import REMOTE_POLL_INTERVAL, RemoteRun
    from .rooms import Room
    from .kernel.undo import UndoOutcome, undo_of
    from . import sharing

#: public name -> the module that defines it (imported when the name is first asked for)
_HOMES = {
    "Server": ".facade", "RunHandle": ".facade",
    "Agent": ".agents", "SAFE_DEFAULT_TOOLS": ".agents", "KERNEL_DEFAULT_TOOLS": ".agents",
    "SESSION_TOOLS": ".agents", "DEFAULT_DATA_ROWS": ".agents", "LOCAL_HOSTS": ".agents",
    "ApprovedCode": ".cells", "Comparison": ".compare", "RunSummary": ".compare", "Side": ".compare",
    "forked_label": ".fork", "McpServer": ".mcp", "Room": ".rooms",
    "RemoteRun": ".remote", "REMOTE_POLL_INTERVAL": ".remote",
    "safe_repr": ".kernel.describe",
    # %chaz undo's outcome, and which call an entry undid (a cell marked for that call)
    "UndoOutcome": ".kernel.undo", "undo_of": ".kernel.undo",
    "CellOutput": ".kernel.run", "record_exception": ".kernel.run", "run_source": ".kernel.run",
    # the store the façade runs on, and the read-only query %chaz sql runs (with or without one)
    "SessionStore": "..core.store", "SessionInfo": "..core.store",
    "run_query": "..core.sqlquery", "DEFAULT_MAX_ROWS": "..core.sqlquery",
    "sharing": ".sharing",
}

__all__ = [
    "Server", "RunHandle", "Agent", "SAFE_DEFAULT_TOOLS", "KERNEL_DEFAULT_TOOLS", "SESSION_TOOLS",
    "DEFAULT_DATA_ROWS", "LOCAL_HOSTS", "ApprovedCode", "Comparison", "RunSummary", "Side", "forked_label",
    "McpServer", "Room",
    "RemoteRun", "REMOTE_POLL_INTERVAL", "safe_repr", "CellOutput", "record_exception", "run_source",
    "SessionStore", "SessionInfo", "run_query", "DEFAULT_MAX_ROWS", "UndoOutcome", "undo_of",
    "sharing",
]


def __getattr__(name: str) -> Any:
    if name == "sharing":  # a module: who this kernel is, and sharing (sharing.py)
        return importlib.import_module(".sharing", __name__)
    home = _HOMES.get(name)
    if home is not None:
        return getattr(importlib.import_module(home, __name__), name)
    raise AttributeError(f"module 'chaz_nb.server' has no attribute {name!r}")
