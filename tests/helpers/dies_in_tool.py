"""Runs one turn whose tool writes a file and then kills the process on the spot (exit 17).

Used by tests/test_write_ahead.py: the store (a DuckDB file or a PostgreSQL URL, argv[1])
must then hold the ToolCall of the tool that had the effect (the file, argv[2]).
Usage: python dies_in_tool.py STORE EFFECT_FILE
"""

import asyncio
import os
import sys

from chaz_nb.core.store import SessionStore
from chaz_nb.engine.backends import ModelReply, ToolCallRequest
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent


@tool
async def touch() -> str:
    """Has an effect, then the process dies before anything else is written."""
    with open(sys.argv[2], "w") as f:
        f.write("done")
    os._exit(17)  # no flush, no close, no atexit: as a kill would


class CallsTouch:
    async def complete(self, model, messages, tools=None, *, script=None, options=None):
        return ModelReply("", [ToolCallRequest("c0", "touch", "{}")])


async def main(target: str) -> None:
    store = SessionStore.open(target)
    server = Server(store, [Agent("a", tools=["touch"])], ToolRegistry([touch]), backend=CallsTouch())
    await (await server.send(server.new_session("a"), "go")).wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
