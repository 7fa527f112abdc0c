"""Several kernels started on the same default database: none crashes, none loses an entry,
each says where it writes, and cross-notebook queries are read-only or say the file is held."""

from __future__ import annotations

import re

import duckdb
import pytest

from kernel_harness import Kernel

TURNS = 5


@pytest.fixture
def kernels(tmp_path):
    started = []
    try:
        for _ in range(3):
            started.append(Kernel(str(tmp_path)))
        yield started
    finally:
        for k in started:
            k.close()


def test_three_kernels_on_one_default_database(kernels, tmp_path):
    lines = []
    for k in kernels:
        r = k.run("%load_ext chaz_nb")
        assert r.status == "ok", r.outputs
        lines.append(r.stdout.strip())
    # the first kernel holds the default file; each other one says so and names its own
    assert lines[0].startswith("chaz_nb: sessions in .chaz/sessions.duckdb"), lines[0]
    own_files = [".chaz/sessions.duckdb"]
    for line in lines[1:]:
        held = r"chaz_nb: \.chaz/sessions\.duckdb is held by another kernel; this kernel uses (\S+) "
        m = re.match(held + r"\(set CHAZ_DB=postgresql://\.\.\. to share sessions between notebooks\) ·", line)
        assert m, line
        own_files.append(m.group(1))
    assert len(set(own_files)) == 3

    # interleaved turns in all three kernels
    for turn in range(TURNS):
        for i, k in enumerate(kernels):
            r = k.run(f"%chaz @assistant kernel {i} turn {turn}")
            assert r.status == "ok", r.outputs

    # a held file cannot be read from another kernel: a clear one-line message
    r = kernels[0].run(f"%chaz sql --db {own_files[1]} SELECT count(*) FROM entries")
    assert r.status == "error" and "held by another kernel" in r.stderr and r.stderr.count("\n") == 1

    # once its kernel is gone the file can be queried read-only from a notebook
    kernels[1].run("%unload_ext chaz_nb")
    r = kernels[0].run(
        f"%chaz sql --db {own_files[1]} -o other --relation SELECT count(*) AS n FROM messages\n"
        "print(other.fetchall()[0][0])"
    )
    assert r.status == "ok", r.outputs
    assert r.stdout.strip().splitlines()[-1] == str(2 * TURNS)
    r = kernels[0].run(f"%chaz sql --db {own_files[1]} DELETE FROM entries")
    assert r.status == "error" and "read-only" in r.stderr

    for k in kernels:
        k.run("%unload_ext chaz_nb")
    # no entry lost: every kernel's file has both sides of every turn
    for i, path in enumerate(own_files):
        con = duckdb.connect(str(tmp_path / path), read_only=True)
        rows = con.execute(
            "SELECT sender, content FROM entries WHERE entry_type = 'Message' ORDER BY id"
        ).fetchall()
        con.close()
        asked = [c for s, c in rows if s == "user"]
        answered = [c for s, c in rows if s == "assistant"]
        assert asked == [f"kernel {i} turn {t}" for t in range(TURNS)]
        assert answered == [f"echo: kernel {i} turn {t}" for t in range(TURNS)]
