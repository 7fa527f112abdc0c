"""Defining an agent from ``%chaz agent NAME --flags`` or ``%%chaz agent NAME`` (a TOML body).

The flags and TOML keys become an ``Agent``; tools named in it are the notebook's
``@chaz_nb.tool`` objects (registered on the server) or globs; the confirmation line names the
tools the agent got, so nobody hands out a tool by accident.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from .agents import AgentCommands, adopt_tools
from .args import HelpShown, split_words, toml_error
from .usage import agent_parser

if TYPE_CHECKING:  # pragma: no cover
    from ...server import Agent, Server
    from ..controller import ExtensionState

AGENT_FIELDS = ("model", "system", "tools", "max_depth", "max_iterations", "script")
_GLOB = re.compile(r"[*?\[]")
_TOOL_PATTERN = re.compile(r"[A-Za-z0-9_*?\[\]!-]{1,64}")



def parse_script(text: str, where: str) -> list[Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: bad --script JSON: {exc}") from None
    if not isinstance(value, list):
        raise UsageError(f"{where}: --script must be a JSON list of steps, got {type(value).__name__}")
    return value


def parse_toml(body: str, where: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(body)
    except tomllib.TOMLDecodeError as exc:
        raise toml_error(exc, where) from None
    allowed = _agent_keys()
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
    return data


def _agent_keys() -> set[str]:
    from ...server import Agent

    return {f.name for f in fields(Agent)} - {"name"}


def resolve_tools(names: list[str] | str | None, shell: Any, server: Server, where: str) -> list[str] | None:
    """Tool names or globs -> names registered on the server (notebook tools get registered).

    A plain name must be a ``@chaz_nb.tool`` object in the notebook's namespace, or a tool the
    server has already (``spawn_agent``, ``spawn_worker``, ones registered before).
    """
    from ...engine.tools import Tool

    if names is None:
        return None
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise UsageError(f"{where}: tools must be a list of tool names")
    ns = getattr(shell, "user_ns", {}) or {}
    out: list[str] = []
    for name in names:
        if not _TOOL_PATTERN.fullmatch(name):
            raise UsageError(
                f"{where}: {name!r} is not a tool name; use letters, digits, _ or - (globs like web_* allowed)"
            )
        if _GLOB.search(name):
            out.append(name)
            continue
        obj = ns.get(name)
        if isinstance(obj, Tool):
            server.tools.register(obj)
            out.append(obj.name)
        elif obj is not None and callable(obj):
            raise UsageError(
                f"{where}: {name} is a plain function, not a chaz_nb tool; decorate it with @chaz_nb.tool"
            )
        elif name in server.tools:
            out.append(name)
        else:
            raise UsageError(
                f"{where}: no tool {name!r} in this notebook; define it with "
                f"@chaz_nb.tool def {name}(...) (known tools: {', '.join(sorted(server.tools.names())) or 'none'})"
            )
    return out


def define_agent(state: ExtensionState, name: str, spec: dict[str, Any], where: str) -> Any:
    from ...errors import AgentError
    from ...server import SAFE_DEFAULT_TOOLS, Agent

    spec = dict(spec)
    if isinstance(spec.get("auto_approve"), str):
        spec["auto_approve"] = [n.strip() for n in spec["auto_approve"].split(",") if n.strip()]
    if "tools" in spec:
        spec["tools"] = resolve_tools(spec["tools"], state.shell, state.server, where)
    else:  # the safe default: never the user's own tools unless named (--tools '*': every tool)
        spec["tools"] = list(SAFE_DEFAULT_TOOLS)
    spec.setdefault("model", _default_model())
    try:
        agent = Agent(name, **spec)
    except AgentError as exc:
        raise UsageError(f"{where}: {exc}") from None
    except TypeError as exc:
        raise UsageError(f"{where}: {exc}") from None
    from ...errors import StoreError

    try:
        state.server.define_agent(agent)
    except StoreError as exc:
        raise UsageError(f"{where}: {exc}") from None
    adopt_tools(state.shell, state.server)
    return agent


def _default_model() -> str:
    from ..controller import default_model

    return default_model()


def describe_agent(agent: Agent, server: Server) -> str:
    """The confirmation line of an agent definition.

    It names the tools the agent got: the safe default (an agent defined without ``tools``)
    by its parts, ``*`` as every tool with today's count, so nobody hands out a tool by accident.
    """
    from ...server import DEFAULT_DATA_ROWS, KERNEL_DEFAULT_TOOLS, LOCAL_HOSTS, SAFE_DEFAULT_TOOLS, SESSION_TOOLS

    if agent.tools is None or "*" in agent.tools:
        tools = f"every registered tool ({len(server.tools)} now, and any registered later)"
    elif list(agent.tools) == list(SAFE_DEFAULT_TOOLS):
        tools = ("the default tools: " + ", ".join(SESSION_TOOLS) + "; the kernel's "
                 + ", ".join(KERNEL_DEFAULT_TOOLS) + " (kernel__run asks you first); not your own tools "
                 "(name them with --tools, or --tools '*' for every tool)")
    else:
        tools = ", ".join(agent.tools) or "no tools"
    if agent.data != "sample" or agent.data_rows != DEFAULT_DATA_ROWS:
        tools += f", data {agent.data}" + (f" ({agent.data_rows} rows)" if agent.data == "sample" else "")
    if agent.egress != "ask" or list(agent.egress_hosts) != list(LOCAL_HOSTS):
        tools += f", egress {agent.egress}" + (
            f" (always to {', '.join(agent.egress_hosts)})" if agent.egress != "allow" and agent.egress_hosts else "")
    extra = f", max depth {agent.max_depth}" if agent.max_depth is not None else ""
    if getattr(agent, "auto_approve", None):
        extra += f", auto-approves {', '.join(agent.auto_approve)}"
    if not getattr(agent, "cells", True):
        extra += ", its approved code does not become cells"
    note = getattr(getattr(server, "roster", None), "notes", {}).get(agent.name)
    if note:  # kept with the sessions, but never a key: what was left out, and how to give it
        extra += f" ({note})"
    return f"agent {agent.name}: {agent.model}, {tools}{extra}"


class DefineCommands(AgentCommands):
    """Mixin of ChazMagics: ``_cmd_agent`` and the ``%%chaz agent`` cell (``--forget`` is AgentCommands')."""

    def _cmd_agent(self, rest: str) -> None:
        self._define_agent_from(rest, body=None)

    def _agent_cell(self, rest: str, body: str) -> None:
        self._define_agent_from(rest, body=body)

    def _define_agent_from(self, rest: str, body: str | None) -> None:
        """``%chaz agent NAME --flags`` or ``%%chaz agent NAME`` (TOML body; flags win)."""
        state = self.state
        try:
            args = agent_parser().parse_args(split_words(rest))
        except HelpShown:
            return
        where = f"%chaz agent {args.name}" if body is None else f"%%chaz agent {args.name}"
        if args.forget or args.accept:
            flag = "forget" if args.forget else "accept"
            others = body is not None or any(
                v not in (None, False) for k, v in vars(args).items() if k not in ("name", flag))
            if flag == "forget":
                self._forget_agent(args.name, others)
            else:
                self._accept_agent(args.name, others)
            return
        options = [k for k, v in vars(args).items() if k not in ("name", "cells") and v not in (None, False)]
        existing = state.server.agents.get(args.name)
        if body is None and args.cells is not None and not options and existing is not None:
            # --cells / --no-cells alone: the agent as it is, only that switch changed
            agent = define_agent(state, args.name, agent_spec(existing, cells=args.cells), where)
            print(describe_agent(agent, state.server))
            return
        spec: dict[str, Any] = {} if body is None else parse_toml(body, where)
        for key in ("model", "system", "max_depth", "max_iterations", "approval_timeout", "max_spawns",
                    "max_model_calls", "api_base", "model_timeout", "max_retries", "stream", "context_tokens",
                    "max_tool_output", "data", "data_rows", "code_timeout", "egress", "egress_hosts",
                    "cells"):
            if getattr(args, key) is not None:
                spec[key] = getattr(args, key)
        if args.auto_approve is not None:
            spec["auto_approve"] = [n.strip() for n in args.auto_approve.split(",") if n.strip()]
        if args.tools is not None:
            spec["tools"] = args.tools
        if args.script is not None:
            spec["script"] = parse_script(args.script, where)
        agent = define_agent(state, args.name, spec, where)
        print(describe_agent(agent, state.server))


def agent_spec(agent: Agent, **changes: Any) -> dict[str, Any]:
    spec = {f.name: getattr(agent, f.name) for f in fields(agent) if f.name != "name"}
    spec.update(changes)
    return spec
