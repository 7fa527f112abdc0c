"""Model calls in the kernel's process (litellm on the kernel loop) against the model worker.

Two parts, each printing ratios of the same run (issue 43 §1):

``load``: 50 sessions x 20 turns, streamed, one loop (this process is the kernel), against a
local OpenAI-compatible server (tests/fakes/openai_server.py, in a process of its own so that
its threads take nothing from this one), three ways: ``bare`` (``litellm.acompletion`` on the
loop, no server: litellm in the kernel without chaz_nb), ``in-kernel`` (the Server with
``LiteLLMBackend``) and ``worker`` (the Server with ``WorkerBackend``, the notebook's default).
Each prints turns/s, the largest stall of the loop (a 10 ms heartbeat: how late it wakes) and
the loop thread's CPU per turn. Targets: stall < 50 ms, the server's loop CPU < 2 ms a turn,
throughput >= 1.0x ``bare``.

``kernel``: fresh kernels (tests/kernel_harness.py), ``CHAZ_MODEL_WORKER=0`` (litellm imported
in the kernel, in a thread) against the default (the worker): the largest loop stall from
``%load_ext`` to the first turn's reply (the turn sent right after the load), how long that
first reply took against a warm turn, and RSS of the kernel and of the worker after the turn.

    python bench/bench_model_worker.py [--part load|kernel|both] [--sessions 50] [--turns 20] [--runs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-real-key-000000")

from chaz_nb import Agent, Server, SessionStore  # noqa: E402

REPLY = "a streamed reply of about a dozen words from the local fake server"
TARGET_STALL_MS = 50.0

SERVE = """
import sys
from fakes.openai_server import FakeModelServer, Reply
server = FakeModelServer()
server.script(*[Reply(REPLY)] * int(sys.argv[1]))
print(server.port, flush=True)
sys.stdin.read()
""".replace("REPLY", repr(REPLY))


class FakeServerProcess:
    """The fake provider in a process of its own, answering ``n`` requests."""

    def __init__(self, n: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE, str(n)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "tests")})
        assert self.proc.stdout is not None
        self.base = f"http://127.0.0.1:{int(self.proc.stdout.readline())}/v1"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Heartbeat:
    """A task that sleeps 10 ms and records how late it wakes: the loop's stalls."""

    def __init__(self) -> None:
        self.worst = self.worst_cpu = 0.0
        self.task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        # also how much of the worst beat the loop thread spent on the CPU (the rest: the
        # thread was not running, the machine's other processes or the GIL held elsewhere)
        while True:
            t, c = time.perf_counter(), time.thread_time()
            await asyncio.sleep(0.01)
            late = time.perf_counter() - t - 0.01
            if late > self.worst:
                self.worst, self.worst_cpu = late, time.thread_time() - c

    def stop(self) -> tuple[float, float]:
        self.task.cancel()
        return self.worst * 1000, self.worst_cpu * 1000


async def bare_session(litellm, base: str, turns: int) -> None:
    from chaz_nb.engine.streaming import StreamAssembly

    history: list[dict] = []
    for turn in range(turns):
        history.append({"role": "user", "content": f"turn {turn}"})
        assembly = StreamAssembly()
        async for chunk in await litellm.acompletion(model="openai/fake", messages=list(history), api_base=base,
                                                     stream=True, stream_options={"include_usage": True}):
            assembly.add(chunk)
        history.append({"role": "assistant", "content": assembly.partial_text})


async def served_sessions(server: Server, sessions: int, turns: int) -> None:
    async def one(sid: int) -> None:
        for turn in range(turns):
            reply = await (await server.send(sid, f"turn {turn}")).wait()
            assert reply is not None and reply.content == REPLY, reply

    await asyncio.gather(*(one(server.new_session("w")) for _ in range(sessions)))


async def measure(label: str, body, n: int) -> dict:
    beat = Heartbeat()
    t0, cpu0 = time.perf_counter(), time.thread_time()
    await body()
    wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    stall, stall_cpu = beat.stop()
    return {"label": label, "turns_s": n / wall, "stall_ms": stall, "stall_cpu_ms": stall_cpu,
            "loop_cpu_ms": cpu / n * 1000}


class InstantBackend:
    """No model: the server's own floor. Like a call over the wire it says when its request
    leaves (so the Ack commits apart from the reply, as it does with a real request), waits
    20 ms off the loop, and hands the reply's words to ``on_delta``; no HTTP, no litellm."""

    streams = True

    async def complete(self, model, messages, tools=None, *, script=None, options=None, on_delta=None):
        from chaz_nb.engine.backends import REQUEST_LEAVING, ModelReply, Usage

        leaving = REQUEST_LEAVING.get()
        if leaving is not None:
            leaving()
        await asyncio.sleep(0.02)
        if on_delta is not None:
            for word in REPLY.split(" "):
                on_delta(word + " ")
        return ModelReply(REPLY, usage=Usage(11, 12, None))


async def load_part(sessions: int, turns: int, tmp: str) -> list[dict]:
    from chaz_nb.engine.backends import LiteLLMBackend, litellm_ready
    from chaz_nb.engine.worker import WorkerBackend

    n = sessions * turns
    fake = FakeServerProcess(3 * n + 300)
    worker = WorkerBackend()
    worker.start()
    try:
        litellm = await litellm_ready()
        results = []
        await bare_session(litellm, fake.base, 1)  # warm (the import is done above)
        results.append(await measure("bare litellm, no server", lambda: asyncio.gather(
            *(bare_session(litellm, fake.base, turns) for _ in range(sessions))), n))
        for label, backend in (("server, litellm in the kernel", LiteLLMBackend()),
                               ("server, model worker", worker),
                               ("server, no model (its floor)", InstantBackend())):
            store = SessionStore(os.path.join(tmp, f"{len(results)}.duckdb"))
            server = Server(store, [Agent("w", model="openai/fake", api_base=fake.base)], backend=backend,
                            max_concurrent_calls=sessions)
            await served_sessions(server, 1, 1)  # warm: the worker's import, litellm's caches
            results.append(await measure(label, lambda s=server: served_sessions(s, sessions, turns), n))
            await server.stop()
            store.close()
        # the client alone: calls one at a time straight to the backend (no server, no store),
        # the loop thread's CPU a call (the worker's and the provider's are other processes)
        messages = [{"role": "user", "content": "turn 0"}]
        for label, backend in (("client alone, litellm in the kernel", LiteLLMBackend()),
                               ("client alone, model worker", worker)):
            calls = 100
            t0, cpu0 = time.perf_counter(), time.thread_time()
            for _ in range(calls):
                await backend.complete("openai/fake", messages, options={"api_base": fake.base},
                                       on_delta=lambda text: None)
            results.append({"label": label, "turns_s": calls / (time.perf_counter() - t0), "stall_ms": 0.0,
                            "stall_cpu_ms": 0.0, "loop_cpu_ms": (time.thread_time() - cpu0) / calls * 1000})
        return results
    finally:
        worker.close()
        fake.close()


def print_load(results: list[dict], sessions: int, turns: int) -> None:
    print(f"-- {sessions} sessions x {turns} turns, streamed, one loop, local OpenAI-compatible server "
          "(its own process)")
    bare = results[0]
    for r in results[:4]:
        print(f"  {r['label']:<32} {r['turns_s']:7.1f} turns/s ({r['turns_s'] / bare['turns_s']:.2f}x bare)  "
              f"largest loop stall {r['stall_ms']:7.1f} ms (on the CPU {r['stall_cpu_ms']:5.1f})  "
              f"loop CPU {r['loop_cpu_ms']:5.2f} ms a turn")
    inproc, worker, floor = results[1], results[2], results[3]
    for r in results[4:]:
        print(f"  {r['label']:<36} streamed calls one at a time: loop CPU {r['loop_cpu_ms']:5.2f} ms a call "
              f"({r['turns_s']:.0f} calls/s)")
    print(f"  the worker's client on the loop (worker - floor): {worker['loop_cpu_ms'] - floor['loop_cpu_ms']:.2f} ms "
          f"a turn; litellm on the loop (in-kernel - floor): {inproc['loop_cpu_ms'] - floor['loop_cpu_ms']:.2f} ms")
    print(f"  worker against litellm in the kernel: stall {worker['stall_ms'] / inproc['stall_ms']:.2f}x, "
          f"loop CPU {worker['loop_cpu_ms'] / inproc['loop_cpu_ms']:.2f}x, "
          f"throughput {worker['turns_s'] / inproc['turns_s']:.2f}x")
    verdict = {True: "met", False: "NOT met"}
    print(f"  targets (worker): stall < {TARGET_STALL_MS:g} ms {verdict[worker['stall_ms'] < TARGET_STALL_MS]}; "
          f"loop CPU < 2 ms a turn {verdict[worker['loop_cpu_ms'] < 2]}; throughput >= 1.0x bare "
          f"{verdict[worker['turns_s'] >= bare['turns_s']]}")


KERNEL_SETUP = """
%load_ext chaz_nb
import asyncio, os, time, chaz_nb
from chaz_nb.notebook.kernel_loop import get_loop
_stall = {"max": 0.0, "cpu": 0.0}
async def _beat():
    # the worst beat's lateness, and how much of it the loop thread spent on the CPU (the rest:
    # the thread was not running: the machine's other processes, or waiting for the GIL)
    while True:
        t, c = time.perf_counter(), time.thread_time()
        await asyncio.sleep(0.010)
        late = (time.perf_counter() - t - 0.010) * 1000
        if late > _stall["max"]:
            _stall["max"], _stall["cpu"] = late, (time.thread_time() - c) * 1000
_hb = get_loop().create_task(_beat())
chaz_nb.current().define_agent(chaz_nb.Agent("w", model="openai/fake", api_base=__BASE__))
"""

KERNEL_TURN = """
_t = time.perf_counter()
_r = await chaz_nb.ask(__TEXT__, display=False)
print(json.dumps({"ms": (time.perf_counter() - _t) * 1000, "stall": _stall["max"], "stall_cpu": _stall["cpu"],
                  "reply": _r.content}))
""".replace("json.dumps", "__import__('json').dumps")

KERNEL_RSS = """
def _rss(pid="self"):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
_pid = getattr(chaz_nb.current().backend, "pid", None)
print(__import__('json').dumps({"kernel": _rss(), "worker": _rss(_pid) if _pid else 0.0,
      "litellm_in_kernel": "litellm" in __import__("sys").modules}))
"""


def kernel_run(worker: bool) -> dict:
    from fakes.openai_server import FakeModelServer, Reply
    from kernel_harness import Kernel

    with FakeModelServer() as server, tempfile.TemporaryDirectory() as cwd:
        server.script(*[Reply(REPLY)] * 4)
        env = {"OPENAI_API_KEY": "sk-bench-not-a-real-key-000000", "CHAZ_MODEL_WORKER": "1" if worker else "0"}
        k = Kernel(cwd, env=env)
        try:
            t0 = time.perf_counter()
            r = k.run(KERNEL_SETUP.replace("__BASE__", repr(server.openai_base)), timeout=60)
            assert r.status == "ok", r.outputs
            r = k.run(KERNEL_TURN.replace("__TEXT__", repr("@w hello")), timeout=180)
            assert r.status == "ok", r.outputs
            first = json.loads(r.stdout.strip().splitlines()[-1])
            first["load_to_reply_ms"] = (time.perf_counter() - t0) * 1000
            r = k.run(KERNEL_TURN.replace("__TEXT__", repr("@w again")), timeout=60)
            warm = json.loads(r.stdout.strip().splitlines()[-1])
            rss = json.loads(k.run(KERNEL_RSS).stdout.strip().splitlines()[-1])
            return {"first": first, "warm": warm, "rss": rss}
        finally:
            k.close()


def kernel_part(runs: int) -> None:
    got: dict[bool, list[dict]] = {True: [], False: []}
    for _ in range(runs):
        for worker in (False, True):  # interleaved
            got[worker].append(kernel_run(worker))
    print(f"-- fresh kernels, first turn sent right after %load_ext (median of {runs})")
    med = statistics.median
    rows = {}
    for worker, label in ((False, "litellm in the kernel"), (True, "model worker")):
        g = got[worker]
        rows[worker] = row = {
            "stall": med(x["first"]["stall"] for x in g), "stall_cpu": med(x["first"]["stall_cpu"] for x in g),
            "first": med(x["first"]["ms"] for x in g),
            "load_to_reply": med(x["first"]["load_to_reply_ms"] for x in g), "warm": med(x["warm"]["ms"] for x in g),
            "kernel": med(x["rss"]["kernel"] for x in g), "worker": med(x["rss"]["worker"] for x in g),
            "litellm": any(x["rss"]["litellm_in_kernel"] for x in g)}
        print(f"  {label:<22} largest loop stall %load_ext->reply {row['stall']:7.1f} ms (loop thread on the CPU "
              f"{row['stall_cpu']:.1f} ms of it); first reply "
              f"{row['first']:6.0f} ms after it was sent ({row['load_to_reply']:.0f} ms after %load_ext was), "
              f"a warm turn {row['warm']:5.1f} ms ({row['first'] / row['warm']:.0f}x); RSS kernel "
              f"{row['kernel']:.0f} MB, worker {row['worker']:.0f} MB, total {row['kernel'] + row['worker']:.0f} MB; "
              f"litellm in the kernel: {row['litellm']}")
    w, k = rows[True], rows[False]
    print(f"  worker against in-kernel: stall {w['stall'] / max(k['stall'], 0.01):.2f}x, kernel RSS "
          f"{w['kernel'] - k['kernel']:+.0f} MB, total RSS {w['kernel'] + w['worker'] - k['kernel']:+.0f} MB; "
          f"target stall < {TARGET_STALL_MS:g} ms: {'met' if w['stall'] < TARGET_STALL_MS else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("load", "kernel", "both"), default="both")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--runs", type=int, default=2, help="fresh kernels of each kind (kernel part)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.part in ("load", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            print_load(asyncio.run(load_part(args.sessions, args.turns, tmp)), args.sessions, args.turns)
    if args.part in ("kernel", "both"):
        kernel_part(args.runs)


if __name__ == "__main__":
    main()
