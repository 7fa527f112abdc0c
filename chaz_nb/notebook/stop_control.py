"""Stop over the kernel's control channel: a Stop click that acts while a cell waits.

A ``%chaz @NAME`` cell waits for the run by driving the kernel's loop itself
(kernel_loop.py), and ipykernel handles shell-channel messages, widget clicks and the
sidebar's comm among them, only after that wait returns. The control channel is served on a
thread and loop of its own, so it is read while the shell is busy. The chaz JupyterLab
extension (JupyterLab and Notebook 7) sends there:

- ``chaz_stop_hello`` ``{}``: "this frontend delivers Stop over control"; the reply
  ``chaz_stop_hello_reply`` ``{"status": "ok", "protocol": 2}`` (2: the sidebar chat's send
  goes over control too, chat_control.py). The live Stop buttons stop
  saying that a click waits for the cell's wait to end (views/stop_button.py).
- ``chaz_stop_request`` ``{"session_id": N}``: stop that session's run, as a click on its
  Stop button does (the button's own handler when the session has a live one, else the
  Server's ``request_stop(session_id, by="user")``). The reply ``chaz_stop_reply``:
  ``{"status": "ok", "ok": bool, "session_id", "message"}`` (``message`` says what was
  stopped, or why nothing was); ``ok`` false for a request that names no session or a session
  the store does not have, or when chaz_nb is not loaded. A request that is not a JSON object
  with an int ``session_id`` is answered so, never raised in the kernel.

The handler runs on the control thread: the stop itself is handed to the kernel loop
(``call_soon_threadsafe``; the loop runs it even inside a cell's wait, nest_asyncio2 defers
only handles of the shell's Context). The reply waits for it at most ``REPLY_TIMEOUT``
seconds, so the control channel (the kernel's Interrupt, the debugger) is never held long:
when the loop is busy in a cell's own code, the reply says the stop is queued.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any
from collections.abc import Callable

from . import controller
from .views import stop_button

__all__ = ["HELLO", "REQUEST", "await_loop", "install", "on_loop", "replier", "stop_session"]

HELLO = "chaz_stop_hello"
REQUEST = "chaz_stop_request"
#: 1: Stop; 2: also the sidebar chat's send (chat_control.py)
PROTOCOL = 2
#: seconds the control thread waits for the kernel loop to carry out a stop before it replies
REPLY_TIMEOUT = 1.0

log = logging.getLogger("chaz_nb.notebook.stop_control")
log.addHandler(logging.NullHandler())


def stop_session(session_id: int) -> dict[str, Any]:
    """On the kernel loop: stop a session's run as its Stop button does; the reply's fields."""
    state = controller.loaded_state()
    reply: dict[str, Any] = {"session_id": session_id}
    if state is None:
        return {**reply, "ok": False, "message": "chaz_nb is not loaded in this kernel"}
    buttons = stop_button.live_buttons(session_id)
    if buttons:  # the same path as a click: the row disables itself and says "stopping…"
        ok, message = buttons[0].request()
        return {**reply, "ok": ok, "message": message}
    try:
        stopped = state.server.request_stop(session_id, by="user")
    except Exception as exc:  # noqa: BLE001 - e.g. no such session: said in the reply
        log.debug("stop of session %s failed", session_id, exc_info=True)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return {**reply, "ok": False, "message": f"could not stop session {session_id}: {first}"}
    message = "; ".join(run.describe() for run in stopped) or f"session {session_id} has no run to stop"
    return {**reply, "ok": True, "message": message}


def _session_id(content: Any) -> int | str:
    """The request's session id, or the one line saying why it has none."""
    if not isinstance(content, dict):
        return "a chaz_stop_request carries a JSON object"
    sid = content.get("session_id")
    if isinstance(sid, bool) or not isinstance(sid, int):
        return f"a chaz_stop_request needs a session id (an integer), not {str(sid)[:40]!r}"
    if sid <= 0 or sid >= 2**63:
        return f"there is no session {sid}"
    return sid


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    """Run ``fn`` on the kernel loop (from the control thread); its result as a future."""
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def call() -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the control thread's reply
            done.set_exception(exc)

    loop.call_soon_threadsafe(call)
    return done


async def await_loop(done: concurrent.futures.Future[Any]) -> Any:
    """The loop's answer, or None after ``REPLY_TIMEOUT`` (the stop still happens then)."""
    try:
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(done)), REPLY_TIMEOUT)
    except asyncio.TimeoutError:
        return None


def replier(session: Any) -> Callable[[Any, Any, Any, str, dict[str, Any]], None]:
    """A control handler's reply: ``send(stream, ident, parent, msg_type, content)``, never raising."""

    def send(stream: Any, ident: Any, parent: Any, msg_type: str, content: dict[str, Any]) -> None:
        try:
            session.send(stream, msg_type, content, parent, ident=ident)
        except Exception:  # noqa: BLE001 - a frontend gone mid-reply; nothing to tell anyone
            log.debug("could not send %s", msg_type, exc_info=True)

    return send


def install(kernel: Any, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """Register the two control handlers on an ipykernel kernel; returns the uninstall.

    Without a kernel (plain IPython, nbclient's in-process tests) nothing is registered.
    """
    handlers = getattr(kernel, "control_handlers", None)
    session = getattr(kernel, "session", None)
    if not isinstance(handlers, dict) or session is None:
        return lambda: None

    send = replier(session)

    async def hello(stream: Any, ident: Any, parent: Any) -> None:
        done = on_loop(loop, lambda: stop_button.set_control_delivery(True))
        await await_loop(done)
        send(stream, ident, parent, HELLO + "_reply", {"status": "ok", "protocol": PROTOCOL})

    async def request(stream: Any, ident: Any, parent: Any) -> None:
        content = parent.get("content") if isinstance(parent, dict) else None
        sid = _session_id(content)
        if isinstance(sid, str):
            send(
                stream,
                ident,
                parent,
                REQUEST.replace("request", "reply"),
                {"status": "ok", "ok": False, "session_id": None, "message": sid},
            )
            return
        done = on_loop(loop, lambda: stop_session(sid))
        try:
            reply = await await_loop(done)
        except Exception as exc:  # noqa: BLE001 - never raise in the kernel
            reply = {"session_id": sid, "ok": False, "message": f"could not stop session {sid}: {exc}"}
        if reply is None:
            reply = {
                "session_id": sid,
                "ok": True,
                "queued": True,
                "message": f"the kernel is busy running code; session {sid} stops when it is free",
            }
        send(stream, ident, parent, REQUEST.replace("request", "reply"), {"status": "ok", **reply})

    handlers[HELLO] = hello
    handlers[REQUEST] = request

    def uninstall() -> None:
        for name, fn in ((HELLO, hello), (REQUEST, request)):
            if handlers.get(name) is fn:
                handlers.pop(name, None)

    return uninstall
