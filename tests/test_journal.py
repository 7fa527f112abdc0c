"""The DuckDB store's journal (issue 43, section 2): an append is durable once its line is
fdatasync'd in ``<db>.journal``; the DuckDB commit follows behind. Every read sees every entry
appended before it; a killed process loses no entry whose append returned, and on reopen the
journal's tail is replayed into DuckDB once, then emptied.
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.core.sqlquery import run_query
from chaz_nb.core.store import NewEntry, SessionStore
from chaz_nb.core.store.journal import journal_path
from chaz_nb.errors import SQLFailed, StoreError

WRITER = Path(__file__).parent / "helpers" / "journal_writer.py"
KILLS = 20


@pytest.fixture(params=["duckdb", "postgres"])
def any_store(request, tmp_path):
    """A store on each back end: a DuckDB file (journaled), and PostgreSQL (its own commit)."""
    if request.param == "duckdb":
        s = SessionStore(str(tmp_path / "s.duckdb"))
    else:
        s = SessionStore.open(request.getfixturevalue("pg_url"))
    yield s
    s.close()


def _in_thread(read):
    """``read()`` on another thread (a tool's, a widget's), its result."""
    out = []
    worker = threading.Thread(target=lambda: out.append(read()))
    worker.start()
    worker.join(30)
    return out[0]


def _forked_contents(store, sid):
    copy = store.fork_session(sid)
    return [e.content for e in store.entries(copy.session_id)]


#: each kind of read, and what it gives for a session whose last entry's content is "fresh"
READS = {
    "read (the audit view's SQL)": lambda s, sid, e: s.read(
        "SELECT content FROM entries WHERE session_id = ? ORDER BY seq DESC LIMIT 1", [sid])[0][0],
    "an audit view": lambda s, sid, e: s.read(
        "SELECT count(*) FROM messages WHERE session_id = ?", [sid])[0][0] == 2 and "fresh",
    "%chaz sql": lambda s, sid, e: run_query(
        f"SELECT content FROM entries WHERE id = {e.id}", store=s).rows[0][0],
    "sql": lambda s, sid, e: s.sql("SELECT content FROM entries WHERE id = ?", [e.id]).fetchall()[0][0],
    "execute": lambda s, sid, e: s.execute("SELECT content FROM entries WHERE id = ?", [e.id])[0][0],
    "another thread": lambda s, sid, e: _in_thread(lambda: s.read(
        "SELECT content FROM entries WHERE id = ?", [e.id]))[0][0],
    "read_page": lambda s, sid, e: s.read_page(sid, limit=1)[0].content,
    "entry": lambda s, sid, e: s.entry(e.id).content,
    "find_entries": lambda s, sid, e: s.find_entries(EntryType.MESSAGE, "id = ?", [e.id])[0].content,
    "fork": lambda s, sid, e: _forked_contents(s, sid)[-1],
    "a reopened store": None,  # (the test below: close, then a new store on the file)
}


@pytest.mark.parametrize("kind", list(READS))
async def test_every_read_sees_an_entry_appended_just_before_it(any_store, kind):
    store = any_store
    sid = store.create_session("a")
    await store.write_one(sid, EntryType.MESSAGE, "u", "first")
    store.read("SELECT 1")  # (the first entry is in DuckDB: only the next one waits in the journal)
    entry = await store.write_one(sid, EntryType.MESSAGE, "u", "fresh")
    if store.dialect == "duckdb":
        assert store._unapplied, "the append returned before its DuckDB commit (else this tests nothing)"
    if READS[kind] is None:
        if store.dialect != "duckdb":
            pytest.skip("a DuckDB file's reopen")
        store.close()
        with SessionStore(store.path, read_only=True) as again:
            assert again.entries(sid)[-1].content == "fresh"
        return
    assert READS[kind](store, sid, entry) == "fresh"


async def test_a_read_only_reader_in_another_process_waits_for_the_kernel(tmp_path):
    """While the writing kernel holds the file no other process reads it (DuckDB's lock), so no
    reader can miss the journal's rows: ``%chaz sql --db`` says so."""
    path = str(tmp_path / "s.duckdb")
    store = SessionStore(path)
    try:
        sid = store.create_session("a")
        await store.write_one(sid, EntryType.MESSAGE, "u", "fresh")
        assert store._unapplied
        code = ("import sys; from chaz_nb.core.sqlquery import run_query\n"
                "try: run_query('SELECT count(*) FROM entries', db=sys.argv[1])\n"
                "except Exception as exc: print(exc)")
        out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
        assert "held by another kernel" in out.stdout
    finally:
        store.close()


def _kill_after_journal(path: str, appends: int = 3) -> list[tuple[int, int, int, str]]:
    """Run the writer until its ``appends``-th append returned and kill it before that entry's
    DuckDB commit; the entries it printed."""
    out = subprocess.run([sys.executable, str(WRITER), path, "--die-after", str(appends)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == -signal.SIGKILL, out.stderr
    return _printed(out.stdout.splitlines())


def _printed(lines) -> list[tuple[int, int, int, str]]:
    rows = []
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[0].isdigit():
            rows.append((int(parts[0]), int(parts[1]), int(parts[2]), parts[3]))
    return rows


def _check_reopened(path: str, printed, attempt: object = "") -> None:
    """Every printed entry is in the file exactly once, as printed; the seqs are gapless; the
    journal was emptied once DuckDB had its rows."""
    with SessionStore(path) as store:
        rows = {r[0]: r[1:] for r in store.execute("SELECT id, session_id, seq, content FROM entries")}
        missing = [p for p in printed if rows.get(p[0]) != p[1:]]
        assert not missing, f"kill {attempt}: entries lost or changed: {missing[:5]}"
        assert store.execute("SELECT count(*) - count(DISTINCT (session_id, seq)) FROM entries") == [(0,)]
        gaps = store.execute("SELECT session_id FROM entries GROUP BY session_id HAVING max(seq) <> count(*)")
        assert gaps == [], f"kill {attempt}: seq gaps in sessions {gaps}"
        assert os.path.getsize(journal_path(path)) == 0
        ids = set(rows)
    with SessionStore(path) as again:  # a second reopen replays nothing twice
        assert {r[0] for r in again.execute("SELECT id FROM entries")} == ids


def test_entries_journaled_but_not_committed_in_duckdb_are_replayed_once_on_open(tmp_path):
    path = str(tmp_path / "s.duckdb")
    printed = _kill_after_journal(path)
    assert printed and os.path.getsize(journal_path(path)) > 0
    _check_reopened(path, printed)


def test_a_read_only_open_refuses_a_file_whose_journal_holds_rows_duckdb_lacks(tmp_path):
    """A reader that opened the DuckDB file alone after its kernel died would miss entries whose
    append returned: it is told to open the file read-write once (which replays them)."""
    path = str(tmp_path / "s.duckdb")
    printed = _kill_after_journal(path)
    with pytest.raises(StoreError, match="not yet in .* open it read-write once"):
        SessionStore(path, read_only=True)
    with pytest.raises(SQLFailed, match="not yet in .* open it read-write once"):
        run_query("SELECT count(*) FROM entries", db=path)
    _check_reopened(path, printed)
    assert run_query("SELECT count(*) FROM entries", db=path).rows[0][0] >= len(printed)


def test_a_torn_last_line_is_ignored_and_a_damaged_middle_line_refused(tmp_path):
    path = str(tmp_path / "s.duckdb")
    printed = _kill_after_journal(path)
    with open(journal_path(path), "ab") as f:  # killed inside the write of a line: its append never returned
        f.write(b'0badc0de {"columns": "id", "rows": [[99')
    _check_reopened(path, printed)

    printed += _kill_after_journal(path, appends=8)
    with open(journal_path(path), "rb") as f:
        lines = f.read().split(b"\n")
    assert len(lines) > 2
    lines[0] = lines[0][:9] + b"[" + lines[0][10:]  # damaged, with good lines after it
    with open(journal_path(path), "wb") as f:
        f.write(b"\n".join(lines))
    with pytest.raises(StoreError, match="line 1 of the journal is damaged"):
        SessionStore(path)
    assert os.path.getsize(journal_path(path)) > 0  # kept as it was


def test_a_journal_write_that_fails_writes_nothing_and_the_next_one_works(tmp_path, monkeypatch):
    path = str(tmp_path / "s.duckdb")
    with SessionStore(path) as store:
        sid = store.create_session("a")
        store.append(sid, EntryType.MESSAGE, "u", "one")

        def full(fd):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fdatasync", full)
        with pytest.raises(StoreError, match="could not write entry.*No space left"):
            store.append_many([NewEntry(sid, EntryType.MESSAGE, "u", "two")])
        monkeypatch.undo()
        assert store.append(sid, EntryType.MESSAGE, "u", "three").seq == 2
        assert [e.content for e in store.entries(sid)] == ["one", "three"]
    with SessionStore(path) as again:
        assert [(e.seq, e.content) for e in again.entries(sid)] == [(1, "one"), (2, "three")]


def test_a_store_without_the_journal_replays_one_left_behind(tmp_path):
    path = str(tmp_path / "s.duckdb")
    printed = _kill_after_journal(path)
    with SessionStore(path, journal=False) as store:
        assert {r[0] for r in store.execute("SELECT id FROM entries")} >= {p[0] for p in printed}
    assert os.path.getsize(journal_path(path)) == 0


def test_sigkill_at_random_points_loses_no_entry_whose_append_returned(tmp_path):
    rng = random.Random(20261207)
    path = str(tmp_path / "crash.duckdb")
    printed: list[tuple[int, int, int, str]] = []
    replayed = 0
    for attempt in range(KILLS):
        proc = subprocess.Popen([sys.executable, str(WRITER), path], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": os.getcwd()})
        lines: list[str] = []
        ready = threading.Event()

        def read(proc=proc, lines=lines, ready=ready) -> None:
            for line in proc.stdout:
                if line.strip() == "ready":
                    ready.set()
                lines.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert ready.wait(60), "writer did not start"
        time.sleep(rng.uniform(0.01, 0.4))  # (a random kill point: no event to wait on here)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        reader.join(10)
        printed += _printed(lines)
        replayed += os.path.getsize(journal_path(path)) > 0
        _check_reopened(path, printed, attempt)
    assert len(printed) > 200  # the writer really wrote between kills
    assert replayed  # some kills fell between a journaled append and its DuckDB commit


def test_a_duckdb_commit_that_fails_behind_loses_no_entry_and_reads_say_why(tmp_path):
    """The append returned (its line is durable): a DuckDB commit refused behind it keeps the
    rows journaled; the next append takes the next ids, a read says what failed, and the entries
    are there once DuckDB takes them (here: the next open)."""
    path = str(tmp_path / "s.duckdb")
    store = SessionStore(path)
    sid = store.create_session("a")
    real = store._db

    class Refusing:
        def execute(self, sql, params=None):
            if sql.startswith("INSERT INTO entries"):
                raise __import__("duckdb").IOException("IO Error: disk went away")
            return real.execute(sql, params or [])

        def __getattr__(self, name):
            return getattr(real, name)

    store._db = Refusing()
    one = store.append(sid, EntryType.MESSAGE, "u", "one")
    two = store.append(sid, EntryType.MESSAGE, "u", "two")
    assert (one.seq, two.seq, two.id) == (1, 2, one.id + 1)
    with pytest.raises(StoreError, match="could not commit journaled entries.*disk went away"):
        store.read("SELECT count(*) FROM entries")
    store._db = real
    real.close()  # the kernel dies here: nothing committed in DuckDB
    with SessionStore(path) as again:
        assert [(e.seq, e.content) for e in again.entries(sid)] == [(1, "one"), (2, "two")]
