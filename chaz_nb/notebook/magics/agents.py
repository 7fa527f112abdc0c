"""``%chaz agents`` and ``%chaz agent NAME --forget``: the agents kept with the sessions.

An agent defined in a notebook is kept in the store (server/agent_book.py) and is back after a
restart, with its current session; its tools are kept by name, so a tool it names comes back
when the notebook defines it again (``adopt_tools`` registers it: after each cell, and before
each turn). ``%chaz agents`` says where each agent comes from and which of its tools this
kernel does not define yet.
"""

from __future__ import annotations

import contextlib
from typing import Any

from IPython.core.error import UsageError

from .args import table
from .host import MagicsHost


def adopt_tools(shell: Any, server: Any) -> list[str]:
    """Register the ``@chaz_nb.tool`` objects of the namespace that an agent names by name and
    the server lacks (a kept agent's tools, defined again after a restart); their names."""
    from ...engine.tools import Tool

    ns = getattr(shell, "user_ns", None) or {}
    adopted: list[str] = []
    for name in list(server.agents):
        for tool_name in server.roster.missing_tools(name, lambda t: t in server.tools):
            obj = ns.get(tool_name)
            if isinstance(obj, Tool) and obj.name == tool_name and tool_name not in server.tools:
                server.tools.register(obj)
                adopted.append(tool_name)
    return adopted


def after_cell(shell: Any) -> Any:
    """The ``post_run_cell`` callback: a kept agent's tool is registered once a cell defines it."""

    def callback(*_: Any) -> None:
        from ..controller import loaded_state

        state = loaded_state()
        if state is None:
            return
        with contextlib.suppress(Exception):  # a cell hook must never fail the user's cell
            adopt_tools(shell, state.server)

    return callback


def masked_api_base(url: str) -> str:
    """An api_base as shown: never its ``user:password@``."""
    from ...core.redaction import redact

    head, sep, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    if sep and "@" in host:
        rest = "[REDACTED]@" + rest.split("@", 1)[1]
    return redact(head + sep + rest)


def tools_cell(agent: Any) -> str:
    from ...server import SAFE_DEFAULT_TOOLS

    if agent.tools is None or "*" in agent.tools:
        return "*"
    if list(agent.tools) == list(SAFE_DEFAULT_TOOLS):
        return "default"
    return ",".join(agent.tools) or "-"


class AgentCommands(MagicsHost):
    """Mixin of ChazMagics: ``_cmd_agents`` and ``--forget``."""

    def _cmd_agents(self, rest: str) -> None:
        if rest:
            raise UsageError("%chaz agents takes no arguments")
        state = self.state
        server = state.server
        server.refresh_agents()  # a shared store: what it defines now
        adopt_tools(state.shell, server)
        roster = server.roster
        rows = [("agent", "model", "tools", "session", "from", "tools not defined here yet")]
        for name in sorted(server.agents):
            a = server.agents[name]
            session = server.current_session_id(name)
            missing = roster.missing_tools(name, lambda t: t in server.tools)
            rows.append(
                (
                    name,
                    a.model,
                    tools_cell(a),
                    "-" if session is None else str(session),
                    roster.origin.get(name, "this kernel"),
                    ", ".join(missing) or "-",
                )
            )
        print(table(rows))
        if any(roster.missing_tools(n, lambda t: t in server.tools) for n in server.agents):
            print("a tool not defined yet: run the cell with its @chaz_nb.tool function; the agent gets it then")
        for line in server.held_agents().values():  # another kernel's change, held here
            print(line)
        book = roster.book
        for name, why in sorted((book.unreadable if book is not None else {}).items()):
            print(f"stored agent {name} is not loaded: {why} (define it again, or %chaz agent {name} --forget)")

    def _accept_agent(self, name: str, others: bool) -> None:
        from ...errors import AgentError

        if others:
            raise UsageError(f"%chaz agent {name} --accept takes no other options")
        try:
            agent = self.state.server.accept_agent(name)
        except AgentError as exc:
            raise UsageError(f"%chaz agent {name} --accept: {exc}") from None
        from .define import describe_agent

        print(describe_agent(agent, self.state.server).replace(f"agent {name}:", f"agent {name} (accepted):", 1)
              + (f", api_base {masked_api_base(agent.api_base)}" if agent.api_base else ""))

    def _forget_agent(self, name: str, others: bool) -> None:
        from ...errors import AgentError, StoreError

        if others:
            raise UsageError(f"%chaz agent {name} --forget takes no other options")
        server = self.state.server
        try:
            done = server.forget_agent(name)
        except (AgentError, StoreError) as exc:
            raise UsageError(f"%chaz agent {name} --forget: {exc}") from None
        print(f"agent {name}: {done}; its sessions stay (%chaz sessions)")
