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

What a server lists is sent to the model on every step of every run that may use the tool, and a
buggy or hostile server can list anything (megabytes of description). So, as results are cut
(``Agent.max_tool_output``), a tool's description and each description in its input schema are
cut to ``MAX_DESCRIPTION_CHARS`` with a visible mark, and a tool whose schema is still over
``MAX_SCHEMA_CHARS`` of JSON (a huge ``enum``, say) is refused (``McpToolRefused``): the server
leaves it out with a one-line warning and offers its other tools.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import TYPE_CHECKING, Any
from collections.abc import Awaitable, Callable, Sequence

from ..core.redaction import redact_then_cut
from ..errors import McpToolRefused, ToolError
from .tools import ApprovalMode, RiskLevel, Tool

if TYPE_CHECKING:  # pragma: no cover - the SDK is imported where a server starts (server/mcp.py)
    from mcp import types

#: what a call goes through: (MCP tool name, arguments) -> the server's result
CallFn = Callable[[str, dict[str, Any]], Awaitable["types.CallToolResult"]]

SEPARATOR = "__"
_NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}")

#: a description (the tool's, or one in its input schema) sent to the model, at most (with the mark)
MAX_DESCRIPTION_CHARS = 2_000
#: an input schema sent to the model, at most, as JSON once its descriptions are cut (~16k tokens)
MAX_SCHEMA_CHARS = 64_000
#: a call's result kept, at most (its start, and a note of how much was clipped)
MAX_RESULT_CHARS = 1_000_000
#: ends a description that was cut, so the model (and whoever reads the request) can tell
CLIP_MARK = "…[clipped]"
#: schema keywords whose values are data, not schemas: a "description" key in them is left alone
_DATA_KEYWORDS = frozenset({"default", "const", "enum", "examples", "example"})
#: schema keywords whose values map names to schemas
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


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
    max_result_chars: int = MAX_RESULT_CHARS,
) -> Tool:
    """The registry tool for ``spec`` (a tool ``server`` listed); calls go through ``call``.

    ``mask``: applied to what the server returns (its own credentials, such as the value of an
    Authorization header it echoes, never reach the model or the log). A result over
    ``max_result_chars`` is clipped, with a note saying by how much.
    """
    name = registry_name(server, spec.name)
    parameters = bounded_schema(name, spec.input_schema or {})
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    mcp_name = spec.name

    async def call_mcp(**arguments: Any) -> str:
        result = await call(mcp_name, arguments)
        # masked before the cut (a credential split by it would leak), and only the part kept:
        # a 50 MB result costs what a 1 MB one does
        note = _result_note(server, max_result_chars)
        text = redact_then_cut(result_text(result), max_result_chars, redact_text=mask, note=note)
        if result.is_error:
            raise ToolError(text or f"{server} reported an error from {mcp_name} (no text)")
        return text

    description = clip(spec.description or spec.title or mcp_name)
    return Tool(
        name=name,
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


def clip(text: str, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """``text`` if it is at most ``limit`` characters, else its start and ``CLIP_MARK`` (``limit`` in all)."""
    return text if len(text) <= limit else text[: limit - len(CLIP_MARK)] + CLIP_MARK


def bounded_schema(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of tool ``name``'s input schema with its descriptions clipped; ``McpToolRefused``
    when it is still over ``MAX_SCHEMA_CHARS`` of JSON, or too deeply nested to measure."""
    try:
        bounded = _clip_descriptions(schema)
        size = len(json.dumps(bounded, ensure_ascii=False, default=str))
    except RecursionError:
        raise McpToolRefused(f"tool {name}: its input schema is nested too deeply to send") from None
    if size > MAX_SCHEMA_CHARS:
        raise McpToolRefused(
            f"tool {name}: its input schema is {size:,} characters of JSON, over the {MAX_SCHEMA_CHARS:,} "
            "sent to the model on every step"
        )
    return bounded


def _clip_descriptions(node: Any, named: bool = False) -> Any:
    """``node`` (a schema, or a part of one) with every ``description`` string clipped.

    ``named``: ``node`` maps names to schemas (``properties``, ``$defs``...), so a parameter
    called ``description`` or ``default`` is a schema like any other."""
    if isinstance(node, list):
        return [_clip_descriptions(item) for item in node]
    if not isinstance(node, dict):
        return node
    clipped: dict[str, Any] = {}
    for key, value in node.items():
        if named:
            clipped[key] = _clip_descriptions(value)
        elif key == "description" and isinstance(value, str):
            clipped[key] = clip(value)
        elif key in _DATA_KEYWORDS:
            clipped[key] = value  # what a value may be, not a schema: sent as the server wrote it
        else:
            clipped[key] = _clip_descriptions(value, named=key in _NAMED_SCHEMAS)
    return clipped


def result_text(result: types.CallToolResult) -> str:
    """A ``tools/call`` result as text for the model (see the module docstring)."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n\n".join(p for p in parts if p)


def _block_text(block: Any) -> str:
    from mcp import types  # a result came from a server: the SDK is imported already

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


def _result_note(server: str, limit: int) -> Callable[[int], str]:
    def note(cut: int) -> str:
        return f"\n[… {cut:,} more characters of this result clipped: MCP server {server} sent over {limit:,}]"

    return note


def _decoded_size(data: str) -> int:
    """Bytes of base64 ``data`` (its text length when it is not valid base64)."""
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data)
