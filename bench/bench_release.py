"""Finished `%chaz` cells in one real kernel: does the kernel let go of their views? (issue 32 §2)

Each tree (this checkout, and every ``--before [LABEL=]DIR``, e.g. ``git archive main | tar -x
-C DIR``) gets a fresh kernel driven by a Jupyter client, with an offline agent
(``chaz/echo``, no model server) and the default log (a DuckDB file in a temporary
directory). The kernel runs ``--cells`` cells of ``%chaz new @a`` + ``%chaz @a hello`` (a fresh
session each, so the prompt does not grow either); trees are interleaved in blocks of 20
cells. Printed per tree: the widgets the kernel holds (``ipywidgets``' registry) and its RSS
after 20 cells and at the end, the growth per 100 cells, the median cell time of cells 11-30
and of the last 20, and the iopub + comm messages per cell.

    python bench/bench_release.py [--cells 200] [--before base=/tmp/chaz-base]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_cell import BenchKernel  # noqa: E402

PROBE = (
    "from ipywidgets.widgets import widget as _w\n"
    "print(len(getattr(_w, '_instances', None) or _w.Widget.widgets),"
    " *(int(l.split()[1]) // 1024 for l in open('/proc/self/status') if l.startswith('VmRSS:')))"
)
SETUP = ["%load_ext chaz_nb", "%chaz agent a --model chaz/echo"]
CELL = "%chaz new @a\n%chaz @a hello"
BLOCK = 20


def probe(kernel: BenchKernel) -> tuple[int, int]:
    widgets, rss = kernel.must(PROBE).split()
    return int(widgets), int(rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=200)
    ap.add_argument("--before", action="append", metavar="[LABEL=]DIR", help="another checkout run beside")
    args = ap.parse_args()
    trees = [("now", ROOT)]
    for spec in args.before or []:
        label, _, root = spec.rpartition("=")
        trees.append((label or "before", root))

    workdir = tempfile.mkdtemp(prefix="bench-release-")
    kernels: dict[str, BenchKernel] = {}
    times: dict[str, list[float]] = {label: [] for label, _ in trees}
    msgs: dict[str, list[int]] = {label: [] for label, _ in trees}
    at20: dict[str, tuple[int, int]] = {}
    try:
        for label, root in trees:
            cwd = os.path.join(workdir, label)
            os.makedirs(cwd)
            kernels[label] = BenchKernel(cwd, root, {})
            for code in SETUP:
                kernels[label].must(code)
        for _ in range(0, args.cells, BLOCK):
            for label, _ in trees:
                for _ in range(BLOCK):
                    cell, _, error = kernels[label].run(CELL)
                    if error:
                        raise RuntimeError(f"{label}: {error}")
                    times[label].append(cell.ms)
                    msgs[label].append(cell.messages)
                if len(times[label]) == BLOCK:
                    at20[label] = probe(kernels[label])
        end = {label: probe(kernels[label]) for label, _ in trees}
    finally:
        for kernel in kernels.values():
            kernel.close()

    n = len(times[trees[0][0]])
    print(
        f"bench_release: {n} finished cells a kernel (fresh session each, chaz/echo, DuckDB file); "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'tree':10s} {'widgets@20':>10s} {'widgets@end':>11s} {'RSS@20':>7s} {'RSS@end':>8s} "
        f"{'MB/100 cells':>12s} {'ms 11-30':>8s} {'ms last 20':>10s} {'msgs':>5s}"
    )
    for label, _ in trees:
        (w20, r20), (wend, rend) = at20[label], end[label]
        per100 = (rend - r20) * 100 / max(1, n - BLOCK)
        print(
            f"{label:10s} {w20:10d} {wend:11d} {r20:7d} {rend:8d} {per100:12.2f} "
            f"{statistics.median(times[label][10:30]):8.1f} {statistics.median(times[label][-20:]):10.1f} "
            f"{statistics.mean(msgs[label]):5.1f}"
        )


if __name__ == "__main__":
    main()
