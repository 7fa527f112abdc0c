"""``%chaz`` and ``%%chaz``: talk to agents, define them, read the log.

Every bad input raises IPython's ``UsageError``, which IPython shows as one line (no
traceback) and which marks the cell as failed, so "Run All" stops there.
"""

from __future__ import annotations

import difflib
import os
import re
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ...core.controls import shown_controls, showing_controls
from ...errors import EntryTooLarge
from .address import parse_address, parse_message_line, take_with
from .approvals import ApprovalCommands
from .cells import CellsCommands
from .define import DefineCommands, agent_spec, define_agent, describe_agent
from .turns import send_turn, wait_session
from .mcp import McpCommands
from .multi import MultiAgentCommands
from .sessions import SessionCommands
from .sql import SqlCommands
from .stop import StopCommands
from .team import TeamCommands
from .fork import ForkCommands
from .undo import UndoCommands
from .args import split_words
from .usage import CELL_USAGE, HELP, SHORT_USAGE, USAGE

if TYPE_CHECKING:  # pragma: no cover
    from ..controller import ExtensionState

#: what other modules and tests import from here (the names moved to the modules beside it)
__all__ = ["HELP", "USAGE", "ChazMagics", "parse_address", "parse_message_line", "send_turn"]


def _state() -> ExtensionState:
    from ...errors import NotLoadedError
    from ..controller import current_state

    try:
        return current_state()
    except NotLoadedError as exc:
        raise UsageError(str(exc)) from None


def _refuse_missing_directory(value: str) -> None:
    """``config db=PATH`` whose directory does not exist: a typo would open a new, empty store
    (the store makes missing directories for the default path only), so it is refused."""
    if value == ":memory:" or value.startswith(("postgresql://", "postgres://")):
        return
    parent = os.path.dirname(os.path.abspath(os.path.expanduser(value)))
    if not os.path.isdir(parent):
        raise UsageError(f"%chaz config db={value}: the directory {parent} does not exist; check the path, "
                         f"or create the directory first (!mkdir -p {parent})")


@magics_class
class ChazMagics(DefineCommands, SessionCommands, ApprovalCommands, SqlCommands, MultiAgentCommands,
                 McpCommands, StopCommands, ForkCommands, UndoCommands,
                 TeamCommands, CellsCommands, Magics):
    """``%chaz`` / ``%%chaz``.

    Sub-command ``%chaz NAME ...`` is the method ``_cmd_NAME``; the agent definition, session,
    approval, SQL/audit and multi-agent sub-commands live in their own modules as mixins.
    """

    def __init__(self, shell: Any, state_getter: Callable[[], ExtensionState] | None = None) -> None:
        super().__init__(shell)
        self._get_state = state_getter

    @property
    def state(self) -> ExtensionState:
        return _state()

    @line_cell_magic
    def chaz(self, line: str, cell: str | None = None) -> Any:
        """Talk to chaz_nb agents. %chaz help for the sub-commands."""
        # what a sub-command prints quotes agents, tools and MCP servers: their ANSI escapes and
        # bidi controls are shown as text (core/controls.py), in its one-line errors too
        with showing_controls():
            try:
                return self._chaz(line, cell)
            except EntryTooLarge as exc:  # a person's message over the limit: one line, nothing written
                raise UsageError(f"%chaz: {exc}") from None
            except UsageError as exc:
                shown = shown_controls(str(exc))
                if shown == str(exc):
                    raise
                raise UsageError(shown) from None

    def _chaz(self, line: str, cell: str | None) -> Any:
        if cell is not None:
            return self._cell(line, cell)
        line = line.strip()
        if not line:  # a person asking what to type: a few lines of output, not an error
            print(SHORT_USAGE)
            return None
        head, _, rest = line.partition(" ")
        if head.startswith("@") or head.startswith("--"):
            return self._message(line, directive=False)
        handler = getattr(self, f"_cmd_{head}", None) if re.fullmatch(r"[a-z]+", head) else None
        if handler is None:
            raise UsageError(f"unknown sub-command {head!r}; {self._nearest(head)} (%chaz help shows the usage)")
        return handler(rest.strip())

    def _nearest(self, head: str) -> str:
        """"did you mean agent?" (difflib over the sub-commands, then the agents' names)."""
        subs = sorted(name[len("_cmd_"):] for name in dir(type(self)) if name.startswith("_cmd_"))
        try:
            agents = sorted(self.state.server.agents)
        except UsageError:  # not loaded: the sub-command will say so
            agents = []
        if head in agents:
            return f"did you mean @{head}? (a message starts with @NAME)"
        for candidates, prefix in ((subs, ""), (agents, "@")):
            close = difflib.get_close_matches(head.lower(), candidates, n=1, cutoff=0.6)
            if close:
                return f"did you mean {prefix}{close[0]}?"
        return f"sub-commands: {', '.join(subs)}"

    # -- cell form
    def _cell(self, line: str, cell: str) -> Any:
        line = line.strip()
        head, _, rest = line.partition(" ")
        if head.startswith("@") or head.startswith("--"):
            line, attach = take_with(line, where="%%chaz")
            name, extra, wait = parse_message_line(line, where="%%chaz")
            if extra:
                raise UsageError("%%chaz: the message is the cell body; put only @NAME [--no-wait] on the line")
            return self._turn(name, cell.rstrip("\n"), wait=wait, directive=False, attach=attach)
        if head == "directive":
            name, extra, wait = parse_message_line(rest, where="%%chaz directive")
            if extra:
                raise UsageError("%%chaz directive: the directive is the cell body; put only @NAME on the line")
            return self._turn(name, cell.rstrip("\n"), wait=wait, directive=True)
        if head == "agent":
            return self._agent_cell(rest, cell)
        if head == "sql":
            return self._sql_cell(rest, cell)
        if head == "mcp":
            return self._mcp_cell(rest, cell)
        if head == "approve":
            return self._approve_cell(rest, cell)
        raise UsageError(f"unknown %%chaz form {head!r}; {CELL_USAGE}")

    # -- messages
    def _message(self, line: str, directive: bool) -> None:
        where = "%chaz directive" if directive else "%chaz"
        line, attach = take_with(line, where=where)
        name, text, wait = parse_message_line(line, where=where)
        if not text:
            raise UsageError(f"{where}: nothing to send to @{name}; write the text after @{name}")
        return self._turn(name, text, wait=wait, directive=directive, attach=attach)

    def _turn(self, name: str, text: str, *, wait: bool, directive: bool, attach: list[str] | None = None) -> None:
        state = self.state
        if attach is None and self._room_turn(name, text, wait=wait, directive=directive):
            return  # a room is current: NAME speaks there (magics_multi.py)
        handle, view = send_turn(state, name, text, directive=directive, attach=attach, waits=wait)
        if wait:
            wait_session(state, view.session_id, handle, view)
        return

    def _cmd_directive(self, rest: str) -> None:
        return self._message(rest, directive=True)

    def _cmd_config(self, rest: str) -> None:
        from ..controller import DEFAULT_AGENT

        state = self.state
        if not rest:
            print(state.db_line)
            return
        for item in split_words(rest):
            key, eq, value = item.partition("=")
            if not eq or not value:
                raise UsageError(f"%chaz config: expected key=value, got {item!r}; keys: db, model")
            if key == "db":
                if state.reopen is None:  # a state the extension did not build
                    raise UsageError("%chaz config db=PATH: run %load_ext chaz_nb first")
                _refuse_missing_directory(value)
                try:
                    print(state.reopen(value))
                except Exception as exc:  # noqa: BLE001 - any failure to open is one UsageError line
                    raise UsageError(f"%chaz config db={value}: {str(exc).splitlines()[0]}") from None
            elif key == "model":
                spec = agent_spec(state.server.agents[DEFAULT_AGENT], model=value)
                define_agent(state, DEFAULT_AGENT, spec, "%chaz config")
                print(describe_agent(state.server.agents[DEFAULT_AGENT], state.server))
            else:
                raise UsageError(f"%chaz config: unknown key {key!r}; keys: db, model")

    def _cmd_help(self, rest: str) -> None:
        print(HELP)


