"""The ``%chaz`` magics: one ``Magics`` class (core.py) and a module per group of sub-commands.

``args.py`` holds the argument-parsing rules every sub-command uses, ``usage.py`` the usage and
help text, ``address.py`` the ``@NAME text`` line; ``define.py`` (agents), ``sessions.py``,
``approvals.py``, ``sql.py``, ``multi.py`` and the others hold their sub-commands as mixins of
``ChazMagics`` working on the typed per-kernel state.
"""

from .core import ChazMagics

__all__ = ["ChazMagics"]
