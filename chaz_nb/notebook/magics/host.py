"""What the ``%chaz`` sub-command mixins use from their host, ``ChazMagics``, typed once.

The mixins (``ApprovalCommands``, ``SqlCommands``, ``MultiAgentCommands``) run as methods of
``ChazMagics``: ``self.state`` is its per-kernel state (a read-only property there) and
``self.shell`` the IPython shell that ``Magics.__init__`` sets. The declarations exist for the
type checker only, so the host's own definitions are the ones that run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..controller import ExtensionState


class MagicsHost:
    """Base of the mixins: the host attributes they read, for mypy."""

    if TYPE_CHECKING:  # pragma: no cover

        @property
        def state(self) -> ExtensionState: ...

        shell: Any
