"""The ``%chaz`` magics: one ``Magics`` class (core.py) and a module per group of sub-commands.

``args.py`` holds the argument-parsing rules every sub-command uses; ``approvals.py``,
``sql.py`` and ``multi.py`` hold their sub-commands as functions of the typed per-kernel state.
"""

from .core import ChazMagics

__all__ = ["ChazMagics"]
