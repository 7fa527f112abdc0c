"""PostgreSQL's side of the store's SQL: URLs as shown, the store's DuckDB-style SQL in
psycopg's form (``to_pg``), ``sql()``'s results, and the connection settings (``connect``).

The store's own SQL (and the server's: schedules, recovery) is written with ``?`` parameters
and DuckDB's ``INSERT OR REPLACE``; ``to_pg`` turns them into psycopg's ``%s`` and
``ON CONFLICT (id) DO UPDATE``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.types.string import TextLoader

from .base import Row

if TYPE_CHECKING:  # pragma: no cover
    import pandas

if TYPE_CHECKING:  # pragma: no cover
    pass


def is_postgres_url(path: str) -> bool:
    return str(path).startswith(("postgresql://", "postgres://"))


def display_url(url: str) -> str:
    """The URL without its password (it is shown in notebooks and errors)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


_PLACEHOLDER = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|%|\?")
_INSERT_OR_REPLACE = re.compile(r"^\s*INSERT\s+OR\s+REPLACE\s+INTO\s+(\w+)\s*\(([^)]*)\)(.*)$", re.I | re.S)


def to_pg(query: str) -> str:
    """DuckDB-style SQL of the store and the server into psycopg's: ``?`` → ``%s``, a literal
    ``%`` doubled, ``INSERT OR REPLACE INTO t (id, ...)`` → an upsert on ``id``."""

    def swap(m: re.Match[str]) -> str:
        token = m.group(0)
        return "%s" if token == "?" else "%%" if token == "%" else token

    query = _PLACEHOLDER.sub(swap, query)
    upsert = _INSERT_OR_REPLACE.match(query)
    if upsert:
        table, columns, rest = upsert.groups()
        names = [c.strip() for c in columns.split(",")]
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in names if c != "id")
        query = f"INSERT INTO {table} ({columns}){rest} ON CONFLICT (id) DO UPDATE SET {sets}"
    return query


class PgResult:
    """What ``sql()`` returns: DuckDB-relation-like (``fetchall``, ``fetchone``, ``columns``, ``df``)."""

    def __init__(self, columns: list[str], rows: list[tuple]) -> None:
        self.columns = columns
        self._rows = rows

    def fetchall(self) -> list[Row]:
        return list(self._rows)

    def fetchone(self) -> Row | None:
        return self._rows[0] if self._rows else None

    def df(self) -> pandas.DataFrame:
        import pandas as pd

        return pd.DataFrame(self._rows, columns=self.columns)


def connect(url: str) -> psycopg.Connection:
    """An autocommit connection that reads json as text, as DuckDB gives it (stored text kept)."""
    con = psycopg.connect(url, autocommit=True)
    con.adapters.register_loader("json", TextLoader)
    return con



def one_line(exc: BaseException) -> str:
    """The first line of a driver's error (its message, else its class's name)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_BIGINT = 2**63 - 1


def bigint(n: int) -> int:
    """``n`` as a whole number within PostgreSQL's bigint (a larger one means "all of them")."""
    return max(-_BIGINT, min(int(n), _BIGINT))
