"""Time ``%load_ext chaz_nb`` in a fresh kernel against ``import litellm`` alone.

Each measurement starts a new kernel and times the kernel's *first* cell:

- ``pass``               the cost of a first cell at all (baseline)
- ``load_ext``           ``%load_ext chaz_nb`` in a new working directory (the store is created)
- ``load_ext again``     the same in a directory whose store exists (a notebook opened again)
- ``import litellm``     what an eager import of litellm would cost

Wall time is measured on the client (execute_request to idle) and, inside the kernel, around
the statement itself (``time.perf_counter``). Target: the extension adds < 150 ms, and the load
does not wait for litellm (its import runs on in a background thread after the load returns).

The chaz_nb trees are byte-compiled first (``compileall`` into their ``__pycache__``, which git
ignores), as a pip-installed package is: with ``PYTHONDONTWRITEBYTECODE`` set, as on the
development machine, a checkout without them compiles every module from source in every kernel
(~0.3 s of a first ``%load_ext`` here). ``--source`` skips that step.

``--before [LABEL=]DIR`` (repeatable) adds the ``load_ext`` rows of another checkout of chaz_nb
(``git worktree add --detach DIR REV``): before/after in the same run, interleaved.

    python bench/bench_load_ext.py [--runs 3] [--before base=DIR] [--source]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_cell import BenchKernel  # noqa: E402

TARGET_MS = 150.0
LOAD = "get_ipython().run_line_magic('load_ext', 'chaz_nb')"
#: right after the load: did it return before litellm's background import was done?
IMPORTING = "from chaz_nb.engine import litellm_loader as _l; print(_l._litellm is None)"


def first_cell(root: str, statement: str, cwd: str, check: str | None = None) -> tuple[float, float, str]:
    """(client wall ms, in-kernel ms, what ``check`` printed) of the first cell of a fresh kernel."""
    k = BenchKernel(cwd, root, {})
    try:
        code = f"import time as _t; _t0 = _t.perf_counter()\n{statement}\n_ms = (_t.perf_counter() - _t0) * 1000\n"
        cell, _, error = k.run(code, timeout=120)
        assert error is None, error
        extra = k.must(check).strip() if check else ""
        inner = float(k.must("print(round(_ms, 1))"))
        return cell.ms, inner, extra
    finally:
        k.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", action="append", metavar="[LABEL=]DIR", help="another chaz_nb checkout")
    ap.add_argument("--source", action="store_true", help="do not byte-compile the trees first")
    args = ap.parse_args()
    trees = [("", ROOT)]
    for spec in args.before or []:
        label, _, root = spec.rpartition("=")
        trees.append((f" ({label or 'before'})", root))
    if not args.source:
        for _, root in trees:
            compileall.compile_dir(os.path.join(root, "chaz_nb"), quiet=1)
    rows: list[tuple[str, str, str, bool]] = [
        ("pass", ROOT, "pass", False),
        ("import litellm", ROOT, "import litellm", False),
    ]
    for label, root in trees:
        rows.append(("load_ext" + label, root, LOAD, False))
        rows.append(("load_ext again" + label, root, LOAD, True))
    results: dict[str, list[tuple[float, float]]] = {r[0]: [] for r in rows}
    waited: dict[str, list[str]] = {r[0]: [] for r in rows}
    work = tempfile.mkdtemp(prefix="bench-load-ext-")
    try:
        for i in range(args.runs):
            for label, root, statement, again in rows:
                cwd = os.path.join(work, f"{i}-{label}".replace(" ", "_").replace("(", "").replace(")", ""))
                os.makedirs(cwd)
                if again:  # the store exists: created by an earlier kernel in this directory
                    first_cell(root, LOAD, cwd)
                check = IMPORTING if statement == LOAD else None
                wall, inner, extra = first_cell(root, statement, cwd, check)
                results[label].append((wall, inner))
                waited[label].append(extra)
                print(f"run {i + 1}: {label:28s} wall {wall:8.1f} ms   in kernel {inner:8.1f} ms", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(label: str, idx: int) -> float:
        return statistics.median(x[idx] for x in results[label])

    print()
    print(f"median of {args.runs} fresh kernels (first cell), bytecode {'not ' if args.source else ''}compiled, "
          f"load {os.getloadavg()[0]:.1f}:")
    for label, *_ in rows:
        print(f"  {label:28s} wall {med(label, 0):8.1f} ms   in kernel {med(label, 1):8.1f} ms")
    print()
    ok = True
    for label, root, statement, _ in rows:
        if statement != LOAD:
            continue
        added = med(label, 1) - med("pass", 1)
        background = all(x == "True" for x in waited[label])
        print(f"{label}: adds {added:.1f} ms in the kernel; returned before litellm's import was done: {background}")
        if root == ROOT:  # the target is this checkout's
            ok = ok and added < TARGET_MS and background
    print(f"import litellm alone takes {med('import litellm', 1):.1f} ms in the kernel")
    print(f"target < {TARGET_MS:.0f} ms, litellm imported in the background: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
