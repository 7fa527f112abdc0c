"""``%chaz pending``, ``%chaz approve``, ``%chaz deny``: deciding tool approvals from a cell.

For keyboard users and for notebooks run top to bottom (nbval): the same decisions as the
approval widget's buttons and the JupyterLab sidebar, written as ApprovalDecision entries by
the person at this kernel (``decided_by="user"``). A cell that waited on a run stops when the
run parks, so these run in a later cell; ``%chaz wait`` then waits for the reply.

``%chaz deny last --reason not today``: everything after ``--reason`` is the reason (no quotes
needed), as ``%chaz @NAME`` takes the rest of the line; so the request comes before it.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from IPython.core.error import UsageError

from ...errors import ApprovalError
from ..views.approval import edit_text
from ..views.code import code_of
from .args import split_words, unknown_option
from .host import MagicsHost

PENDING_USAGE = "usage: %chaz pending"
APPROVE_USAGE = (
    "usage: %chaz approve ID|last|oldest|all [--all-calls]  |  %chaz approve ID --args JSON...  |  "
    "%chaz approve ID --edit  |  %%chaz approve ID [--code] (the cell body: the edited arguments, or code)"
)
DENY_USAGE = "usage: %chaz deny ID|last|oldest|all [--reason TEXT...]"


_REASON = re.compile(r"(?:^|\s)--reason(?:=|\s|$)")
_ARGS = re.compile(r"(?:^|\s)--args(?:=|\s|$)")


def split_reason(rest: str) -> tuple[str, str | None]:
    """``ID --reason not today`` -> (``"ID"``, ``"not today"``).

    Everything after ``--reason`` (or ``--reason=``) is the reason, unquoted words and all, as
    ``%chaz @NAME`` takes the rest of the line; one pair of quotes around all of it is dropped.
    """
    m = _REASON.search(rest)
    if m is None:
        return rest, None
    reason = rest[m.end():].strip()
    if len(reason) >= 2 and reason[0] == reason[-1] and reason[0] in "'\"":
        try:
            words = shlex.split(reason)
        except ValueError:
            words = []
        if len(words) == 1:
            reason = words[0]
    if not reason.strip():
        raise UsageError(f"%chaz deny: --reason needs a text; {DENY_USAGE}")
    return rest[: m.start()], reason


def _short(value: Any, n: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _arguments_cell(pending: dict[str, Any]) -> str:
    """A request's arguments in one cell of ``%chaz pending``: a code call's code (masked by
    its literals alone), marked when it cannot run as shown."""
    check = pending.get("code_check")
    problem = check.get("problem") if isinstance(check, dict) else None
    return ("⛔ cannot run as shown (edit it) · " if problem else "") + _short(pending.get("arguments_display", {}))


class ApprovalCommands(MagicsHost):
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
                    _arguments_cell(p),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows))
        print("decide: %chaz approve ID|last|all  ·  %chaz deny ID|last [--reason R]")
        if any(p.get("kind") == "egress" for p in pending):
            print("egress:HOST asks whether your data may leave for that host: %chaz approve ID (allow once), "
                  "%chaz approve ID --all-calls (allow for this session), %chaz deny ID (withheld)")

    def _cmd_approve(self, rest: str) -> None:
        m = _ARGS.search(rest)
        if m is not None:  # everything after --args is the JSON, as typed (no shell quoting)
            self._approve_edited(rest[: m.start()], _unquoted(rest[m.end():].strip()), "--args")
            return
        args = split_words(rest, APPROVE_USAGE)
        if "--edit" in args:
            args.remove("--edit")
            self._open_edit(args)
            return
        decision = "approve"
        if "--all-calls" in args:
            args.remove("--all-calls")
            decision = "approve_all"
        bad = [a for a in args if a.startswith("--")]
        if bad:
            raise unknown_option("%chaz approve", bad[0], ["--all-calls", "--edit", "--args"], APPROVE_USAGE)
        if len(args) != 1:
            raise UsageError(f"%chaz approve: say which request; {APPROVE_USAGE}")
        self._decide("approve", args[0], decision, None)

    def _cmd_deny(self, rest: str) -> None:
        refs_text, reason = split_reason(rest)
        args = split_words(refs_text, DENY_USAGE)
        bad = [a for a in args if a.startswith("--")]
        if bad:
            raise unknown_option("%chaz deny", bad[0], ["--reason"], DENY_USAGE)
        if reason is not None and not args:
            raise UsageError(
                f"%chaz deny: put the request before --reason (everything after --reason is the reason); {DENY_USAGE}"
            )
        if len(args) != 1:
            raise UsageError(f"%chaz deny: say which request; {DENY_USAGE}")
        self._decide("deny", args[0], "deny", reason)

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

    # ------------------------------------------------------------ approve with edits
    def _approve_cell(self, line: str, cell: str) -> None:
        """``%%chaz approve ID [--code]``: the cell body is the edited arguments (JSON), or with
        ``--code`` the code of a code call (``kernel__run``); the body is not expanded."""
        args = split_words(line, APPROVE_USAGE)
        code = "--code" in args
        if code:
            args.remove("--code")
        if code:
            self._approve_edited(" ".join(args), {"code": _cell_code(cell)}, "%%chaz approve")
        else:
            self._approve_edited(" ".join(args), cell, "%%chaz approve")

    def _approve_edited(self, refs_text: str, arguments: dict[str, Any] | str, how: str) -> None:
        refs = split_words(refs_text, APPROVE_USAGE)
        bad = [a for a in refs if a.startswith("--")]
        if bad:
            raise UsageError(f"%chaz approve: {bad[0]} does not go with {how}; {APPROVE_USAGE}")
        if len(refs) != 1 or refs[0] == "all":
            raise UsageError(f"%chaz approve: {how} edits one request: say which (ID or last); {APPROVE_USAGE}")
        if isinstance(arguments, str) and not arguments.strip():
            raise UsageError(f"%chaz approve: {how} needs the edited arguments as a JSON object; {APPROVE_USAGE}")
        ok, message = self.state.server.decide(refs[0], "approve", decided_by="user", arguments=arguments)
        if not ok:
            raise UsageError(f"%chaz approve {refs[0]}: {message}")
        print(message)

    def _open_edit(self, refs: list[str]) -> None:
        """``--edit``: a new cell below, ready to run, holding the request's arguments (the code
        of a code call) to edit: ``%%chaz approve ID [--code]`` and the arguments as its body."""
        bad = [a for a in refs if a.startswith("--")]
        if bad:
            raise UsageError(f"%chaz approve: {bad[0]} does not go with --edit; {APPROVE_USAGE}")
        if len(refs) != 1 or refs[0] == "all":
            raise UsageError(f"%chaz approve: --edit opens one request: say which (ID or last); {APPROVE_USAGE}")
        server = self.state.server
        try:
            request_id = server.approvals.resolve_id(refs[0])
        except ApprovalError as exc:
            raise UsageError(f"%chaz approve {refs[0]} --edit: {exc}") from None
        request = next((p for p in server.pending_approvals() if p["request_id"] == request_id), None)
        if request is None:
            raise UsageError(f"%chaz approve {refs[0]} --edit: request {request_id} is not open any more")
        shown = request.get("arguments_display") or {}
        flag = " --code" if code_of(shown) is not None else ""
        self.shell.set_next_input(f"%%chaz approve {request_id}{flag}\n{edit_text(shown)}", replace=False)
        print(f"{request.get('tool_name')} ({request_id}): its arguments are in a new cell below; "
              "edit them and run that cell to approve (or %chaz deny ...)")


def _unquoted(text: str) -> str:
    """``'{"a": 1}'`` -> ``{"a": 1}``: one pair of quotes around the whole JSON is dropped."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        try:
            words = shlex.split(text)
        except ValueError:
            return text
        if len(words) == 1:
            return words[0]
    return text


def _cell_code(cell: str) -> str:
    """The cell body as code: IPython adds the last newline, which the code did not have."""
    return cell[:-1] if cell.endswith("\n") else cell
