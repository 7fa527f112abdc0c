"""Time the first screen of ``%chaz log`` and of the live session view: 50k entries vs 1k.

Builds one session of 1,000 and one of 50,000 entries in a DuckDB file (written through the
store directly, in batches), then loads the extension on that file in IPython's test shell
(``IPython.testing.globalipapp``, as the tests do) and times, for each session:

- ``%chaz log SESSION``: the magic, from the line to the displayed bundle (text, HTML and the
  session JSON: the newest page, 50 entries, and the "N earlier entries" line);
- the live view's first render: a following ``SessionView`` (ipywidgets built) and its bundle;
- ``%chaz log SESSION --all`` and a view without paging: the whole log, what both did before.

Each figure is the median of ``--runs`` runs after one warm-up run. Target: the first screen in < 100 ms at 50k.

    .venv/bin/python bench/bench_paging.py [--runs 5] [--sizes 1000,50000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

TARGET_MS = 100.0
BATCH = 5000


def build(path: str, sizes: list[int]) -> dict[int, int]:
    """One session per size, a run-like mix of entries; {size: session id}."""
    from chaz_nb.core.entries import EntryType
    from chaz_nb.core.store import NewEntry, SessionStore

    store = SessionStore(path)
    sessions: dict[int, int] = {}
    try:
        for size in sizes:
            sid = store.create_session("assistant")
            sessions[size] = sid
            items: list[NewEntry] = []
            for i in range(size):
                k = i % 5
                if k == 0:
                    items.append(NewEntry(sid, EntryType.MESSAGE, "user", f"question {i}: what is {i} + 1?"))
                elif k == 1:
                    items.append(NewEntry(sid, EntryType.ACK, "assistant", "assistant is working"))
                elif k == 2:
                    items.append(NewEntry(sid, EntryType.TOOL_CALL, "assistant", "add", tool_call_id=f"c{i}",
                                          tool_name="add", payload={"arguments": {"a": i, "b": 1}}))
                elif k == 3:
                    items.append(NewEntry(sid, EntryType.TOOL_RESULT, "assistant", str(i + 1), tool_call_id=f"c{i - 1}",
                                          tool_name="add", payload={"output": str(i), "duration_ms": 0.1}))
                else:
                    items.append(NewEntry(sid, EntryType.MESSAGE, "assistant", f"{i - 4} + 1 = {i - 3}"))
                if len(items) >= BATCH:
                    store.append_many(items)
                    items = []
            if items:
                store.append_many(items)
    finally:
        store.close()
    return sessions


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm up: the first call pays for imports and the widget classes
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="1000,50000", help="session sizes, comma-separated")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sessions.duckdb")
        t0 = time.perf_counter()
        sessions = build(path, sizes)
        print(f"built sessions of {', '.join(f'{n:,}' for n in sizes)} entries in "
              f"{time.perf_counter() - t0:.1f} s ({path})")

        os.environ["CHAZ_DB"] = path
        os.environ.pop("CHAZ_MODEL", None)
        from IPython.testing.globalipapp import get_ipython

        ip = get_ipython()
        with contextlib.redirect_stdout(io.StringIO()):
            ip.run_line_magic("load_ext", "chaz_nb")
        import chaz_nb
        from chaz_nb.notebook.views.session import SessionView

        server = chaz_nb.current()
        loop = asyncio.new_event_loop()

        def log(line: str) -> Callable[[], None]:
            def run() -> None:
                with contextlib.redirect_stdout(io.StringIO()):
                    ip.run_line_magic("chaz", line)
            return run

        def live(sid: int, page: int | None) -> Callable[[], None]:
            def run() -> None:
                view = SessionView(server.store, sid, status=lambda _s: "running", loop=loop,
                                   follow=True, page=page, streams=None)
                view.bundle()  # widget built; text, HTML and the session JSON rendered
                view.close()
            return run

        rows = []
        for size in sizes:
            sid = sessions[size]
            rows.append((size, {
                "%chaz log (first screen)": median_ms(log(f"log {sid}"), args.runs),
                "live view first render": median_ms(live(sid, 50), args.runs),
                "%chaz log --all": median_ms(log(f"log {sid} --all"), max(1, min(args.runs, 3))),
                "live view, no paging": median_ms(live(sid, None), max(1, min(args.runs, 3))),
            }))
        with contextlib.redirect_stdout(io.StringIO()):
            ip.run_line_magic("unload_ext", "chaz_nb")
        loop.close()

    names = list(rows[0][1])
    width = max(len(n) for n in names)
    print(f"\nmedian of {args.runs} runs (ms)")
    print(f"{'':{width}}  " + "  ".join(f"{size:>10,}" for size, _ in rows))
    for name in names:
        print(f"{name:{width}}  " + "  ".join(f"{figures[name]:>10.1f}" for _, figures in rows))
    small, big = rows[0][1], rows[-1][1]
    for name in ("%chaz log (first screen)", "live view first render"):
        ok = big[name] < TARGET_MS
        print(f"{name} at {sizes[-1]:,} entries: {big[name]:.1f} ms = {big[name] / small[name]:.2f}x "
              f"{sizes[0]:,} entries; target < {TARGET_MS:.0f} ms: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
