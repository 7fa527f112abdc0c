"""MCP servers as a server part: connections to Model Context Protocol tool servers.

``McpServers.add`` returns at once: each server's connection lives in its own task on the
kernel loop (the official ``mcp`` SDK's ``stdio_client`` / ``streamable_http_client`` and
``ClientSession``), so starting one never blocks the loop or ``%load_ext``. States:

- ``starting``: the process is up (or the URL is being reached), ``initialize`` and
  ``tools/list`` are under way;
- ``ready``: its tools are in the registry as ``NAME__TOOL`` (engine/mcp_tools.py), so an
  agent scoped to ``NAME__*`` gets them from its next run;
- ``failed``: it exited, refused, or did not settle within ``start_timeout`` (or died
  later, seen at a call): the reason and the tail of its stderr are kept, its tools leave the
  registry, and nothing else (the kernel, other servers, runs) is affected;
- ``stopped``: removed, or the server stopped.

The whole connection (enter, serve, exit) runs inside one task because the SDK's transports
are anyio task groups, whose cancel scopes must be left in the task that entered them.
Closing a stdio connection ends the process (the SDK terminates its process group); a kernel
that dies without closing leaves the server reading EOF on its stdin, which ends it too.

The SDK (``mcp`` and its starlette/uvicorn/pydantic-settings tree, ~16 MB and ~1 s of import)
is imported by the first server's task, on a thread (``_sdk``): a kernel that never starts an
MCP server never holds it (issue 32, a lean kernel).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Literal
from collections.abc import Callable, Mapping, Sequence

import types as pytypes
from typing import TYPE_CHECKING

from ..core.entries import EntryType
from ..core.redaction import REDACTED, is_credential_field, is_secret_name, redact
from ..engine.mcp_tools import SEPARATOR, check_server_name, mcp_tool
from ..engine.runtime import ToolExecutor, ToolOutcome
from ..engine.tools import APPROVAL_MODES, RISK_LEVELS, ApprovalMode, RiskLevel, Tool
from ..errors import McpToolRefused, ServerError, ToolError
from .mcp_stderr import STDERR_TAIL, StderrTail
from .ports import Part, RunContext, ServerPort

if TYPE_CHECKING:  # pragma: no cover
    from mcp import ClientSession, types

log = logging.getLogger(__name__)

State = Literal["starting", "ready", "failed", "stopped"]
STOP_TIMEOUT = 10.0  # seconds one connection may take to close
MIN_MASKED = 4  # a credential shorter than this is not searched for in text (it would mask words)


@dataclass
class McpServer:
    """One configured MCP server and its connection state."""

    name: str
    command: list[str] | None = None
    url: str | None = None
    #: the process's environment (values never shown: they may be keys)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    #: HTTP headers of a URL server (``Authorization``...): their values are credentials,
    #: never shown nor stored (``status`` lists the names, errors have them masked)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    risk: RiskLevel = "medium"
    approval: ApprovalMode = "unless_auto_approved"
    #: per-tool approval override, by the server's own tool name
    tool_approval: dict[str, ApprovalMode] = field(default_factory=dict)
    #: seconds one call may take
    timeout: float = 60.0
    #: seconds to settle (initialize + tools/list) before it counts as failed
    start_timeout: float = 30.0
    sensitive_params: tuple[str, ...] = ()
    cwd: str | None = None
    state: State = "starting"
    reason: str | None = None
    tools: list[str] = field(default_factory=list)
    session: ClientSession | None = None
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    #: the process's stderr: its newest 64 KB (mcp_stderr.py)
    errlog: StderrTail | None = None
    #: the last HTTP error status a URL server answered (the SDK's error does not say it)
    http_error: str | None = None
    #: called with the server each time it becomes ready or failed (the cell that added it)
    listeners: list[Callable[[McpServer], None]] = field(default_factory=list, repr=False)

    def __repr__(self) -> str:
        # a cell's last line may be this server: its URL or command may hold credentials
        return f"McpServer(name={self.name!r}, state={self.state!r}, target={self.target!r}, tools={self.tools!r})"

    def names_server(self, pattern: str) -> bool:
        """Whether a tool pattern (``time__*``, ``time__get_current_time``) names this server."""
        return pattern.startswith(f"{self.name}{SEPARATOR}")

    def _notify(self) -> None:
        for listener in list(self.listeners):
            try:
                listener(self)
            except Exception:  # noqa: BLE001 - a display that fails must not break the server
                log.exception("MCP server %s: a state listener failed", self.name)

    @property
    def target(self) -> str:
        return self.mask(" ".join(self.command) if self.command else str(self.url))

    def status(self) -> dict[str, Any]:
        """What ``mcp_servers()`` and ``%chaz mcp list`` show (header values masked)."""
        return {
            "name": self.name, "state": self.state, "reason": self.reason, "target": self.target,
            "tools": list(self.tools), "approval": self.approval, "risk": self.risk, "timeout": self.timeout,
            "headers": {k: REDACTED for k in self.headers},
        }

    def secrets(self) -> list[str]:
        """Values never to show, longest first: the value of each credential header
        (Authorization, ``*-api-key``, ``*-token``, a name with KEY, SECRET, TOKEN, PASSWORD, or
        Cookie), whole and its credential after a scheme such as ``Bearer``; and the env values
        whose names look like keys. (``status`` hides every header value.)"""
        values = set()
        for name, value in self.headers.items():
            if not _credential_header(name):
                continue
            values.add(value.strip())
            scheme, _, credential = value.strip().partition(" ")
            if credential and scheme.isalpha():
                values.add(credential.strip())
        values.update(v for k, v in self.env.items() if is_secret_name(k))
        values.update(_url_secrets(self.url) if self.url else ())
        values.update(_command_secrets(self.command or []))
        return sorted((v for v in values if len(v) >= MIN_MASKED), key=len, reverse=True)

    def mask(self, text: str) -> str:
        """``text`` with this server's credentials and any key-like value replaced by [REDACTED]."""
        for value in self.secrets():
            text = text.replace(value, REDACTED)
        return redact(text)

    def stderr_tail(self) -> str:
        """The last ``STDERR_TAIL`` characters the server wrote to stderr, masked before the cut."""
        return "" if self.errlog is None else self.errlog.text(STDERR_TAIL, self.mask)


class McpServers(Part):
    """The MCP servers of one chaz_nb Server (``server.mcp``)."""

    name = "mcp"

    def __init__(self, port: ServerPort) -> None:
        self.port = port
        self._servers: dict[str, McpServer] = {}

    # ------------------------------------------------------------- public
    def add(
        self,
        name: str,
        command: Sequence[str] | None = None,
        url: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        risk: RiskLevel = "medium",
        approval: ApprovalMode = "unless_auto_approved",
        tool_approval: Mapping[str, ApprovalMode] | None = None,
        timeout: float = 60.0,
        start_timeout: float = 30.0,
        sensitive_params: Sequence[str] = (),
        cwd: str | None = None,
    ) -> McpServer:
        """Start connecting to a server in the background; its tools join when it is ready.

        A server of the same name is replaced (the old connection is closed first).
        """
        try:
            check_server_name(name)
        except ValueError as exc:
            raise ServerError(str(exc)) from None
        if (command is None) == (url is None):
            raise ServerError(f"MCP server {name}: give either command=[...] or url=..., not both or neither")
        for option, table in (("env", env), ("headers", headers), ("tool_approval", tool_approval)):
            if table is not None and not (
                isinstance(table, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in table.items())
            ):  # the values may be credentials: never quoted
                raise ServerError(f"MCP server {name}: {option} is a table of names to strings, "
                                  f"e.g. {option} = {{NAME = \"...\"}}")
        if headers and url is None:
            raise ServerError(f"MCP server {name}: headers are for a url=... server (a process gets env=...)")
        if command is not None and (isinstance(command, str) or not command):
            raise ServerError(
                f"MCP server {name}: command is a list of words, e.g. ['python', '-m', 'mcp_server_time']"
            )
        for mode in [approval, *(tool_approval or {}).values()]:
            if mode not in APPROVAL_MODES:
                raise ServerError(
                    f"MCP server {name}: approval must be one of {', '.join(APPROVAL_MODES)}, not {mode!r}"
                )
        if risk not in RISK_LEVELS:
            raise ServerError(f"MCP server {name}: risk must be one of {', '.join(RISK_LEVELS)}, not {risk!r}")
        for what, seconds in (("timeout", timeout), ("start_timeout", start_timeout)):
            if not seconds > 0:
                raise ServerError(f"MCP server {name}: {what} must be a positive number of seconds, not {seconds!r}")
        if self.port.stopped:
            raise ServerError("the server is stopped; MCP servers cannot be added to it")
        loop = self.port.loop()
        previous = self._servers.get(name)
        conn = McpServer(
            name, command=list(command) if command is not None else None, url=url, env=dict(env or {}),
            headers={str(k): str(v) for k, v in (headers or {}).items()},
            risk=risk, approval=approval, tool_approval=dict(tool_approval or {}), timeout=float(timeout),
            start_timeout=float(start_timeout), sensitive_params=tuple(sensitive_params), cwd=cwd,
        )
        self._servers[name] = conn
        old_task = self._close(previous) if previous is not None else None
        conn.task = loop.create_task(self._serve(conn, old_task), name=f"chaz-mcp-{name}")
        return conn

    def remove(self, name: str) -> asyncio.Task[None] | None:
        """Stop a server: its tools leave the registry now; the task ends once it is closed."""
        conn = self._servers.pop(name, None)
        if conn is None:
            known = ", ".join(sorted(self._servers)) or "none"
            raise ServerError(f"no MCP server named {name!r} (servers: {known})")
        return self._close(conn)

    def get(self, name: str) -> McpServer:
        try:
            return self._servers[name]
        except KeyError:
            known = ", ".join(sorted(self._servers)) or "none"
            raise ServerError(f"no MCP server named {name!r} (servers: {known})") from None

    def status(self) -> list[dict[str, Any]]:
        """Every server's status, by name."""
        return [self._servers[n].status() for n in sorted(self._servers)]

    async def wait_settled(self, name: str, timeout: float | None = None) -> McpServer:
        """Wait until the server is ready or failed (tests, notebooks); return it."""
        conn = self.get(name)
        await asyncio.wait_for(conn.settled.wait(), timeout)
        return conn

    def wrap_executor(self, ctx: RunContext, executor: ToolExecutor) -> ToolExecutor:
        """A run whose tool globs name a server (``time__*``) is told when that server failed."""
        patterns = ctx.agent.tools
        if not patterns:
            return executor
        return _FailedServerNotes(self, ctx, executor, list(patterns))

    def names_tool(self, name: str) -> bool:
        """Whether a configured server (in any state) is the one a tool name (``time__now``) names."""
        return any(c.names_server(name) for c in self._servers.values())

    def failed_for(self, patterns: Sequence[str]) -> list[McpServer]:
        """The failed servers that one of ``patterns`` names."""
        return [c for c in self._servers.values()
                if c.state == "failed" and any(c.names_server(p) for p in patterns)]

    async def stop(self) -> None:
        """The chaz server stops: close every connection (ends every server process)."""
        tasks = [t for t in (self._close(c) for c in self._servers.values()) if t is not None]
        self._servers.clear()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_TIMEOUT + 1)

    # ----------------------------------------------------------- internal
    def _close(self, conn: McpServer) -> asyncio.Task[None] | None:
        self._unregister(conn)
        starting = conn.state == "starting"
        if conn.state in ("starting", "ready"):
            conn.state = "stopped"
            conn.reason = "removed"
        conn.settled.set()
        conn.closing.set()
        if starting and conn.task is not None:
            # A handshake in progress does not watch ``closing`` (it would wait out its whole
            # start_timeout, with its process running): cancel it, which closes the transport.
            conn.task.cancel()
        return conn.task

    def _unregister(self, conn: McpServer) -> None:
        for tool_name in conn.tools:
            registered = self.port.tools.get(tool_name)
            if registered is not None and registered.mcp_server == conn.name:
                self.port.tools.unregister(tool_name)

    def _fail(self, conn: McpServer, reason: str) -> None:
        """Record the failure and take the tools away (``settled`` is set once the process is closed)."""
        if conn.state == "stopped":
            return
        tail = conn.stderr_tail()
        conn.state = "failed"
        conn.reason = conn.mask(f"{reason}; stderr: {tail}" if tail else reason)
        self._unregister(conn)
        conn.tools = []
        conn.session = None
        log.warning("MCP server %s failed: %s", conn.name, conn.reason)

    async def _serve(self, conn: McpServer, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous], timeout=STOP_TIMEOUT)
        # the child's stderr goes to a pipe whose newest 64 KB are kept (mcp_stderr.py)
        conn.errlog = errlog = StderrTail()
        try:
            # the first server imports the SDK, off the loop; a failed import is this server's failure
            sdk = await asyncio.to_thread(_sdk)
            async with contextlib.AsyncExitStack() as stack:
                # Entering the transport is only the spawn (or the HTTP client); the timeout
                # covers the handshake, and must not wrap the transport's own task group.
                session = await self._connect(conn, stack)
                errlog.close_writer()  # the process has its own copy: EOF once it (and its children) end
                try:
                    with sdk.anyio.fail_after(conn.start_timeout):
                        await session.initialize()
                        listed = await self._list_tools(session)
                except TimeoutError:
                    self._fail(conn, f"did not start within {conn.start_timeout:g} s (start_timeout)")
                    return
                except sdk.MCPError as exc:
                    if exc.code != sdk.CONNECTION_CLOSED:
                        raise
                    self._fail(conn, "exited (or closed its output) while starting")
                    return
                if any(spec.output_schema for spec in listed):
                    # The SDK imports jsonschema at the first result it validates: seconds of
                    # a held kernel loop on a cold start. Import it on a thread beforehand.
                    await asyncio.to_thread(_import_validators)
                if conn.closing.is_set():
                    return
                conn.session = session
                self._register_tools(conn, listed)
                conn.state = "ready"
                conn.settled.set()
                conn._notify()
                await conn.closing.wait()
        except Exception as exc:  # noqa: BLE001 - any failure of the server is its state, never the kernel's
            if not conn.closing.is_set():
                self._fail(conn, _describe(exc) + (f" ({conn.http_error})" if conn.http_error else ""))
        finally:
            conn.session = None
            conn.settled.set()
            errlog.close_writer()
            if conn.state == "failed":
                conn._notify()

    async def _connect(self, conn: McpServer, stack: contextlib.AsyncExitStack) -> ClientSession:
        sdk = _sdk()
        if conn.command is not None:
            params = sdk.StdioServerParameters(
                command=conn.command[0], args=conn.command[1:], env=conn.env or None, cwd=conn.cwd
            )
            assert conn.errlog is not None
            errlog: Any = conn.errlog.writer  # (the SDK types it TextIO; the process is given its fd)
            read, write = await stack.enter_async_context(sdk.stdio_client(params, errlog=errlog))
        else:
            assert conn.url is not None
            client = await stack.enter_async_context(sdk.create_mcp_http_client(headers=conn.headers or None))

            async def note_status(response: Any) -> None:
                if response.status_code >= 400:
                    conn.http_error = f"HTTP {response.status_code} {response.reason_phrase}".strip()

            client.event_hooks = {**client.event_hooks, "response": [*client.event_hooks["response"], note_status]}
            read, write = await stack.enter_async_context(sdk.streamable_http_client(conn.url, http_client=client))
        return await stack.enter_async_context(sdk.ClientSession(read, write))

    @staticmethod
    async def _list_tools(session: ClientSession) -> list[types.Tool]:
        listed: list[types.Tool] = []
        cursor: str | None = None
        sdk = _sdk()
        while True:
            page = await session.list_tools(
                params=sdk.types.PaginatedRequestParams(cursor=cursor) if cursor else None
            )
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return listed

    def _register_tools(self, conn: McpServer, listed: list[types.Tool]) -> None:
        async def call(tool_name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            return await self._call(conn, tool_name, arguments)

        made: list[Tool] = []
        for spec in listed:
            try:
                made.append(mcp_tool(
                    conn.name, spec, call, approval=conn.tool_approval.get(spec.name, conn.approval),
                    risk=conn.risk, timeout=conn.timeout, sensitive_params=conn.sensitive_params,
                    mask=conn.mask,
                ))
            except McpToolRefused as exc:  # too large for every step's request: the others still serve
                log.warning("MCP server %s: %s; it is left out", conn.name, exc)
        kept = []
        for t in made:
            existing = self.port.tools.get(t.name)
            if existing is not None and existing.mcp_server != conn.name:
                # never in another's place: agents scoped, and approvals set, for that tool
                # (a Python tool needing approval) would get the server's instead
                log.warning("MCP server %s: tool %s is left out: a tool of that name is registered already",
                            conn.name, t.name)
                continue
            self.port.tools.register(t)
            if t.name not in kept:  # "a.b" and "a_b" are both SERVER__a_b: the last one listed
                kept.append(t.name)
        conn.tools = kept

    async def _call(self, conn: McpServer, tool_name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        session = conn.session
        if session is None or conn.state != "ready":
            raise ToolError(f"MCP server {conn.name} is {conn.state}" + (f": {conn.reason}" if conn.reason else ""))
        try:
            return await session.call_tool(tool_name, arguments, read_timeout_seconds=conn.timeout)
        except _sdk().MCPError as exc:
            if exc.code != _sdk().CONNECTION_CLOSED:  # the server answered with a JSON-RPC error
                raise ToolError(conn.mask(f"{conn.name} {tool_name}: {exc.message}")) from None
            # A closed connection means the server died: it is failed for every later call too.
            self._fail(conn, f"connection lost during {tool_name}")
            raise ToolError(f"MCP server {conn.name} failed during {tool_name}: {conn.reason}") from None
        except Exception as exc:  # noqa: BLE001 - the client's own failure (an HTTP error quoting the URL...)
            # becomes the ToolResult the log keeps: masked like the server's answers
            raise ToolError(conn.mask(f"{conn.name} {tool_name}: {_describe(exc)}")) from None


class _FailedServerNotes:
    """A run's executor that writes an Error entry once per failed server its globs name.

    Checked at every step (when the tools are offered), so a server that failed before the
    run or during it is reported in the run's session: ``MCP server NAME failed: reason; the
    run goes on without its tools``. The run itself goes on with the other tools.
    """

    def __init__(self, servers: McpServers, ctx: RunContext, inner: ToolExecutor, patterns: list[str]) -> None:
        self.servers, self.ctx, self.inner, self.patterns = servers, ctx, inner, patterns
        self.noted: set[int] = set()

    def schemas(self) -> list[dict[str, Any]]:
        for conn in self.servers.failed_for(self.patterns):
            if id(conn) in self.noted:
                continue
            self.noted.add(id(conn))
            self.servers.port.store.append(
                self.ctx.session_id, EntryType.ERROR, "system",
                f"MCP server {conn.name} failed: {conn.reason}; the run goes on without its tools",
                payload={"mcp_server": conn.name, "run_id": self.ctx.run_id, "note": True},
            )
        return self.inner.schemas()

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        return await self.inner.call(call_id, name, arguments)


def _url_secrets(url: str) -> list[str]:
    """The credentials a URL carries: the password of ``user:pw@`` and the values of query
    parameters named like a key (``token``, ``access_token``, ``key``, ``sig``...), as written and
    decoded."""
    parts = urllib.parse.urlsplit(url)
    values: list[str] = []
    userinfo = parts.netloc.rpartition("@")[0]
    password = userinfo.partition(":")[2]
    if password:
        values += [password, urllib.parse.unquote(password)]
    for pair in parts.query.split("&"):
        name, eq, raw = pair.partition("=")
        name = urllib.parse.unquote_plus(name).lower()
        if eq and raw and _credential_param(name):
            values += [raw, urllib.parse.unquote_plus(raw)]
    return values


def _command_secrets(command: Sequence[str]) -> list[str]:
    """The values of a command's credential flags: ``--api-key=V``, ``--token V``."""
    values = []
    for i, word in enumerate(command):
        if not word.startswith("-"):
            continue
        name, eq, value = word.lstrip("-").partition("=")
        if not _credential_param(name.lower()):
            continue
        if eq:
            values.append(value)
        elif i + 1 < len(command) and not command[i + 1].startswith("-"):
            values.append(command[i + 1])
    return values


def _credential_param(name: str) -> bool:
    """Whether a URL query parameter or a command flag called ``name`` (lower case) holds a credential."""
    return (_credential_header(name) or name in _CREDENTIAL_NAMES
            or any(w in name for w in _CREDENTIAL_WORDS))


#: words of a URL query parameter's name that make its value a credential
_CREDENTIAL_WORDS = ("token", "secret", "password", "passwd", "credential")
#: ... and whole names (not words: ``--author``, ``--signal`` hold none)
_CREDENTIAL_NAMES = frozenset({"auth", "sig", "signature", "code"})


def _credential_header(name: str) -> bool:
    """Whether an HTTP header called ``name`` carries a credential (its value is masked in text)."""
    return (is_credential_field(name) or is_secret_name(name.replace("-", "_"))
            or name.lower() in ("cookie", "x-api-key") or "key" in name.lower())


_SDK: pytypes.SimpleNamespace | None = None


def _sdk() -> pytypes.SimpleNamespace:
    """The MCP SDK's names this module uses, imported at the first use (see the module doc)."""
    global _SDK
    if _SDK is None:
        import anyio
        from mcp import ClientSession, StdioServerParameters, stdio_client, types
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        _SDK = pytypes.SimpleNamespace(
            anyio=anyio, ClientSession=ClientSession, StdioServerParameters=StdioServerParameters,
            stdio_client=stdio_client, types=types, streamable_http_client=streamable_http_client,
            create_mcp_http_client=create_mcp_http_client, MCPError=MCPError, CONNECTION_CLOSED=CONNECTION_CLOSED,
        )
    return _SDK


def _import_validators() -> None:
    """What the SDK imports lazily to check a tool's structured output (see ``_serve``)."""
    import jsonschema.exceptions  # noqa: F401 - imported for its side effect: loaded before a tool's output needs it
    import referencing.exceptions  # noqa: F401 - as above


def _describe(exc: BaseException) -> str:
    """One line for an exception, the leaves of an exception group included."""
    inner = getattr(exc, "exceptions", None)  # an exception group (3.11+; anyio's on 3.10)
    if isinstance(inner, (list, tuple)) and inner:
        return "; ".join(_describe(e) for e in inner)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
