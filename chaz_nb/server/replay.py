"""Recorded replay: a branch's tool calls answered from its source's log, never run.

A fork (fork.py) with ``replay="recorded"`` (the default) gives its branch a *recording*: the
source session's tool calls, each a ToolCall with its ToolResult, after the point the branch
replays from (the fork point, or the re-run trigger) and up to the source's end at the fork.
Every tool call of a run in the branch then goes through ``RecordedExecutor`` before anything
else (this part is registered first, so it wraps the approval proxy):

- a call whose tool and arguments match an unused recorded call (the first such, in the
  source's order) gets that call's recorded output, and its ToolResult says where it comes
  from (``replayed_from``: the source's ToolResult entry id, with its session and seq). The
  tool does not run, and asks for no approval: it ran with one, or was denied, in the source
  (a denial replays as the same denial);
- a call with no unused match is a tool error the model sees ("not in the recording"); the
  tool does not run. A call repeated more often than recorded is such a call the second time.

Arguments are compared as the log keeps them: a tool's ``sensitive_params`` masked and the
store's redaction applied, so a call with the real secret matches its recorded, masked form.
The recording is read from the log, and what the branch has used of it too (its ToolResults'
``replayed_from``), so a branch made before a restart still replays (the spec is kept in the
branch's session metadata, ``replay``). ``replay="live"`` gives no recording: tools run as usual.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.entries import Entry, EntryType
from ..core.redaction import redact_data
from ..engine.runtime import ToolExecutor, ToolOutcome
from .approval_rules import mask_arguments
from .ports import Part

if TYPE_CHECKING:  # pragma: no cover
    from ..core.store import Store
    from .ports import RunContext, ServerPort

#: the session metadata key of a branch's replay spec
META_KEY = "replay"
REPLAY_MODES = ("recorded", "live")


@dataclass(frozen=True)
class RecordedCall:
    """One tool call of the source: its tool, its arguments' key, and what it returned."""

    tool: str
    key: str
    output: str
    is_error: bool
    session_id: int
    result_id: int
    result_seq: int
    #: what the recorded result sent of the notebook's data (its ``egress`` payload), if anything
    egress: dict[str, Any] | None = None


class Recording:
    """A source's recorded calls, in order, and which of them the branch has used."""

    def __init__(self, source_id: int, calls: list[RecordedCall], used: set[int] | None = None) -> None:
        self.source_id = source_id
        self.calls = calls
        self.used: set[int] = set(used or ())

    def take(self, tool: str, key: str) -> RecordedCall | None:
        """The first unused recorded call of ``tool`` with ``key``, now used; None if none."""
        for call in self.calls:
            if call.result_id not in self.used and call.tool == tool and call.key == key:
                self.used.add(call.result_id)
                return call
        return None

    @property
    def unused(self) -> list[RecordedCall]:
        return [c for c in self.calls if c.result_id not in self.used]


def arguments_key(arguments: Any, redact: Callable[[str], str]) -> str:
    """The arguments as compared: redacted as the store writes them, in one canonical JSON."""
    return json.dumps(redact_data(arguments, redact), sort_keys=True, ensure_ascii=False, default=str)


def read_recording(store: Store, source_id: int, after_seq: int, upto_seq: int, branch_id: int | None) -> Recording:
    """The source's calls with a ToolResult in ``(after_seq, upto_seq]``, and what ``branch_id``
    has used of them already (its ToolResults' ``replayed_from``)."""
    entries = [e for e in store.entries(source_id, after_seq, types=(EntryType.TOOL_CALL, EntryType.TOOL_RESULT))
               if e.seq <= upto_seq]
    results: dict[tuple[Any, str | None], Entry] = {}
    for e in entries:
        if e.entry_type is EntryType.TOOL_RESULT:
            results.setdefault((e.payload.get("run_id"), e.tool_call_id), e)
    calls: list[RecordedCall] = []
    for e in entries:
        args = e.payload.get("arguments")
        result = results.get((e.payload.get("run_id"), e.tool_call_id))
        if e.entry_type is not EntryType.TOOL_CALL or result is None or not isinstance(args, dict):
            continue  # a call with no result (cut by the fork point), or arguments that never parsed
        calls.append(RecordedCall(
            tool=e.tool_name or "", key=arguments_key(args, store.redact),
            output=str(result.payload.get("output", "")), is_error=bool(result.payload.get("is_error")),
            session_id=source_id, result_id=result.id, result_seq=result.seq,
            egress=_egress_of(result),
        ))
    used: set[int] = set()
    if branch_id is not None:
        for e in store.entries(branch_id, types=(EntryType.TOOL_RESULT,)):
            ref = e.payload.get("replayed_from")
            if isinstance(ref, int) and e.payload.get("copied_from") is None:
                used.add(ref)
    return Recording(source_id, calls, used)


def replayed_egress(recorded: RecordedCall, agent: Any) -> dict[str, Any] | None:
    """The ``egress`` of a recorded result sent again: the notebook's data it carries goes to
    this run's model, so the ``data_egress`` view has a row for this send too (naming it)."""
    if recorded.egress is None:
        return None
    from .egress import egress_target

    # the source's egress-gate decision was about the source's model: this send is decided anew
    source = {k: v for k, v in recorded.egress.items() if k not in ("decision", "decided_by", "request_id")}
    return {**source, "chars": len(recorded.output), **egress_target(agent),
            "replayed_from": recorded.result_id}


def _egress_of(result: Entry) -> dict[str, Any] | None:
    egress = result.payload.get("egress")
    return dict(egress) if isinstance(egress, dict) else None


class RecordedExecutor:
    """A run's tools, answered from the recording (see the module docstring)."""

    def __init__(self, recording: Recording, ctx: RunContext, inner: ToolExecutor,
                 redact: Callable[[str], str]) -> None:
        self.recording = recording
        self.ctx = ctx
        self.inner = inner
        self.redact = redact

    def schemas(self) -> list[dict[str, Any]]:
        return self.inner.schemas()

    async def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        tool = self.ctx.port.tools.get(name)
        shown = mask_arguments(tool, arguments) if tool is not None else arguments
        recorded = self.recording.take(name, arguments_key(shown, self.redact))
        source = self.recording.source_id
        if recorded is None:
            return ToolOutcome(
                f"{name} was not run: this call is not in the recording of session {source} (the branch "
                "replays its recorded tool calls; no unused call there has this tool and these arguments)",
                is_error=True, extra={"replay": "not_recorded"},
            )
        extra: dict[str, Any] = {
            "replay": "recorded", "replayed_from": recorded.result_id,
            "replayed_from_session": recorded.session_id, "replayed_from_seq": recorded.result_seq,
        }
        egress = replayed_egress(recorded, self.ctx.agent)
        if egress is not None:
            extra["egress"] = egress
        return ToolOutcome(recorded.output, is_error=recorded.is_error, extra=extra)


class RecordedTools(Part):
    """The branches that replay recorded tools, and the wrapper of their runs' executors."""

    name = "replay"

    def __init__(self, port: ServerPort) -> None:
        self.port = port
        self._recordings: dict[int, Recording | None] = {}

    def start(self, branch_id: int, spec: dict[str, Any]) -> Recording | None:
        """Give ``branch_id`` the recording ``spec`` names (the fork wrote it in the metadata)."""
        recording = self._read(branch_id, spec)
        self._recordings[branch_id] = recording
        return recording

    def recording(self, session_id: int) -> Recording | None:
        """The session's recording (read from its metadata on first use), None: tools run live."""
        if session_id not in self._recordings:
            info = self.port.store.session(session_id)
            spec = (info.metadata or {}).get(META_KEY) if info.forked_from is not None else None
            self._recordings[session_id] = self._read(session_id, spec) if isinstance(spec, dict) else None
        return self._recordings[session_id]

    def _read(self, branch_id: int, spec: dict[str, Any] | None) -> Recording | None:
        if not spec or spec.get("mode") != "recorded":
            return None
        return read_recording(self.port.store, int(spec["source"]), int(spec.get("after", 0)),
                              int(spec.get("upto", 0)), branch_id)

    def wrap_executor(self, ctx: RunContext, executor: ToolExecutor) -> ToolExecutor:
        recording = self.recording(ctx.session_id)
        if recording is None:
            return executor
        return RecordedExecutor(recording, ctx, executor, self.port.store.redact)
