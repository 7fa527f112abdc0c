"""``%chaz schedule``, ``%chaz room``, ``%chaz compact``: schedules, shared sessions, summaries."""

from __future__ import annotations


class MultiAgentCommands:
    """Mixin of ChazMagics: ``_cmd_schedule``, ``_cmd_room``, ``_cmd_compact``."""
