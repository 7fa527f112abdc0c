"""Core figures, measured in one run on this machine.

1. Append throughput and append -> on_write callback latency, 10k entries, file store.
2. Server overhead per ReAct step against a bare litellm.acompletion loop with the same
   offline model, the same script and the same tool.

Targets (issue 2): append + callback p50 < 1 ms; server overhead < 5 % of the bare loop.
Run: python bench/bench_core.py [--entries 10000] [--runs 30]

``--http`` (issue 14): a one-step turn and an 8-step run through the Server against a bare
``litellm.acompletion`` loop, both over HTTP to the same local OpenAI-compatible fake
(tests/fakes/openai_server.py) answering after ``--latency`` seconds (20 ms). Runs are
interleaved; medians over ``--runs``. Targets: < 5 % (one step), < 2 % (8 steps).
Each case also times the *floor*, interleaved with the other two: the bare loop plus the two
durable commits the primitive puts on a turn's path whatever the server does (the trigger
before the run starts: on_write fires after its commit; the reply before the turn ends:
the handle resolves with the committed entry), each an ``await store.write_one`` into the
same store. Served minus floor is what the server itself adds.
Since the log is write-ahead (issue 24: a step's tools start once its ToolCalls are durable),
the floor of a run with tool steps has one more commit per step: *floor+steps* times the
floor plus an ``await store.write_one`` before each tool step's tool; and *ahead off* times
the served run with the ToolCalls gathered with their results as before (``record_calls``
dropped: the bench's only way to see the old path in the same run).
``--commits`` (with ``--http``) also times each commit of entries of the served turns
(the store's connection behind a timing proxy) and prints their medians in turn order.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import tempfile
import sys
import time
from collections.abc import Iterator

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from chaz_nb import Agent, Server, SessionStore, ToolRegistry, tool  # noqa: E402
from chaz_nb.engine.backends import litellm_module  # noqa: E402
from chaz_nb.core.entries import EntryType  # noqa: E402
from chaz_nb.engine.runtime import execute  # noqa: E402

STEPS = 8  # tool-calling steps per run (+1 final answer)
#: the order of the three interleaved measurements, rotated run by run (--http)
KINDS = ("bare", "floor", "steps", "served", "behind")
ORDERS = [KINDS[i:] + KINDS[:i] for i in range(len(KINDS))]


@tool  # async: runs on the loop, no thread hop in the measured step
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


SCRIPT = [{"tool": "add", "args": {"a": i, "b": 1}} for i in range(STEPS)] + ["done {result}"]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def bench_append(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(os.path.join(tmp, "bench.duckdb"))
        sessions = [store.create_session(f"agent{i}") for i in range(10)]
        written_at: dict[int, float] = {}
        latencies: list[float] = []
        store.subscribe(lambda e: latencies.append(time.perf_counter() - written_at[e.id]))
        next_id = store._next_entry_id
        t0 = time.perf_counter()
        for i in range(n):
            written_at[next_id + i] = time.perf_counter()
            store.append(sessions[i % 10], EntryType.MESSAGE, "user", f"message {i}", payload={"i": i})
        elapsed = time.perf_counter() - t0
        store.close()
        size = os.path.getsize(store.path)
    ms = [x * 1000 for x in latencies]
    print(f"append (file store, {n} entries, one commit each): {n / elapsed:,.0f} entries/s")
    print(f"append -> callback latency: p50 {pct(ms, 50):.3f} ms, p99 {pct(ms, 99):.3f} ms"
          f"  (target p50 < 1 ms: {'met' if pct(ms, 50) < 1 else 'NOT met'})")
    print(f"file size after {n} entries: {size / 1e6:.1f} MB")


async def bare_loop(litellm, delay: float) -> float:
    """The same work without the server: model call, tool call, result fed back."""
    tools = [add.schema]
    messages = [{"role": "user", "content": "go"}]
    t0 = time.perf_counter()
    while True:
        resp = await litellm.acompletion(model="chaz/script", messages=messages, tools=tools,
                                         metadata={"chaz_script": SCRIPT, "chaz_delay": delay})
        msg = resp.choices[0].message
        if not msg.tool_calls:
            break
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in msg.tool_calls]})
        for c in msg.tool_calls:
            out = await add.fn(**json.loads(c.function.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(out)})
    return time.perf_counter() - t0


async def server_run(server: Server) -> float:
    session = server.new_session("bench")
    t0 = time.perf_counter()
    reply = await (await server.send(session, "go")).wait()
    elapsed = time.perf_counter() - t0
    assert reply is not None and reply.content.startswith("done"), reply
    return elapsed


async def bench_overhead(runs: int) -> None:
    litellm = litellm_module()
    await bare_loop(litellm, 0)  # warm-up (first call builds litellm's caches)
    cases = [("memory store", ":memory:", 0.0), ("file store", "file", 0.0),
             ("file store, model latency 50 ms", "file", 0.05),
             ("file store, model latency 250 ms", "file", 0.25)]
    with tempfile.TemporaryDirectory() as tmp:
        for label, where, delay in cases:
            path = os.path.join(tmp, f"o{delay}.duckdb") if where == "file" else where
            store = SessionStore(path)
            # whole replies, as the bare loop asks for them (the same stream setting on both sides)
            server = Server(store, [Agent("bench", model="chaz/script", tools=["add"], script=SCRIPT,
                                          max_iterations=STEPS + 2, stream=False,
                                          model_options={"metadata": {"chaz_delay": delay}})],
                            ToolRegistry([add]))
            await server_run(server)
            bare, served = [], []
            for _ in range(runs if not delay else 3):
                # interleaved, so machine noise hits both alike
                bare.append(await bare_loop(litellm, delay))
                served.append(await server_run(server))
            b = statistics.median(bare) / (STEPS + 1) * 1000
            s = statistics.median(served) / (STEPS + 1) * 1000
            overhead = (s - b) / b * 100
            print(f"per ReAct step ({label}): bare litellm loop {b:.2f} ms, through the server {s:.2f} ms, "
                  f"overhead {s - b:.2f} ms = {overhead:.1f} % (target < 5 %: {'met' if overhead < 5 else 'NOT met'})")
            store.close()


async def bare_http(litellm, fake, steps: int, options: dict, stream: bool = False, floor=None,
                    per_step: bool = False) -> float:
    """``steps`` tool-calling model calls and the final answer, litellm alone, over HTTP.

    ``stream``: as the server streams (``Agent.stream``, the default): ``stream=True`` with
    usage in the last chunk, the chunks read as they come and put together by litellm.
    ``floor``: ``(store, session)``: also commit the trigger before the first call and the
    reply after the last one (the primitive's two commits on the path, see the module doc).
    ``per_step`` (with ``floor``): also commit one entry before each tool step runs (write-ahead).
    """
    tools = [add.schema]
    t0 = time.perf_counter()
    if floor is not None:
        await floor[0].write_one(floor[1], EntryType.MESSAGE, "user", "go")
    messages: list[dict] = [{"role": "user", "content": "go"}]
    while True:
        if stream:
            chunks = [c async for c in await litellm.acompletion(
                model="openai/bench", messages=messages, tools=tools, stream=True,
                stream_options={"include_usage": True}, **options)]
            resp = litellm.stream_chunk_builder(chunks, messages=messages)
        else:
            resp = await litellm.acompletion(model="openai/bench", messages=messages, tools=tools, **options)
        msg = resp.choices[0].message
        if not msg.tool_calls:
            break
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in msg.tool_calls]})
        if per_step and floor is not None:
            await floor[0].write_one(floor[1], EntryType.TOOL_CALL, "bench", "add", tool_call_id=msg.tool_calls[0].id)
        for c in msg.tool_calls:
            out = await add.fn(**json.loads(c.function.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(out)})
    if floor is not None:
        await floor[0].write_one(floor[1], EntryType.MESSAGE, "bench", msg.content or "")
    return time.perf_counter() - t0


def http_script(fake, steps: int, latency: float) -> None:
    from fakes.openai_server import Call, Reply

    fake.script(*[Reply(tool_calls=[Call("add", {"a": i, "b": 1})], delay=latency) for i in range(steps)],
                Reply("done", delay=latency))


class TimedConnection:
    """The store's connection, each ``INSERT INTO entries`` timed into ``log`` (``--commits``)."""

    def __init__(self, con, log: list[float]) -> None:
        self._con, self._log = con, log

    def execute(self, query, *args):
        t0 = time.perf_counter()
        result = self._con.execute(query, *args)
        if query.startswith("INSERT INTO entries"):
            self._log.append(time.perf_counter() - t0)
        return result

    def __getattr__(self, name):
        return getattr(self._con, name)


def print_commits(label: str, per_turn: list[list[float]]) -> None:
    parts = []
    for i in range(max(map(len, per_turn))):
        column = [turn[i] * 1000 for turn in per_turn if len(turn) > i]
        parts.append(f"#{i + 1} {statistics.median(column):.2f}")
    print(f"  {label}: commits of entries in a served turn, in order, median ms: {', '.join(parts)}")


async def bench_http(runs: int, latency: float, commits: bool = False) -> None:
    """Server vs bare litellm over HTTP (issue 14): medians of interleaved runs.

    Both sides alike: whole replies on both (``Agent(stream=False)``), then streamed on both
    (the Agent's default, against a bare loop that streams too).
    """
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from fakes.openai_server import FakeModelServer

    litellm = litellm_module()
    with FakeModelServer() as fake, tempfile.TemporaryDirectory() as tmp:
        options = {"api_base": fake.openai_base, "api_key": "sk-bench"}
        store = SessionStore(os.path.join(tmp, "http.duckdb"))
        # the floor's commits: a store of its own on the same disk, so no server hears them
        floor_store = SessionStore(os.path.join(tmp, "floor.duckdb"))
        log: list[float] = []
        if commits:
            store._con = TimedConnection(store._con, log)
        for stream in (False, True):
            server = Server(store, [Agent("bench", model="openai/bench", tools=["add"], max_iterations=STEPS + 2,
                                          stream=stream, api_base=fake.openai_base,
                                          model_options={"api_key": "sk-bench"})],
                            ToolRegistry([add]))
            for steps, target in ((0, 5.0), (STEPS, 2.0)):
                http_script(fake, steps, latency)
                await bare_http(litellm, fake, steps, options, stream)  # warm-up: connections, caches
                http_script(fake, steps, latency)
                await server_http(server)
                times: dict[str, list[float]] = {kind: [] for kind in KINDS}
                per_turn = []
                floor_session = floor_store.create_session("floor")
                for i in range(runs):
                    # interleaved, rotating which goes first, so machine noise hits all alike
                    for which in ORDERS[i % len(ORDERS)]:
                        http_script(fake, steps, latency)
                        if which in ("bare", "floor", "steps"):
                            times[which].append(await bare_http(
                                litellm, fake, steps, options, stream,
                                floor=None if which == "bare" else (floor_store, floor_session),
                                per_step=which == "steps"))
                        elif which == "behind":
                            with write_ahead_off():
                                times[which].append(await server_http(server))
                        else:
                            start = len(log)
                            times[which].append(await server_http(server))
                            per_turn.append(log[start:])
                b, f, fs, s, sb = (statistics.median(times[kind]) * 1000 for kind in KINDS)
                overhead = (s - b) / b * 100
                label = "one-step turn" if steps == 0 else f"{steps + 1}-call run ({steps} tool steps)"
                print(f"HTTP, {latency * 1000:.0f} ms latency, {'streamed' if stream else 'whole replies'}, "
                      f"{label}: bare litellm {b:.1f} ms, through the server {s:.1f} ms, "
                      f"overhead {s - b:+.1f} ms = {overhead:+.1f} % "
                      f"(target < {target:.0f} %: {'met' if overhead < target else 'NOT met'})")
                print(f"  floor (bare + the trigger's and the reply's commits) {f:.1f} ms = {(f - b) / b * 100:+.1f} %;"
                      f" the server above the floor: {s - f:+.1f} ms = {(s - f) / b * 100:+.1f} %")
                if steps:
                    print(f"  floor+steps (the floor + one commit before each tool step) {fs:.1f} ms = "
                          f"{(fs - b) / b * 100:+.1f} %; the server above it: {s - fs:+.1f} ms = "
                          f"{(s - fs) / b * 100:+.1f} %;"
                          f" ahead off (ToolCalls gathered with their results, as before) {sb:.1f} ms: "
                          f"write-ahead costs {s - sb:+.1f} ms = {(s - sb) / steps:+.2f} ms a tool step")
                if commits:
                    print_commits(label, per_turn)
                assert not fake.unscripted and not fake.pending(), "the fake was asked more or less than scripted"
            await server.stop()
        store.close()
        floor_store.close()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


@contextlib.contextmanager
def write_ahead_off() -> Iterator[None]:
    """Runs started inside take the path before issue 24: tools start before their ToolCall
    is committed (the runtime is not given ``record_calls``). For the comparison only."""
    from chaz_nb.server import runs

    def no_record(**kwargs):
        kwargs.pop("record_calls", None)
        return execute(**kwargs)

    runs.execute = no_record
    try:
        yield
    finally:
        runs.execute = execute


async def server_http(server: Server) -> float:
    session = server.new_session("bench")
    t0 = time.perf_counter()
    reply = await (await server.send(session, "go")).wait()
    elapsed = time.perf_counter() - t0
    assert reply is not None and reply.content == "done", reply
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--http", action="store_true", help="only the local-HTTP overhead benchmark")
    parser.add_argument("--commits", action="store_true", help="--http: also time each INSERT of a served turn")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds the HTTP fake waits (--http)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    if args.http:
        asyncio.run(bench_http(args.runs, args.latency, args.commits))
        return
    bench_append(args.entries)
    asyncio.run(bench_overhead(args.runs))


if __name__ == "__main__":
    main()
