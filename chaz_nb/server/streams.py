"""Reply text while a model writes it: transient per-session stream events, never entries.

The run engine hands each text delta of a run to ``StreamHub.delta``; the hub keeps the text
so far of each session's run and calls the subscribers with a ``StreamEvent`` (session, run,
the whole text so far, ``done``). When the run's reply lands (its Message, its Error, a
silent-turn Ack) or a tool call of the run is written (the text of that step is superseded),
the engine calls ``clear`` and subscribers get one event with ``done=True`` and no text: a
view drops its partial block then, and shows the entry instead. Apart from the stream events,
``subscribe_ended`` followers hear when a session's run loop is over (idle; no entry says so).

Subscribers run on the kernel loop, synchronously, once per delta: they must only store the
text and arm their own throttled refresh (views/base.py), never render per delta.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from collections.abc import Callable

log = logging.getLogger(__name__)

__all__ = ["StreamEvent", "StreamHub", "StreamListener"]


@dataclass(frozen=True)
class StreamEvent:
    """The reply a run is writing: ``text`` is everything so far (empty once ``done``)."""

    session_id: int
    run_id: int
    text: str
    done: bool = False


StreamListener = Callable[[StreamEvent], None]


class StreamHub:
    """The text so far of each streaming run, and who follows which session."""

    def __init__(self) -> None:
        self._text: dict[int, tuple[int, str]] = {}  # session -> (run id, text so far)
        self._listeners: dict[int | None, list[StreamListener]] = {}
        self._ended: list[Callable[[int], None]] = []

    def subscribe(self, session_id: int | None, callback: StreamListener) -> Callable[[], None]:
        """Call ``callback(event)`` for each stream event of ``session_id`` (``None``: every
        session). A run already streaming is replayed at once (its text so far). Returns
        the function that unsubscribes."""
        listeners = self._listeners.setdefault(session_id, [])
        listeners.append(callback)
        if session_id is not None and (now := self.current(session_id)) is not None:
            self._call(callback, now)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):  # unsubscribed already
                listeners.remove(callback)

        return unsubscribe

    def current(self, session_id: int) -> StreamEvent | None:
        """The reply being written in ``session_id`` now, if any."""
        held = self._text.get(session_id)
        if held is None:
            return None
        return StreamEvent(session_id, held[0], held[1])

    def delta(self, session_id: int, run_id: int, text: str) -> None:
        held = self._text.get(session_id)
        so_far = (held[1] if held is not None and held[0] == run_id else "") + text
        self._text[session_id] = (run_id, so_far)
        self._publish(StreamEvent(session_id, run_id, so_far))

    def clear(self, session_id: int, run_id: int | None = None) -> None:
        """The partial reply of ``session_id`` (of ``run_id`` only, when given) is over."""
        held = self._text.get(session_id)
        if held is None or (run_id is not None and held[0] != run_id):
            return
        del self._text[session_id]
        self._publish(StreamEvent(session_id, held[0], "", done=True))

    def subscribe_ended(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(session_id)`` each time a session's run loop is over (it is idle
        now). Returns the function that unsubscribes."""
        self._ended.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._ended.remove(callback)

        return unsubscribe

    def ended(self, session_id: int) -> None:
        """The session's run loop is over: its status is idle now. The loop ends after its
        closing entry with no write of its own, so a follower showing the status (the lab
        sidebar) learns it here. Not a stream event: a session that streamed nothing has none."""
        for callback in list(self._ended):
            try:
                callback(session_id)
            except Exception:  # a follower's problem must not break the run's end
                log.exception("run-end listener %r failed", callback)

    def _publish(self, event: StreamEvent) -> None:
        for callback in [*self._listeners.get(event.session_id, ()), *self._listeners.get(None, ())]:
            self._call(callback, event)

    @staticmethod
    def _call(callback: StreamListener, event: StreamEvent) -> None:
        try:
            callback(event)
        except Exception:  # a view's problem must not end the run that streams
            log.exception("stream listener %r failed", callback)
