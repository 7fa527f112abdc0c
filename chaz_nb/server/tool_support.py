"""A run told, once per session and model, that its model cannot take the tools it is offered.

A model whose entry in litellm's model info says ``supports_function_calling: false`` gets the
tools in the request, yet never calls one: every answer it gives about the notebook's data is
made up, and nothing said that the tools never reached it. ``ToolSupport`` wraps each run's
executor: when the run's tools are first offered to such a model it writes one Error note
(``payload.note``: it closes nothing, as ``tool_notes.py``'s notes do) saying so, in the
session's view and log. A model litellm does not know (a local server's) is not judged here:
its server's refusal of the tools is the run's Error (``engine/faults.py``, kind
``tools_unsupported``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..core.entries import EntryType
from ..engine.runtime import ToolExecutor, ToolOutcome
from .ports import Part, RunContext, ServerPort


def no_tools_note(agent: str, model: str) -> str:
    """The note's one line."""
    return (f"@{agent}'s model {model} does not take tools (litellm's model info), so its tools never reach it and "
            "what it says about your data is not from them; give the agent a model that calls tools "
            f"(%chaz agent {agent} --model M)")


class ToolSupport(Part):
    """The part that notes a model that cannot take tools (see the module docstring)."""

    name = "tool_support"

    def __init__(self, port: ServerPort) -> None:
        self.port = port
        #: (session, model) pairs already told
        self.told: set[tuple[int, str]] = set()

    def wrap_executor(self, ctx: RunContext, executor: ToolExecutor) -> ToolExecutor:
        # a backend that can tell (litellm's, in the kernel or in the model worker)
        if getattr(self.port.backend, "refuses_tools", None) is None or (ctx.session_id, ctx.agent.model) in self.told:
            return executor
        return _Check(self, ctx, executor)

    async def check(self, ctx: RunContext) -> None:
        # (litellm is imported already, but for the first turn after %load_ext)
        refuses = await self.port.backend.refuses_tools(ctx.agent.model)  # type: ignore[attr-defined]
        key = (ctx.session_id, ctx.agent.model)
        if key in self.told or not refuses or self.port.store.closed:
            return
        self.told.add(key)
        # (no run_id in the payload: a run's Error with its run_id closes it, serving.py)
        note = no_tools_note(ctx.agent.name, ctx.agent.model)
        self.port.store.append(ctx.session_id, EntryType.ERROR, "system", note,
                               payload={"tools_unsupported": ctx.agent.model, "note": True})


class _Check:
    """A run's executor that checks the model once, when its tools are first offered."""

    def __init__(self, part: ToolSupport, ctx: RunContext, inner: ToolExecutor) -> None:
        self.part, self.ctx, self.inner = part, ctx, inner
        self.checked = False
        self._task: asyncio.Task[None] | None = None

    def schemas(self) -> list[dict[str, Any]]:
        schemas = self.inner.schemas()
        if schemas and not self.checked:
            self.checked = True
            # litellm may still be importing (the first turn): checked when it is there
            self._task = self.part.port.loop().create_task(self.part.check(self.ctx))
        return schemas

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        return await self.inner.call(call_id, name, arguments)
