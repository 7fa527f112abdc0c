"""MCP tool definitions as registry tools (chaz_nb/engine/mcp_tools.py): what a server lists is
sent to the model on every step, so its size is bounded where the tool is made."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from mcp import types

from chaz_nb.engine.mcp_tools import (
    CLIP_MARK,
    MAX_DESCRIPTION_CHARS,
    MAX_SCHEMA_CHARS,
    mcp_tool,
)
from chaz_nb.errors import McpToolRefused
from chaz_nb.server import Server


async def never_called(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    raise AssertionError("no call is made in these tests")


def spec(name: str = "search", text: str | None = "Search the docs.", **properties: Any) -> types.Tool:
    """A tool as a server lists it; ``properties`` are its parameters' schemas."""
    schema = {"type": "object", "properties": properties or {"q": {"type": "string", "description": "the query"}}}
    return types.Tool(name=name, description=text, inputSchema=schema)


@pytest.fixture
async def server(store):
    s = Server(store)
    yield s
    await s.stop()


def test_a_short_description_and_schema_are_sent_as_the_server_wrote_them():
    made = mcp_tool("docs", spec(), never_called)
    assert made.description == "Search the docs. (MCP server docs)"
    assert made.parameters["properties"] == {"q": {"type": "string", "description": "the query"}}


def test_a_megabyte_description_is_clipped_with_a_visible_mark():
    made = mcp_tool("docs", spec(text="spam " * 200_000), never_called)
    text, suffix = made.description.rsplit(" (MCP server", 1)
    assert len(text) == MAX_DESCRIPTION_CHARS and text.endswith(CLIP_MARK)
    assert text.startswith("spam spam") and suffix == " docs)"


def test_parameter_descriptions_are_clipped_and_the_rest_of_the_schema_kept():
    long = "x" * 100_000
    made = mcp_tool("docs", spec(q={"type": "string", "description": long, "enum": [long[:10]]},
                                 description={"type": "string", "description": "a parameter named description"},
                                 default={"type": "string", "description": long}),
                    never_called)
    properties = made.parameters["properties"]
    for clipped in (properties["q"]["description"], properties["default"]["description"]):
        assert len(clipped) == MAX_DESCRIPTION_CHARS and clipped.endswith(CLIP_MARK)
    assert properties["q"]["type"] == "string" and properties["q"]["enum"] == ["x" * 10]  # values: kept
    assert properties["description"]["description"] == "a parameter named description"


def test_a_schema_too_large_even_clipped_is_refused_in_one_line():
    huge = {"type": "string", "enum": [f"value {i}" for i in range(20_000)]}
    assert len(json.dumps(huge)) > MAX_SCHEMA_CHARS
    with pytest.raises(McpToolRefused) as refused:
        mcp_tool("docs", spec(q=huge), never_called)
    message = str(refused.value)
    assert "\n" not in message and "docs__search" in message and f"{MAX_SCHEMA_CHARS:,}" in message


async def test_the_server_leaves_a_tool_with_an_absurd_schema_out_and_says_so(server, caplog):
    from chaz_nb.server.mcp import McpServer

    conn = McpServer("docs", command=["unused"])
    huge = {"type": "string", "enum": [f"value {i}" for i in range(20_000)]}
    with caplog.at_level(logging.WARNING, logger="chaz_nb.server.mcp"):
        server.mcp._register_tools(conn, [spec("search"), spec("bloated", q=huge)])
    assert conn.tools == ["docs__search"] and "docs__bloated" not in server.tools
    [warning] = [r.getMessage() for r in caplog.records if "docs__bloated" in r.getMessage()]
    assert "left out" in warning and "\n" not in warning


async def test_a_result_over_the_bound_is_masked_then_clipped_with_a_note():
    from chaz_nb.engine.mcp_tools import MAX_RESULT_CHARS

    secret = "s3cr3t-credential-abcdef0123456789"
    body = "r" * (MAX_RESULT_CHARS - 10) + secret + "z" * 50_000_000  # 50 MB, a key across the bound

    async def big(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=body)])

    made = mcp_tool("docs", spec(), big, mask=lambda t: t.replace(secret, "[REDACTED]"))
    text = await made.fn(q="x")
    assert len(text) <= MAX_RESULT_CHARS
    assert text.startswith("rrr") and "more characters of this result clipped: MCP server docs sent over" in text
    assert "50,0" in text.rsplit("[…", 1)[1]  # says how much was left out
    assert not any(secret[i:i + 8] in text for i in range(len(secret) - 7))
