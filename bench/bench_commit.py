"""What one durable DuckDB commit of one entry row costs here, and where (issue 14).

Every case writes one row of ``entries`` in one autocommitted transaction, as
``SessionStore.append_many`` does for a one-entry batch; the cases of a group run
interleaved (round robin, the order reversed every other round), so machine noise hits
them alike. Medians over ``--rounds``.

1. ``ways``: how the row reaches DuckDB, file store, real schema: the store's
   ``execute(sql, params)``, a reused cursor, ``executemany``, SQL ``PREPARE`` once +
   ``EXECUTE``, literal SQL, the Appender (``con.appender``, flushed per row), the relational
   API's ``insert``, one list-of-STRUCT parameter; and BEGIN/INSERT/COMMIT (three statements).
2. ``parts``: what the commit is made of: a ``SELECT 1``, parsing the INSERT alone, the INSERT
   in a ``:memory:`` database (no WAL, no fsync), the constraints (PRIMARY KEY, the unique
   (session_id, seq) index), tables of 1/4/11/22 columns, and ``write`` + ``fdatasync`` of
   600 bytes (the WAL record of one row is ~400-550 bytes, written and synced once a commit).
3. ``settings``: connect-time settings of the writer's instance (``threads``, ``async_threads``,
   ``scheduler_process_partial``, ``pin_threads``).
4. ``cold``: the store's commit right after 5 ms of other Python work (JSON in and out, as a
   turn's litellm and server code before it): the CPU caches no longer hold DuckDB's code and
   data; and right after 20 ms idle (a model call's wait, then the reply's commit).
5. ``gil``: the same commit while another Python thread is busy: DuckDB releases the GIL while
   it works, and each time the busy thread keeps it for up to ``sys.getswitchinterval()``.

Run: python bench/bench_commit.py [--rounds 300] [--only ways,parts,settings,cold,gil]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import duckdb

from chaz_nb.core.store.migrations import MIGRATIONS, apply_duckdb
from chaz_nb.core.store import LOCKED_DOWN

COLS = "id, session_id, seq, entry_type, sender, content, tool_call_id, tool_name, payload, created_at, run_id"
INSERT = f"INSERT INTO entries ({COLS}) VALUES ({', '.join('?' * 11)})"
ROW_TYPE = ("STRUCT(id BIGINT, session_id BIGINT, seq BIGINT, entry_type VARCHAR, sender VARCHAR, content VARCHAR, "
            "tool_call_id VARCHAR, tool_name VARCHAR, payload VARCHAR, created_at TIMESTAMP, run_id BIGINT)")
PAYLOAD = '{"run_id": 12, "model": "openai/bench", "usage": {"prompt_tokens": 12, "completion_tokens": 3}}'

Case = tuple[str, Any, Callable[[Any], Any]]


class Rows:
    """Fresh ids for every row of every case (one counter: ids never collide within a table)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> list[Any]:
        self.n += 1
        return [self.n, 1 + self.n % 9, self.n, "Message", "bench", "done, the answer is 42", None, None, PAYLOAD,
                dt.datetime.now(dt.timezone.utc).replace(tzinfo=None), 12]


row = Rows()


def full_row() -> list[Any]:
    """A row for the APIs that fill every column in order (the Appender, ``relation.insert``):
    the store's table ends with ``copied_from`` (the forks' migration), None here."""
    return [*row(), None]


def append_flushed(app: Any) -> None:
    """One row through the Appender, flushed: its own commit."""
    app.append_row(*full_row())
    app.flush()


class Databases:
    def __init__(self, tmp: str) -> None:
        self.tmp, self.k = tmp, 0

    def connect(self, where: str = "file", **config: Any) -> duckdb.DuckDBPyConnection:
        self.k += 1
        path = ":memory:" if where == "memory" else os.path.join(self.tmp, f"{self.k}.duckdb")
        return duckdb.connect(path, config={**LOCKED_DOWN, **config})

    def store(self, where: str = "file", **config: Any) -> duckdb.DuckDBPyConnection:
        con = self.connect(where, **config)
        apply_duckdb(con, MIGRATIONS)
        return con

    def entries(self, where: str = "memory", pk: bool = False, unique: bool = False) -> Any:
        """``entries`` as migration 001 + 003 make it, with or without its constraints."""
        con = self.connect(where)
        con.execute(f"CREATE TABLE entries (id BIGINT {'PRIMARY KEY' if pk else ''}, session_id BIGINT NOT NULL, "
                    "seq BIGINT NOT NULL, entry_type VARCHAR NOT NULL, sender VARCHAR NOT NULL, content VARCHAR "
                    "NOT NULL, tool_call_id VARCHAR, tool_name VARCHAR, payload JSON, created_at TIMESTAMP NOT NULL, "
                    "run_id BIGINT)")
        if unique:
            con.execute("CREATE UNIQUE INDEX entries_session_seq ON entries (session_id, seq)")
        return con

    def table(self, columns: int) -> Any:
        con = self.connect("memory")
        con.execute(f"CREATE TABLE t ({', '.join(f'c{i} BIGINT' for i in range(columns))})")
        return con


def literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    return "'" + str(value).replace("'", "''") + "'"


def insert(con: Any) -> None:
    con.execute(INSERT, row())


def reused(make: Callable[[Any], Any], use: Callable[[Any], None]) -> Callable[[Any], None]:
    """A case that builds its helper (cursor, appender, relation, prepared statement) once per connection."""
    made: dict[int, Any] = {}

    def run(con: Any) -> None:
        if id(con) not in made:
            made[id(con)] = make(con)
        use(made[id(con)])

    return run


def ways(db: Databases) -> list[Case]:
    def three(con: Any) -> None:
        con.execute("BEGIN TRANSACTION")
        con.execute(INSERT, row())
        con.execute("COMMIT")

    keys = [c.strip() for c in COLS.split(",")]
    return [
        ("execute(sql, params) (the store's)", db.store(), insert),
        ("cursor reused", db.store(), reused(lambda c: c.cursor(), insert)),
        ("executemany, one row", db.store(), lambda c: c.executemany(INSERT, [row()])),
        ("PREPARE once, EXECUTE (literals)", db.store(),
         reused(lambda c: c.execute(f"PREPARE ins AS {INSERT}"),
                lambda c: c.execute(f"EXECUTE ins({', '.join(map(literal, row()))})"))),
        ("literal SQL", db.store(), lambda c: c.execute(f"INSERT INTO entries ({COLS}) VALUES "
                                                         f"({', '.join(map(literal, row()))})")),
        ("Appender, flushed per row", db.store(), reused(lambda c: c.appender("entries"), append_flushed)),
        ("relation.insert", db.store(), reused(lambda c: c.table("entries"), lambda r: r.insert(full_row()))),
        ("one list-of-STRUCT parameter", db.store(),
         lambda c: c.execute(f"INSERT INTO entries ({COLS}) SELECT unnest(?::{ROW_TYPE}[], recursive := true)",
                             [[dict(zip(keys, row(), strict=True))]])),
        ("BEGIN; INSERT; COMMIT", db.store(), three),
    ]


def parts(db: Databases) -> list[Case]:
    fd = os.open(os.path.join(db.tmp, "synced"), os.O_WRONLY | os.O_CREAT)

    def synced(_: Any) -> None:
        os.write(fd, b"x" * 600)
        os.fdatasync(fd)

    def wide(columns: int) -> Callable[[Any], None]:
        sql = f"INSERT INTO t VALUES ({', '.join('?' * columns)})"
        return lambda c: c.execute(sql, [7] * columns)

    return [
        ("file: the store's INSERT", db.store(), insert),
        ("memory: the store's INSERT", db.store("memory"), insert),
        ("SELECT 1, fetched", db.connect("memory"), lambda c: c.execute("SELECT 1").fetchall()),
        ("parse the INSERT only", db.connect("memory"), lambda c: c.extract_statements(INSERT)),
        ("memory, entries, PK + unique index", db.entries(pk=True, unique=True), insert),
        ("memory, entries, PK only", db.entries(pk=True), insert),
        ("memory, entries, unique index only", db.entries(unique=True), insert),
        ("memory, entries, no constraint", db.entries(), insert),
        ("file, entries, no constraint", db.entries("file"), insert),
        ("memory, 1 BIGINT column", db.table(1), wide(1)),
        ("memory, 4 BIGINT columns", db.table(4), wide(4)),
        ("memory, 11 BIGINT columns", db.table(11), wide(11)),
        ("memory, 22 BIGINT columns", db.table(22), wide(22)),
        ("write + fdatasync 600 bytes", None, synced),
    ]


def settings(db: Databases) -> list[Case]:
    return [(f"file: {name}", db.store(**config), insert) for name, config in (
        ("defaults", {}), ("threads=1", {"threads": 1}), ("async_threads=1", {"async_threads": 1}),
        ("scheduler_process_partial", {"scheduler_process_partial": True}), ("pin_threads=off", {"pin_threads": "off"}),
        ("threads=1, async_threads=1", {"threads": 1, "async_threads": 1}))]


BUSY = {f"k{i}": [{"a": j, "b": "x" * 50} for j in range(20)] for i in range(200)}


def other_work(ms: float) -> None:
    """``ms`` of Python work that allocates and walks a few MB (JSON out and back in, kept a while)."""
    t0 = time.perf_counter()
    kept: list[Any] = []
    while time.perf_counter() - t0 < ms / 1000:
        kept.append(json.loads(json.dumps(BUSY)))
        if len(kept) > 5:
            kept.clear()


def cold(db: Databases) -> list[Case]:
    return [("warm: the store's INSERT", db.store(), insert),
            ("warm: threads=1", db.store(threads=1), insert),
            ("after 5 ms of other work: the store's INSERT", db.store(), insert),
            ("after 5 ms of other work: threads=1", db.store(threads=1), insert),
            ("after 20 ms idle: the store's INSERT", db.store(), insert)]


def run(title: str, cases: list[Case], rounds: int) -> None:
    times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for i in range(rounds + 20):
        for name, con, fn in cases if i % 2 else cases[::-1]:
            if name.startswith("after 5 ms"):
                other_work(5)
            elif name.startswith("after 20 ms idle"):
                time.sleep(0.02)
            t0 = time.perf_counter()
            fn(con)
            if i >= 20:  # the first 20 rounds warm up
                times[name].append(time.perf_counter() - t0)
    print(f"\n{title} (median of {rounds}, interleaved; p90)")
    for name, _, _ in cases:
        ms = sorted(t * 1000 for t in times[name])
        print(f"  {name:44s} {statistics.median(ms):6.3f} ms  p90 {ms[int(len(ms) * 0.9)]:6.3f}")


def gil(db: Databases, rounds: int) -> None:
    state = {"busy": False, "stop": False}

    def spin() -> None:
        n = 0
        while not state["stop"]:
            if state["busy"]:
                n += 1
            else:
                time.sleep(0.0005)

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    cases = [("execute(sql, params), defaults", db.store(), insert),
             ("execute(sql, params), threads=1", db.store(threads=1), insert),
             ("Appender, flushed per row", db.store(), reused(lambda c: c.appender("entries"), append_flushed)),
             ("Appender, threads=1", db.store(threads=1), reused(lambda c: c.appender("entries"), append_flushed))]
    try:
        run("another Python thread idle", cases, rounds)
        state["busy"] = True
        run(f"another Python thread busy (switch interval {sys.getswitchinterval() * 1000:.0f} ms)",
            cases, max(20, rounds // 10))
    finally:
        state["stop"] = True
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--only", default="ways,parts,settings,cold,gil")
    args = parser.parse_args()
    only = set(args.only.split(","))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"duckdb {duckdb.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        db = Databases(tmp)
        for name, build in (("ways", ways), ("parts", parts), ("settings", settings), ("cold", cold)):
            if name in only:
                run(f"{name}: one row, one commit", build(db), args.rounds)
        if "gil" in only:
            gil(db, args.rounds)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
