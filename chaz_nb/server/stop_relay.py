"""Stopping a run another kernel serves (a ``SharedSessions`` store: PostgreSQL).

Only the kernel that holds a session's lease runs it, so only that kernel can cancel its run
(the task is in its loop). A stop asked for in another kernel (``%chaz stop SESSION``, a Stop
button, the sidebar) goes there as a notice on the store's ``chaz_stop`` channel:

1. the asking kernel sends ``{"stop": SESSION, "by": LABEL, "id": REQUEST}``;
2. every kernel's listener hears it; the one that runs the session (or holds its lease) does
   what a local stop does, ``stop_runs(SESSION, by=LABEL)``: the run closes with its
   ``cancelled`` Ack naming ``LABEL`` (stopping.py), its spawned children with it;
3. once those runs have unwound it answers ``{"stopped": REQUEST, "runs": [...]}`` (each
   ``StoppedRun`` as a dict), which resolves the asking kernel's wait. NOTIFY is delivered in
   commit order, so the closing Acks have reached the asking kernel's subscribers by then.

A NOTIFY reaches only the listeners LISTENing when it is sent: a kernel whose listener is
still connecting (its first write started it; a loaded machine starts a backend slowly) or
reconnecting misses a request. So the asking kernel sends the same request again every
``RESEND_INTERVAL`` seconds until the answer comes (or ``REMOTE_STOP_TIMEOUT`` passes), also
for a request nobody waits on (a Stop button's); the serving kernel acts on a request id once
and answers a repeat with the answer it gave (``ANSWERS_KEPT`` of them are kept).

Trust: any kernel on the store may already write to a session and decide its approval
requests, so it may stop its runs too; on a team's store (``core/store/pgteam.py``) only a role
that may write to the session: the serving kernel asks the database which role sent the
request (the notifying backend's login), whatever the payload says. ``by`` is the asking side's plain label (printable,
cut to ``MAX_BY`` characters); nothing secret is sent. Any client of the database can NOTIFY
on the channel, so a payload that is not one of the two shapes above is ignored, and nothing
that arrives there can raise into the store's listener. A reply can be lost (a listener that
reconnects does not replay notices): the asking side then looks in the log after
``REMOTE_STOP_TIMEOUT`` seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from ..core.redaction import redact_then_cut
from ..core.store import SharedSessions, TeamAccess
from .stopping import StoppedRun

log = logging.getLogger(__name__)

#: the store's notice channel of stop requests and their answers (store/postgres.py NOTICE_CHANNELS)
STOP_CHANNEL = "chaz_stop"
#: how long a stop waits for the serving kernel's answer (a kernel running a long cell answers
#: when the cell ends: its loop, and with it its run, is held meanwhile)
REMOTE_STOP_TIMEOUT = 10.0
#: how often an unanswered request is sent again (a listener that missed it may hear it now)
RESEND_INTERVAL = 0.5
#: the request ids answered (and their answers) a serving kernel keeps, for repeats
ANSWERS_KEPT = 256
#: the longest ``by`` label kept; a request id is at most as long
MAX_BY = 64
#: stopped runs listed in one answer at most (a NOTIFY payload is under 8000 bytes)
MAX_RUNS = 40
_WAS = ("running", "parked")

#: the serving side: does this kernel serve the session; stop its runs here and wait for them
Serves = Callable[[int], bool]
StopHere = Callable[[int, str], Awaitable[list[StoppedRun]]]


def plain_label(value: Any) -> str | None:
    """``value`` as a one-line label of printable characters, or None when there is none."""
    if not isinstance(value, str):
        return None
    text = "".join(ch for ch in value if ch.isprintable()).strip()
    return redact_then_cut(text, MAX_BY, note=lambda _: "") or None


def _whole(value: Any) -> int | None:
    # (a JSON true is an int to Python: not an id)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_runs(value: Any) -> list[StoppedRun] | None:
    """The ``runs`` of an answer, or None when any of them is not a StoppedRun's dict."""
    if not isinstance(value, list) or len(value) > MAX_RUNS:
        return None
    runs = []
    for item in value:
        if not isinstance(item, dict):
            return None
        sid, agent, was = _whole(item.get("session_id")), plain_label(item.get("agent")), item.get("was")
        run_id, via, dropped = item.get("run_id"), item.get("via"), _whole(item.get("dropped", 0))
        if sid is None or agent is None or was not in _WAS or dropped is None \
                or (run_id is not None and _whole(run_id) is None) or (via is not None and _whole(via) is None):
            return None
        runs.append(StoppedRun(sid, agent, run_id, was, via=via, dropped=dropped, elsewhere=True))
    return runs


class StopRelay:
    """Stop requests between the kernels of one shared store (see the module docstring)."""

    def __init__(self, store: SharedSessions, serves: Serves, stop_here: StopHere) -> None:
        self.store = store
        self._serves = serves
        self._stop_here = stop_here
        self._waiting: dict[str, asyncio.Future[list[StoppedRun]]] = {}
        self._tasks: set[asyncio.Task] = set()  # answers being prepared, requests resent (kept from the GC)
        #: request id -> its answer's payload (None while the stop is under way): a repeat is not
        #: acted on again
        self._answers: OrderedDict[str, str | None] = OrderedDict()
        self._unsubscribe: Callable[[], None] | None = None
        if not store.read_only:
            self._unsubscribe = store.on_notice(STOP_CHANNEL, self._heard)
        #: a shared store this kernel writes: the other kernels may serve its sessions
        self.enabled = self._unsubscribe is not None

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    # ----------------------------------------------------------- asking side
    def send(self, session_id: int, by: str) -> str:
        """Ask the kernel that serves ``session_id`` to stop its run, without waiting for it (it
        is sent again until answered, in the background); the request's id."""
        self._check(session_id)
        request = uuid.uuid4().hex
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to send it again from: once
            self._request(request, session_id, by)
            return request
        self._keep(loop.create_task(self._ask(request, session_id, by, REMOTE_STOP_TIMEOUT),
                                    name=f"chaz-stop-ask-{session_id}"))
        return request

    def _check(self, session_id: int) -> None:
        """On a team's store, a role that may not write to the session is told so in one line
        (the serving kernel would ignore its request: ``_asked``)."""
        if isinstance(self.store, TeamAccess):
            self.store.check_may(session_id, "write")

    def _request(self, request: str, session_id: int, by: str) -> None:
        label = plain_label(by) or "user"
        self.store.notify(STOP_CHANNEL, json.dumps({"stop": int(session_id), "by": label, "id": request}))

    async def ask(self, session_id: int, by: str, timeout: float = REMOTE_STOP_TIMEOUT) -> list[StoppedRun] | None:
        """Send the request and wait for the serving kernel's answer: the runs it stopped, or
        None when no answer came within ``timeout`` seconds."""
        return await self._ask(uuid.uuid4().hex, session_id, by, timeout)

    async def _ask(self, request: str, session_id: int, by: str, timeout: float) -> list[StoppedRun] | None:
        self._check(session_id)
        self.store.start_listener()  # the answer comes through it (running already in a kernel)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[StoppedRun]] = loop.create_future()
        self._waiting[request] = future  # before the request: the answer may come at once
        end = loop.time() + timeout
        try:
            while True:
                self._request(request, session_id, by)
                left = end - loop.time()
                if left <= 0:
                    return None
                try:
                    return await asyncio.wait_for(asyncio.shield(future), min(RESEND_INTERVAL, left))
                except TimeoutError:
                    if loop.time() >= end:
                        return None
        finally:
            self._waiting.pop(request, None)

    def _keep(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---------------------------------------------------------- the listener
    def _heard(self, payload: str) -> None:
        """A notice on the channel, from any client of the database: act on the two shapes."""
        try:
            message = json.loads(payload)
        except (TypeError, ValueError, RecursionError):  # (deep nesting fits in a NOTIFY payload)
            return
        if not isinstance(message, dict):
            return
        request = message.get("id") if "stop" in message else message.get("stopped")
        if not isinstance(request, str) or not 0 < len(request) <= MAX_BY:
            return
        if "stop" in message:
            self._asked(request, _whole(message.get("stop")), plain_label(message.get("by")))
        else:
            self._answered(request, parse_runs(message.get("runs")))

    def _asked(self, request: str, session_id: int | None, by: str | None) -> None:
        if session_id is None or by is None or not self._serves(session_id):
            return  # not a request, or not this kernel's session (each kernel hears them all)
        if isinstance(self.store, TeamAccess) and not self.store.notice_sender_may(session_id, "write"):
            # a team's store: the role PostgreSQL says sent it may not write to the session
            log.warning("ignored a stop request for session %s from a role it is not shared with", session_id)
            return
        if request in self._answers:  # a repeat: the asker missed the answer, or sent it again
            answer = self._answers[request]
            if answer is not None:
                self.store.notify(STOP_CHANNEL, answer)
            return
        self._answers[request] = None
        while len(self._answers) > ANSWERS_KEPT:
            self._answers.popitem(last=False)
        self._keep(asyncio.get_running_loop().create_task(self._answer(request, session_id, by),
                                                          name=f"chaz-stop-{session_id}"))

    async def _answer(self, request: str, session_id: int, by: str) -> None:
        try:
            stopped = await self._stop_here(session_id, by)
            runs = [asdict(run) for run in stopped[:MAX_RUNS]]
            for run in runs:
                run.pop("elsewhere", None)
            answer = json.dumps({"stopped": request, "runs": runs})
            if request in self._answers:
                self._answers[request] = answer
            self.store.notify(STOP_CHANNEL, answer)
        except Exception:  # noqa: BLE001 - a request must never break the listener's loop
            self._answers.pop(request, None)  # a repeat tries again
            log.exception("stop request for session %s failed", session_id)

    def _answered(self, request: str, runs: list[StoppedRun] | None) -> None:
        future = self._waiting.get(request)
        if future is not None and runs is not None and not future.done():
            future.set_result(runs)
