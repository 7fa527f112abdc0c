"""Start tests/fakes/mcp_http.py (a real Streamable HTTP MCP server) as a process on 127.0.0.1.

The process binds a port the OS picks and prints it once the socket listens; ``start`` reads
that line (a blocking read on its stdout: an event, no sleep and no port race).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("mcp_http.py")
START_TIMEOUT = 60.0


class McpHttpServer:
    def __init__(self, token: str | None = None) -> None:
        env = dict(os.environ)
        env.pop("MCP_HTTP_TOKEN", None)
        if token is not None:
            env["MCP_HTTP_TOKEN"] = token
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
        )
        try:
            line = self._first_line()
        except BaseException:
            self.close()
            raise
        if not line.startswith("PORT "):
            err = self.process.stderr.read() if self.process.poll() is not None and self.process.stderr else ""
            self.close()
            raise RuntimeError(f"the MCP HTTP server did not start: {line!r} {err[-800:]}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def _first_line(self) -> str:
        import selectors

        assert self.process.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            if not sel.select(START_TIMEOUT):
                raise RuntimeError(f"the MCP HTTP server printed no port within {START_TIMEOUT:g} s")
        return self.process.stdout.readline().strip()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
