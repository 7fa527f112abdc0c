"""Every exception chaz_nb raises, in one place, under one base class (``ChazError``).

Each message is one line that says what to do. The classes keep the built-in base they had
before they moved here (``AgentError`` is still a ``ValueError``, ``NotLoadedError`` a
``RuntimeError``), so ``except ValueError`` in a caller still catches what it caught. This
module imports nothing from the package: every layer (core, engine, server, notebook) may use it.
"""

from __future__ import annotations

from typing import Any


class ChazError(Exception):
    """Base of every chaz_nb error: ``except chaz_nb.errors.ChazError`` catches them all."""


# ----------------------------------------------------------------- core (store, SQL)
class StoreError(ChazError):
    """A store operation that cannot be done; the message says what to do."""


class StoreLockedError(StoreError):
    """The database file is held by another process (another kernel): close it there, or
    open another file (``%chaz db PATH``)."""


class EntryTooLarge(StoreError):
    """An entry over the store's entry limit (``CHAZ_MAX_ENTRY_CHARS``): nothing was written."""


class SQLRefused(ChazError, ValueError):
    """A statement that would change the store (or the connection): only SELECT-like reads run.

    ``what`` names what is refused ("DELETE statements", "a WITH that runs DELETE").
    """

    what = ""


class SQLFailed(ChazError, ValueError):
    """DuckDB could not run the query; the message is DuckDB's, on one line: fix the query."""


# ------------------------------------------------------ engine (tools, model calls)
class ToolError(ChazError):
    """A tool call that cannot run (unknown tool, bad arguments); fed back to the model,
    which can call again with what the message asks for."""


class ModelCallError(ChazError):
    """A model call failed; carries what the run had used before it. The run ends with an
    Error entry naming the reason (check the model name, the key, the network)."""

    def __init__(self, reason: str, usage: Any, steps: int, details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage
        self.steps = steps
        #: what the backend knows of the failure (kind, status, provider, attempts)
        self.details = details or {}


class ToolCallsNotRecorded(ChazError):
    """The session log refused a step's ToolCall entries, so none of the step's tools ran (the
    log is write-ahead: no tool effect without its record). The run ends with an Error entry
    naming the calls and the store's reason; carries what the run had used before it."""

    def __init__(self, reason: str, usage: Any, steps: int, calls: list[tuple[str, str]]) -> None:
        names = ", ".join(name for _, name in calls)
        super().__init__(f"tool call(s) not run: the session log refused their ToolCall entries ({names}): {reason}")
        self.reason = reason
        self.usage = usage
        self.steps = steps
        #: (tool_call_id, tool name) of each call of the step, in the model's order
        self.calls = calls


class ProviderError(ChazError):
    """A model call that failed for good (after the retries); ``str()`` is the one line the Error
    entry shows, naming what to check (the key, the model name, the provider's status)."""

    def __init__(self, message: str, *, model: str, provider: str, kind: str,
                 status: int | None = None, attempts: int = 1, partial_text: str | None = None,
                 extra: dict[str, Any] | None = None, head: str | None = None) -> None:
        super().__init__(message)
        #: what failed, without what to do (the message's first sentence), where the maker knows it
        self.head = head
        #: more of what is known (a context-window refusal: context_tokens, context_window)
        self.extra = dict(extra or {})
        self.model, self.provider, self.kind = model, provider, kind
        self.status, self.attempts = status, attempts
        #: the reply text streamed before the stream broke (``None``: nothing was streamed)
        self.partial_text = partial_text

    def details(self) -> dict[str, Any]:
        """What the Error entry's payload records (no key, no header value)."""
        details: dict[str, Any] = {"error_kind": self.kind, "status": self.status, "provider": self.provider,
                                   "attempts": self.attempts, **self.extra}
        if self.partial_text is not None:
            details["partial_text"] = self.partial_text
            details["stream_broken"] = True
        return details


class TreeBudgetExceeded(ChazError):
    """The run tree has used up its budget; the message says which limit and how to raise it
    (``Agent(max_spawns=...)`` / ``Agent(max_model_calls=...)``)."""


# ------------------------------------------------------------ server and its parts
class McpToolRefused(ChazError, ValueError):
    """An MCP server's tool left out of the registry (its input schema is too large to send the
    model on every step); the server's other tools are offered. Fix or configure the server."""


class ServerError(ChazError):
    """A server request that cannot be served; the message says what to do."""


class UndoRefused(ServerError):
    """``%chaz undo`` that changed nothing: the call is unknown, already undone, its
    before-state is gone, or it did what no undo takes back (the message says which flag goes on)."""


class AgentError(ChazError, ValueError):
    """An agent definition that cannot be used; the message says what to change."""


class CeilingError(ChazError, ValueError):
    """A stored ceiling that cannot be read; the session refuses to run rather than run open:
    start a new session."""


class ApprovalError(ChazError, ValueError):
    """A decision that cannot be taken (unknown or already decided request); the message says why."""


class CompactionError(ChazError, ValueError):
    """A compaction that cannot be done (too little context, no agent to summarize); the
    message is one line saying why."""


class TriggerError(ChazError, ValueError):
    """A trigger text that cannot be parsed; the message is one line saying what to write
    (``every 10m``, ``at 09:00``, ``cron 0 9 * * 1-5``)."""


class ScheduleError(ChazError, ValueError):
    """A schedule request that cannot be served; the message says what to do."""


class LateBoundError(ChazError, RuntimeError):
    """A late-bound value used before it was set, or set twice: build the Server first (it
    sets it), and build one Server per tool registry."""


# ------------------------------------------------------------------------ notebook
class NotLoadedError(ChazError, RuntimeError):
    """``chaz_nb.current()`` / ``ask()`` before ``%load_ext chaz_nb``: run that first."""


class WaitInterrupted(ChazError):
    """The user interrupted a wait; the run goes on. Shown by IPython as one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def _render_traceback_(self) -> list[str]:  # IPython: no traceback, just this line
        return [f"\x1b[0;31m{self.message}\x1b[0m"]
