"""A parent agent spawns a child agent, offline; prints both session logs.

Run: python examples/spawn_demo.py
"""

import asyncio

from chaz_nb import Agent, Server, SessionStore, ToolRegistry, tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def main() -> None:
    store = SessionStore(":memory:")
    server = Server(
        store,
        [
            Agent(
                "planner",
                model="chaz/script",
                tools=["spawn_agent", "add"],
                script=[
                    {"tool": "spawn_agent", "args": {"agent": "calculator", "task": "What is 2 + 3?"}},
                    "The calculator says: {result}",
                ],
            ),
            Agent(
                "calculator",
                model="chaz/script",
                tools=["add"],
                script=[{"tool": "add", "args": {"a": 2, "b": 3}}, "2 + 3 = {result}"],
            ),
        ],
        ToolRegistry([add]),
    )
    session = server.current_session("planner")
    handle = await server.send(session, "Please work out 2 + 3 with the calculator.")
    reply = await handle.wait()
    for info in store.sessions():
        parent = f", parent session {info.parent_id}" if info.parent_id else ""
        print(f"== session {info.id}: {info.agent} ({info.kind}, depth {info.depth}{parent})")
        for entry in store.entries(info.id):
            print("  ", entry.one_line(120))
    print("reply:", reply.content)
    store.close()


if __name__ == "__main__":
    asyncio.run(main())
