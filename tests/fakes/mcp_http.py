"""A real Streamable HTTP MCP server (the SDK's own MCPServer app under uvicorn) on 127.0.0.1.

It listens on a port the OS picks and prints ``PORT <n>`` on stdout once the socket listens
(the test fixture reads that line: readiness is an event, not a sleep). With
``MCP_HTTP_TOKEN`` set, every request must carry ``Authorization: Bearer <token>`` or gets
401, so a test sees that ``--header`` reaches the server.

Tools: ``echo(text)``, ``whoami()`` (echoes the Authorization header back) and ``fail(why)``
(an MCP error result).
"""

import asyncio
import os
import socket
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("http-fake")
TOKEN = os.environ.get("MCP_HTTP_TOKEN")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header this call came with (a server that echoes a credential)."""
    request = ctx.request_context.request
    return f"you sent {request.headers.get('authorization')}" if request is not None else "no request"


@server.tool()
def fail(why: str) -> str:
    """Fail with the reason given."""
    raise ToolError(why)


def guarded(app):
    async def asgi(scope, receive, send):
        if TOKEN and scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"bad or missing token"})
                return
        await app(scope, receive, send)

    return asgi


async def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    app = guarded(server.streamable_http_app())
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"PORT {sock.getsockname()[1]}", flush=True)  # connections queue until serve() accepts
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
