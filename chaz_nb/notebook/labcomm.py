"""Kernel side of the ``chaz`` comm used by the JupyterLab "Chaz" sidebar.

The frontend opens a comm with target name ``chaz``. On open, and whenever
entries are written (throttled), the kernel sends::

    {"type": "state", "sessions": [...], "pending": [...], "agents": [...]}

A session whose run is streaming a reply has ``"streaming": TEXT`` (the end of the text so
far, at most ``MAX_CONTENT`` characters): stream events (``server.subscribe_stream``) arm the
same throttled broadcast as writes, so the sidebar shows the reply as it is written at most
~4 times a second; the key is gone once the reply's entry is written.

The frontend sends ``{"type": "refresh"}``,
``{"type": "decide", "request_id", "decision": "approve"|"deny"|"approve_all", "reason"}`` (an approve may carry
``"arguments"``: the edited arguments, an object or its JSON text, checked against the tool's
schema; a bad edit is answered ``ok`` false and the request stays open),
``{"type": "stop", "session_id"}`` (the sidebar's Stop button: what ``%chaz stop SESSION``
does, server/stopping.py; a session another kernel serves is stopped there, server/stop_relay.py)
and ``{"type": "page", "session_id", "before_seq", "limit", "request_id"}`` (the transcript
renderer's "show earlier"); the sidebar's chat (``chat_open``, ``chat_close``, ``send``) is
answered by labchat.py. A decide is answered with
``{"type": "decided", "request_id", "ok", "message"}``, a stop with
``{"type": "stopped", "session_id", "ok", "message"}`` (``message`` says what was stopped, or
why nothing was), each then with a fresh state; a page with ``{"type": "page", "request_id",
"ok", "session_id", "entries", "first_seq", "earlier"}`` (or ``ok`` false and a ``message``).

A comm a notebook opens with ``{"role": "cells"}`` (the extension's cells plugin) gets no state:
only ``{"type": "cell", "session_id", "cell_id", "source", "outputs", "metadata"}`` when a
person's approved ``kernel__run`` ran (``server.subscribe_cells``, server/cells.py), which the
extension inserts below the cell ``cell_id`` (None: the sidebar chat, at the notebook's end).

The chat's ``chat_open``, ``chat_close`` and ``page`` may come over the kernel's control
channel instead (a ``chaz_comm_msg`` naming the comm, chat_control.py: read while a cell
waits), handed to ``handle_msg`` here.

Only this server interface is used: ``server.store.subscribe(cb) -> unsubscribe``,
``server.store.sessions()``, ``server.store.latest(session_id)``, ``server.store.read_page(...)``,
``server.session_status(session_id)``, ``server.pending_approvals()``,
``server.decide(request_id, decision, reason=None, decided_by="user")`` and
``server.request_stop(session_id, by="user")``; optionally ``server.subscribe_stream`` and
``server.subscribe_run_end(cb)`` (a run's end: idle with no write, so the state is sent again)
and ``server.subscribe_agents(cb)`` (an agent defined or forgotten: the state's ``agents``)
and ``server.subscribe_cells(cb)`` (approved code that ran: a ``cell`` message).

Nothing here prints: sends from background callbacks go over the comm only, and
failures are logged to the ``chaz_nb.labcomm`` logger (which has a NullHandler,
so Python's last-resort handler never writes them into a cell's stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import threading
import time
from types import SimpleNamespace
from typing import Any
from collections.abc import Callable

from ..core.redaction import redact
# the chat (labchat.py) owns the page/JSON helpers the state shares (a page is a chat's "show earlier")
from .labchat import CHAT_TYPES, PAGE_BYTES, PAGE_LIMIT, PAGE_MAX, PAGE_TEXT_MAX, ChatHub  # noqa: F401 - re-exported
from .labchat import comm_key as _key
from .labchat import enum_value as _value
from .labchat import jsonable as _jsonable

__all__ = ["TARGET_NAME", "CommRegistration", "LabBridge", "register_comm_target"]

TARGET_NAME = "chaz"

#: Minimum seconds between two background state broadcasts (at most ~4/s).
MIN_INTERVAL = 0.25
#: Longest last-entry content sent to the sidebar (it shows one line).
MAX_CONTENT = 500
#: Most sessions listed in a state message (newest first).
MAX_SESSIONS = 200
#: the longest string a frontend message may carry in any field (a deny reason is the longest
#: one a person writes; the server keeps 2,000 characters of it): a longer one is refused whole
MAX_FIELD_CHARS = 10_000

log = logging.getLogger("chaz_nb.labcomm")
log.addHandler(logging.NullHandler())


def _oversized(data: dict) -> str | None:
    """The name of a field of a frontend message whose text is over ``MAX_FIELD_CHARS``, or None.

    A value that is not text (a list, a number) counts by its ``str``: that is what the
    handlers make of it (a request id, a reason).
    """
    for key, value in data.items():
        if isinstance(value, (int, float, bool)) or value is None:
            continue
        text = value if isinstance(value, str) else None
        if text is None:
            try:
                text = json.dumps(value)[: MAX_FIELD_CHARS + 1]
            except (TypeError, ValueError):
                text = str(value)[: MAX_FIELD_CHARS + 1]
        if len(text) > MAX_FIELD_CHARS or len(str(key)) > 100:
            return repr(str(key)[:100])
    return None


def _last_entry(entry: Any) -> dict | None:
    if entry is None:
        return None
    content = getattr(entry, "content", "") or ""
    if not isinstance(content, str):
        content = str(content)
    if len(content) > MAX_CONTENT:
        content = content[: MAX_CONTENT - 1] + "…"
    return {
        "type": str(_value(getattr(entry, "entry_type", None)) or ""),
        "sender": str(getattr(entry, "sender", "") or ""),
        "content": content,
        "created_at": _jsonable(getattr(entry, "created_at", None)),
    }


def _streaming(server: Any, session_id: Any) -> dict:
    """``{"streaming": text}`` while a run of the session streams a reply, else ``{}``."""
    current = getattr(server, "current_stream", None)
    if current is None:
        return {}
    try:
        event = current(session_id)
    except Exception:  # noqa: BLE001 - a broken stream must not hide the session
        log.debug("current_stream(%s) failed", session_id, exc_info=True)
        return {}
    text = getattr(event, "text", "") if event is not None else ""
    if not text:
        return {}
    # masked as entries are when written (the whole text first: a key cut by the tail would pass)
    text = redact(text)
    return {"streaming": text if len(text) <= MAX_CONTENT else "…" + text[-(MAX_CONTENT - 1):]}


def _code_check(check: Any) -> dict:
    """What the sidebar's card says about a code call's code (the request's ``code_check``, as
    the cell's card: approval.py ``code_notes``): why Approve is refused, how many literals are
    masked, the code's sha256. Only these fields, typed; nothing for a call that is not code."""
    if not isinstance(check, dict):
        return {}
    out: dict[str, Any] = {}
    if isinstance(check.get("problem"), str) and check["problem"]:
        out["problem"] = check["problem"][:500]
    if isinstance(check.get("masked_literals"), int) and not isinstance(check["masked_literals"], bool):
        out["masked_literals"] = check["masked_literals"]
    if isinstance(check.get("sha256"), str):
        out["sha256"] = check["sha256"][:64]
    return {"code_check": out} if out else {}


def build_state(server: Any) -> dict:
    """The ``state`` message for the current server contents."""
    store = server.store
    sessions = list(store.sessions())
    sessions.sort(key=lambda s: getattr(s, "id", 0), reverse=True)
    out = []
    for s in sessions[:MAX_SESSIONS]:
        sid = s.id
        try:
            status = server.session_status(sid)
        except Exception:  # noqa: BLE001 - a broken session must not hide the others
            log.debug("session_status(%s) failed", sid, exc_info=True)
            status = "idle"
        try:
            last = _last_entry(store.latest(sid))
        except Exception:  # noqa: BLE001 - a broken session must not hide the others
            log.debug("latest(%s) failed", sid, exc_info=True)
            last = None
        out.append(
            {
                "id": _jsonable(sid),
                "agent": str(getattr(s, "agent", "") or ""),
                "kind": str(_value(getattr(s, "kind", "")) or ""),
                "status": str(_value(status) or "idle"),
                "last_entry": last,
                **_streaming(server, sid),
            }
        )
    pending = []
    for p in server.pending_approvals() or []:
        p = dict(p)
        pending.append(
            {
                "request_id": str(p.get("request_id", "")),
                "session_id": _jsonable(p.get("session_id")),
                "agent": str(p.get("agent", "") or ""),
                "tool_name": str(p.get("tool_name", "") or ""),
                "risk_level": str(_value(p.get("risk_level", "")) or ""),
                "arguments_display": _jsonable(p.get("arguments_display", {})),
                "created_at": _jsonable(p.get("created_at")),
                "kind": str(p.get("kind") or "tool"),  # egress: Allow once / for this session / Deny
                **_code_check(p.get("code_check")),
            }
        )
    agents = sorted(str(a) for a in (getattr(server, "agents", None) or {}))  # "new chat with @NAME"
    return {"type": "state", "sessions": out, "pending": pending, "agents": agents}


class LabBridge:
    """Serves the ``chaz`` comms of one kernel from one server.

    ``call_later(delay, fn)`` schedules ``fn`` on the kernel loop and returns a
    handle with ``cancel()``; by default it uses the loop captured at creation
    (thread-safe). Tests pass their own scheduler and clock.
    """

    def __init__(
        self,
        server: Any,
        *,
        min_interval: float = MIN_INTERVAL,
        call_later: Callable[[float, Callable[[], None]], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server
        self.min_interval = float(min_interval)
        self.comms: dict[str, Any] = {}
        #: comms a notebook opened with ``{"role": "cells"}``: they get ``cell`` messages only
        self.cell_comms: dict[str, Any] = {}
        self._clock = clock
        self._call_later = call_later or self._loop_call_later
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        if call_later is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._loop = None
            self._loop_thread = threading.get_ident()
        self._last_sent = float("-inf")
        self._interval = self.min_interval
        self._scheduled: Any = None
        self._lock = threading.Lock()
        self._closed = False
        # the sidebar's chat: followed sessions, Messages written
        self.chat = ChatHub(server, send=self._send, is_open=self.comms.__contains__,
                            broadcast_soon=self.schedule_broadcast)
        self._unsubscribe: Callable[[], Any] | None = None
        try:
            self._unsubscribe = server.store.subscribe(self._on_write)
        except Exception:  # noqa: BLE001 - the sidebar is optional: a server without writes to hear
            log.warning("could not subscribe to store writes", exc_info=True)
        self._unsubscribe_stream: Callable[[], Any] | None = None
        subscribe_stream = getattr(server, "subscribe_stream", None)
        if subscribe_stream is not None:
            try:  # every session's reply text as it is written (throttled like writes)
                self._unsubscribe_stream = subscribe_stream(None, self._on_write)
            except Exception:  # noqa: BLE001 - optional: the sidebar then shows replies when written
                log.warning("could not subscribe to reply streams", exc_info=True)
        self._unsubscribe_end: Callable[[], Any] | None = None
        subscribe_run_end = getattr(server, "subscribe_run_end", None)
        if subscribe_run_end is not None:
            try:  # a run's end: idle, with no write after its closing entry (the Stop goes)
                self._unsubscribe_end = subscribe_run_end(self._on_run_end)
            except Exception:  # noqa: BLE001 - optional: a status then changes at the next write
                log.warning("could not subscribe to run ends", exc_info=True)
        self._unsubscribe_cells: Callable[[], Any] | None = None
        subscribe_cells = getattr(server, "subscribe_cells", None)
        if subscribe_cells is not None:
            try:  # approved agent code, inserted as a cell by the notebook's extension
                self._unsubscribe_cells = subscribe_cells(self._on_cell)
            except Exception:  # noqa: BLE001 - optional: the code stays in the log (%chaz cells)
                log.warning("could not subscribe to approved code", exc_info=True)
        self._unsubscribe_agents: Callable[[], Any] | None = None
        subscribe_agents = getattr(server, "subscribe_agents", None)
        if subscribe_agents is not None:
            try:  # an agent defined or forgotten: "New chat with" lists it now, not at Refresh
                self._unsubscribe_agents = subscribe_agents(self._on_agents)
            except Exception:  # noqa: BLE001 - optional: the list then changes at the next write
                log.warning("could not subscribe to agent definitions", exc_info=True)

    # -- scheduling ---------------------------------------------------------

    def _loop_call_later(self, delay: float, fn: Callable[[], None]) -> Any:
        loop = self._loop
        if loop is None or loop.is_closed():
            # No event loop (not in a kernel cell): a daemon timer thread.
            timer = threading.Timer(max(0.0, delay), fn)
            timer.daemon = True
            timer.start()
            return timer
        if threading.get_ident() == self._loop_thread:
            return loop.call_later(max(0.0, delay), fn)
        # From another thread: hop onto the loop first.
        holder: dict[str, Any] = {}

        class _Handle:
            def cancel(self) -> None:
                holder["cancelled"] = True
                h = holder.get("h")
                if h is not None:
                    h.cancel()

        def arm() -> None:
            if not holder.get("cancelled"):
                holder["h"] = loop.call_later(max(0.0, delay), fn)

        loop.call_soon_threadsafe(arm)
        return _Handle()

    def _on_write(self, *args: Any, **kwargs: Any) -> None:
        """Store write callback: schedule a throttled broadcast. Never raises."""
        try:
            self.chat.touch(*args[:1])
            self.schedule_broadcast()
        except Exception:  # noqa: BLE001 - a store callback: it must never raise into the writer
            log.debug("scheduling a broadcast failed", exc_info=True)

    def _on_run_end(self, session_id: int) -> None:
        """A session's run loop is over: its status changed with no write. Never raises."""
        self._on_write(SimpleNamespace(session_id=session_id))

    def _on_agents(self) -> None:
        """An agent was defined, redefined or forgotten: the state's ``agents`` changed. Never raises."""
        try:
            self.schedule_broadcast()
        except Exception:  # noqa: BLE001 - called from define_agent: it must never fail a definition
            log.debug("scheduling a broadcast failed", exc_info=True)

    def _on_cell(self, cell: Any) -> None:
        """Approved code ran: ``{"type": "cell", session_id, cell_id, source, outputs,
        metadata}`` to each notebook's cells comm (``cell_id`` None: the sidebar chat asked, at
        the notebook's end). Never raises."""
        try:
            msg = {"type": "cell", **_jsonable(cell.to_json())}
        except Exception:  # noqa: BLE001 - a server callback: it must never raise into the run
            log.debug("building a cell message failed", exc_info=True)
            return
        for key, comm in list(self.cell_comms.items()):
            try:
                comm.send(msg)
            except Exception:  # noqa: BLE001 - a comm gone with its notebook: dropped
                log.debug("cell comm send failed; dropping comm", exc_info=True)
                self.cell_comms.pop(key, None)

    def schedule_broadcast(self) -> None:
        """Broadcast the state soon, at most once per interval."""
        with self._lock:
            if self._closed or not self.comms or self._scheduled is not None:
                return
            delay = max(0.0, self._last_sent + self._interval - self._clock())
            self._scheduled = True  # placeholder while the handle is created
        try:
            handle = self._call_later(delay, self._flush)
        except Exception:  # noqa: BLE001 - a closed loop or timer: this broadcast is skipped, the next write tries again
            log.debug("call_later failed", exc_info=True)
            with self._lock:
                self._scheduled = None
            return
        with self._lock:
            if self._scheduled is True:
                self._scheduled = handle if handle is not None else True

    def _flush(self) -> None:
        with self._lock:
            self._scheduled = None
        if self._closed:
            return
        self.broadcast()

    # -- sending --------------------------------------------------------------

    def state(self) -> dict:
        return build_state(self.server)

    def broadcast(self) -> None:
        """Send a fresh state to every open comm now."""
        if self._closed or not self.comms:
            return
        started = self._clock()
        try:
            msg = self.state()
        except Exception:  # noqa: BLE001 - a timer callback on the kernel loop: it must never raise there
            log.warning("building the chaz state failed", exc_info=True)
            return
        finished = self._clock()
        self._last_sent = finished
        # Keep state building under ~20% of the loop's time.
        self._interval = max(self.min_interval, 5 * (finished - started))
        for comm in list(self.comms.values()):
            self._send(comm, msg)
        self.chat.flush()

    def _send(self, comm: Any, msg: dict) -> None:
        try:
            comm.send(msg)
        except Exception:  # noqa: BLE001 - a comm gone with its frontend: dropped, never raised
            log.debug("comm send failed; dropping comm", exc_info=True)
            self.comms.pop(_key(comm), None)

    def send_state(self, comm: Any) -> None:
        try:
            msg = self.state()
        except Exception:  # noqa: BLE001 - the state a comm opens with: an empty one rather than a kernel traceback
            log.warning("building the chaz state failed", exc_info=True)
            msg = {"type": "state", "sessions": [], "pending": []}
        self._send(comm, msg)

    # -- comm lifecycle ---------------------------------------------------------

    def open(self, comm: Any, open_msg: Any = None) -> None:
        """Comm target callback: adopt a comm the frontend opened."""
        if self._closed:
            comm.close()
            return
        key = _key(comm)
        if _role(open_msg) == "cells":  # a notebook's: approved code as cells, no state
            self.cell_comms[key] = comm
            comm.on_close(lambda msg: self.cell_comms.pop(key, None))
            return
        self.comms[key] = comm

        def on_msg(msg: Any) -> None:
            self.handle_msg(comm, msg)

        def on_close(msg: Any) -> None:
            self.comms.pop(key, None)
            self.chat.forget(key)

        comm.on_msg(on_msg)
        comm.on_close(on_close)
        self.send_state(comm)

    def handle_msg(self, comm: Any, msg: Any) -> None:
        try:
            data = msg["content"]["data"]
        except (KeyError, TypeError):
            data = None
        if not isinstance(data, dict):
            return
        kind = data.get("type")
        try:
            self._dispatch(comm, kind, data)
        except Exception as exc:  # noqa: BLE001 - the one guard: a failed message is a one-line reply, never a kernel traceback
            log.debug("chaz comm message %r failed", kind, exc_info=True)
            self._failed(comm, kind, data, " ".join(f"{type(exc).__name__}: {exc}".split()))

    def _failed(self, comm: Any, kind: Any, data: dict, message: str) -> None:
        """The one-line error reply to a message of ``kind`` (in the form its answer takes)."""
        if kind == "decide":
            self._decided(comm, str(data.get("request_id") or ""), False, message)
        elif kind == "stop":
            self._stopped(comm, data.get("session_id"), False, message)
        elif kind == "page":
            self._send(comm, {"type": "page", "request_id": str(data.get("request_id") or ""), "ok": False,
                              "message": message})
        else:
            self._send(comm, {"type": "error", "request": _jsonable(kind), "message": message})

    def _dispatch(self, comm: Any, kind: Any, data: dict) -> None:
        if kind in CHAT_TYPES:  # (bounds its own fields: a Message may be longer than a reason)
            self.chat.handle(comm, data)
            return
        too_long = _oversized(data)
        if too_long is not None:
            message = (f"{too_long} is over {MAX_FIELD_CHARS:,} characters; the message was ignored "
                       "(a deny reason of at most 2,000 characters is kept)")
            log.debug("chaz comm message %r refused: %s", kind, message)
            if kind == "decide":
                self._decided(comm, "", False, message)
            elif kind == "stop":
                self._stopped(comm, None, False, message)
            elif kind == "page":
                self._send(comm, {"type": "page", "request_id": "", "ok": False, "message": message})
            return
        if kind == "refresh":
            self.send_state(comm)
        elif kind == "decide":
            self._decide(comm, data)
        elif kind == "stop":
            self._stop(comm, data)
        elif kind == "page":
            self.chat.page(comm, data)
        else:
            log.debug("unknown chaz comm message %r", kind)

    def _decide(self, comm: Any, data: dict) -> None:
        request_id = str(data.get("request_id") or "")
        decision = data.get("decision")
        reason = data.get("reason")
        reason = str(reason) if reason not in (None, "") else None  # stored as text, whatever was sent
        if decision not in ("approve", "deny", "approve_all"):  # approve_all: an egress card's
            self._decided(comm, request_id, False, f"unknown decision {decision!r}")
            return
        if not request_id:
            self._decided(comm, request_id, False, "missing request_id")
            return
        arguments = data.get("arguments")
        if arguments is not None and (decision != "approve" or not isinstance(arguments, (dict, str))):
            self._decided(comm, request_id, False, "edited arguments go with approve, as a JSON object")
            return
        # a failure (unknown request, a bad edit) is handle_msg's one-line reply
        if arguments is None:
            result = self.server.decide(request_id, decision, reason=reason, decided_by="user")
        else:
            result = self.server.decide(request_id, decision, reason=reason, decided_by="user", arguments=arguments)
        if inspect.isawaitable(result):
            async def finish() -> None:
                try:
                    res = await result
                except Exception as exc:  # noqa: BLE001 - a task after handle_msg returned: its own reply
                    self._decided(comm, request_id, False, f"{type(exc).__name__}: {exc}")
                    return
                self._decided_result(comm, request_id, res)

            try:
                asyncio.ensure_future(finish())
            except RuntimeError:
                self._decided(comm, request_id, False, "no event loop to finish the decision")
            return
        self._decided_result(comm, request_id, result)

    def _stop(self, comm: Any, data: dict) -> None:
        session_id = data.get("session_id")
        if not isinstance(session_id, int) or isinstance(session_id, bool):
            self._stopped(comm, session_id, False, f"stop needs a session id (a number), not {session_id!r}")
            return
        # a failure (e.g. no such session) is handle_msg's one-line reply
        stopped = self.server.request_stop(session_id, by="user")
        # each stopped run writes its cancelled Ack as it unwinds; the state follows the writes
        message = "; ".join(run.describe() for run in stopped) or f"session {session_id} has no run to stop"
        self._stopped(comm, session_id, True, message)

    def _stopped(self, comm: Any, session_id: Any, ok: bool, message: str) -> None:
        self._send(comm, {"type": "stopped", "session_id": _jsonable(session_id), "ok": ok, "message": message})
        self.broadcast()

    def _decided_result(self, comm: Any, request_id: str, result: Any) -> None:
        try:
            ok, message = result
        except (TypeError, ValueError):
            ok, message = bool(result), ""
        self._decided(comm, request_id, bool(ok), str(message or ""))

    def _decided(self, comm: Any, request_id: str, ok: bool, message: str) -> None:
        self._send(
            comm,
            {"type": "decided", "request_id": request_id, "ok": ok, "message": message},
        )
        # "... and then a fresh state", to every open sidebar, right away.
        self.broadcast()

    def close(self) -> None:
        """Stop: unsubscribe, cancel a pending send, close the comms."""
        with self._lock:
            self._closed = True
            handle, self._scheduled = self._scheduled, None
        if handle is not None and hasattr(handle, "cancel"):
            # teardown: a loop already closed must not stop the rest of close()
            with contextlib.suppress(Exception):
                handle.cancel()
        for unsubscribe in (self._unsubscribe, self._unsubscribe_stream, self._unsubscribe_end,
                            self._unsubscribe_agents, self._unsubscribe_cells):
            try:  # store writes, reply streams, run ends, agent definitions
                if unsubscribe is not None:
                    unsubscribe()
            except Exception:  # noqa: BLE001 - teardown: one failed unsubscribe must not keep the other
                log.debug("unsubscribe failed", exc_info=True)
        self._unsubscribe = self._unsubscribe_stream = self._unsubscribe_end = self._unsubscribe_agents = None
        self._unsubscribe_cells = None
        for comm in [*self.comms.values(), *self.cell_comms.values()]:
            # a comm whose kernel side is gone may raise on close; the others still close
            with contextlib.suppress(Exception):
                comm.close()
        self.comms.clear()
        self.cell_comms.clear()


def _role(open_msg: Any) -> str | None:
    """The ``role`` a comm_open's data names (``cells``), or None."""
    try:
        role = open_msg["content"]["data"].get("role")
    except (KeyError, TypeError, AttributeError):
        return None
    return role if isinstance(role, str) else None


def _comm_manager(ipython: Any) -> Any:
    kernel = getattr(ipython, "kernel", None)
    if kernel is None:
        return None
    manager = getattr(kernel, "comm_manager", None)
    if manager is not None:
        return manager
    try:
        import comm  # ipykernel >= 6.? installs its manager as comm's default

        return comm.get_comm_manager()
    except Exception:  # noqa: BLE001 - no comm package or manager: the sidebar is off, the kernel is not
        return None


class CommRegistration:
    """What ``register_comm_target`` returns once it registered: call it to unregister;
    ``bridge`` is the LabBridge serving the target's comms (tests drive it)."""

    def __init__(self, bridge: LabBridge, unregister: Callable[[], None]) -> None:
        self.bridge = bridge
        self._unregister = unregister

    def __call__(self) -> None:
        self._unregister()


def register_comm_target(ipython: Any, server: Any) -> Callable[[], None]:
    """Register the ``chaz`` comm target on the kernel of ``ipython``.

    Returns a callable that unregisters it (idempotent). Without a kernel
    (plain IPython), nothing is registered and the callable does nothing.
    """
    manager = _comm_manager(ipython)
    if manager is None:
        log.debug("no kernel comm manager: the chaz sidebar is not available")
        return lambda: None

    bridge = LabBridge(server)

    def target(comm: Any, open_msg: Any) -> None:
        bridge.open(comm, open_msg)

    manager.register_target(TARGET_NAME, target)
    done = False

    def unregister() -> None:
        nonlocal done
        if done:
            return
        done = True
        targets = getattr(manager, "targets", None)
        if isinstance(targets, dict):
            if targets.get(TARGET_NAME) is target:
                targets.pop(TARGET_NAME, None)
        else:
            # managers differ across ipykernel/comm versions; unregistering is best effort
            with contextlib.suppress(Exception):
                manager.unregister_target(TARGET_NAME, target)
        bridge.close()

    return CommRegistration(bridge, unregister)
