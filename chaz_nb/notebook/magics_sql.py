"""``%chaz sql`` and ``%chaz audit``: the read-only SQL audit trail from a notebook."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError


class SqlCommands:
    """Mixin of ChazMagics: ``_cmd_sql``, ``_cmd_audit``."""

    def _cmd_sql(self, rest: str) -> Any:
        from ..sqlquery import SQLFailed, SQLRefused, run_query

        if not rest:
            raise UsageError("usage: %chaz sql QUERY, e.g. %chaz sql SELECT * FROM runs LIMIT 5")
        try:
            return run_query(rest, self.state.server.store).relation
        except (SQLFailed, SQLRefused) as exc:
            raise UsageError(f"%chaz sql: {exc}") from None
