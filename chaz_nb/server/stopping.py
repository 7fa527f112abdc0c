"""Stopping a run on a person's request (``%chaz stop``, the Stop buttons).

What a stop does (the run engine, runs.py, carries it out):

- The session's run task is cancelled: the model call in flight is abandoned, running async
  tools see ``asyncio.CancelledError`` (a sync tool on a thread cannot be interrupted by
  Python; its result is dropped), and every ToolCall already written gets its ToolResult
  ("cancelled: the run was stopped").
- Open approval requests of the run close as ``timed_out`` with the reason "run cancelled
  before a decision". A distinct decision value would change what the approvals view, the
  session views and the JupyterLab sidebar must understand; ``timed_out`` already means
  "denied because nobody decided", which is what a stop is to the request.
- The run ends with an Ack whose payload ``status`` is ``cancelled`` (``stopped_by`` says who);
  the ``runs`` view shows status ``cancelled``. Nothing written before is touched, and the reply
  text streamed so far (not an entry) is kept in that Ack's payload ``partial_text``.
- Messages queued for a follow-up run of that session are dropped (they stay in the log, with
  no reply; the closing Ack lists them under ``dropped``). A Message written after the stop
  starts a run as usual.
- The runs of sessions spawned from it (children, grandchildren, sync or async spawns) are
  stopped too: they serve the same request. Stopping a child alone leaves its parent running;
  the parent's spawn call then returns a tool error saying the child was stopped.
- On a shared store (PostgreSQL) a session's run is in the kernel that serves it: a stop asked
  for in another kernel is carried out there, the same way (stop_relay.py). ``stop all`` stops
  this kernel's runs only.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the Ack status of a run a person stopped (runs view status ``cancelled``)
CANCELLED = "cancelled"


@dataclass(frozen=True)
class StoppedRun:
    """One run a stop request cancelled."""

    session_id: int
    agent: str
    #: the run (its opening Ack's id); None when the stop came before the Ack was written
    run_id: int | None
    #: ``running`` or ``parked`` (waiting for an approval) when it was stopped
    was: str
    #: the session whose stop reached this one (a spawned child's ancestor), or None
    via: int | None = None
    #: queued trigger entries dropped with it
    dropped: int = 0
    #: another kernel serves the session and stopped it on this kernel's request (stop_relay.py)
    elsewhere: bool = False

    def describe(self) -> str:
        """One line for ``%chaz stop``: ``stopped session 3 (analyst, run_id 17, was parked)``.

        The run is named by its ``run_id`` (the ``runs`` view's column: the id of the entry that
        opened it), not "run 17", which reads as the session's seventeenth run."""
        run = f"run_id {self.run_id}" if self.run_id is not None else "run starting"
        extra = f", spawned from session {self.via}" if self.via is not None else ""
        extra += ", in another kernel" if self.elsewhere else ""
        dropped = f"; dropped {self.dropped} queued message(s)" if self.dropped else ""
        return f"stopped session {self.session_id} ({self.agent}, {run}, was {self.was}{extra}){dropped}"
