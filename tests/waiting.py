"""Waiting in tests: on events, never on fixed sleeps.

``await until(predicate, *sources)`` re-checks ``predicate`` each time one of ``sources``
reports something, and returns its (truthy) value. A source is a ``subscribe(callback) ->
unsubscribe`` function: ``store.subscribe`` (each committed entry), ``server.schedules.subscribe``
(a schedule or fire changed), a view's ``on_update`` (a live view refreshed or finished).
``timeout`` only bounds a failure (seconds with no event, at most five times that in all); a
passing test never waits for it. With the loop not
running (a sync test), ``loop.run_until_complete(until(...))`` or ``run_sync(until(...), loop)``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any
from collections.abc import Callable

Subscribe = Callable[[Callable[..., None]], Callable[[], None]]


async def until(
    predicate: Callable[[], Any],
    *sources: Subscribe,
    timeout: float = 30.0,
    what: str = "the condition",
) -> Any:
    """Return ``predicate()`` once it is truthy, re-checked after each event of ``sources``."""
    if not sources:
        raise TypeError("until() needs the sources that wake it, e.g. until(pred, store.subscribe)")
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    woken = asyncio.Event()

    def wake(*_: Any) -> None:
        if threading.get_ident() == loop_thread:
            woken.set()
        else:  # an event from a worker thread: asyncio.Event is not thread-safe
            loop.call_soon_threadsafe(woken.set)

    unsubscribes = [subscribe(wake) for subscribe in sources]
    cap = loop.time() + 5 * timeout
    try:
        async with asyncio.timeout(timeout) as deadline:
            # the predicate runs on the loop after the callbacks, so the state it reads is settled
            while not (value := predicate()):
                woken.clear()
                await woken.wait()
                # progress: the deadline counts from the last event (a cold litellm import can
                # hold the loop for many seconds on a busy machine), within an overall cap
                deadline.reschedule(min(loop.time() + timeout, cap))
            return value
    except TimeoutError:
        # synchronous work on the loop (a cold import of litellm takes seconds on a busy
        # machine) can hold it past the deadline while the condition came true: look once more
        if value := predicate():
            return value
        raise AssertionError(f"timed out waiting for {what} (no progress in {timeout:g} s)") from None
    finally:
        for unsubscribe in unsubscribes:
            unsubscribe()


def calls(target: Any, name: str) -> Subscribe:
    """A source for ``until``: each call of ``target.name`` (a fake's method) wakes the wait."""

    def subscribe(callback: Callable[..., None]) -> Callable[[], None]:
        original = getattr(target, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:
                callback()

        setattr(target, name, wrapped)
        return lambda: setattr(target, name, original)

    return subscribe


async def past(delay: float) -> None:
    """Return once every loop timer due within ``delay`` s from now has run.

    For "this must not happen" checks against a timer-driven component (a throttle armed
    with ``call_later(interval)``): asyncio runs timers in deadline order and the awaiting
    task resumes one loop iteration after its own timer fired, so a timer armed before this
    call with a delay <= ``delay`` has run by then, however loaded the machine is. It is not
    a guess at how long something takes.
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_later(delay, lambda: done.done() or done.set_result(None))
    await done


def poll(predicate: Callable[[], Any], timeout: float, what: str = "condition") -> Any:
    """Check ``predicate`` every 0.2 s until it is truthy (a browser page has no event to wait on)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
