"""``%chaz mcp add|list|remove`` and ``%%chaz mcp NAME`` (TOML): MCP tool servers from a cell.

``%chaz mcp add NAME -- COMMAND ARGS...`` (stdio: everything after ``--`` is the command, not
parsed) or ``%chaz mcp add NAME --url URL`` (Streamable HTTP). Adding returns at once: the
server starts in the background (chaz_nb/server/mcp.py) and ``%chaz mcp list`` shows when it
is ready, or why it failed. ``--wait`` waits for it to settle (notebooks run top to bottom).
"""

from __future__ import annotations

import sys
import uuid
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ...core.controls import shown_controls
from ...engine.tools import APPROVAL_MODES, RISK_LEVELS
from ...errors import ServerError
from .args import CommandParser, split_words, table, toml_error, usage_of
from .host import MagicsHost

if TYPE_CHECKING:  # pragma: no cover
    from ...server import McpServer

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MCP_KEYS = ("command", "url", "env", "headers", "risk", "approval", "tool_approval", "timeout", "start_timeout",
            "sensitive_params", "cwd")


def _add_parser() -> CommandParser:
    p = CommandParser("mcp add")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--url", metavar="URL", help="a Streamable HTTP server")
    p.add_argument("--env", metavar="K=V", action="append", default=[], help="environment of the process")
    p.add_argument("--header", metavar="K=V", action="append", default=[],
                   help="an HTTP header of a --url server (Authorization=...); its value is never shown")
    p.add_argument("--risk", choices=RISK_LEVELS, default="medium")
    p.add_argument("--approval", choices=APPROVAL_MODES, default="unless_auto_approved")
    p.add_argument("--tool-approval", metavar="TOOL=POLICY", action="append", default=[],
                   help="one tool's approval (the server's own tool name)")
    p.add_argument("--sensitive", metavar="P1,P2", default="", help="parameters masked in the log")
    p.add_argument("--timeout", metavar="S", type=float, default=60.0, help="seconds per call")
    p.add_argument("--start-timeout", metavar="S", type=float, default=30.0)
    p.add_argument("--wait", action="store_true", help="wait until it is ready or failed")
    p.usage = usage_of(p) + " [-- COMMAND ARGS...]"
    return p


MCP_USAGE = f"usage: %chaz {_add_parser().usage} | mcp list | mcp remove NAME"


def _env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"%chaz mcp add: --env takes K=V, got {item!r}")
        env[key] = value
    return env


def _headers(items: list[str]) -> dict[str, str]:
    headers = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value:
            # the value may be a credential: never echoed back
            raise UsageError("%chaz mcp add: --header takes NAME=VALUE, e.g. --header \"Authorization=Bearer $TOKEN\"")
        headers[key.strip()] = value
    return headers


def _tool_approval(items: list[str]) -> dict[str, str]:
    modes = ", ".join(APPROVAL_MODES)
    policies = {}
    for item in items:
        tool, eq, policy = item.partition("=")
        if not eq or not tool or policy not in APPROVAL_MODES:
            raise UsageError(f"%chaz mcp add: --tool-approval takes TOOL=POLICY with POLICY one of {modes}, "
                             f"got {item!r}")
        policies[tool] = policy
    return policies


def _sensitive(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",")] if value else []
    if any(not n for n in names):
        raise UsageError(f"%chaz mcp add: --sensitive takes parameter names separated by commas, got {value!r}")
    return names


class McpCommands(MagicsHost):
    """The ``%chaz mcp`` sub-commands (a mixin of ChazMagics)."""


    def _cmd_mcp(self, rest: str) -> None:
        head, _, tail = rest.strip().partition(" ")
        if head == "add":
            return self._mcp_add(tail)
        if head == "list" and not tail.strip():
            return self._mcp_list()
        if head == "remove" and len(split_words(tail)) == 1:
            return self._mcp_remove(tail.strip())
        raise UsageError(MCP_USAGE)

    def _mcp_add(self, rest: str) -> None:
        before, dashes, command = f" {rest} ".partition(" -- ")
        words = split_words(before, MCP_USAGE)
        args = _add_parser().parse_args(words)
        cmd = split_words(command, MCP_USAGE) if dashes else []
        if bool(cmd) == bool(args.url):
            raise UsageError(f"%chaz mcp add {args.name}: give -- COMMAND ARGS... or --url URL; {MCP_USAGE}")
        if args.header and not args.url:
            raise UsageError(f"%chaz mcp add {args.name}: --header is for a --url server (a process takes --env)")
        options: dict[str, Any] = {
            "env": _env(args.env), "risk": args.risk, "approval": args.approval,
            "timeout": args.timeout, "start_timeout": args.start_timeout,
            "tool_approval": _tool_approval(args.tool_approval), "sensitive_params": _sensitive(args.sensitive),
        }
        if args.header:
            options["headers"] = _headers(args.header)
        self._mcp_start(args.name, cmd or None, args.url, options, wait=args.wait)

    def _mcp_cell(self, rest: str, body: str) -> None:
        """``%%chaz mcp NAME [--wait]``: the options as TOML (``command = ["python", "-m", ...]``)."""
        words = split_words(rest, MCP_USAGE)
        wait = "--wait" in words
        words = [w for w in words if w != "--wait"]
        if len(words) != 1:
            raise UsageError("%%chaz mcp NAME [--wait]: the server's options are the TOML body")
        try:
            spec = tomllib.loads(body)
        except tomllib.TOMLDecodeError as exc:
            raise toml_error(exc, f"%%chaz mcp {words[0]}") from None
        unknown = sorted(set(spec) - set(MCP_KEYS))
        if unknown:
            raise UsageError(f"%%chaz mcp: unknown key(s) {', '.join(unknown)}; keys: {', '.join(MCP_KEYS)}")
        command, url = spec.pop("command", None), spec.pop("url", None)
        self._mcp_start(words[0], command, url, spec, wait=wait)

    def _mcp_start(self, name: str, command: list[str] | None, url: str | None, options: dict[str, Any],
                   *, wait: bool) -> None:
        server = self.state.server
        try:
            conn = server.add_mcp_server(name, command=command, url=url, **options)
        except (ServerError, TypeError) as exc:
            raise UsageError(f"%chaz mcp add {name}: {exc}") from None
        if not wait:
            _show_in_this_cell(conn)
            return
        from ..kernel_loop import run_sync

        run_sync(server.mcp.wait_settled(name), self.state.loop)
        print(_one_line(conn.status()))

    def _mcp_list(self) -> None:
        servers = self.state.server.mcp_servers()
        if not servers:
            print("no MCP servers (%chaz mcp add NAME -- COMMAND ARGS... adds one)")
            return
        rows = [("name", "state", "tools", "target")]
        rows += [(s["name"], s["state"], str(len(s["tools"])), s["target"]) for s in servers]
        print(table(rows))
        for s in servers:
            if s["state"] == "ready":
                print(f"{s['name']}: {', '.join(s['tools']) or 'no tools'}")
            elif s["reason"]:
                print(f"{s['name']}: {s['state']}: {s['reason']}")

    def _mcp_remove(self, name: str) -> None:
        server = self.state.server
        from ..kernel_loop import run_sync

        try:
            run_sync(server.remove_mcp_server(name), self.state.loop)
        except ServerError as exc:
            raise UsageError(f"%chaz mcp remove: {exc}") from None
        print(f"MCP server {name}: removed")


def _show_in_this_cell(conn: McpServer) -> None:
    """The server's line in the cell that added it, updated when it is ready or has failed.

    Through a display_id, so the line is rewritten in this cell's output even when the
    server settles after the cell ended (stdout would land in whichever cell is running).
    """
    from IPython.display import display, update_display

    display_id = f"chaz-mcp-{conn.name}-{uuid.uuid4().hex[:8]}"
    line = f"MCP server {conn.name}: starting ({conn.target}); %chaz mcp list shows when it is ready"
    display({"text/plain": line}, raw=True, display_id=display_id)

    def settled(c: McpServer) -> None:
        update_display({"text/plain": _one_line(c.status())}, raw=True, display_id=display_id)

    conn.listeners.append(settled)


def _one_line(status: dict[str, Any]) -> str:
    """One line for a server's state (shown in its cell: its reason quotes the server's stderr,
    whose ANSI and bidi controls are shown as text)."""
    if status["state"] == "ready":
        text = f"MCP server {status['name']}: ready, {len(status['tools'])} tools: {', '.join(status['tools'])}"
    else:
        text = f"MCP server {status['name']}: {status['state']}: {status['reason']}"
    return shown_controls(text)
