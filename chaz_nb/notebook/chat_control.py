"""The sidebar's chat (and its other comm messages) over the kernel's control channel.

The sidebar's comm (labcomm.py) arrives on the shell channel, which the kernel reads only
once a waiting ``%chaz @NAME`` cell returns, so a Message sent from the chat then would say
"Sending…" until that wait ends. The chaz JupyterLab extension sends it on the control
channel instead, as it does Stop (stop_control.py, whose hand-off to the kernel loop this
reuses), once the kernel's ``chaz_stop_hello`` reply said ``protocol`` 2:

- ``chaz_chat_send`` ``{"request_id", "text", "session_id"?, "agent"?, "new"?, "comm_id"?}``:
  the comm's ``send`` (labchat.py), checked and written by the same ``ChatHub.send``, so the
  Message goes through the façade with ``payload.origin.via = "sidebar"``. ``comm_id`` names
  the sidebar's ``chaz`` comm: the kernel answers ``sent`` on it too and its chat follows the
  Message's session, as after a comm send; a comm this kernel does not know (gone, forged)
  only loses that (the Message is written all the same).
- The reply ``chaz_chat_reply``: ``{"status": "ok", "type": "sent", "request_id", "ok",
  "session_id", "message"}``, the comm's ``sent``; a request that is not a JSON object, or
  whose ``request_id``/``comm_id`` is not a short string, is answered ``ok`` false in one line.
  When the loop is busy in a cell's own code (not a wait) the reply comes after
  ``stop_control.REPLY_TIMEOUT`` with ``"queued": true``: the Message is written when the
  kernel is free, and its ``sent`` then comes on the comm.

- ``chaz_comm_msg`` ``{"comm_id", "data"}``: the chat's reads on the sidebar's comm
  (``COMM_TYPES``: ``chat_open``, ``chat_close``, ``page``), handed to that comm's
  ``LabBridge.handle_msg`` on the kernel loop, so it is checked and answered (on the comm, over
  iopub, which a waiting cell does not hold) exactly as if it came on the comm. The reply
  ``chaz_comm_reply`` ``{"status": "ok", "ok", "message"}`` only says whether it was handed
  over: ``ok`` false for a comm this kernel does not know (the frontend then sends it on the
  comm) or a request that is not ``{"comm_id": str, "data": {...}}`` of those types;
  ``"queued": true`` when the loop is busy in a cell's own code. Approve / Deny stay on the
  comm: a decision handled from the control thread's context did not resume the parked run in
  JupyterLab (tests/e2e/test_sidebar_e2e.py), a wait ends on a parked run anyway.

The comm's ``send`` stays for frontends that do not say hello (an older extension) or kernels
whose control channel has no chaz handlers (an older chaz_nb).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from collections.abc import Callable

from . import controller
from .labchat import MAX_ID_CHARS, ChatHub
from .stop_control import await_loop, on_loop, replier

__all__ = ["COMM", "COMM_REPLY", "SEND", "REPLY", "comm_message", "install", "send_message"]

SEND = "chaz_chat_send"
REPLY = "chaz_chat_reply"
COMM = "chaz_comm_msg"
COMM_REPLY = "chaz_comm_reply"
#: the comm messages taken over control (reads: they write nothing, start no run)
COMM_TYPES = frozenset({"chat_open", "chat_close", "page"})
#: the fields of a send (others are ignored, as the comm path ignores them)
FIELDS = ("request_id", "text", "session_id", "agent", "new")

log = logging.getLogger("chaz_nb.notebook.chat_control")
log.addHandler(logging.NullHandler())


def _refused(request_id: Any, message: str) -> dict[str, Any]:
    rid = request_id if isinstance(request_id, str) and len(request_id) <= MAX_ID_CHARS else ""
    return {"type": "sent", "request_id": rid, "ok": False, "session_id": None, "message": message}


def check(content: Any) -> dict[str, Any]:
    """On the control thread: the send's fields, or ``{"refused": reply}`` (one line).

    Only the envelope is checked here; the text, agent, session and ``new`` are checked on
    the kernel loop by ``ChatHub``, exactly as a comm send's are.
    """
    if not isinstance(content, dict):
        return {"refused": _refused(None, "a chaz_chat_send carries a JSON object")}
    rid = content.get("request_id")
    if not isinstance(rid, str) or len(rid) > MAX_ID_CHARS:
        return {"refused": _refused(None, f"a chaz_chat_send needs a request_id (at most {MAX_ID_CHARS} characters)")}
    comm_id = content.get("comm_id")
    if comm_id is not None and (not isinstance(comm_id, str) or len(comm_id) > MAX_ID_CHARS):
        return {"refused": _refused(rid, f"comm_id is the sidebar's comm id (at most {MAX_ID_CHARS} characters)")}
    data = {"type": "send", **{k: content[k] for k in FIELDS if k in content}}
    return {"data": data, "comm_id": comm_id}


def send_message(data: dict[str, Any], comm_id: str | None) -> dict[str, Any]:
    """On the kernel loop: write the Message as the comm's ``send`` does; the ``sent`` answer."""
    state = controller.loaded_state()
    if state is None:
        return _refused(data.get("request_id"), "chaz_nb is not loaded in this kernel")
    bridge = getattr(state.unregister_comm, "bridge", None)
    if bridge is None:  # no comm target (an odd kernel): written all the same, no chat follows
        hub = ChatHub(state.server, send=lambda comm, msg: None, is_open=lambda key: False,
                      broadcast_soon=lambda: None)
        return hub.send(None, data)
    comm = bridge.comms.get(comm_id) if comm_id else None
    return bridge.chat.send(comm, data)


def check_comm(content: Any) -> tuple[str, dict[str, Any]] | str:
    """On the control thread: a ``chaz_comm_msg``'s comm id and data, or why it has none."""
    if not isinstance(content, dict):
        return "a chaz_comm_msg carries a JSON object"
    comm_id, data = content.get("comm_id"), content.get("data")
    if not isinstance(comm_id, str) or not comm_id or len(comm_id) > MAX_ID_CHARS:
        return f"a chaz_comm_msg needs comm_id, the sidebar's comm id (at most {MAX_ID_CHARS} characters)"
    if not isinstance(data, dict):
        return "a chaz_comm_msg's data is the comm message (a JSON object)"
    if data.get("type") not in COMM_TYPES:
        kind = data.get("type")
        shown = kind[:40] if isinstance(kind, str) else kind
        return f"a chaz_comm_msg carries {', '.join(sorted(COMM_TYPES))}; {shown!r} goes over the comm"
    return comm_id, data


def comm_message(comm_id: str, data: dict[str, Any]) -> dict[str, Any]:
    """On the kernel loop: handle ``data`` as a message of the comm ``comm_id``; whether it was."""
    state = controller.loaded_state()
    bridge = getattr(getattr(state, "unregister_comm", None), "bridge", None)
    comm = bridge.comms.get(comm_id) if bridge is not None else None
    if bridge is None or comm is None:
        return {"ok": False, "message": f"no chaz comm {comm_id[:40]!r} in this kernel"}
    bridge.handle_msg(comm, {"content": {"data": data}})  # answers on the comm; never raises
    return {"ok": True, "message": ""}


def install(kernel: Any, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """Register ``chaz_chat_send`` on an ipykernel kernel's control channel; returns the uninstall."""
    handlers = getattr(kernel, "control_handlers", None)
    session = getattr(kernel, "session", None)
    if not isinstance(handlers, dict) or session is None:
        return lambda: None
    send = replier(session)

    async def chat_send(stream: Any, ident: Any, parent: Any) -> None:
        checked = check(parent.get("content") if isinstance(parent, dict) else None)
        reply = checked.get("refused")
        if reply is None:
            data, comm_id = checked["data"], checked["comm_id"]
            done = on_loop(loop, lambda: send_message(data, comm_id))
            try:
                reply = await await_loop(done)
            except Exception as exc:  # noqa: BLE001 - never raise in the kernel
                log.debug("chat send over control failed", exc_info=True)
                reply = _refused(data.get("request_id"), f"{type(exc).__name__}: {str(exc)[:200]}")
            if reply is None:
                reply = {
                    "type": "sent",
                    "request_id": data.get("request_id"),
                    "ok": True,
                    "queued": True,
                    "session_id": None,
                    "message": "the kernel is busy running code; the message is written when it is free",
                }
        send(stream, ident, parent, REPLY, {"status": "ok", **reply})

    async def comm_msg(stream: Any, ident: Any, parent: Any) -> None:
        checked = check_comm(parent.get("content") if isinstance(parent, dict) else None)
        if isinstance(checked, str):
            answer: dict[str, Any] = {"ok": False, "message": checked}
        else:
            comm_id, data = checked
            done = on_loop(loop, lambda: comm_message(comm_id, data))
            try:
                handed = await await_loop(done)
            except Exception as exc:  # noqa: BLE001 - never raise in the kernel
                handed = {"ok": False, "message": f"{type(exc).__name__}: {str(exc)[:200]}"}
            answer = handed if handed is not None else {
                "ok": True, "queued": True,
                "message": "the kernel is busy running code; the message is handled when it is free"}
        send(stream, ident, parent, COMM_REPLY, {"status": "ok", **answer})

    handlers[SEND] = chat_send
    handlers[COMM] = comm_msg

    def uninstall() -> None:
        for name, fn in ((SEND, chat_send), (COMM, comm_msg)):
            if handlers.get(name) is fn:
                handlers.pop(name, None)

    return uninstall
