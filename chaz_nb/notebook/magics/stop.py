"""``%chaz stop [SESSION|all]``: stop a session's run from a cell.

The same stop as the Server's ``stop_runs`` (see ``chaz_nb/server/stopping.py``): the model call
and running tools are cancelled, open approval requests close as timed_out, and the run ends
with an Ack whose status is ``cancelled`` (the ``runs`` view shows it). The sessions spawned from
the stopped one are stopped with it. The cell returns once every stopped run wrote its Ack.
On a shared store (PostgreSQL) a session another kernel serves is stopped by that kernel, on
this one's request (server/stop_relay.py).
"""

from __future__ import annotations

from IPython.core.error import UsageError

from ...errors import ServerError, StoreError
from .host import MagicsHost
from .turns import parse_session

STOP_USAGE = "usage: %chaz stop [SESSION|all]"


class StopCommands(MagicsHost):
    """Mixin of ChazMagics: ``_cmd_stop``."""

    def _cmd_stop(self, rest: str) -> None:
        from ..kernel_loop import run_sync

        state = self.state
        server = state.server
        words = rest.split()
        if len(words) > 1:
            raise UsageError(f"%chaz stop takes one SESSION or all; {STOP_USAGE}")
        session = None if words == ["all"] else parse_session(server, rest, state.last_session, "stop")
        try:
            stopped = run_sync(server.stop_runs(session, by="user"))
        except (StoreError, ServerError) as exc:  # the session vanished; its kernel is gone or busy
            raise UsageError(f"%chaz stop: {exc}") from None
        if not stopped:
            print("nothing is running" if session is None else f"session {session} has no run to stop")
            return
        for run in stopped:
            print(run.describe())
