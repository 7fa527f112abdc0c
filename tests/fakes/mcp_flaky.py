"""A small real MCP server (the SDK's MCPServer, stdio) whose tools fail in the ways a server can.

- ``echo(text)``: the text back;
- ``fail(why)``: an MCP error result (``isError``) with ``why`` as its text;
- ``picture()``: an image and an embedded text resource (binary content the client summarises);
- ``die()``: the process exits in the middle of the call (a crash mid-call);
- ``stall()``: never answers (until the client gives up on the call).
"""

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp import types

server = MCPServer("flaky")


CALLS = os.environ.get("FLAKY_CALLS")  # a file each call appends its tool name to


def _seen(name: str) -> None:
    if CALLS:
        with open(CALLS, "a") as f:
            f.write(name + "\n")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    _seen("echo")
    return text


@server.tool()
def fail(why: str) -> str:
    """Fail with the reason given."""
    raise ToolError(why)


@server.tool()
def picture() -> list[types.ContentBlock]:
    """A 4-byte PNG-typed image and an embedded text resource."""
    return [
        types.ImageContent(type="image", data="iVBORw==", mime_type="image/png"),
        types.EmbeddedResource(
            type="resource",
            resource=types.TextResourceContents(uri="file:///notes.txt", mime_type="text/plain", text="a note"),
        ),
    ]


@server.tool()
async def stall() -> str:
    """Never answer."""
    import anyio

    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
def die() -> str:
    """Exit the process mid-call."""
    print("flaky: dying on purpose", file=sys.stderr, flush=True)
    os._exit(7)


if __name__ == "__main__":
    server.run()
