"""The approval proxy: the ToolExecutor every run's tools go through (ApprovalBook.wrap_executor).

A call that needs approval (approval_rules.py) is validated, then parks on the book's request
until a decision comes; an approve runs it (with the edited arguments, if any), a deny or a
timeout answers the model with an error.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from ..core.codemask import code_argument, code_sha256
from ..engine.runtime import ToolExecutor, ToolOutcome
from ..engine.tools import ToolError
from .approval_rules import mask_arguments, needs_approval

if TYPE_CHECKING:  # pragma: no cover
    from ..core.entries import Entry
    from ..engine.tools import Tool
    from .ports import RunContext


class Book(Protocol):
    """What the proxy asks of the approval book (approvals.py's ``ApprovalBook``)."""

    def session_grant(self, session_id: int, agent: str, tool_name: str) -> bool: ...

    async def request(self, ctx: RunContext, t: Tool, call_id: str, arguments: dict[str, Any]) -> Entry: ...

    def take_edit(self, request_id: str) -> dict[str, Any] | None: ...

    def code_refusal(self, code: str, *, problems: bool = True) -> str | None: ...


class ApprovalProxy:
    """A ToolExecutor that asks before running tools that need approval."""

    def __init__(self, book: Book, ctx: RunContext, inner: ToolExecutor) -> None:
        self.book = book
        self.ctx = ctx
        self.inner = inner
        self.approve_all = False  # set by an approve_all decision, for the rest of this run

    def schemas(self) -> list[dict[str, Any]]:
        return self.inner.schemas()

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            t = self.ctx.scope.get(name)
        except ToolError:
            return await self.inner.call(call_id, name, arguments)  # reports the unknown tool
        asks = needs_approval(t, self.ctx.auto_approve)
        granted = asks and self.book.session_grant(self.ctx.session_id, self.ctx.agent.name, name)
        unasked = not asks or (t.approval != "always" and (self.approve_all or granted))
        # Code runs only as the log keeps it: whole, and masked by its literals alone. Code too
        # long for that is refused before anyone is asked; a secret its mask would hide code
        # with is on the card, where a person can edit it (unasked, it is refused here).
        # (for a tool that asks, or always asks unless an auto_approve names it: kernel__run)
        refused = self._code_refused(arguments, problems=unasked) if asks or t.approval == "always" else None
        if refused is not None:
            return refused
        if not asks:
            return self._ran(await self.inner.call(call_id, name, arguments), arguments)
        if unasked:
            outcome = self._ran(await self.inner.call(call_id, name, arguments), arguments)
            outcome.extra.update({"approval": "approved", "decided_by": "approve_all"})
            return outcome
        try:
            t.validate(arguments)  # never ask a person about a call that cannot run
        except ToolError as exc:
            return ToolOutcome(str(exc), is_error=True)
        started = time.perf_counter()
        # (the ToolCall entry is committed already: no tool runs before it, runs.py)
        decision = await self.book.request(self.ctx, t, call_id, arguments)
        # the edited arguments an approve gave (taken whatever the verdict: nothing keeps them)
        edited = self.book.take_edit(str(decision.payload.get("request_id")))
        waited = round((time.perf_counter() - started) * 1000, 3)
        verdict = decision.payload.get("decision")
        info = {
            "request_id": decision.payload.get("request_id"),
            "decided_by": decision.payload.get("decided_by", decision.sender),
            "approval_wait_ms": waited,
        }
        if verdict in ("approve", "approve_all"):
            if verdict == "approve_all":
                self.approve_all = True
            # an edit changes the arguments only: the call stays a call to ``name``
            run_with = arguments if edited is None else edited
            # (the book refuses such an approve; a decision written past it runs nothing either)
            refused = self._code_refused(run_with, problems=True)
            if refused is not None:
                refused.extra.update({"approval": "approved", **info})
                return refused
            outcome = self._ran(await self.inner.call(call_id, name, run_with), run_with)
            outcome.extra.update({"approval": "approved", **info})
            if edited is not None:
                outcome.extra.update({"edited": True, "arguments": mask_arguments(t, edited)})
            return outcome
        reason = decision.payload.get("reason")
        if verdict == "timed_out":
            text = f"{name} was not run: approval timed out ({reason or 'no decision'}); denied by default"
            approval = "timeout"
        else:
            text = f"{name} was denied by the user" + (f": {reason}" if reason else "")
            approval = "denied"
        return ToolOutcome(text, is_error=True, extra={"approval": approval, **info})

    def _code_refused(self, arguments: dict[str, Any], *, problems: bool) -> ToolOutcome | None:
        """A code call that may not run (see ``Book.code_refusal``), answered in one line."""
        code = code_argument(arguments)
        refused = self.book.code_refusal(code, problems=problems) if code is not None else None
        return None if refused is None else ToolOutcome(f"not run: {refused}", is_error=True)

    @staticmethod
    def _ran(outcome: ToolOutcome, arguments: dict[str, Any]) -> ToolOutcome:
        """The outcome, with the sha256 of the exact code that ran (a code call's)."""
        code = code_argument(arguments)
        if code is not None:
            outcome.extra["code_sha256"] = code_sha256(code)
        return outcome

