"""The kernel loop's largest stall while a fresh kernel runs its first turns.

A fresh kernel loads the extension, starts a 10 ms heartbeat task on the kernel's own event
loop, and then, over HTTP to a local OpenAI-compatible server (tests/fakes/openai_server.py,
``openai/NAME`` with ``api_base``, through litellm's real OpenAI provider):

- ``first turn``       its first turn (a plain reply), sent right after ``%load_ext``
- ``first tool call``  its first turn with a tool call
- ``later turn``       a plain turn once everything is warm (for comparison)
- ``1000-entry burst`` 1,000 entries written at once (one group commit)

It does this twice: with the first turn sent right after ``%load_ext`` (the background
import of litellm still running: its CPU and GIL use is what the loop then waits on), and
with the first turn sent after that import finished (what is left on the loop itself).

For each phase it prints the largest stall: how much later than its 10 ms period the
heartbeat woke up. While the loop stalls, widgets, comms, schedules and other runs freeze.
Target: < 50 ms on the first turn (2,360 ms before litellm was imported off the loop).

``--why`` prints, for each stalled phase, the loop thread's and the background import
thread's stacks at the worst moment, and every garbage collection over 10 ms (a full
collection holds the GIL for as long as it walks the heap: before the import ran with the
collector off, those were the largest stalls while litellm imported, 100-210 ms each).

    python bench/bench_loop_stall.py [--runs 3] [--why]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from fakes.openai_server import Call, FakeModelServer, Reply  # noqa: E402
from kernel_harness import Kernel  # noqa: E402

TARGET_MS = 50.0
PHASES = ("first turn", "first tool call", "later turn", "1000-entry burst")

HEARTBEAT = """
import asyncio, time, chaz_nb
from chaz_nb.notebook.kernel_loop import get_loop
_stall = {"phase": "idle", "max": {}}
async def _beat():
    last = time.perf_counter()
    while True:
        await asyncio.sleep(0.010)
        now = time.perf_counter()
        late = (now - last - 0.010) * 1000
        phase = _stall["phase"]
        _stall["max"][phase] = max(_stall["max"].get(phase, 0.0), late)
        last = now
_hb = get_loop().create_task(_beat())
""" + r"""
# --why: a watchdog thread samples the loop thread's stack while the heartbeat is late
import sys, threading, traceback
_loop_thread = threading.get_ident()
_beat_at = [time.perf_counter()]
_samples = []
def _watch():
    while True:
        time.sleep(0.005)
        late = time.perf_counter() - _beat_at[0]
        if late > 0.030:
            frames = sys._current_frames()
            frame = frames.get(_loop_thread)
            if frame is not None:
                _samples.append((_stall["phase"], round(late * 1000), "".join(traceback.format_stack(frame)[-12:])))
            # the background import holds the GIL while the loop waits: where it is now
            for t in threading.enumerate():
                if t.name == "chaz-import-litellm" and t.ident in frames:
                    _samples.append((_stall["phase"] + " [import thread]", round(late * 1000),
                                     "".join(traceback.format_stack(frames[t.ident])[-8:])))
import gc
def _gc_watch(phase, info, _at=[0.0]):
    # a full collection holds the GIL for as long as it walks the heap (--why names it)
    if phase == "start":
        _at[0] = time.perf_counter()
    elif time.perf_counter() - _at[0] > 0.010:
        took = round((time.perf_counter() - _at[0]) * 1000)
        _samples.append((_stall["phase"] + f" [gc gen{info['generation']}]", took,
                         f"a gen-{info['generation']} collection, {took} ms, "
                         f"in thread {threading.current_thread().name}\n"))
if __WHY__:
    gc.callbacks.append(_gc_watch)
    async def _stamp():
        while True:
            _beat_at[0] = time.perf_counter()
            await asyncio.sleep(0.005)
    _stamper = get_loop().create_task(_stamp())
    threading.Thread(target=_watch, daemon=True).start()
""" + """

@chaz_nb.tool
def add(a: int, b: int) -> int:
    '''Add two integers.'''
    return a + b

chaz_nb.current().tools.register(add)
chaz_nb.current().define_agent(chaz_nb.Agent("w", model="openai/fake", api_base=__BASE__, tools=["add"]))
if __SETTLED__:  # let the background import finish before the first turn
    from chaz_nb.engine import backends
    _stall["phase"] = "import, no turn"
    await asyncio.wrap_future(backends.start_import())
    await asyncio.sleep(0.1)
    _stall["phase"] = "idle"
"""

TURN = """
_stall["phase"] = __PHASE__
_r = await chaz_nb.ask(__TEXT__, display=False)
_stall["phase"] = "idle"
print(_r.entry_type.value, _r.content)
"""

BURST = """
from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import NewEntry
_srv = chaz_nb.current()
_sid = _srv.current_session("w")
await asyncio.sleep(0.05)
_stall["phase"] = "1000-entry burst"
await _srv.store.write([NewEntry(_sid, EntryType.TOOL_RESULT, "w", f"add: {i}", payload={"output": str(i)})
                        for i in range(1000)])
await asyncio.sleep(0.05)
_stall["phase"] = "idle"
"""


def turn(phase: str, text: str) -> str:
    return TURN.replace("__PHASE__", repr(phase)).replace("__TEXT__", repr(text))


def show_samples(samples: list[list]) -> None:
    """The loop thread's stack at the worst moment of each stalled phase (for --why)."""
    worst: dict[str, list] = {}
    for phase, late, stack in samples:
        if phase not in worst or late > worst[phase][0]:
            worst[phase] = [late, stack]
    for phase, (late, stack) in worst.items():
        print(f"--- {phase}: loop thread {late} ms late, at:\n{stack}")


def one_run(why: bool = False, settled: bool = False) -> dict[str, float]:
    with FakeModelServer() as server, tempfile.TemporaryDirectory() as cwd:
        server.script(Reply("hello"), Reply(tool_calls=[Call("add", {"a": 2, "b": 3})]), Reply("5"), Reply("again"))
        k = Kernel(cwd, env={"OPENAI_API_KEY": "sk-bench-not-a-real-key-000000"})
        try:
            cells = [
                "%load_ext chaz_nb",
                HEARTBEAT.replace("__BASE__", repr(server.openai_base)).replace("__WHY__", repr(why))
                .replace("__SETTLED__", repr(settled)),
                turn("first turn", "@w hello"),
                turn("first tool call", "@w add 2 and 3"),
                turn("later turn", "@w once more"),
                BURST,
                "import json; print(json.dumps(_stall['max']))",
            ]
            if why:
                cells.insert(-1, "import json; print(json.dumps(_samples))")
            cells += [
            ]
            out = ""
            for cell in cells:
                if why and "_samples" in cell and "phase" not in cell:
                    r = k.run(cell, timeout=60)
                    show_samples(json.loads(r.stdout))
                    continue
                r = k.run(cell, timeout=180)
                if r.status != "ok":
                    raise RuntimeError(f"cell failed: {cell[:60]!r}: {r.outputs}")
                out = r.stdout
                if "chaz_nb.ask" in cell and not out.startswith("Message"):
                    raise RuntimeError(f"turn did not reply: {out!r}")
            return json.loads(out.strip().splitlines()[-1])
        finally:
            k.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--why", action="store_true",
                        help="print the loop thread's and the import thread's stacks during each stall, and full "
                             "garbage collections over 10 ms (each holds the GIL throughout)")
    args = parser.parse_args()
    print(f"largest kernel-loop stall (ms) over {args.runs} fresh kernels each, 10 ms heartbeat; median [min–max]")
    firsts: dict[bool, float] = {}
    for settled in (False, True):
        got = [one_run(args.why, settled) for _ in range(args.runs)]
        firsts[settled] = statistics.median(r.get("first turn", 0.0) for r in got)
        print("first turn sent right after %load_ext (litellm still importing in its thread):" if not settled
              else "first turn sent after the background import finished:")
        for phase in (*PHASES, "import, no turn", "idle"):
            values = [r.get(phase, 0.0) for r in got]
            if any(values) or phase in PHASES:
                print(f"  {phase:<18} {statistics.median(values):8.1f}   [{min(values):.1f}–{max(values):.1f}]")
    for settled, label in ((False, "right after %load_ext"), (True, "after the import")):
        verdict = "met" if firsts[settled] < TARGET_MS else "NOT met"
        print(f"target: first turn < {TARGET_MS:g} ms, {label}: {verdict} ({firsts[settled]:.0f} ms)")


if __name__ == "__main__":
    main()
