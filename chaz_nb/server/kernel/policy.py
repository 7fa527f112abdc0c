"""The data policy of the kernel's tools: how much of the notebook's values an agent is sent.

Per agent (``Agent.data`` / ``Agent.data_rows``, ``%chaz agent --data``):

- ``schema``: names, types, shapes and counts; no values (``kernel__query`` refuses).
- ``sample``: plus up to ``data_rows`` rows (default 10) of a frame, a query result or an array.
- ``full``: rows up to the tool-output clip (``Agent.max_tool_output``).

Secrets are redacted before any cut (a cut secret no longer matches), and a variable whose
name says it holds a key (``api_key``, ``DB_PASSWORD``) never shows its value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core.redaction import REDACTED, is_credential_field, is_secret_name, redact
from ...engine.runtime import DEFAULT_MAX_TOOL_OUTPUT
from ..agents import DEFAULT_DATA_ROWS
from ..ports import current_run

if TYPE_CHECKING:  # pragma: no cover
    from ..agents import Agent

#: the most rows ``full`` fetches of one result (the text is clipped well before, as a rule)
FULL_ROWS = 100_000


@dataclass(frozen=True)
class DataPolicy:
    mode: str = "sample"
    rows: int = DEFAULT_DATA_ROWS
    max_chars: int = DEFAULT_MAX_TOOL_OUTPUT

    @classmethod
    def of(cls, agent: Agent | None) -> DataPolicy:
        if agent is None:
            return cls()
        return cls(agent.data, agent.data_rows, agent.max_tool_output or DEFAULT_MAX_TOOL_OUTPUT)

    @classmethod
    def current(cls) -> DataPolicy:
        """The policy of the agent whose run calls the tool (the default outside a run)."""
        ctx = current_run.get()
        return cls.of(ctx.agent if ctx is not None else None)

    @property
    def values(self) -> bool:
        """Whether any value may be sent."""
        return self.mode != "schema"

    @property
    def row_limit(self) -> int:
        if self.mode == "schema":
            return 0
        return FULL_ROWS if self.mode == "full" else self.rows

    def to_json(self) -> str:
        return self.mode if self.mode != "sample" else f"sample:{self.rows}"


def secret_name(name: Any) -> bool:
    """A variable or column whose name says it holds a credential: its values are never sent."""
    text = str(name)
    return is_secret_name(text) or is_credential_field(text) or is_secret_name(text.upper())


def clip(text: str, limit: int) -> str:
    """``text`` redacted, then cut to ``limit`` characters with a note saying so."""
    text = redact(text)
    if len(text) <= limit:
        return text
    note = f"\n… (clipped: {len(text):,} characters, {limit:,} sent)"
    return text[: max(0, limit - len(note))] + note


__all__ = ["DataPolicy", "FULL_ROWS", "REDACTED", "clip", "secret_name"]
