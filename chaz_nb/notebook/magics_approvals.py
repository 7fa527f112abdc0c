"""``%chaz pending``, ``%chaz approve``, ``%chaz deny``: deciding tool approvals from a cell."""

from __future__ import annotations


class ApprovalCommands:
    """Mixin of ChazMagics: ``_cmd_pending``, ``_cmd_approve``, ``_cmd_deny``."""
