"""Appends entries to a DuckDB file store forever, printing each entry whose append returned.

Used by tests/test_journal.py, which SIGKILLs it at random points (or, with ``--die-after N``,
it kills itself right after its Nth append returned, before the DuckDB commit behind it).
Each printed line is ``id session seq content``: what the reopened store must hold.
"""

import asyncio
import os
import signal
import sys

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import NewEntry, SessionStore


def show(entries) -> None:
    for e in entries:
        print(e.id, e.session_id, e.seq, e.content, flush=True)


async def main(path: str, die_after: int | None) -> None:
    store = SessionStore(path)
    sessions = [store.create_session("w") for _ in range(3)]
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        sid = sessions[i % 3]
        kind = i % 4
        if kind == 0:  # one entry, awaited
            show([await store.write_one(sid, EntryType.MESSAGE, "u", f"m{i}")])
        elif kind == 1:  # two requests in one group commit
            a, b = await asyncio.gather(store.write([NewEntry(sid, EntryType.MESSAGE, "u", f"a{i}")]),
                                        store.write([NewEntry(sessions[(i + 1) % 3], EntryType.ACK, "w", f"b{i}")]))
            show(a + b)
        elif kind == 2:  # written behind, hurried by its waiter
            future = store.write_behind([NewEntry(sid, EntryType.ACK, "w", f"w{i}")])
            store.hurry()
            show(await future)
        else:  # a model call's wait (the DuckDB commit falls in it), then a read
            await asyncio.sleep(0.002)
            store.read("SELECT count(*) FROM entries")
            show([store.append(sid, EntryType.MESSAGE, "u", f"s{i}")])
        if die_after is not None and i >= die_after and store._unapplied:
            os.kill(os.getpid(), signal.SIGKILL)  # journaled, not yet committed in DuckDB


if __name__ == "__main__":
    die = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--die-after" else None
    asyncio.run(main(sys.argv[1], die))
