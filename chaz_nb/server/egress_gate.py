"""The gate on what leaves the kernel, before it leaves (issue 44 §2).

Each agent has an egress rule (``Agent.egress``): ``allow``, ``deny`` or ``ask``, and hosts it
may always send the notebook's data to (``Agent.egress_hosts``, by default this machine's: a
llama.cpp or Ollama server). The offline ``chaz/*`` models never leave the process: always
allowed. With ``ask``, before a model request carries kernel-derived content (a kernel tool's
result, a ``--with`` attachment, a context copied by a fork or replayed) to another host, a
person is asked through the approval book (an ApprovalRequest of kind ``egress``: the cell
card, the sidebar, ``%chaz pending``, another kernel on a shared store): Approve = allow
once, Approve all = allow for this session (this agent, that host), Deny; no decision within
the approval timeout is a deny.

What is denied never reaches the model: a tool result becomes one line saying it was
withheld; a context entry is replaced by such a line (egress.py, ``ContextData.denied``).
Every decision is in the ``egress`` payload of the entry that records the send (``decision``,
a column of ``data_egress``): the tool result, the run's Ack, or an Ack of the gate's own
written before the request when a person was asked (the run's Ack had landed by then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.entries import Entry, EntryType
from ..engine.runtime import ToolExecutor, ToolOutcome
from .egress import egress_target
from .ports import Part

if TYPE_CHECKING:  # pragma: no cover
    from .agents import Agent
    from .approvals import ApprovalBook
    from .ports import RunContext, ServerPort

#: characters of what would leave the card shows
PREVIEW_CHARS = 400
#: the decisions that let the data go
ALLOWED = frozenset({"allow", "allow_once", "allow_session"})
_VERDICTS = {"approve": "allow_once", "approve_all": "allow_session", "deny": "deny", "timed_out": "timed_out"}


@dataclass(frozen=True)
class Verdict:
    """What the agent's rule says of a send: ``allow``, ``deny`` or ``ask``, and why."""

    decision: str
    why: str = ""


def destination(target: dict[str, Any]) -> str:
    """The host a send goes to, as the rule names it: the API's host, else the provider (its
    own endpoint), else the model."""
    return str(target.get("host") or target.get("provider") or target.get("model") or "?").lower()


def gate_name(target: dict[str, Any]) -> str:
    """The approval's tool name: ``egress:HOST`` (an Approve all grants that host)."""
    return f"egress:{destination(target)}"


def rule_verdict(agent: Agent, target: dict[str, Any]) -> Verdict:
    """The agent's rule on a send to ``target`` (no person asked yet)."""
    if str(target.get("model") or "").startswith("chaz/"):
        return Verdict("allow", "offline model")
    if destination(target) in agent.egress_hosts:
        return Verdict("allow", "egress host")
    if agent.egress == "allow":
        return Verdict("allow", "rule allow")
    if agent.egress == "deny":
        return Verdict("deny", "rule deny")
    return Verdict("ask")


def withheld_line(what: str, target: dict[str, Any], decision: str) -> str:
    """The one line the model gets instead of data that may not leave."""
    why = "no decision in time" if decision == "timed_out" else "denied"
    return (f"[withheld: {what} carries the notebook's data; sending it to {target.get('model')} at "
            f"{destination(target)} was {why} (egress gate)]")


def denied_record(egress: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The ``egress`` of a send that did not happen: what was withheld, nothing sent."""
    return {**egress, **fields, "rows": 0, "columns": 0, "chars": 0,
            "withheld_chars": egress.get("chars"), "entries": [],
            "withheld_entries": list(egress.get("entries") or [])}


class EgressGate(Part):
    """The egress gate of one server (a part: it wraps every run's tools)."""

    name = "egress_gate"

    def __init__(self, port: ServerPort) -> None:
        self.port = port

    def _book(self) -> ApprovalBook:
        book: ApprovalBook = self.port.part("approvals")
        return book

    def verdict(self, session_id: int, agent: Agent) -> Verdict:
        """The rule's verdict, or an earlier Allow for this session of the agent to that host."""
        target = egress_target(agent)
        verdict = rule_verdict(agent, target)
        if verdict.decision == "ask" and self._book().session_grant(session_id, agent.name, gate_name(target)):
            return Verdict("allow_session", "allowed for this session")
        return verdict

    async def decide(self, ctx: RunContext, egress: dict[str, Any], preview: str, call_id: str | None,
                     what: str) -> dict[str, Any]:
        """The gate's decision on sending ``egress`` (``preview``: the text that would leave)
        in ``ctx``'s run: the fields its record gets (``decision``, ``decided_by``, and the
        ``request_id`` when a person was asked)."""
        verdict = self.verdict(ctx.session_id, ctx.agent)
        if verdict.decision != "ask":
            return {"decision": verdict.decision, "decided_by": verdict.why}
        target = egress_target(ctx.agent)
        variables = [str(v) for v in egress.get("variables") or []]
        shown = {
            "to": f"{target.get('model')} at {destination(target)}",
            "what": what,
            "variables": variables,
            "rows": egress.get("rows") or 0,
            "columns": egress.get("columns") or 0,
            "characters": egress.get("chars") or len(preview),
            "preview": preview[:PREVIEW_CHARS] + ("…" if len(preview) > PREVIEW_CHARS else ""),
        }
        names = ", ".join(variables) or "no named variable"
        text = (f"{ctx.agent.name} would send the notebook's data ({what}: {names}; {shown['characters']:,} "
                f"characters) to {shown['to']}: allow?")
        decision = await self._book().request_egress(ctx, call_id, gate_name(target), shown, text)
        verdict_of = _VERDICTS.get(str(decision.payload.get("decision")), "deny")
        return {"decision": verdict_of, "decided_by": decision.payload.get("decided_by", decision.sender),
                "request_id": decision.payload.get("request_id")}

    def wrap_executor(self, ctx: RunContext, executor: ToolExecutor) -> ToolExecutor:
        """Every run's tool results go through the gate before the model is sent them."""
        return GatedExecutor(self, ctx, executor)

    def record_asked(self, ctx: RunContext, egress: dict[str, Any], fields: dict[str, Any]) -> Entry:
        """The record of a run's context send a person was asked about (its Ack had landed
        without it): an Ack of the gate's own, written before the request leaves."""
        allowed = fields["decision"] in ALLOWED
        record = {**egress, **fields} if allowed else denied_record(egress, fields)
        record["run_id"] = ctx.run_id
        verb = "sends" if allowed else "withholds"
        return self.port.store.append(
            ctx.session_id, EntryType.ACK, "system",
            f"run {ctx.run_id} {verb} the notebook's data in its context ({fields['decision']})",
            payload={"ledger": True, "egress": record})


class GatedExecutor:
    """A ToolExecutor whose results that carry the notebook's data (an ``egress`` payload)
    reach the model only as the gate decides."""

    def __init__(self, gate: EgressGate, ctx: RunContext, inner: ToolExecutor) -> None:
        self.gate = gate
        self.ctx = ctx
        self.inner = inner

    def schemas(self) -> list[dict[str, Any]]:
        return self.inner.schemas()

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        outcome = await self.inner.call(call_id, name, arguments)
        egress = outcome.extra.get("egress")
        if not isinstance(egress, dict):  # (a replayed result's carries its source's decision: decided anew)
            return outcome
        fields = await self.gate.decide(self.ctx, egress, outcome.output, call_id, f"the result of {name}")
        if fields["decision"] in ALLOWED:
            outcome.extra["egress"] = {**egress, **fields}
            return outcome
        # not one byte of it goes on: the model is told, in one line, that it was withheld
        extra = {**outcome.extra, "egress": denied_record(egress, fields)}
        extra.pop("rich_outputs", None)
        target = egress_target(self.ctx.agent)
        return ToolOutcome(withheld_line(f"the result of {name}", target, fields["decision"]),
                           is_error=outcome.is_error, extra=extra)
