"""MCP tools as registry tools: one ``Tool`` per tool an MCP server lists, named ``SERVER__TOOL``.

The tool keeps the server's input schema as its parameters (so validation, scopes such as
``time__*`` and the approval proxy treat it like any Python tool); calling it sends
``tools/call`` through the server's ``ClientSession``. What comes back is text for the model:

- text content inline (several blocks joined by blank lines);
- images, audio and blob resources summarised as ``[image image/png, 1234 bytes]``: the
  bytes are not for the model, but it is told they were there (never dropped silently);
- embedded text resources inline under their URI; resource links as their URI;
- structured content as JSON when the server sent no text.

An MCP error result (``isError``) raises ``ToolError`` with its text: a tool error the model
sees, exactly like a Python tool that raised.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any
from collections.abc import Awaitable, Callable, Sequence

from mcp import types

from ..errors import ToolError
from .tools import ApprovalMode, RiskLevel, Tool

#: what a call goes through: (MCP tool name, arguments) -> the server's result
CallFn = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]

SEPARATOR = "__"
_NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}")


def registry_name(server: str, tool_name: str) -> str:
    """``SERVER__TOOL``, with characters a model API refuses replaced by ``_`` (64 at most)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}{SEPARATOR}{tool_name}")[:64]


def check_server_name(name: str) -> str:
    """A server name usable as a tool-name prefix; ValueError saying what to use otherwise."""
    # A name ending in "_" would make NAME__ another server's prefix: "time_"'s tool "x" is
    # "time___x", which "time__*" (a scope, an auto-approve pattern) names and which is also
    # "time"'s tool "_x". Without "__" in it nor "_" at its end, NAME__ is this server's only.
    if not _NAME_OK.fullmatch(name) or SEPARATOR in name or name.endswith("_") or len(name) > 40:
        raise ValueError(
            f"MCP server name {name!r}: use 1-40 letters, digits, - or single _ (not at the end; "
            "it prefixes its tools as NAME__TOOL)"
        )
    return name


def mcp_tool(
    server: str,
    spec: types.Tool,
    call: CallFn,
    *,
    approval: ApprovalMode = "unless_auto_approved",
    risk: RiskLevel = "medium",
    timeout: float | None = None,
    sensitive_params: Sequence[str] = (),
    mask: Callable[[str], str] = str,
) -> Tool:
    """The registry tool for ``spec`` (a tool ``server`` listed); calls go through ``call``.

    ``mask``: applied to what the server returns (its own credentials, such as the value of an
    Authorization header it echoes, never reach the model or the log).
    """
    parameters = dict(spec.input_schema or {})
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    mcp_name = spec.name

    async def call_mcp(**arguments: Any) -> str:
        result = await call(mcp_name, arguments)
        text = mask(result_text(result))
        if result.is_error:
            raise ToolError(text or f"{server} reported an error from {mcp_name} (no text)")
        return text

    description = spec.description or spec.title or mcp_name
    return Tool(
        name=registry_name(server, mcp_name),
        description=f"{description} (MCP server {server})",
        parameters=parameters,
        fn=call_mcp,
        approval=approval,
        risk=risk,
        sensitive_params=tuple(p for p in sensitive_params if p in parameters["properties"]),
        in_thread=False,  # async: the call awaits the server, the loop is free meanwhile
        timeout=timeout,
        mcp_server=server,
    )


def result_text(result: types.CallToolResult) -> str:
    """A ``tools/call`` result as text for the model (see the module docstring)."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n\n".join(p for p in parts if p)


def _block_text(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, (types.ImageContent, types.AudioContent)):
        return f"[{block.type} {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        mime = res.mime_type or "unknown type"
        if isinstance(res, types.TextResourceContents):
            return f"[resource {res.uri} ({mime})]\n{res.text}"
        return f"[resource {res.uri} ({mime}), {_decoded_size(res.blob)} bytes]"
    if isinstance(block, types.ResourceLink):
        size = f", {block.size} bytes" if block.size is not None else ""
        return f"[resource link {block.uri} ({block.mime_type or 'unknown type'}){size}]"
    kind = getattr(block, "type", type(block).__name__)
    return f"[{kind} content]"


def _decoded_size(data: str) -> int:
    """Bytes of base64 ``data`` (its text length when it is not valid base64)."""
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data)
