"""Writes and runs agents on a file store forever, printing each committed entry id.

Used by tests/test_crash.py, which SIGKILLs it at random points. Runs without litellm: the
model is a small ModelBackend that calls tools and answers, so the loop is quick.
"""

import asyncio
import sys

from chaz_nb.server.agents import Agent
from chaz_nb.engine.backends import ModelReply, ToolCallRequest, Usage
from chaz_nb.core.entries import EntryType
from chaz_nb.server import Server
from chaz_nb.core.store import SessionStore
from chaz_nb.engine.tools import ToolRegistry, tool


@tool
async def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool(approval="always")
def risky(x: int) -> int:
    """Needs a person."""
    return x


class TwoStepModel:
    """Calls add (and every 5th run risky) then answers."""

    async def complete(self, model, messages, tools=None, *, script=None, options=None):
        await asyncio.sleep(0)
        done = sum(1 for m in messages if m.get("role") == "tool")
        if tools and done == 0:
            calls = [ToolCallRequest("c1", "add", '{"a": 1, "b": 2}')]
            if len(messages) % 5 == 0:
                calls.append(ToolCallRequest("c2", "risky", '{"x": 1}'))
            return ModelReply("", calls, Usage(3, 2))
        return ModelReply(f"answer after {done} tool results", [], Usage(5, 3))


async def main(path: str) -> None:
    store = SessionStore(path)
    server = Server(store, [Agent("worker", max_iterations=3, approval_timeout=0.05)],
                    ToolRegistry([add, risky]), backend=TwoStepModel())
    store.subscribe(lambda e: print(e.id, flush=True))
    print("ready", flush=True)
    sessions = [server.new_session("worker") for _ in range(3)]
    i = 0
    while True:
        i += 1
        handles = [server.post(s, EntryType.MESSAGE, f"turn {i}") for s in sessions]
        await asyncio.gather(*(h.wait() for h in handles if h is not None))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
