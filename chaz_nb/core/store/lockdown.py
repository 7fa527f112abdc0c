"""The DuckDB instance the store opens, and the read-only transactions users' SQL runs in.

The DuckDB instance is opened locked down (``LOCKED_DOWN``): no file access besides its own
database file (no ``COPY ... TO``, ``EXPORT``, ``ATTACH`` of a file, ``read_csv``, extension
``LOAD``/``INSTALL``) and no configuration change (``SET`` is refused). The store needs none of
them, and this is what lets ``%chaz sql`` and the audit view run users' SQL on the writer's own
instance without being able to write anything (see ``chaz_nb.core.sqlquery``): DuckDB cannot open the
same file a second time in the process, not even read-only. To export data, fetch it
(``store.sql(...).fetchall()`` / ``.df()``) and write it from Python.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import duckdb

from ...errors import StoreError, StoreLockedError

#: DuckDB settings of every store instance (and of ``%chaz sql --db``'s read-only one):
#: queries cannot touch the file system, load extensions or change any setting afterwards.
LOCKED_DOWN: dict[str, bool] = {"enable_external_access": False, "lock_configuration": True}


@contextmanager
def read_only_transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """Run the block in ``BEGIN TRANSACTION READ ONLY`` on ``con``, rolled back afterwards.

    DuckDB refuses any write to any attached database inside it when the statement is bound
    (before a row is touched), however the write is spelled: a DELETE inside a WITH,
    ``EXPLAIN ANALYZE UPDATE``, ``nextval()``, ``MERGE``. Use a cursor of its own: a statement
    that ends the transaction (``COMMIT``) makes the ROLLBACK fail, which is ignored.
    """
    con.execute("BEGIN TRANSACTION READ ONLY")
    try:
        yield con
    finally:
        # nothing to undo: ends the snapshot; TransactionException: the block ended it itself
        with suppress(duckdb.TransactionException):
            con.execute("ROLLBACK")


def connect(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    """The store's locked-down connection to ``path``; a one-line StoreError when it cannot open."""
    if path != ":memory:":
        parent = os.path.dirname(os.path.abspath(path))
        if not read_only:
            os.makedirs(parent, exist_ok=True)
    try:
        return duckdb.connect(path, read_only=read_only, config=dict(LOCKED_DOWN))
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            raise StoreLockedError(
                f"{path} is in use by another process (another kernel?); "
                "close that kernel or choose another file with CHAZ_DB"
            ) from None
        raise StoreError(f"cannot open {path}: {text.splitlines()[0]}") from None
