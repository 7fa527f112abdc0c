"""``%chaz pending``, ``%chaz approve``, ``%chaz deny``: deciding tool approvals from a cell.

For keyboard users and for notebooks run top to bottom (nbval): the same decisions as the
approval widget's buttons and the JupyterLab sidebar, written as ApprovalDecision entries by
the person at this kernel (``decided_by="user"``). A cell that waited on a run stops when the
run parks, so these run in a later cell; ``%chaz wait`` then waits for the reply.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from IPython.core.error import UsageError

PENDING_USAGE = "usage: %chaz pending"
APPROVE_USAGE = "usage: %chaz approve ID|last|oldest|all [--all-calls]"
DENY_USAGE = "usage: %chaz deny ID|last|oldest|all [--reason R]"


def _args(rest: str, usage: str) -> list[str]:
    try:
        return shlex.split(rest)
    except ValueError as exc:
        raise UsageError(f"cannot parse the line ({exc}); {usage}") from None


def _short(value: Any, n: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


class ApprovalCommands:
    """Mixin of ChazMagics: ``_cmd_pending``, ``_cmd_approve``, ``_cmd_deny``."""

    def _cmd_pending(self, rest: str) -> None:
        if rest:
            raise UsageError(f"%chaz pending takes no arguments; {PENDING_USAGE}")
        pending = self.state.server.pending_approvals()
        if not pending:
            print("no pending approval requests")
            return
        rows = [("request", "session", "agent", "tool", "risk", "arguments")]
        for p in pending:
            rows.append(
                (
                    str(p["request_id"]),
                    str(p["session_id"]),
                    str(p.get("agent") or "?"),
                    str(p.get("tool_name") or "?"),
                    str(p.get("risk_level") or "?"),
                    _short(p.get("arguments_display", {})),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows))
        print("decide: %chaz approve ID|last|all  ·  %chaz deny ID|last [--reason R]")

    def _cmd_approve(self, rest: str) -> None:
        args = _args(rest, APPROVE_USAGE)
        decision = "approve"
        if "--all-calls" in args:
            args.remove("--all-calls")
            decision = "approve_all"
        bad = [a for a in args if a.startswith("--")]
        if bad:
            raise UsageError(f"%chaz approve: unknown option {bad[0]}; {APPROVE_USAGE}")
        if len(args) != 1:
            raise UsageError(f"%chaz approve: say which request; {APPROVE_USAGE}")
        self._decide("approve", args[0], decision, None)

    def _cmd_deny(self, rest: str) -> None:
        args = _args(rest, DENY_USAGE)
        reason = None
        refs: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--reason" or a.startswith("--reason="):
                if a == "--reason":
                    if i + 1 >= len(args) or not args[i + 1].strip():
                        raise UsageError(f"%chaz deny: --reason needs a text; {DENY_USAGE}")
                    reason = args[i + 1]
                    i += 2
                    continue
                reason = a.partition("=")[2]
                if not reason.strip():
                    raise UsageError(f"%chaz deny: --reason needs a text; {DENY_USAGE}")
            elif a.startswith("--"):
                raise UsageError(f"%chaz deny: unknown option {a}; {DENY_USAGE}")
            else:
                refs.append(a)
            i += 1
        if len(refs) != 1:
            raise UsageError(f"%chaz deny: say which request; {DENY_USAGE}")
        self._decide("deny", refs[0], "deny", reason)

    def _decide(self, what: str, ref: str, decision: str, reason: str | None) -> None:
        server = self.state.server
        if ref == "all":
            pending = server.pending_approvals()
            if not pending:
                raise UsageError(f"%chaz {what} all: no pending approval requests")
            results = server.approvals.decide_all(decision, reason)
            for ok, message in results:
                print(message if ok else f"not decided: {message}")
            return
        ok, message = server.decide(ref, decision, reason=reason, decided_by="user")
        if not ok:
            raise UsageError(f"%chaz {what} {ref}: {message}")
        print(message)
