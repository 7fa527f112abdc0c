"""A run told, once per session and model, that its model cannot take the tools it is offered.

A model whose entry in litellm's model info says ``supports_function_calling: false`` gets the
tools in the request, yet never calls one: every answer it gives about the notebook's data is
made up, and nothing said that the tools never reached it. ``ToolSupport`` wraps each run's
executor: when the run's tools are first offered to such a model it writes one Error note
(``payload.note``: it closes nothing, as ``tool_notes.py``'s notes do) saying so, in the
session's view and log. A model litellm does not know (a local server's) is not judged here:
its server's refusal of the tools is the run's Error (``engine/faults.py``, kind
``tools_unsupported``); a server that takes the tools but whose chat template leaves them out
of the prompt (llama.cpp's ``/props`` says ``supports_tools: false``: ``template_caps.py``)
gets the same one note, naming the server.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..core.entries import EntryType
from ..engine.runtime import ToolExecutor, ToolOutcome
from .ports import Part, RunContext, ServerPort
from .template_caps import server_root, template_takes_tools


def no_tools_note(agent: str, model: str) -> str:
    """The note's one line."""
    return (f"@{agent}'s model {model} does not take tools (litellm's model info), so its tools never reach it and "
            "what it says about your data is not from them; give the agent a model that calls tools "
            f"(%chaz agent {agent} --model M)")


def template_note(agent: str, model: str, root: str) -> str:
    """The note's one line for a server whose chat template leaves the tools out."""
    return (f"@{agent}'s model server {root} says its chat template takes no tools (its /props: supports_tools "
            f"false), so {model} never sees its tools and what it says about your data is not from them; start "
            "the server with a model or --chat-template that has tool calls (llama-server --jinja), or give the "
            f"agent another model (%chaz agent {agent} --model M)")


class ToolSupport(Part):
    """The part that notes a model that cannot take tools (see the module docstring)."""

    name = "tool_support"

    def __init__(self, port: ServerPort) -> None:
        self.port = port
        #: (session, model) pairs already told
        self.told: set[tuple[int, str]] = set()
        #: what each server root said of its template (asked once per root: see template_caps)
        self.templates: dict[str, asyncio.Future[bool | None]] = {}

    def wrap_executor(self, ctx: RunContext, executor: ToolExecutor) -> ToolExecutor:
        if (ctx.session_id, ctx.agent.model) in self.told:
            return executor
        # a backend that can ask litellm's model info (in the kernel or in the model worker), or
        # a model server that can be asked about its template
        if getattr(self.port.backend, "refuses_tools", None) is None and not ctx.agent.api_base:
            return executor
        return _Check(self, ctx, executor)

    async def check(self, ctx: RunContext) -> None:
        note = await self._litellm_says(ctx) or await self._server_says(ctx)
        key = (ctx.session_id, ctx.agent.model)
        if note is None or key in self.told or self.port.store.closed:
            return
        self.told.add(key)
        # (no run_id in the payload: a run's Error with its run_id closes it, serving.py)
        self.port.store.append(ctx.session_id, EntryType.ERROR, "system", note,
                               payload={"tools_unsupported": ctx.agent.model, "note": True})

    async def _litellm_says(self, ctx: RunContext) -> str | None:
        # litellm's model info, where litellm runs (LiteLLMBackend here, WorkerBackend in the
        # model worker); imported already, but for the first turn after %load_ext
        refuses = getattr(self.port.backend, "refuses_tools", None)
        if refuses is None:
            return None
        return no_tools_note(ctx.agent.name, ctx.agent.model) if await refuses(ctx.agent.model) else None

    async def _server_says(self, ctx: RunContext) -> str | None:
        root = server_root(ctx.agent.api_base) if ctx.agent.api_base else None
        if root is None:
            return None
        asked = self.templates.get(root)
        if asked is None:  # one question per server, however many runs start meanwhile
            asked = self.templates[root] = asyncio.ensure_future(asyncio.to_thread(template_takes_tools, root))
        if await asyncio.shield(asked) is not False:
            return None
        return template_note(ctx.agent.name, ctx.agent.model, root)


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
