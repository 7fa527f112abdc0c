"""The kernel as a tool server named ``kernel``: its variables, frames, SQL over them, the
cells the person ran, and Python run in it with approval.

``KernelTools(host).install(registry)`` registers ``kernel__variables``, ``kernel__describe``,
``kernel__query``, ``kernel__cells`` and ``kernel__run``. The host is where code runs and what
the tools read: ``PlainHost(namespace_dict)`` for a Server built outside IPython
(``Server.add_kernel(globals())``), the notebook's own for ``%load_ext chaz_nb``.

The read-only tools are sync functions, so they run on a worker thread and never hold the
kernel loop; each sends only what the calling agent's data policy allows (policy.py: one policy
for every tool, results and errors alike) and says in its ToolResult payload (``egress``) what
it sent, for the ``data_egress`` view: a failed call too (its error may quote the data).
``kernel__run`` is the one tool that holds the loop: it runs the code on the kernel's thread
between cells, as a cell would (run.py), under the agent's ``code_timeout``; each call that
ran leaves a record for ``%chaz undo`` (undo_book.py: references to what it rebound or deleted,
effects.py: what no undo takes back; undo.py undoes it).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ...core.codemask import code_sha256
from ...engine.tools import Tool, ToolRegistry, ToolReply, function_tool
from ...errors import ToolError
from ..agents import DEFAULT_CODE_TIMEOUT
from ..egress import egress_target
from ..ports import current_run
from .describe import DataToolError, Egress, describe, lookup, safe_repr, variables
from .effects import Effects
from .interrupts import Interrupter
from .namespace import changes, snapshot, user_items
from .policy import REDACTED, DataPolicy, Secrets, clip, names_in
from .run import CellOutput, CodeHost, PlainHost, nb_outputs, reply_text
from .undo_book import UndoBook, current_call, make_record

__all__ = ["KERNEL_READ_ONLY", "KERNEL_TOOLS", "CodeHost", "KernelTools", "PlainHost", "egress_target"]

KERNEL_READ_ONLY = ("kernel__variables", "kernel__describe", "kernel__query", "kernel__cells")
KERNEL_TOOLS = (*KERNEL_READ_ONLY, "kernel__run")
#: cells ``kernel__cells`` returns at most
MAX_CELLS = 100


def ledgered(fn: Callable[..., ToolReply], host: CodeHost) -> Callable[..., ToolReply]:
    """A read-only kernel tool whose failure is sent as its result is: masked under the calling
    agent's policy, and recorded with an ``egress`` payload (a ToolError would reach the model
    with neither). ``fn`` keeps its signature and docstring (the tool's schema)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> ToolReply:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure's text may quote the notebook's data
            policy = DataPolicy.current()
            egress = exc.egress if isinstance(exc, DataToolError) else Egress()
            text = str(exc) if isinstance(exc, ToolError) else f"{fn.__name__} failed: {type(exc).__name__}: {exc}"
            text = clip(text, policy.max_chars, Secrets.of(host.namespace, host.hidden))
            egress.chars = len(text)
            return ToolReply(text, is_error=True, payload={"egress": egress_payload(egress, policy)})

    return wrapper


def egress_payload(egress: Egress, policy: DataPolicy) -> dict[str, Any]:
    """The ``egress`` payload: what was sent, under which policy, to which model and host."""
    ctx = current_run.get()
    return {**egress.to_json(policy), **egress_target(ctx.agent if ctx is not None else None)}


class KernelTools:
    """The ``kernel`` tool server over one host (see the module docstring)."""

    def __init__(self, host: CodeHost) -> None:
        self.host = host
        self._lock = asyncio.Lock()
        self._guard: Interrupter | None = None
        self._guard_lock = threading.Lock()
        #: what ``%chaz undo`` needs of the recent ``kernel__run`` calls (undo_book.py)
        self.undo_book = UndoBook()
        #: told what each piece of code produced: (session, the code's sha256, nbformat
        #: outputs); the approved ones become cells (server/cells.py)
        self.produced: Callable[[int, str, list[dict[str, Any]]], None] | None = None
        self.tools: list[Tool] = self._build()

    @property
    def namespace(self) -> Any:
        return self.host.namespace

    def install(self, registry: ToolRegistry) -> None:
        for t in self.tools:
            registry.register(t)

    def uninstall(self, registry: ToolRegistry) -> None:
        for t in self.tools:
            if registry.get(t.name) is t:
                registry.unregister(t.name)

    def stop(self, reason: str = "stopped by user") -> bool:
        """Stop the agent code running now (KeyboardInterrupt in it), from any thread."""
        with self._guard_lock:
            guard = self._guard
        return guard.stop(reason) if guard is not None else False

    @property
    def running(self) -> bool:
        return self._guard is not None

    def attach(self, names: Iterable[str], agent: Any) -> tuple[str, dict[str, Any]]:
        """``%chaz @NAME --with a,b``: each variable's description under ``agent``'s policy.

        Returns the text appended to the Message (what the model reads) and its payload
        (``attachments`` and the ``egress`` the ``data_egress`` view reads). An unknown name is
        a ToolError listing the nearest names."""
        policy = DataPolicy.of(agent)
        secrets = Secrets.of(self.host.namespace, self.host.hidden)
        blocks: list[str] = []
        attachments: list[dict[str, Any]] = []
        total = Egress()
        for name in names:
            obj = lookup(self.host.namespace, name, self.host.hidden)
            text, egress = describe(name, obj, policy, secrets)
            blocks.append(f"--- attached: {name} ---\n{text}")
            attachments.append({"name": name, "chars": len(text), "rows": egress.rows, "columns": egress.columns})
            total.variables.append(name)
            total.rows += egress.rows
            total.columns += egress.columns
            total.chars += len(text)
        egress_json = {**total.to_json(policy), **egress_target(agent)}
        return "\n\n".join(blocks), {"attachments": attachments, "egress": egress_json}

    # ------------------------------------------------------------ the tools
    def _build(self) -> list[Tool]:
        host = self.host

        def kernel__variables() -> ToolReply:
            """List the notebook's variables: name, type, shape or length, approximate memory (never values)."""
            policy = DataPolicy.current()
            text, egress = variables(host.namespace, host.hidden, policy.max_chars)
            text = clip(text, policy.max_chars, Secrets.of(host.namespace, host.hidden))
            egress.chars = len(text)
            return ToolReply(text, payload={"egress": egress_payload(egress, policy)})

        def kernel__describe(name: str) -> ToolReply:
            """Describe one notebook variable: a DataFrame's rows, columns, dtypes, nulls,
            summaries and first rows; an array's shape and summary; anything else, its type and repr.

            Args:
                name: the variable's name, as kernel__variables lists it
            """
            policy = DataPolicy.current()
            obj = lookup(host.namespace, name, host.hidden)
            text, egress = describe(name, obj, policy, Secrets.of(host.namespace, host.hidden))
            return ToolReply(text, payload={"egress": egress_payload(egress, policy)})

        def kernel__query(sql: str) -> ToolReply:
            """Run read-only DuckDB SQL over the notebook's DataFrames, arrow tables and numpy
            arrays, named by their variable names (SELECT region, sum(amount) FROM sales GROUP BY 1).

            Args:
                sql: one or more read-only statements (SELECT, EXPLAIN, informational PRAGMA)
            """
            # imported at the first query: DuckDB's query instance and the read-only check
            # (core/sqlquery.py) are for the agents that query frames, not for every turn
            from .query import run_query

            policy = DataPolicy.current()
            text, egress = run_query(sql, host.namespace, policy, host.hidden,
                                     secrets=Secrets.of(host.namespace, host.hidden))
            return ToolReply(text, payload={"egress": egress_payload(egress, policy)})

        def kernel__cells(last: int = 10) -> ToolReply:
            """The code of the last cells the person ran in the notebook, and the text of their results.

            Args:
                last: how many cells, newest last (at most 100)
            """
            policy = DataPolicy.current()
            if not 1 <= last <= MAX_CELLS:
                raise ToolError(f"kernel__cells: last must be from 1 to {MAX_CELLS}, not {last}")
            cells = host.history(last)
            if not cells:
                return ToolReply("no cells run yet", payload={"egress": egress_payload(Egress(chars=16), policy)})
            secrets = Secrets.of(host.namespace, host.hidden)
            lines: list[str] = []
            rows = 0
            for number, code, value in cells:
                lines.append(f"[{number}]: {code.rstrip()}")
                if value is not None and policy.values:
                    shown = REDACTED if secrets.holds(value) else safe_repr(value, 500)
                    lines.append(f"Out[{number}]: {shown}")
                    rows += 1
            text = clip("\n".join(lines), policy.max_chars, secrets)
            names = names_in(code for _, code, _ in cells)
            egress = Egress(variables=[n for n, _ in user_items(host.namespace, host.hidden) if n in names],
                            rows=rows, chars=len(text))
            return ToolReply(text, payload={"egress": egress_payload(egress, policy)})

        async def kernel__run(code: str) -> ToolReply:
            """Run Python in the notebook's namespace, as a cell would, after the person approves:
            returns stdout, stderr, the last expression's value, the error and traceback, rich
            outputs, and the variables it created, changed or deleted.

            Args:
                code: Python source (IPython syntax in a notebook); its last expression's value is returned
            """
            return await self.run(code)

        read_only = [function_tool(ledgered(f, host), risk="low") for f in
                     (kernel__variables, kernel__describe, kernel__query, kernel__cells)]
        run = function_tool(kernel__run, approval="always", risk="high")
        # waivable only by an auto_approve that names it; its steps hold the loop on purpose
        run.waived_by_name = True
        run.timed_steps = False
        run.timeout = 7 * 24 * 3600.0  # its own code_timeout stops the code; the wait for a turn has no limit
        return [*read_only, run]

    async def run(self, code: str) -> ToolReply:
        """``kernel__run``: one piece of code at a time, between cells, under the agent's timeout."""
        ctx = current_run.get()
        policy = DataPolicy.current()
        timeout = ctx.agent.code_timeout if ctx is not None else DEFAULT_CODE_TIMEOUT
        async with self._lock:
            await self.host.wait_turn()
            before = snapshot(self.host.namespace, self.host.hidden)
            # references (no copies) to every variable, for the ones the code rebinds or
            # deletes: undo puts those back (undo_book.py); the rest are let go below
            refs = dict(user_items(self.host.namespace, self.host.hidden))
            out = CellOutput()
            guard = Interrupter(timeout)
            effects = Effects()
            try:
                with guard:
                    with self._guard_lock:
                        self._guard = guard
                    try:
                        with effects:
                            out = self.host.execute(code)
                    finally:
                        with self._guard_lock:
                            self._guard = None
            except KeyboardInterrupt:
                out.error = "KeyboardInterrupt"
            if guard.reason is not None:
                out.stopped = guard.reason
            after = snapshot(self.host.namespace, self.host.hidden)
            call_id = current_call.get()
            if ctx is not None and call_id is not None:
                self.undo_book.keep(make_record(call_id, ctx.session_id, ctx.run_id, ctx.agent.name,
                                                before, after, refs, effects.describe()))
            del refs
        found = changes(before, after)
        self.host.show(out)
        secrets = Secrets.of(self.host.namespace, self.host.hidden)
        if self.produced is not None and ctx is not None:
            self.produced(ctx.session_id, code_sha256(code), nb_outputs(out, secrets))
        text = reply_text(out, found, policy, secrets)
        # what the reply may carry: the variables the code names, and those it changed
        named = names_in([code]) | {c["name"] for c in found}
        sent = sorted(n for n in {*before, *after} if n in named)
        egress = Egress(variables=sent, rows=int(policy.values and (out.result is not None or bool(out.stdout))),
                        chars=len(text))
        payload = {"namespace_changes": found, "egress": egress_payload(egress, policy),
                   "rich_outputs": out.rich}
        return ToolReply(text, is_error=bool(out.error or out.stopped), payload=payload)


def kernel_tool_names(names: Iterable[str]) -> list[str]:
    return [n for n in names if n.startswith("kernel__")]
