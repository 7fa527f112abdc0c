"""Stop requests between kernels over a lossy channel (server/stop_relay.py, PostgreSQL).

A NOTIFY reaches only the listeners LISTENing when it is sent: a kernel whose listener is
still connecting (its first write started it a moment ago; on a loaded machine a backend
takes a while to start) or reconnecting misses it. A Stop button in another kernel then
stopped nothing (test_pg_multi's stop-button test failed that way under load: the serving
kernel's listener LISTENed 80 ms after the request). The asking kernel sends the request
again until the serving kernel answers; the serving kernel acts on a request id once and
answers a repeat with the same answer.
"""

from __future__ import annotations

import asyncio
import json

from chaz_nb.server.stop_relay import STOP_CHANNEL

from test_pg_multi import cancelled_acks, held, held_run, two  # noqa: F401 - fixtures
from waiting import calls, until


def deaf_to_first_stop(server) -> list[str]:
    """``server``'s listener misses the first stop request it would hear (as one that was not
    LISTENing yet); returns the stop requests it did hear."""
    relay = server._engine.relay
    relay._unsubscribe()
    heard: list[str] = []

    def listener(payload: str) -> None:
        message = json.loads(payload)
        if "stop" in message:
            heard.append(message["id"])
            if len(heard) == 1:
                return  # lost
        relay._heard(payload)

    relay._unsubscribe = server.store.on_notice(STOP_CHANNEL, listener)
    return heard


async def test_a_stop_button_request_the_serving_kernel_missed_is_sent_again(held):  # noqa: F811
    a, b, release = held
    sid, handle = await held_run(held)
    heard = deaf_to_first_stop(a)
    try:
        [run] = b.request_stop(sid, by="user")  # the Stop button: it does not wait
        assert run.elsewhere
        assert await asyncio.wait_for(handle.wait(), 30) is None  # (the bound only ends a failing test)
    finally:
        release.set()
    [ack] = await until(lambda: cancelled_acks(b.store, sid), b.store.subscribe, what="A's cancelled Ack in B")
    assert ack.payload["stopped_by"] == "user"
    assert len(heard) >= 2 and len(set(heard)) == 1  # the same request, again


async def test_a_waited_stop_the_serving_kernel_missed_is_sent_again_and_answered(held):  # noqa: F811
    a, b, release = held
    sid, handle = await held_run(held)
    deaf_to_first_stop(a)
    try:
        [run] = await b.stop_runs(sid, by="bea")
    finally:
        release.set()
    assert (run.session_id, run.was, run.elsewhere) == (sid, "running", True)
    [ack] = cancelled_acks(b.store, sid)
    assert ack.payload["run_id"] == run.run_id and await handle.wait() is None


async def test_a_repeated_request_is_acted_on_once_and_answered_the_same(held, monkeypatch):  # noqa: F811
    a, b, release = held
    sid, handle = await held_run(held)
    answers: list[dict] = []
    notify = a.store.notify
    monkeypatch.setattr(a.store, "notify", lambda channel, payload: answers.append(json.loads(payload))
                        or notify(channel, payload))
    relay = a._engine.relay  # straight to A's handler, as A's listener hands a notice to it
    request = json.dumps({"stop": sid, "by": "bea", "id": "r1"})
    try:
        relay._heard(request)
        relay._heard(request)  # sent again while the stop is under way: no second stop
        await until(lambda: answers, calls(a.store, "notify"), what="the answer")
        relay._heard(request)  # its answer lost: the asker sends it again
    finally:
        release.set()
    first, second = answers
    assert first == second and first["stopped"] == "r1" and [r["session_id"] for r in first["runs"]] == [sid]
    assert len(cancelled_acks(a.store, sid)) == 1 and await handle.wait() is None
