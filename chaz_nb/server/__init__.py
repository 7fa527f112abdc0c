"""The server layer: the ``Server`` façade, the run engine, the port its parts use, the parts.

``Server`` and ``RunHandle`` load lazily (``from chaz_nb.server import Server``), so importing a
part's module, or ``chaz_nb.server.agents``, does not import every part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .facade import RunHandle, Server

__all__ = ["RunHandle", "Server"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import facade

        return getattr(facade, name)
    raise AttributeError(f"module 'chaz_nb.server' has no attribute {name!r}")
