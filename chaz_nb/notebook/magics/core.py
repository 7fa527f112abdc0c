"""``%chaz`` and ``%%chaz``: talk to agents, define them, read the log.

Every bad input raises IPython's ``UsageError``, which IPython shows as one line (no
traceback) and which marks the cell as failed, so "Run All" stops there.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
import textwrap
from dataclasses import fields
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ...core.controls import shown_controls, showing_controls
from ...errors import EntryTooLarge
from .agents import AgentCommands, adopt_tools
from .approvals import APPROVE_USAGE, DENY_USAGE, PENDING_USAGE, ApprovalCommands
from .args import CommandParser, HelpShown, split_words, table, usage_of
from .turns import check_agent, open_view, parse_session, send_turn, wait_session
from ..views.session import DEFAULT_PAGE as DEFAULT_LOG_LIMIT
from .mcp import MCP_USAGE, McpCommands
from .multi import ROOM_USAGE, SCHEDULE_USAGE, MultiAgentCommands
from .sql import AUDIT_USAGE, SQL_USAGE, SqlCommands
from .stop import STOP_USAGE, StopCommands
from .fork import COMPARE_USAGE, FORK_USAGE, REPLAY_USAGE, ForkCommands, forked_note

if TYPE_CHECKING:  # pragma: no cover
    from ...server import Agent, Server
    from ..controller import ExtensionState

USE_USAGE = "usage: %chaz use SESSION"
CELL_USAGE = (
    "usage: %%chaz @NAME [--no-wait] | %%chaz directive @NAME | %%chaz agent NAME (TOML body) "
    "| %%chaz sql [options] (SQL body) | %%chaz mcp NAME (TOML body) "
    "| %%chaz approve ID [--code] (edited arguments as JSON, or the code, as body)"
)

_HELP = """\
%chaz @NAME text            send a Message to NAME's current session and wait for the reply
%chaz --no-wait @NAME text  send and return at once (the run goes on; see %chaz wait)
%chaz @NAME --with a,b text attach the variables' descriptions (under NAME's data policy) to the Message
%chaz directive @NAME text  write a Directive (a task) instead of a Message
%%chaz @NAME                the cell body is the message
{agent}
                            without --tools: the built-in session tools and the kernel's (kernel__*, kernel__run
                            asks first), not your own tools; --tools '*' gives every tool
                            --data schema|sample|full, --data-rows N: what the kernel's tools send of your data
%%chaz agent NAME           the same fields as a TOML body (model = "...", tools = ["a", "b"], ...)
%chaz agents                the agents here: where each comes from, the tools they name not defined yet
%chaz agent NAME --forget   remove NAME from this kernel and the store (agents are kept with the sessions)
%chaz sessions              the sessions in the database
%chaz log [SESSION] [--limit N] [--before SEQ] [--all]
                            a session's transcript (SESSION: an id or @NAME; default: the last one):
                            its newest 50 entries (--limit N), those before seq SEQ, or --all of them
%chaz new @NAME             start a fresh session with NAME
%chaz use SESSION           make SESSION its agent's current one here (e.g. one another kernel serves)
%chaz wait [SESSION]        wait for a session's run to finish
%chaz stop [SESSION|all]    stop a run (and its spawned children): tools cancelled, approvals closed, Ack cancelled
%chaz pending               tool calls waiting for your approval
%chaz approve ID|last|all   approve (--all-calls: every call to that tool in the session)
%chaz approve ID --args JSON   approve with edited arguments (checked against the tool's schema)
%chaz approve ID --edit     a new cell below holds the arguments (a code call's code) to edit and run
%chaz deny ID|last [--reason TEXT...]   deny; the agent is told, with the reason (the rest of the line)
%chaz sql [-o NAME] QUERY   read-only SQL on the session database (views: tool_calls, runs, approvals, messages)
%%chaz sql [-o NAME [--relation]] [--db PATH] [--max-rows N]   the cell body is the query
%chaz audit [SESSION]       a live table of tool calls with filters and totals
%chaz schedule add @NAME "CRON|every 30s|at ISO|in 10m" prompt... [--fresh|--session ID] [--max-fires N]
                            wake NAME with the prompt on a trigger (cron: UTC, 5 fields or 6 with seconds)
%chaz schedule list|pause ID|resume ID|remove ID   the schedules (kept in the database)
%chaz room NAME @a @b [--host a] [--budget N]   a session shared by agents; it becomes the current room:
                            %chaz @a text then speaks there, and the agents @mentioned take turns
%chaz room [NAME]           list the rooms / enter room NAME;  %chaz room --leave  leaves the current room
%chaz fork SESSION [--at SEQ] [--agent NAME] [--model M] [--system TEXT] [--say TEXT] [--rerun] [--replay recorded|live]
                            a new session starting with SESSION's log up to SEQ (another model, prompt, message)
%chaz replay SESSION --model M [--agent NAME]   every trigger of SESSION again in a new branch; tools from the recording
%chaz compare A B           two branches side by side from their fork point
%chaz compact [SESSION]     summarize the conversation into a Summary: later runs start from it
%chaz mcp add NAME -- COMMAND ARGS...   start an MCP tool server (or --url URL); its tools are NAME__TOOL
                            options: --env K=V --risk R --approval MODE --timeout S --start-timeout S --wait
%chaz mcp list | mcp remove NAME   the MCP servers (state, tools, why one failed) / stop one
%%chaz mcp NAME             the same options as TOML (command = ["python", "-m", "mcp_server_time"])
%chaz config [db=PATH] [model=M]   show or change the database / the default agent's model
await chaz_nb.ask("@NAME text")    the async form; returns the reply entry
Tools: decorate a function with @chaz_nb.tool and list its name in --tools.
Interrupting a wait stops waiting only: the run goes on and every entry is kept."""

AGENT_FIELDS = ("model", "system", "tools", "max_depth", "max_iterations", "script")
_GLOB = re.compile(r"[*?\[]")
_TOOL_PATTERN = re.compile(r"[A-Za-z0-9_*?\[\]!-]{1,64}")
#: ``@NAME``, and a fork's variant of an agent, ``@analyst@gpt-4o`` (server/fork.py)
_NAME = re.compile(r"@([A-Za-z][A-Za-z0-9_-]*(?:@[A-Za-z0-9_.-]+)?)")


def _state() -> ExtensionState:
    from ...errors import NotLoadedError
    from ..controller import current_state

    try:
        return current_state()
    except NotLoadedError as exc:
        raise UsageError(str(exc)) from None


# ------------------------------------------------------------------ parsing
def _agent_parser() -> CommandParser:
    p = CommandParser(prog="agent")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--model", metavar="M")
    p.add_argument("--system", metavar="S")
    p.add_argument("--tools", metavar="a,b",
                   help="comma-separated tool names (from this notebook) or globs; default: the session tools and "
                        "the kernel's (kernel__*), not your own; '*': every tool")
    p.add_argument("--auto-approve", dest="auto_approve", metavar="a,b",
                   help="comma-separated tools (or globs) this agent may call without asking")
    p.add_argument("--approval-timeout", type=float, dest="approval_timeout", metavar="S",
                   help="seconds an approval request waits before it is denied")
    p.add_argument("--max-depth", type=int, dest="max_depth", metavar="N")
    p.add_argument("--max-iterations", type=int, dest="max_iterations", metavar="N")
    p.add_argument("--max-spawns", type=int, dest="max_spawns", metavar="N",
                   help="spawns in the whole run tree this agent starts (default 50)")
    p.add_argument("--max-model-calls", type=int, dest="max_model_calls", metavar="N",
                   help="model calls in the whole run tree this agent starts (default 500)")
    p.add_argument("--context-tokens", type=int, dest="context_tokens", metavar="N",
                   help="token budget of a run's context, newest first from the latest Summary (default 32000)")
    p.add_argument("--max-tool-output", type=int, dest="max_tool_output", metavar="N",
                   help="characters of one tool result the model is sent; the log keeps it whole (default 50000)")
    p.add_argument("--data", choices=("schema", "sample", "full"),
                   help="what the kernel's tools send of the notebook's values (default sample)")
    p.add_argument("--data-rows", type=int, dest="data_rows", metavar="N",
                   help="rows the sample policy sends of a frame or query result (default 10)")
    p.add_argument("--code-timeout", type=float, dest="code_timeout", metavar="S",
                   help="seconds kernel__run code may run before it is interrupted (default 60)")
    p.add_argument("--script", metavar="JSON", help="JSON list of steps for the chaz/script model")
    p.add_argument("--api-base", dest="api_base", metavar="URL",
                   help="the model server's URL (keys come from the environment)")
    p.add_argument("--model-timeout", type=float, dest="model_timeout", metavar="S",
                   help="seconds one model call may take (default 600)")
    p.add_argument("--max-retries", type=int, dest="max_retries", metavar="N",
                   help="retries of a rate-limited, failed or dropped model call (default 2)")
    p.add_argument("--no-stream", dest="stream", action="store_const", const=False, default=None,
                   help="ask the model for whole replies (default: stream, the view shows the reply as it is written)")
    p.add_argument("--forget", action="store_true",
                   help="remove NAME from this kernel and the store (its sessions stay)")
    p.usage = "%chaz " + usage_of(p)
    return p


def _log_parser() -> CommandParser:
    p = CommandParser(prog="log")
    p.add_argument("session", nargs="?", default="", metavar="SESSION")
    p.add_argument("--limit", metavar="N", help=f"entries to show (default {DEFAULT_LOG_LIMIT}): the newest ones")
    p.add_argument("--before", metavar="SEQ", help="show the entries before seq SEQ")
    p.add_argument("--all", action="store_true", help="the whole log")
    p.usage = "%chaz " + usage_of(p)
    return p


def _positive(value: str | None, flag: str, usage: str | None) -> int | None:
    """``--limit N`` / ``--before SEQ``: a whole number >= 1, else one UsageError line."""
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"%chaz log: {flag} takes a whole number of 1 or more, not {value!r}; usage: {usage}")
    return n


def _forms(usage: str) -> str:
    return usage[len("usage: %chaz "):]


AGENT_FORM = usage_of(_agent_parser())
#: the full usage: each sub-command's own usage text, so none can fall behind its parser
USAGE = "usage: %chaz " + " | ".join(
    [
        "@NAME text",
        "--no-wait @NAME text",
        "directive @NAME text",
        AGENT_FORM,
        "agents",
        "sessions",
        usage_of(_log_parser()),
        "new @NAME",
        _forms(USE_USAGE),
        "wait [SESSION]",
        _forms(STOP_USAGE),
        _forms(PENDING_USAGE),
        _forms(APPROVE_USAGE),
        _forms(DENY_USAGE),
        _forms(SQL_USAGE),
        _forms(MCP_USAGE),
        _forms(AUDIT_USAGE),
        _forms(SCHEDULE_USAGE),
        _forms(ROOM_USAGE),
        _forms(FORK_USAGE),
        _forms(REPLAY_USAGE),
        _forms(COMPARE_USAGE),
        "compact [SESSION]",
        "config [db=PATH] [model=M]",
        "help",
    ]
)
HELP = _HELP.replace(
    "{agent}",
    # never cut a flag at its hyphen ("--model-" / "timeout")
    textwrap.fill(AGENT_FORM, width=100, initial_indent="%chaz ", subsequent_indent=" " * 28,
                  break_on_hyphens=False, break_long_words=False),
)


def parse_message_line(line: str, where: str = "%chaz") -> tuple[str, str, bool]:
    """``[--no-wait] @NAME [--no-wait] text`` -> (name, text, wait). The text is kept verbatim."""
    rest = line.strip()
    wait = True
    name = None
    while rest:
        m = re.match(r"(\S+)(\s+|$)", rest)
        assert m is not None
        token = m.group(1)
        if token == "--no-wait":
            wait = False
        elif token.startswith("--"):
            raise UsageError(f"{where}: unknown option {token}; the only option here is --no-wait")
        elif name is None and token.startswith("@"):
            nm = _NAME.fullmatch(token)
            if nm is None:
                raise UsageError(f"{where}: {token} is not an agent name (@ then letters, digits, _ or -)")
            name = nm.group(1)
        else:
            break
        rest = rest[m.end():]
    if name is None:
        raise UsageError(f"{where}: say which agent, e.g. {where} @assistant hello (%chaz help shows the usage)")
    return name, rest.strip(), wait


def take_with(line: str, where: str = "%chaz") -> tuple[str, list[str] | None]:
    """``--with a,b`` among the options before the text -> (the line without it, the names).

    Only the leading options are read: ``--with`` inside the message text stays text."""
    rest = line.strip()
    kept: list[str] = []
    names: list[str] | None = None
    while rest:
        m = re.match(r"(\S+)(\s+|$)", rest)
        assert m is not None
        token = m.group(1)
        if token == "--with":
            rest = rest[m.end():]
            value = re.match(r"(\S+)(\s+|$)", rest)
            if value is None:
                raise UsageError(f"{where}: --with needs variable names, e.g. --with sales,orders")
            names = [n.strip() for n in value.group(1).split(",") if n.strip()]
            bad = [n for n in names if not n.isidentifier()]
            if bad or not names:
                raise UsageError(f"{where}: --with takes variable names separated by commas, not {value.group(1)!r}")
            rest = rest[value.end():]
            continue
        if not (token.startswith("--") or (token.startswith("@") and not any(k.startswith("@") for k in kept))):
            break
        kept.append(token)
        rest = rest[m.end():]
    return " ".join([*kept, rest]).strip(), names


def parse_address(text: str, server: Server | None = None) -> tuple[str, str]:
    """``"@NAME text"`` -> (NAME, text), checked against the server's agents."""
    name, body, _ = parse_message_line(text, where="chaz_nb.ask")
    if server is not None:
        check_agent(server, name)
    if not body:
        raise UsageError(f"chaz_nb.ask: nothing to send to @{name}")
    return name, body


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
        raise UsageError(f"{where}: bad TOML: {exc}") from None
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
    from ...server import DEFAULT_DATA_ROWS, KERNEL_DEFAULT_TOOLS, SAFE_DEFAULT_TOOLS, SESSION_TOOLS

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
    extra = f", max depth {agent.max_depth}" if agent.max_depth is not None else ""
    if getattr(agent, "auto_approve", None):
        extra += f", auto-approves {', '.join(agent.auto_approve)}"
    left_out = getattr(getattr(server, "roster", None), "left_out", {}).get(agent.name)
    if left_out:  # kept with the sessions, but never a key
        extra += f" (not stored: {', '.join(left_out)}; keys come from the environment)"
    return f"agent {agent.name}: {agent.model}, {tools}{extra}"


# ------------------------------------------------------------------ turns


# ------------------------------------------------------------------ the magics
@magics_class
class ChazMagics(AgentCommands, ApprovalCommands, SqlCommands, MultiAgentCommands, McpCommands, StopCommands,
                 ForkCommands, Magics):
    """``%chaz`` / ``%%chaz``.

    Sub-command ``%chaz NAME ...`` is the method ``_cmd_NAME``; the approval, SQL/audit and
    multi-agent sub-commands live in their own modules as mixins.
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
        if not line:
            raise UsageError(USAGE)
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
        handle, view = send_turn(state, name, text, directive=directive, attach=attach)
        if wait:
            wait_session(state, view.session_id, handle, view)
        return

    def _cmd_directive(self, rest: str) -> None:
        return self._message(rest, directive=True)

    # -- agents
    def _cmd_agent(self, rest: str) -> None:
        self._define_agent_from(rest, body=None)

    def _agent_cell(self, rest: str, body: str) -> None:
        self._define_agent_from(rest, body=body)

    def _define_agent_from(self, rest: str, body: str | None) -> None:
        """``%chaz agent NAME --flags`` or ``%%chaz agent NAME`` (TOML body; flags win)."""
        state = self.state
        try:
            args = _agent_parser().parse_args(split_words(rest))
        except HelpShown:
            return
        where = f"%chaz agent {args.name}" if body is None else f"%%chaz agent {args.name}"
        if args.forget:
            others = body is not None or any(
                v not in (None, False) for k, v in vars(args).items() if k not in ("name", "forget"))
            self._forget_agent(args.name, others)
            return
        spec: dict[str, Any] = {} if body is None else parse_toml(body, where)
        for key in ("model", "system", "max_depth", "max_iterations", "approval_timeout", "max_spawns",
                    "max_model_calls", "api_base", "model_timeout", "max_retries", "stream", "context_tokens",
                    "max_tool_output", "data", "data_rows", "code_timeout"):
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

    # -- sessions
    def _cmd_sessions(self, rest: str) -> None:
        if rest:
            raise UsageError("%chaz sessions takes no arguments")
        server = self.state.server
        counts = dict(server.store.execute("SELECT session_id, count(*) FROM entries GROUP BY session_id"))
        sessions = server.store.sessions()
        forks = any(s.forked_from is not None for s in sessions)
        rows = [("id", "agent", "kind", "parent", "depth", "entries", "status") + (("forked",) if forks else ())]
        for s, level in fork_tree(sessions):
            rows.append(
                (
                    "  " * level + ("└ " if level else "") + str(s.id),
                    s.agent,
                    s.kind,
                    "-" if s.parent_id is None else str(s.parent_id),
                    str(s.depth),
                    str(counts.get(s.id, 0)),
                    server.session_status(s.id),
                ) + ((forked_note(s) or "-",) if forks else ())
            )
        if len(rows) == 1:
            print("no sessions yet; talk to an agent: %chaz @assistant hello")
            return
        print(table(rows))

    def _cmd_log(self, rest: str) -> None:
        parser = _log_parser()
        args = parser.parse_args(split_words(rest, parser.usage))
        limit = _positive(args.limit, "--limit", parser.usage)
        before = _positive(args.before, "--before", parser.usage)
        if args.all and (limit is not None or before is not None):
            raise UsageError(f"%chaz log: --all shows the whole log, so it takes no --limit or --before; "
                             f"usage: {parser.usage}")
        state = self.state
        session = parse_session(state.server, args.session, state.last_session, "log")
        page = None if args.all else (limit or DEFAULT_LOG_LIMIT)
        # a window that ends before the newest entry is history: it does not follow new writes
        follow = False if before is not None else None
        open_view(state, session, page=page, before_seq=before, follow=follow).display()

    def _cmd_new(self, rest: str) -> None:
        state = self.state
        m = _NAME.fullmatch(rest.strip())
        if m is None:
            raise UsageError("usage: %chaz new @NAME")
        check_agent(state.server, m.group(1))
        session = state.server.new_session(m.group(1))
        state.last_session = session
        print(f"session {session}: a fresh session with @{m.group(1)}")

    def _cmd_use(self, rest: str) -> None:
        """``%chaz use SESSION``: the session becomes its agent's current one in this kernel, so
        ``%chaz @NAME`` writes there (on PostgreSQL: wakes the kernel that serves it)."""
        from ...errors import ServerError, StoreError

        state = self.state
        words = split_words(rest, USE_USAGE)
        if len(words) != 1:
            raise UsageError(f"%chaz use: say which session; {USE_USAGE}")
        try:
            sid = int(words[0])
        except ValueError:
            raise UsageError(f"%chaz use: SESSION is a session id, not {words[0]!r}; {USE_USAGE}") from None
        try:
            info = state.server.use_session(sid)
        except StoreError:
            raise UsageError(f"%chaz use: there is no session {sid}; see %chaz sessions") from None
        except ServerError as exc:
            raise UsageError(f"%chaz use: {exc}") from None
        state.last_session = sid
        served = state.server.session_status(sid)
        where = "" if info.agent in state.server.agents else f" (@{info.agent} is not defined in this kernel)"
        print(f"session {sid} is @{info.agent}'s current session here ({served}): "
              f"%chaz @{info.agent} TEXT writes there{where}")

    def _cmd_wait(self, rest: str) -> None:

        state = self.state
        server = state.server
        session = parse_session(server, rest, state.last_session, "wait")
        status = server.session_status(session)  # (a run another kernel serves counts too)
        if status == "idle":
            print(f"session {session} is {status}")
            return
        view = open_view(state, session, after_seq=_last_trigger_seq(server, session), follow=True)
        view.display()
        wait_session(state, session, None, view)

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
                try:
                    print(state.reopen(value))
                except Exception as exc:  # noqa: BLE001 - any failure to open is one UsageError line
                    raise UsageError(f"%chaz config db={value}: {str(exc).splitlines()[0]}") from None
            elif key == "model":
                spec = _agent_spec(state.server.agents[DEFAULT_AGENT], model=value)
                define_agent(state, DEFAULT_AGENT, spec, "%chaz config")
                print(describe_agent(state.server.agents[DEFAULT_AGENT], state.server))
            else:
                raise UsageError(f"%chaz config: unknown key {key!r}; keys: db, model")

    def _cmd_help(self, rest: str) -> None:
        print(HELP)


def fork_tree(sessions: list[Any]) -> list[tuple[Any, int]]:
    """Sessions in id order, each fork right under the session it was forked from (indented)."""
    ids = {s.id for s in sessions}
    children: dict[int | None, list[Any]] = {}
    for s in sessions:
        source = s.forked_from if s.forked_from in ids else None
        children.setdefault(source, []).append(s)
    out: list[tuple[Any, int]] = []
    stack = [(s, 0) for s in reversed(children.get(None, []))]
    while stack:
        s, level = stack.pop()
        out.append((s, level))
        stack.extend((c, level + 1) for c in reversed(children.get(s.id, [])))
    return out


def _agent_spec(agent: Agent, **changes: Any) -> dict[str, Any]:
    spec = {f.name: getattr(agent, f.name) for f in fields(agent) if f.name != "name"}
    spec.update(changes)
    return spec


def _last_trigger_seq(server: Server, session: int) -> int:
    """The seq just before the session's latest user Message or Directive (0 if none)."""
    return server.last_trigger_seq(session)
