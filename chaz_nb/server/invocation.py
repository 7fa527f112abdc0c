"""What a run gets beyond its trigger entry: schedule fires and room turns.

A plain run is "the session's agent, on the session's context". A schedule fire adds a wake
prompt that is input to that one run and is never written to the log; a room turn names
which of the room's agents takes the turn. Both go through the server's one run path
(``RunEngine.run_turn`` / ``ServerPort.start_run``, server/runs.py) with an ``Invocation``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .ceiling import Ceiling


@dataclass
class Invocation:
    #: run this agent instead of the session's own (a room member, a schedule's owner)
    agent: str | None = None
    #: invocation-scoped user message appended to the context, not written as an entry
    input: str | None = None
    #: extra Ack payload (``trigger_type``, ``schedule_id``, ``room`` ...) for the audit trail
    ack: dict[str, Any] = field(default_factory=dict)
    #: no person is there to answer approval requests (a schedule fire)
    unattended: bool = False
    #: a cap on the run (a schedule that a capped run created), see ceiling.py
    ceiling: Ceiling | None = None
    #: the run-tree budget it draws on (a schedule a run made: that run's); None opens one
    budget: str | None = None
