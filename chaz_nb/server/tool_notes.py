"""A run told, in one line of its session, which of its agent's named tools are not defined here.

An agent kept with the sessions (agent_book.py) comes back after a kernel restart with its
definition, ``tools=["add", ...]`` included, but a tool's code is not kept: until the notebook
runs the cell with its ``@chaz_nb.tool`` function again, the registry has no ``add``. The run
then offers the model the agent's other tools, and nothing said why ``add`` was not among
them. ``MissingTools`` wraps each run's executor: at its first step it writes one Error note
(``payload.note``: it closes nothing, as the MCP part's failed-server notes do) naming the
tools the agent lists by name that neither the registry nor a configured MCP server (whose
tools join when it is ready, and whose failure mcp.py reports) provides, and how to define
them. The run goes on. Globs (``kernel__*``) name no tool in particular and are not checked.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from ..core.entries import EntryType
from ..engine.runtime import ToolExecutor, ToolOutcome
from .ports import Part, RunContext, ServerPort

#: characters that make a tools entry a pattern rather than a tool's name
GLOB = "*?["


def missing_note(agent: str, missing: list[str]) -> str:
    """The note's one line."""
    if len(missing) == 1:
        return (f"@{agent}'s tool {missing[0]} is not defined in this kernel, so this run goes on without it; "
                "define it again: run the cell with its @chaz_nb.tool function (%chaz agents lists what is missing)")
    return (f"@{agent}'s tools {', '.join(missing)} are not defined in this kernel, so this run goes on without "
            "them; define them again: run the cells with their @chaz_nb.tool functions (%chaz agents lists "
            "what is missing)")


class MissingTools(Part):
    """The part that notes a run's missing named tools (see the module docstring)."""

    name = "missing_tools"

    def __init__(self, port: ServerPort, served: Callable[[str], bool]) -> None:
        self.port = port
        #: whether a configured MCP server provides (or will) the tool of this name
        self._served = served

    def wrap_executor(self, ctx: RunContext, executor: ToolExecutor) -> ToolExecutor:
        named = [t for t in ctx.agent.tools or () if not any(c in t for c in GLOB)]
        return _Notes(self, ctx, executor, named) if named else executor

    def missing(self, named: list[str]) -> list[str]:
        tools = self.port.tools
        return [t for t in named if tools.get(t) is None and not self._served(t)]


class _Notes:
    """A run's executor that writes the note once, when the tools are first offered."""

    def __init__(self, part: MissingTools, ctx: RunContext, inner: ToolExecutor, named: list[str]) -> None:
        self.part, self.ctx, self.inner, self.named = part, ctx, inner, named
        self.noted = False

    def schemas(self) -> list[dict[str, Any]]:
        if not self.noted:
            self.noted = True
            missing = self.part.missing(self.named)
            if missing:
                # (no run_id in the payload: a run's Error with its run_id closes it, serving.py)
                self.part.port.store.append(
                    self.ctx.session_id, EntryType.ERROR, "system", missing_note(self.ctx.agent.name, missing),
                    payload={"missing_tools": missing, "note": True},
                )
        return self.inner.schemas()

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        return await self.inner.call(call_id, name, arguments)
