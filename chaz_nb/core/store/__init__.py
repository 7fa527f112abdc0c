"""The session store: one contract (``base.Store``), two implementations.

- ``base.py``: the contract every store keeps, and ``SharedSessions``, the capability of a
  store whose sessions several processes serve (leases, a listener); ask
  ``isinstance(store, SharedSessions)`` for it.
- ``duckdb.py``: ``SessionStore``, a DuckDB file (or ``:memory:``) one process writes;
  ``SessionStore.open(path)`` picks PostgreSQL for a ``postgresql://`` URL.
- ``postgres.py``: ``PgSessionStore``, a PostgreSQL database several kernels share (psycopg:
  imported only then).
- ``pgteam.py``: ``TeamAccess``, the capability of a store whose roles the database confines
  (PostgreSQL: who this kernel is, sharing a session); ``isinstance(store, TeamAccess)``.
- ``rows.py``: the rows both read and write; ``log_cache.py``: DuckDB's memory of its
  sessions' newest entries; ``migrations.py``: one migration list, a body per dialect.
"""

from ...errors import StoreError, StoreLockedError
from ..writer import NewEntry, OnWrite
from .base import ForkCopy, SessionInfo, SharedSessions, SqlResult, Store, served_elsewhere
from .duckdb import SessionStore
from .lockdown import LOCKED_DOWN, read_only_transaction
from .pgteam import TeamAccess
from .rows import (ENTRY_COLUMNS, Row, Value, bool_value, entry_from_row, int_or_none, int_value, run_id_of,
                   session_from_row, str_or_none, str_value, time_or_none, utcnow)

__all__ = [
    "ENTRY_COLUMNS", "LOCKED_DOWN", "ForkCopy", "NewEntry", "OnWrite", "Row", "SessionInfo", "SessionStore",
    "SharedSessions", "SqlResult", "Store", "StoreError", "StoreLockedError", "TeamAccess", "Value", "bool_value",
    "entry_from_row", "int_or_none", "int_value", "read_only_transaction", "run_id_of", "served_elsewhere",
    "session_from_row", "str_or_none", "str_value", "time_or_none", "utcnow",
]
