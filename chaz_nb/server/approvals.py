"""Tool approvals: the book of requests and decisions, and deny-by-default timeouts.

The proxy every run's tools go through is approval_proxy.py; which call needs approval, which
decision counts and how arguments are shown are approval_rules.py.

Before a tool that needs approval runs, the proxy writes an ApprovalRequest entry in the
session where the call happens and parks the run until the matching ApprovalDecision entry
is written by a person's bridge (a widget button, ``%chaz approve``, the JupyterLab
sidebar). No decision within the timeout is a ``timed_out`` decision: fail closed.

Effective decision of a request: ``timed_out`` if any decision says so, else the first
decision in entry order. Decisions written by an agent are ignored, with an Error entry.
"Approve all calls to this tool in this session" (``approve_all``) is granted to the agent
whose call it was: in a room, the other members' calls of that tool still ask.

The open requests are read from the log (``open_requests``), not from this server's memory:
on a shared store (PostgreSQL) ``%chaz pending`` in any kernel lists every kernel's requests,
and a decision written in one kernel reaches the kernel whose run is parked through its
on_write (the cross-process listener), which resumes the run. Only the kernel that serves the
session (holds its lease, see core/store/base.py SharedSessions) answers a bad decision with an Error, so two
kernels never both write it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.codemask import code_argument, code_summary, mask_code
from ..core.redaction import CODE_MARK
from ..core.entries import Entry, EntryType
from ..core.store import Store, int_value
from ..core.writer import ENTRY_LIMIT_VAR
from ..engine.runtime import ToolExecutor
from ..engine.tools import Tool
from ..errors import ApprovalError
from .approval_proxy import ApprovalProxy
from .approval_rules import (
    DECISIONS,
    DEFAULT_TIMEOUT,
    MAX_REASON_CHARS,
    NOT_IGNORED,
    OPEN_REQUEST,
    SYSTEM,
    decision_text,
    describe_decision,
    describe_payload,
    effective_decision,
    shown_arguments,
)
from .ports import Part

if TYPE_CHECKING:  # pragma: no cover
    from .ports import RunContext
    from .ports import ServerPort

log = logging.getLogger(__name__)


@dataclass
class PendingRequest:
    entry: Entry
    future: asyncio.Future[Entry] | None = None

    @property
    def request_id(self) -> str:
        return str(self.entry.payload["request_id"])

    def to_json(self) -> dict[str, Any]:
        p = self.entry.payload
        return {
            "request_id": p["request_id"],
            "kind": p.get("kind", "tool"),  # ``egress``: may the notebook's data leave (egress_gate.py)
            "entry_id": self.entry.id,
            "session_id": self.entry.session_id,
            "agent": p.get("agent", self.entry.sender),
            "run_id": p.get("run_id"),
            "tool_name": p.get("tool_name"),
            "risk_level": p.get("risk_level"),
            "arguments_display": p.get("arguments_display"),
            "code_check": p.get("code_check"),
            "timeout_secs": p.get("timeout_secs"),
            "created_at": self.entry.created_at.isoformat() if self.entry.created_at else None,
        }


class ApprovalBook(Part):
    """Open approval requests of one server, and the decisions that close them (a part)."""

    name = "approvals"

    def __init__(self, port: ServerPort, default_timeout: float = DEFAULT_TIMEOUT) -> None:
        self.port = port
        self.default_timeout = default_timeout
        self._open: dict[str, PendingRequest] = {}
        self._waiters: dict[str, asyncio.Future] = {}
        self._decided: dict[str, Entry] = {}
        #: (session, agent, tool) of each approve_all decision: the agent whose call it was
        self._session_grants: set[tuple[int, str, str]] = set()
        # Approve with edits (approval_edits.py): the tool and the model's arguments of each
        # request a run of this server waits on, and the edited arguments a decision gave it
        # (the real values: the entry's payload is masked and redacted).
        self._edit_basis: dict[str, tuple[Tool, dict[str, Any]]] = {}
        self._edited: dict[str, dict[str, Any]] = {}

    # -------------------------------------------------------------- queries
    def open_requests(self) -> list[Entry]:
        """ApprovalRequest entries of every session (every kernel's, on a shared store) that no
        decision has closed, oldest first. A decision the serving server ignored (an agent's, a
        bad value: an Error names it as ``ignored_entry``) does not close its request."""
        return self.port.store.find_entries(EntryType.APPROVAL_REQUEST, OPEN_REQUEST)

    def pending(self) -> list[dict[str, Any]]:
        """Open requests, oldest first (from the log: every kernel's on a shared store)."""
        return [PendingRequest(e).to_json() for e in self.open_requests()]

    def resolve_id(self, ref: str | int) -> str:
        """A request id from ``ID`` (request id, its prefix, or the request entry's id) or ``last``."""
        ref = str(ref).strip()
        if ref in ("last", "oldest"):
            open_now = self.open_requests()
            if not open_now:
                raise ApprovalError("no pending approval requests")
            return str((open_now[-1] if ref == "last" else open_now[0]).payload["request_id"])
        if ref in self._open or ref in self._decided:
            return ref
        open_ids = {str(e.payload["request_id"]): e.id for e in self.open_requests()}
        if ref in open_ids:
            return ref
        matches = [rid for rid in [*open_ids, *self._open, *self._decided] if rid.startswith(ref)]
        if ref.isdigit():
            matches += [rid for rid, entry_id in open_ids.items() if entry_id == int(ref)]
        if ref:
            stored = self._find_request(ref)
            if stored is not None:
                matches.append(str(stored.payload["request_id"]))
        matches = sorted(set(matches))
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise ApprovalError(f"{ref!r} matches several requests ({', '.join(matches)}); give more of the id")
        raise ApprovalError(f"no approval request {ref!r}; `%chaz pending` lists the open ones")

    def _find_request(self, request_id: str) -> Entry | None:
        found = self.port.store.find_entries(
            EntryType.APPROVAL_REQUEST, "json_extract_string(payload, '$.request_id') = ?", [request_id]
        )
        return found[0] if found else None

    def _decisions_for(self, request_id: str) -> list[Entry]:
        """The request's decisions the serving server did not ignore (an Error names those)."""
        return self.port.store.find_entries(
            EntryType.APPROVAL_DECISION,
            "json_extract_string(payload, '$.request_id') = ? AND " + NOT_IGNORED.format(d="entries"),
            [request_id],
        )

    def decision_of(self, request_id: str) -> Entry | None:
        """The effective decision of a request, or None while it is open."""
        if request_id in self._decided:
            return self._decided[request_id]
        return effective_decision(
            d for d in self._decisions_for(request_id) if d.sender not in self.port.agents
        )

    # ------------------------------------------------------------- deciding
    def decide(
        self, request_id: str, decision: str, reason: str | None = None, decided_by: str = "user",
        arguments: dict[str, Any] | str | None = None,
    ) -> tuple[bool, str]:
        """Write a person's decision; a second decision is a no-op saying who decided first.

        ``arguments``: approve with edits (a dict, or its JSON text): the tool runs with them
        once they pass its schema; a bad edit writes nothing and the request stays open."""
        if decision not in ("approve", "deny", "approve_all"):
            return False, f"decision must be approve, deny or approve_all, not {decision!r}"
        if arguments is not None and decision != "approve":
            return False, f"edited arguments go with approve (one call), not {decision}"
        if decided_by in self.port.agents:
            return False, f"{decided_by} is an agent; only a person can decide approval requests"
        if reason is not None and len(reason) > MAX_REASON_CHARS:
            return False, (f"the reason is {len(reason):,} characters; a decision keeps at most "
                           f"{MAX_REASON_CHARS:,}: shorten it and decide again")
        try:
            request_id = self.resolve_id(request_id)
        except ApprovalError as exc:
            return False, str(exc)
        existing = self.decision_of(request_id)
        if existing is not None:
            return False, f"request {request_id} was already decided: {describe_decision(existing)}"
        pending = self._open.get(request_id)
        request = pending.entry if pending else self._find_request(request_id)
        if request is None:
            return False, f"no approval request {request_id!r}"
        if arguments is not None and request.payload.get("kind") == "egress":
            return False, (f"request {request_id} asks whether data may leave: allow or deny it, "
                           "there is nothing to edit")
        payload = {"request_id": request_id, "decision": decision, "reason": reason,
                   "decided_by": decided_by, "run_id": request.payload.get("run_id")}
        if decision == "approve_all":
            payload["scope"] = "session"
            payload["tool_name"] = request.payload.get("tool_name")
            payload["agent"] = request.payload.get("agent", request.sender)  # the grant is this agent's
        edited: dict[str, Any] | None = None
        if arguments is not None:
            try:
                edited = self._edit_of(request, arguments)
            except ApprovalError as exc:
                return False, str(exc)
        if decision in ("approve", "approve_all"):
            refused = self._refused_code(request, edited)
            if refused is not None:
                return False, refused
        if edited is not None:
            payload.update(self._edit_payload(request, edited))
            self._edited[request_id] = edited  # before the write: on_write finds it
        try:
            self.port.store.append(
                request.session_id, EntryType.APPROVAL_DECISION, decided_by, decision_text(payload),
                tool_call_id=request.tool_call_id, tool_name=request.tool_name, payload=payload,
            )
        except BaseException:
            if edited is not None and request_id not in self._decided:
                self._edited.pop(request_id, None)
            raise
        return True, f"{request.payload.get('tool_name')}: {describe_payload(payload)}"

    def code_refusal(self, code: str, *, problems: bool = True) -> str | None:
        """Why ``code`` may not run (one line), or None: longer than a person is shown and the
        log keeps whole, or (``problems``) a secret its masking would hide code with."""
        limit = self.port.store.max_entry_chars // 4
        if len(code) > limit:
            return (f"the code is {len(code):,} characters, more than the {limit:,} an approval card shows "
                    f"and the log keeps whole (a quarter of {ENTRY_LIMIT_VAR}); send it in smaller parts")
        return mask_code(code, self.port.store.redact).problem if problems else None

    def _refused_code(self, request: Entry, edited: dict[str, Any] | None) -> str | None:
        """Why an approve of ``request`` (with ``edited`` arguments, if any) is refused: the
        code that would run cannot be shown whole or holds a secret its mask would hide code
        with; the request stays open for an edit or a deny."""
        request_id = request.payload.get("request_id")
        if edited is None:
            check = request.payload.get("code_check")
            problem = check.get("problem") if isinstance(check, dict) else None
            if problem:
                return f"request {request_id} stays open: {problem}; Edit the code, then approve the edit"
            return None
        code = code_argument(edited)
        if code is not None and CODE_MARK in code:
            # (another kernel's request: the masked literals are not here to give back)
            return (f"edited code refused: it holds {CODE_MARK}, a literal only the kernel that asked has; write the "
                    f"value as read from the environment (os.environ[...]); the request {request_id} stays open")
        refused = self.code_refusal(code) if code is not None else None
        return None if refused is None else f"edited code refused: {refused}; the request {request_id} stays open"

    def _edit_of(self, request: Entry, arguments: dict[str, Any] | str) -> dict[str, Any] | None:
        """The arguments the tool gets from an edit (None: the edit changes nothing), checked
        against the tool's schema; an ApprovalError of one line for a bad edit."""
        from .approval_edits import check_edit, merge_edit, parse_edit  # (imports this module)

        edited = parse_edit(arguments)
        request_id = str(request.payload["request_id"])
        shown = request.payload.get("arguments_display")
        shown = shown if isinstance(shown, dict) else {}
        basis = self._edit_basis.get(request_id)
        # another kernel's request: its tool as this server knows it, and no model arguments
        t, original = basis if basis is not None else (self._tool_named(request), None)
        merged = merge_edit(t, shown, original, edited)
        if original is not None and merged == original:
            return None  # as asked: a plain approve
        if t is not None:
            check_edit(t, merged)
        return merged

    def _edit_payload(self, request: Entry, edited: dict[str, Any]) -> dict[str, Any]:
        """What an edited decision records: both argument sets, as the log keeps arguments."""
        from .approval_edits import recorded_edit

        basis = self._edit_basis.get(str(request.payload["request_id"]))
        t = basis[0] if basis is not None else self._tool_named(request)
        return {"edited": True, "original_arguments": request.payload.get("arguments_display"),
                "arguments": recorded_edit(t, edited)}

    def _tool_named(self, request: Entry) -> Tool | None:
        return self.port.tools.get(str(request.payload.get("tool_name") or ""))

    def take_edit(self, request_id: str) -> dict[str, Any] | None:
        """The edited arguments an approve gave the request (once), or None."""
        return self._edited.pop(request_id, None)

    def decide_all(self, decision: str, reason: str | None = None, decided_by: str = "user") -> list[tuple[bool, str]]:
        return [self.decide(str(e.payload["request_id"]), decision, reason, decided_by) for e in self.open_requests()]

    # ---------------------------------------------------- on_write callback
    def on_write(self, entry: Entry) -> None:
        if entry.entry_type is EntryType.APPROVAL_REQUEST:
            request_id = entry.payload.get("request_id")
            if isinstance(request_id, str) and request_id and request_id not in self._decided:
                self._open[request_id] = PendingRequest(entry, self._waiters.pop(request_id, None))
                self.port.park(entry.session_id)
            return
        if entry.entry_type is not EntryType.APPROVAL_DECISION:
            return
        request_id = entry.payload.get("request_id")
        if not self._serves(entry.session_id, request_id):
            self._note_remote_decision(entry)
            return
        if entry.sender in self.port.agents:
            # Agents cannot approve their own (or anyone's) tool calls.
            self.port.store.append(
                entry.session_id, EntryType.ERROR, SYSTEM,
                f"ApprovalDecision from agent {entry.sender} ignored: only a person can decide",
                payload={"request_id": request_id, "ignored_entry": entry.id},
            )
            return
        if entry.payload.get("decision") not in DECISIONS:
            self.port.store.append(
                entry.session_id, EntryType.ERROR, SYSTEM,
                f"ApprovalDecision ignored: decision must be one of {', '.join(DECISIONS)}",
                payload={"request_id": request_id, "ignored_entry": entry.id},
            )
            return
        if not isinstance(request_id, str) or not request_id:
            self.port.store.append(
                entry.session_id, EntryType.ERROR, SYSTEM,
                "ApprovalDecision ignored: its payload names no request_id; "
                "decide with `%chaz approve ID` / `%chaz deny ID` (`%chaz pending` lists the IDs)",
                payload={"request_id": request_id, "ignored_entry": entry.id},
            )
            return
        if entry.payload.get("edited") and not self._book_edit(entry, request_id):
            return
        first = self._decided.get(request_id)
        if first is not None and entry.payload.get("decision") != "timed_out":
            self.port.store.append(
                entry.session_id, EntryType.ERROR, SYSTEM,
                f"second decision for request {request_id} ignored: already decided ({describe_decision(first)})",
                payload={"request_id": request_id, "ignored_entry": entry.id},
            )
            return
        # (effective_decision of two entries is one of them, never None)
        self._decided[request_id] = entry if first is None else effective_decision([first, entry]) or entry
        self._grant(entry)
        pending = self._open.pop(request_id, None)
        if pending is not None:
            self.port.unpark(pending.entry.session_id)
            if pending.future is not None and not pending.future.done():
                pending.future.set_result(self._decided[request_id])

    def _book_edit(self, entry: Entry, request_id: str) -> bool:
        """An edited decision (written here or by another kernel) checked before it counts:
        an approve, whose arguments fit the tool; else an Error, and the request stays open."""
        problem = None
        if entry.payload.get("decision") != "approve":
            problem = "edited arguments go with approve only"
        elif request_id not in self._edited and request_id not in self._decided:
            arguments = entry.payload.get("arguments")
            request = self._open[request_id].entry if request_id in self._open else self._find_request(request_id)
            if not isinstance(arguments, dict) or request is None:
                problem = "edited arguments must be a JSON object"
            else:
                try:
                    edited = self._edit_of(request, arguments)
                except ApprovalError as exc:
                    problem = str(exc)
                else:
                    problem = self._refused_code(request, edited) if edited is not None else None
                    if edited is not None and problem is None:
                        self._edited[request_id] = edited
        if problem is None:
            return True
        self.port.store.append(
            entry.session_id, EntryType.ERROR, SYSTEM, f"ApprovalDecision ignored: {problem}",
            payload={"request_id": request_id, "ignored_entry": entry.id},
        )
        return False

    def _serves(self, session_id: int, request_id: Any) -> bool:
        """Whether this server answers decisions in the session: always on an embedded store;
        on a shared one while a run of its own waits on the request, is in the session, or it
        holds the session's lease (else another kernel's run is parked there, and that kernel
        checks the decision and writes any Error, once)."""
        pending = self._open.get(request_id) if isinstance(request_id, str) else None
        if pending is not None and pending.future is not None:
            return True
        return self.port.serving.holds(session_id) or self.port.is_busy(session_id)

    def _note_remote_decision(self, entry: Entry) -> None:
        """Another kernel's session: book a person's valid decision (no Error writing here)."""
        request_id = entry.payload.get("request_id")
        if (entry.sender in self.port.agents or entry.payload.get("decision") not in DECISIONS
                or not isinstance(request_id, str) or not request_id):
            return
        if entry.payload.get("edited"):
            # only the serving kernel can check an edit against the waiting call: it counts once
            # the run resumes, and until then ``decision_of`` reads the log (which skips an edit
            # the serving kernel ignored)
            return
        first = self._decided.get(request_id)
        self._decided[request_id] = entry if first is None else effective_decision([first, entry]) or entry
        self._open.pop(request_id, None)
        self._grant(entry)  # for when this kernel takes over

    # ------------------------------------------------------------- the proxy
    async def request(self, ctx: RunContext, t: Tool, call_id: str, arguments: dict[str, Any]) -> Entry:
        """Write an ApprovalRequest, park the run, and return the effective decision entry."""
        store = self.port.store
        timeout = ctx.agent.approval_timeout if ctx.agent.approval_timeout is not None else self.default_timeout
        request_id = uuid.uuid4().hex[:10]
        shown = shown_arguments(t, arguments)
        payload = {
            "request_id": request_id,
            "tool_name": t.name,
            "risk_level": t.risk,
            "arguments_display": shown,
            "timeout_secs": timeout,
            "agent": ctx.agent.name,
            "run_id": ctx.run_id,
        }
        code = code_argument(arguments)
        if code is None:
            text = f"{t.name}({json.dumps(shown, ensure_ascii=False, default=str)}) needs approval (risk {t.risk})"
        else:
            # the card shows the code masked by token (the store's mask_code), this says what it did
            payload["code_check"] = mask_code(code, store.redact).check()
            text = f"{t.name}({code_summary(code)}) needs approval (risk {t.risk})"
        future: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
        # The waiter is known before the write: on_write opens the request with it, and a
        # decision written by another on_write callback finds it.
        self._waiters[request_id] = future
        self._edit_basis[request_id] = (t, dict(arguments))
        try:
            return await self._wait_decision(ctx, store, request_id, future, text, t.name, call_id, payload, timeout)
        finally:
            self._edit_basis.pop(request_id, None)

    async def request_egress(self, ctx: RunContext, call_id: str | None, gate: str, shown: dict[str, Any],
                             text: str) -> Entry:
        """Ask a person whether the notebook's data may leave (egress_gate.py): an
        ApprovalRequest of kind ``egress`` named ``gate`` (``egress:HOST``), so the cell card,
        the sidebar and ``%chaz pending`` show it as any request. Approve = allow once,
        approve_all = allow for this session (the agent's, to that host), no answer = deny."""
        timeout = ctx.agent.approval_timeout if ctx.agent.approval_timeout is not None else self.default_timeout
        request_id = uuid.uuid4().hex[:10]
        payload = {"request_id": request_id, "kind": "egress", "tool_name": gate, "risk_level": "egress",
                   "arguments_display": shown, "timeout_secs": timeout, "agent": ctx.agent.name,
                   "run_id": ctx.run_id}
        future: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = future
        return await self._wait_decision(ctx, self.port.store, request_id, future, text, gate, call_id, payload,
                                         timeout)

    async def _wait_decision(
        self, ctx: RunContext, store: Store, request_id: str, future: asyncio.Future[Entry], text: str,
        tool_name: str, call_id: str | None, payload: dict[str, Any], timeout: float,
    ) -> Entry:
        try:
            store.append(
                ctx.session_id, EntryType.APPROVAL_REQUEST, ctx.agent.name, text,
                tool_call_id=call_id, tool_name=tool_name, payload=payload,
            )
        finally:
            self._waiters.pop(request_id, None)
        if ctx.unattended:
            self._close(request_id, "deny", "no person to ask (unattended run); auto-approve the tool to allow it")
            return await future
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            self._close(request_id, "timed_out", f"no decision within {timeout:g} s")
            return await future
        except asyncio.CancelledError:
            if request_id in self._open:
                self._close(request_id, "timed_out", "run cancelled before a decision")
            raise

    def _close(self, request_id: str, decision: str, reason: str) -> None:
        pending = self._open.get(request_id)
        if pending is None:
            return
        payload = {"request_id": request_id, "decision": decision, "reason": reason, "decided_by": SYSTEM,
                   "run_id": pending.entry.payload.get("run_id")}
        self.port.store.append(
            pending.entry.session_id, EntryType.APPROVAL_DECISION, SYSTEM, decision_text(payload),
            tool_call_id=pending.entry.tool_call_id, tool_name=pending.entry.tool_name, payload=payload,
        )

    def _grant(self, decision: Entry) -> None:
        """Book a person's ``approve_all`` decision as a grant to the agent whose call it was.

        A decision that names no agent (one written before grants were per agent, or by hand)
        is granted to the agent of the request it answers; with no such request, to nobody.
        """
        p = decision.payload
        tool_name = p.get("tool_name")
        if p.get("decision") != "approve_all" or p.get("scope") != "session" or not tool_name:
            return
        agent = p.get("agent")
        if not isinstance(agent, str) or not agent:
            request_id = p.get("request_id")
            pending = self._open.get(request_id if isinstance(request_id, str) else "")
            request = pending.entry if pending else self._find_request(str(p.get("request_id") or ""))
            agent = request.payload.get("agent", request.sender) if request is not None else None
        if isinstance(agent, str) and agent:
            self._session_grants.add((decision.session_id, agent, str(tool_name)))

    def session_grant(self, session_id: int, agent: str, tool_name: str) -> bool:
        """Whether a person approved all of ``agent``'s calls of ``tool_name`` in the session."""
        return (session_id, agent, tool_name) in self._session_grants

    # ------------------------------------------------------------ part hooks
    def recover(self) -> dict[str, int]:
        return {"approvals": self.close_orphans()}

    def recover_session(self, session_id: int) -> dict[str, int]:
        return {"approvals": self.close_orphans(session_id)}

    def wrap_executor(self, ctx: RunContext, executor: ToolExecutor) -> ToolExecutor:
        """Every run's tools go through the approval proxy."""
        return ApprovalProxy(self, ctx, executor)

    # ------------------------------------------------------------- recovery
    def close_orphans(self, session_id: int | None = None) -> int:
        """Close requests left open by a previous process (in one session, or in all) as
        timed_out; return how many."""
        store = self.port.store
        where = "" if session_id is None else " AND r.session_id = ?"
        rows = store.execute(
            f"""
            SELECT r.id, r.session_id FROM entries r
            WHERE r.entry_type = 'ApprovalRequest'{where}
              AND NOT EXISTS (
                SELECT 1 FROM entries d
                WHERE d.entry_type = 'ApprovalDecision'
                  AND json_extract_string(d.payload, '$.request_id') = json_extract_string(r.payload, '$.request_id'))
            ORDER BY r.id
            """,
            [] if session_id is None else [session_id],
        )
        if session_id is None:
            rows = [row for row in rows if not self.port.serving.elsewhere(int_value(row[1]))]
        for entry_id, _session_id in rows:
            request = store.entry(int_value(entry_id))
            if request is None:  # entry() is None only for an unknown id; the query just found it
                continue
            payload = {
                "request_id": request.payload.get("request_id"),
                "decision": "timed_out",
                "reason": "kernel stopped before a decision",
                "decided_by": SYSTEM,
                "run_id": request.payload.get("run_id"),
            }
            store.append(
                request.session_id, EntryType.APPROVAL_DECISION, SYSTEM, decision_text(payload),
                tool_call_id=request.tool_call_id, tool_name=request.tool_name, payload=payload,
            )
        if session_id is not None:
            return len(rows)
        # Session-wide grants survive a restart: they are in the log.
        for d in store.find_entries(
            EntryType.APPROVAL_DECISION, "json_extract_string(payload, '$.scope') = 'session'"
        ):
            if d.sender not in self.port.agents:
                self._grant(d)
        return len(rows)

