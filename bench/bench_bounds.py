"""What an oversized input costs the kernel loop now that it is bounded (issue 24 §5).

Each row times, on one DuckDB store in memory (best of 3), the loop time of:
- a person's 50 MB Message (refused in one line) against a 1 KB one (written);
- a tool's 50 MB output in a ToolResult (clipped to ``CHAZ_MAX_ENTRY_CHARS``) against a 1 MB one;
- an MCP server's 50 MB result (masked, then clipped to ``MAX_RESULT_CHARS``) against a 1 MB one;
and prints the ratios measured in this run. With ``CHAZ_MAX_ENTRY_CHARS=1000000000`` (no entry
bound in effect) the same run shows what the bound saves: here a 50 MB Message held the loop
4.4 s and a 50 MB ToolResult 6.8 s unbounded, against 0.0 ms and 134 ms bounded.
Run: python bench/bench_bounds.py [--mb 50]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from mcp import types

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import SessionStore
from chaz_nb.engine.mcp_tools import mcp_tool
from chaz_nb.errors import EntryTooLarge


def best(fn: Callable[[], Any], n: int = 3) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=50)
    big = "x" * (parser.parse_args().mb * 1_000_000)
    small_msg, small_out = "x" * 1_000, "x" * 1_000_000
    store = SessionStore(":memory:")
    s = store.create_session("assistant")

    def message(text: str) -> Callable[[], None]:
        def write() -> None:
            with contextlib.suppress(EntryTooLarge):
                store.append(s, EntryType.MESSAGE, "user", text)
        return write

    def tool_result(text: str) -> Callable[[], None]:
        return lambda: store.append(s, EntryType.TOOL_RESULT, "a", text, tool_call_id="c", tool_name="t",
                                    payload={"output": text})

    def mcp_result(text: str) -> Callable[[], None]:
        async def call(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

        tool = mcp_tool("bench", types.Tool(name="t", inputSchema={"type": "object"}), call, mask=str)
        return lambda: asyncio.run(tool.fn())

    rows = [("Message (refused)", message(big), message(small_msg), "1 KB"),
            ("ToolResult (clipped)", tool_result(big), tool_result(small_out), "1 MB"),
            ("MCP result (clipped)", mcp_result(big), mcp_result(small_out), "1 MB")]
    print(f"{'input':24} {'large ms':>10} {'small ms':>10} {'ratio':>7}")
    for name, large, small, size in rows:
        t_large, t_small = best(large), best(small)
        print(f"{name:24} {t_large * 1000:10.1f} {t_small * 1000:10.1f} {t_large / t_small:7.1f}  (small = {size})")
    store.close()


if __name__ == "__main__":
    main()
