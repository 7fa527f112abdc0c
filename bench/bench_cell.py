"""A notebook cell that asks a model, as a user runs it: real kernels, one Jupyter client.

Each row is a cell run in its own fresh kernel (execute request to idle, timed by the client),
all against one local OpenAI-compatible server (tests/fakes/openai_server.py) that answers
every request after ``--latency`` seconds (20 ms) through litellm's real OpenAI provider:

- ``bare``          ``r = await litellm.acompletion(...)`` (no log, no view), whole reply
- ``bare stream``   the same, ``stream=True``, the chunks read
- ``floor``         ``bare`` with the two durable commits the guarantees put on a cell's path: the
                    user's Message before the call (write-ahead) and the reply after it (durable
                    before the cell is done), one-row ``append_many`` each on a DuckDB file, no view
- ``floor stream``  the same around ``bare stream``
- ``chaz``          ``%chaz @a hello``, agent ``a`` defined ``--no-stream`` (durable DuckDB log, live view)
- ``chaz stream``   ``%chaz @a hello`` (streamed, the default)
- ``jupyter-ai``    jupyter-ai v3 ``%%ai fake`` (jupyter-ai-magic-commands, its own sync
                    ``litellm.completion``; no log) when ``--jai-site DIR`` holds it:
                    ``pip install --target DIR jupyter-ai-magic-commands==0.0.4
                    jupyter-ai-litellm==0.1.0``. The kernel appends DIR to ``sys.path``, so
                    it uses the same litellm as the others; without DIR the row is skipped
                    with the reason printed.

``--before [LABEL=]DIR`` (repeatable) adds ``chaz`` / ``chaz stream`` rows run from another
checkout of chaz_nb (``git archive main | tar -x -C DIR``): before/after in the same run.

Rounds are interleaved (one cell of each row in turn, ``--cells`` per round, ``--rounds``).
Printed per row: median ms per cell and its ratio to ``bare`` (streamed rows to ``bare
stream``); iopub and comm messages per cell (every iopub message that arrives while the
cell runs, its own ``status`` and ``execute_input`` left out); against jupyter-ai, the
``floor`` rows show how close to ``%%ai`` any cell with a durable log before and after the
call can come on this machine; widgets created per cell
(``comm_open`` of ``jupyter.widget``); and the kernel's RSS after it loaded its extension
and ran one turn (before any other cell), all from the same run: VmRSS, RssAnon (its
private part: without the pages of shared libraries such as DuckDB's, which every kernel on
the machine shares) and ``duckdb``, the resident pages of DuckDB's shared library (from the
kernel's /proc/self/smaps; file-backed, so shared, but counted in VmRSS), in MB.

    python bench/bench_cell.py [--rounds 3] [--cells 40] [--jai-site /tmp/jai-site] [--before DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import queue
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from jupyter_client.manager import KernelManager  # noqa: E402

from fakes.openai_server import FakeModelServer, Reply  # noqa: E402

RSS = "print(*(int(l.split()[1]) // 1024 for l in open('/proc/self/status') if l.startswith(('VmRSS:', 'RssAnon:'))))"

#: the kernel's resident pages of DuckDB's shared library (file-backed, shared by every process
#: that maps it, and counted in each one's RSS), in MB, from its own /proc/self/smaps
DUCKDB_PAGES = (
    "_m = False; _kb = 0\n"
    "for _l in open('/proc/self/smaps'):\n"
    "    if _l[:1] in '0123456789abcdef' and '-' in _l.split(' ', 1)[0]: _m = '_duckdb' in _l\n"
    "    elif _m and _l.startswith('Rss:'): _kb += int(_l.split()[1])\n"
    "print(_kb // 1024)"
)


#: the ``floor`` rows' store: one durable commit of one entry a ``_write`` (``append_many``)
FLOOR = (
    "import os, tempfile\n"
    "from chaz_nb import SessionStore\n"
    "from chaz_nb.core.entries import EntryType\n"
    "from chaz_nb.core.writer import NewEntry\n"
    "_store = SessionStore(os.path.join(tempfile.mkdtemp(), 'floor.duckdb'))\n"
    "_sid = _store.create_session('a')\n"
    "def _write(text, sender='user'):\n"
    "    _store.append_many([NewEntry(_sid, EntryType.MESSAGE, sender, text)])"
)


class AnsweringServer(FakeModelServer):
    """The wire fixture, answering every request with the same reply after ``latency`` s."""

    def __init__(self, latency: float) -> None:
        super().__init__()
        self.reply = Reply("Hello! This is the fake model answering your cell.", delay=latency)

    def _next(self, model: str | None) -> Reply:
        return self.reply

    def _record(self, rec: Any) -> None:  # thousands of requests: keep none
        pass


@dataclass
class Cell:
    ms: float
    messages: int
    widgets: int
    kinds: collections.Counter[str]


class BenchKernel:
    """A python3 kernel of this venv with ``root`` first on its path."""

    def __init__(self, cwd: str, root: str, env: dict[str, str]) -> None:
        self.km = KernelManager(kernel_name="python3")
        full = dict(os.environ)
        for name in ("CHAZ_DB", "CHAZ_MODEL"):
            full.pop(name, None)
        full.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        full.update(env)
        full["PYTHONPATH"] = root
        self.km.start_kernel(cwd=cwd, env=full)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def run(self, code: str, timeout: float = 300) -> tuple[Cell, str, str | None]:
        """Run one cell; its time (send to idle + reply), messages, stdout and error name."""
        msg = self.kc.session.msg(
            "execute_request",
            {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
        )
        msg_id = msg["header"]["msg_id"]
        kinds: collections.Counter[str] = collections.Counter()
        widgets, stdout, error = 0, [], None
        t0 = time.perf_counter()
        self.kc.shell_channel.send(msg)
        deadline = time.monotonic() + timeout
        while True:
            try:
                m = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"cell did not finish in {timeout} s: {code[:60]!r}") from None
                continue
            mine = m["parent_header"].get("msg_id") == msg_id
            kind = m["msg_type"]
            if mine and kind == "status":
                if m["content"]["execution_state"] == "idle":
                    break
                continue
            if mine and kind == "execute_input":
                continue
            kinds[kind] += 1
            if kind == "comm_open" and m["content"].get("target_name") == "jupyter.widget":
                widgets += 1
            if kind == "stream" and m["content"]["name"] == "stdout":
                stdout.append(m["content"]["text"])
            if kind == "error":
                error = f"{m['content']['ename']}: {m['content']['evalue']}"
        while True:
            reply = self.kc.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        ms = (time.perf_counter() - t0) * 1000
        return Cell(ms, sum(kinds.values()), widgets, kinds), "".join(stdout), error

    def must(self, code: str) -> str:
        _, out, error = self.run(code)
        if error:
            raise RuntimeError(f"{code[:80]!r} failed: {error}")
        return out

    def close(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)


@dataclass
class Row:
    name: str
    root: str
    setup: list[str]
    cell: str
    base: str  # the row its ratio is taken against
    kernel: BenchKernel | None = None
    rss_mb: int = 0
    anon_mb: int = 0  # RssAnon: private memory (RSS less the shared libraries' and files' pages)
    duckdb_mb: int = 0  # resident pages of DuckDB's shared library (file-backed, part of RSS)
    cells: list[Cell] = field(default_factory=list)
    medians: list[float] = field(default_factory=list)


def rows_for(api: str, jai_site: str | None, before: list[str] | None) -> tuple[list[Row], list[str]]:
    bare = "import litellm\n_msgs = [{'role': 'user', 'content': 'hello'}]"
    call = f"model='openai/fake', api_base={api!r}, api_key='sk-bench', messages=_msgs"
    rows = [
        Row(
            "bare", ROOT, [bare], f"r = await litellm.acompletion({call})\nprint(r.choices[0].message.content)", "bare"
        ),
        Row(
            "bare stream",
            ROOT,
            [bare],
            f"r = [c async for c in await litellm.acompletion({call}, stream=True, "
            "stream_options={'include_usage': True})]\nprint(len(r))",
            "bare stream",
        ),
    ]
    rows += [
        Row("floor", ROOT, [bare, FLOOR], f"_write('hello')\nr = await litellm.acompletion({call})\n"
            "_write(r.choices[0].message.content, 'a')\nprint(r.choices[0].message.content)", "bare"),
        Row("floor stream", ROOT, [bare, FLOOR], f"_write('hello')\nr = [c async for c in await litellm.acompletion("
            f"{call}, stream=True, stream_options={{'include_usage': True}})]\n_write(str(len(r)), 'a')\nprint(len(r))",
            "bare stream"),
    ]
    agent = f"%chaz agent a --model openai/fake --api-base {api}"
    trees = [("", ROOT)]
    for spec in before or []:  # LABEL=DIR, or DIR (labelled "before")
        label, _, root = spec.rpartition("=")
        trees.append((f" ({label or 'before'})", root))
    for label, root in trees:
        rows.append(Row("chaz" + label, root, ["%load_ext chaz_nb", agent + " --no-stream"], "%chaz @a hello", "bare"))
        rows.append(Row("chaz stream" + label, root, ["%load_ext chaz_nb", agent], "%chaz @a hello", "bare stream"))
    skipped = []
    marker = os.path.join(jai_site or "", "jupyter_ai_magic_commands", "__init__.py")
    if jai_site and os.path.exists(marker):
        rows.append(
            Row(
                "jupyter-ai %%ai",
                ROOT,
                [
                    f"import sys; sys.path.append({jai_site!r})",
                    "%load_ext jupyter_ai_magic_commands",
                    f"%ai alias fake openai/fake --api-base {api}",
                ],
                "%%ai fake\nhello",
                "bare",
            )
        )
    elif jai_site:
        skipped.append(f"jupyter-ai: no jupyter_ai_magic_commands in {jai_site}")
    else:
        skipped.append(
            "jupyter-ai: not installed beside it (pass --jai-site DIR after "
            "pip install --target DIR jupyter-ai-magic-commands==0.0.4 jupyter-ai-litellm==0.1.0)"
        )
    return rows, skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cells", type=int, default=40, help="cells of each row per round")
    ap.add_argument("--latency", type=float, default=0.020, help="the model server's answer time (s)")
    ap.add_argument("--jai-site", default=None, help="a pip --target dir holding jupyter-ai's magics")
    ap.add_argument(
        "--before",
        action="append",
        metavar="[LABEL=]DIR",
        help="another chaz_nb checkout whose chaz rows run beside (repeatable)",
    )
    ap.add_argument("--only", default=None, help="comma-separated row names to run (bare and floor always run)")
    args = ap.parse_args()

    server = AnsweringServer(args.latency)
    rows, skipped = rows_for(server.openai_base, args.jai_site, args.before)
    if args.only:
        keep = {"bare", "bare stream", "floor", "floor stream", *args.only.split(",")}
        rows = [r for r in rows if r.name in keep]
    workdir = tempfile.mkdtemp(prefix="bench-cell-")
    try:
        for row in rows:  # one fresh kernel a row: its RSS after load + one turn
            cwd = os.path.join(workdir, row.name.replace(" ", "_").replace("%", "").replace("(", "").replace(")", ""))
            os.makedirs(cwd)
            row.kernel = BenchKernel(cwd, row.root, {"OPENAI_API_KEY": "sk-bench"})
            for code in row.setup:
                row.kernel.must(code)
            _, out, error = row.kernel.run(row.cell)
            if error:
                raise RuntimeError(f"{row.name}: {error}")
            row.rss_mb, row.anon_mb = map(int, row.kernel.must(RSS).split())
            row.duckdb_mb = int(row.kernel.must(DUCKDB_PAGES))
        for _ in range(3):  # warm
            for row in rows:
                row.kernel.run(row.cell)  # type: ignore[union-attr]
        for _ in range(args.rounds):
            per_round: dict[str, list[float]] = collections.defaultdict(list)
            for _ in range(args.cells):
                for row in rows:
                    cell, _, error = row.kernel.run(row.cell)  # type: ignore[union-attr]
                    if error:
                        raise RuntimeError(f"{row.name}: {error}")
                    row.cells.append(cell)
                    per_round[row.name].append(cell.ms)
            for row in rows:
                row.medians.append(statistics.median(per_round[row.name]))
    finally:
        for row in rows:
            if row.kernel is not None:
                row.kernel.close()
        server.close()

    by_name = {r.name: r for r in rows}
    print(
        f"bench_cell: {args.rounds} rounds x {args.cells} cells, model answers in {args.latency * 1000:.0f} ms; "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'cell':26s} {'ms/cell':>8s} {'vs bare':>8s} {'rounds (ms)':>24s} {'msgs':>5s} {'widgets':>7s} "
        f"{'RSS MB':>7s} {'anon':>5s} {'duckdb':>6s}  messages by type (per cell)"
    )
    for row in rows:
        ms = statistics.median(row.medians)
        base = statistics.median(by_name[row.base].medians)
        n = len(row.cells)
        kinds = collections.Counter[str]()
        for c in row.cells:
            kinds.update(c.kinds)
        by_type = ", ".join(f"{k} {v / n:.1f}" for k, v in kinds.most_common())
        print(
            f"{row.name:26s} {ms:8.1f} {ms / base:7.2f}x {' / '.join(f'{m:.1f}' for m in row.medians):>24s} "
            f"{sum(c.messages for c in row.cells) / n:5.1f} {sum(c.widgets for c in row.cells) / n:7.1f} "
            f"{row.rss_mb:7d} {row.anon_mb:5d} {row.duckdb_mb:6d}  {by_type}"
        )
    jai = by_name.get("jupyter-ai %%ai")
    if jai is not None:
        j = statistics.median(jai.medians)
        for r in rows:
            if r.name.startswith(("chaz", "floor")):
                name = r.name
                print(
                    f"{name} vs jupyter-ai: {statistics.median(r.medians) / j:.2f}x per cell, "
                    f"RSS {r.rss_mb - jai.rss_mb:+d} MB (anon {r.anon_mb - jai.anon_mb:+d} MB, DuckDB's library "
                    f"{r.duckdb_mb - jai.duckdb_mb:+d} MB, other files "
                    f"{(r.rss_mb - r.anon_mb - r.duckdb_mb) - (jai.rss_mb - jai.anon_mb - jai.duckdb_mb):+d} MB)"
                )
    for reason in skipped:
        print(f"skipped {reason}")


if __name__ == "__main__":
    main()
