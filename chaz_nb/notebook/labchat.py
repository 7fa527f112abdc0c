"""The chat of the JupyterLab "Chaz" sidebar, kernel side (``labcomm.LabBridge`` dispatches here).

A comm may follow one session (its chat) and write Messages to sessions. Messages from the
frontend::

    {"type": "chat_open", "session_id"}     follow this session (replaces the one followed)
    {"type": "chat_close"}                  follow none
    {"type": "send", "request_id", "text", "session_id"?, "agent"?, "new"?}

``send`` writes a Message from ``user`` through the server façade, as ``%chaz @NAME`` does
(``Server.post``; in a room ``rooms.say``), so the cell views, ``%chaz log``, the audit views
and the other kernels on a shared store see it as any other entry. The target: ``session_id``
(the chat that is open); with ``agent`` (the box's ``@NAME``) that agent's current session
when it is not the open session's agent (in a room: the member who takes the turn); with
``new`` a fresh session of ``agent`` (the "new chat" control, as ``%chaz new @NAME``).

Answers::

    {"type": "chat", "ok": true, "session_id", "reset": true, "bundle": {...}}
        the followed session's newest page: the cell view's bundle (views/session.py), drawn
        by the same renderer; earlier pages come from labcomm's ``page`` message
    {"type": "chat", "ok": true, "session_id", "reset": false, "entries": [...], "status",
     "stream": {"run_id", "sender", "text"} | null}
        what changed since (sent with the bridge's throttled state, at most ~4 a second)
    {"type": "chat", "ok": false, "session_id", "message"}     a chat_open refused
    {"type": "sent", "request_id", "ok", "session_id", "message"}

A ``send`` may also come over the kernel's control channel (chat_control.py: read while a
cell waits, when the comm is not); it is written here all the same (``ChatHub.send``).

``{"type": "page", ...}`` (a transcript's "show earlier", in the chat and in the cells) is
answered here too; its contract is in labcomm.py.

A written Message moves the comm's chat to its session (a ``reset`` follows). Every field is
checked (types, lengths) and a bad message gets a one-line answer; nothing here raises into
the kernel.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.redaction import redact
from ..errors import StoreError
from .views.display import JSON_TEXT_MAX, clip_json

__all__ = ["ChatHub", "CHAT_TYPES", "MAX_MESSAGE_CHARS", "comm_key", "enum_value", "jsonable"]

#: the chat's message types (labcomm.py hands them here)
CHAT_TYPES = frozenset({"chat_open", "chat_close", "send"})
#: Entries in a "page" reply when the frontend gives no limit, and the most it may ask for.
PAGE_LIMIT = 50
PAGE_MAX = 500
#: A page answer's size: the log keeps a tool's whole output (an MCP server may return
#: megabytes), so each string of an entry is clipped to ``PAGE_TEXT_MAX`` characters (the
#: renderer shows 20,000) and the answer holds the newest entries that fit in ``PAGE_BYTES``
#: characters of JSON (at least one); ``first_seq``/``earlier`` say where the next page starts.
PAGE_TEXT_MAX = JSON_TEXT_MAX
PAGE_BYTES = 2_000_000

#: the longest Message the box may write (a pasted traceback fits; a file does not)
MAX_MESSAGE_CHARS = 100_000
#: the longest request id / agent name accepted
MAX_ID_CHARS = 100
#: new entries in one delta; more than that (a burst) and the chat is sent again from its newest page
MAX_DELTA = PAGE_LIMIT
#: the end of a streamed reply sent with a delta (the cell view clips the same way)
MAX_STREAM_CHARS = PAGE_TEXT_MAX
#: session kinds a person writes to (a child session belongs to the run that spawned it)
WRITABLE_KINDS = ("chat", "room")

_AGENT = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(?:@[A-Za-z0-9_.-]+)?")

log = logging.getLogger("chaz_nb.labcomm")


def jsonable(value: Any) -> Any:
    """Make a value JSON-serialisable: datetimes to ISO strings, enums to values."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    return str(value)


def enum_value(x: Any) -> Any:
    return x.value if isinstance(x, enum.Enum) else x


def comm_key(comm: Any) -> Any:
    return getattr(comm, "comm_id", None) or id(comm)


def _page_entries(entries: list[Any]) -> list[dict]:
    """The JSON of the newest ``entries`` that fit in ``PAGE_BYTES`` (at least one), seq order."""
    out: list[dict] = []
    size = 0
    for entry in reversed(entries):
        item = clip_json(jsonable(entry.to_json()), PAGE_TEXT_MAX)
        cost = len(json.dumps(item))
        if out and size + cost > PAGE_BYTES:
            break
        if cost > PAGE_BYTES:  # one entry alone, its strings clipped, still too big: a huge payload
            item["payload"] = {"page_clipped": "payload left out of this page (too big); %chaz sql reads it"}
            cost = len(json.dumps(item))
        out.append(item)
        size += cost
    return out[::-1]


class ChatError(Exception):
    """A refused chat request: its text is the one-line answer."""


@dataclass
class _Watch:
    """One comm's open chat."""

    comm: Any
    session_id: int
    last_seq: int = 0
    status: str = ""
    stream: Any = None
    dirty: bool = True
    agent: str = ""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _int_id(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChatError(f"{what} is a session id (a number), not {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _agent_name(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_ID_CHARS or not _AGENT.fullmatch(value):
        raise ChatError(f"@NAME is an agent name (letters, digits, - and _), not {_short(value)}")
    return value


class ChatHub:
    """The chats of one bridge's comms: who follows which session, and the writes."""

    def __init__(
        self,
        server: Any,
        *,
        send: Callable[[Any, dict], None],
        is_open: Callable[[Any], bool],
        broadcast_soon: Callable[[], None],
    ) -> None:
        self.server = server
        self._send = send  # the bridge's: a comm that fails is dropped there
        self._is_open = is_open
        self._broadcast_soon = broadcast_soon
        self.watches: dict[Any, _Watch] = {}

    # -- dispatch ------------------------------------------------------------
    def handle(self, comm: Any, data: dict) -> None:
        """Answer one chat message of the frontend; never raises."""
        kind = data.get("type")
        try:
            if kind == "chat_open":
                self.open(comm, data.get("session_id"))
            elif kind == "chat_close":
                self.watches.pop(comm_key(comm), None)
            elif kind == "send":
                self.send(comm, data)
        except Exception as exc:  # noqa: BLE001 - a bug here must not reach the kernel
            log.debug("chat message %r failed", kind, exc_info=True)
            if kind == "send":
                self._sent(comm, data.get("request_id"), False, None, _one_line(exc))
            else:
                self._reply(comm, {"type": "chat", "ok": False, "session_id": None, "message": _one_line(exc)})

    def forget(self, key: Any) -> None:
        """The comm closed: stop following for it."""
        self.watches.pop(key, None)

    def _reply(self, comm: Any, msg: dict) -> None:
        self._send(comm, msg)

    # -- following -----------------------------------------------------------
    def open(self, comm: Any, session_id: Any) -> None:
        """Follow ``session_id`` for ``comm``: its newest page now, what changes later."""
        try:
            sid = _int_id(session_id, "chat_open: session_id")
            info = self.server.store.session(sid)
        except Exception as exc:  # noqa: BLE001 - a bad or unknown id is the answer
            self._reply(
                comm,
                {
                    "type": "chat",
                    "ok": False,
                    "session_id": jsonable(session_id)
                    if isinstance(session_id, (int, str)) and len(str(session_id)) <= MAX_ID_CHARS
                    else None,
                    "message": exc.args[0] if isinstance(exc, ChatError) else _one_line(exc),
                },
            )
            return
        watch = _Watch(comm, sid)
        # the reset goes out before the watch is followed: the bridge's flush may run on a timer
        # thread, and a delta sent to a watch still being reset arrived before its reset
        self._reply(comm, self._reset(watch, info))
        self.watches[comm_key(comm)] = watch
        watch.dirty = True  # what was written between the page read and now: the next flush sends it

    def _reset(self, watch: _Watch, info: Any) -> dict:
        """The ``reset`` message of a watch: the newest page as the cell view's bundle."""
        sid = watch.session_id
        page = self.server.store.read_page(sid, limit=PAGE_LIMIT)
        entries = _page_entries(page)
        watch.last_seq = page[-1].seq if page else 0
        watch.agent = str(info.agent)
        watch.status = self._status(sid)
        watch.stream = self._stream(sid, watch.agent)
        watch.dirty = False
        session: dict[str, Any] = {
            "id": info.id,
            "agent": str(info.agent),
            "kind": str(enum_value(info.kind)),
            "parent_id": getattr(info, "parent_id", None),
            "depth": getattr(info, "depth", 0),
        }
        if getattr(info, "forked_from", None) is not None:
            session["forked_from"] = info.forked_from
            session["forked_at_seq"] = getattr(info, "forked_at_seq", None)
        bundle: dict[str, Any] = {
            "version": 1,
            "session": jsonable(session),
            "status": watch.status,
            "entries": entries,
        }
        if entries and entries[0]["seq"] > 1:
            first = entries[0]["seq"]
            bundle.update(first_seq=first, earlier=first - 1, earlier_command=f"%chaz log {sid} --before {first}")
        if watch.stream is not None:
            bundle["stream"] = watch.stream
        return {"type": "chat", "ok": True, "session_id": sid, "reset": True, "bundle": bundle}

    def touch(self, event: Any = None) -> None:
        """A write or a stream event: mark the chats of its session to be sent again."""
        sid = getattr(event, "session_id", None)
        for watch in self.watches.values():
            if sid is None or watch.session_id == sid:
                watch.dirty = True

    def flush(self) -> None:
        """Send each followed session what changed (called with the bridge's throttled state)."""
        for key, watch in list(self.watches.items()):
            if not self._is_open(key):
                self.watches.pop(key, None)
                continue
            if not watch.dirty:
                continue
            try:
                msg = self._delta(watch)
            except Exception:  # noqa: BLE001 - the next write tries again
                log.debug("chat delta of session %s failed", watch.session_id, exc_info=True)
                continue
            if msg is not None:
                self._reply(watch.comm, msg)

    def _delta(self, watch: _Watch) -> dict | None:
        sid = watch.session_id
        watch.dirty = False
        store = self.server.store
        latest = store.latest(sid)
        if latest is not None and latest.seq - watch.last_seq > MAX_DELTA:
            return self._reset(watch, store.session(sid))  # a burst: the newest page again
        new = list(store.entries(sid, after_seq=watch.last_seq)) if latest and latest.seq > watch.last_seq else []
        status = self._status(sid)
        stream = self._stream(sid, watch.agent)
        if not new and status == watch.status and stream == watch.stream:
            return None
        if new:
            watch.last_seq = new[-1].seq
        watch.status, watch.stream = status, stream
        return {
            "type": "chat",
            "ok": True,
            "session_id": sid,
            "reset": False,
            "entries": _page_entries(new),
            "status": status,
            "stream": stream,
        }

    def _status(self, sid: int) -> str:
        try:
            return str(enum_value(self.server.session_status(sid)) or "idle")
        except Exception:  # noqa: BLE001 - a broken session must not break the chat's reply
            return "idle"

    def _stream(self, sid: int, agent: str) -> dict | None:
        current = getattr(self.server, "current_stream", None)
        if current is None:
            return None
        try:
            event = current(sid)
        except Exception:  # noqa: BLE001 - a broken stream must not hide the session
            return None
        text = getattr(event, "text", "") if event is not None else ""
        if not text:
            return None
        text = redact(text)  # masked as the reply's entry will be
        if len(text) > MAX_STREAM_CHARS:
            text = "…" + text[-(MAX_STREAM_CHARS - 1) :]
        return {"run_id": jsonable(getattr(event, "run_id", 0)), "sender": agent, "text": text}

    def page(self, comm: Any, data: dict) -> None:
        """``{"type": "page", "session_id", "before_seq", "limit", "request_id"}``: the entries of
        a session before ``before_seq`` (the transcript renderer's "show earlier"), a page at a
        time. The reply has them in seq order, with ``first_seq`` and ``earlier`` (how many
        entries come before the page)."""
        request_id = str(data.get("request_id") or "")
        reply: dict[str, Any] = {"type": "page", "request_id": request_id}
        try:
            session_id = int(data["session_id"])
            before = data.get("before_seq")
            before_seq = None if before is None else int(before)
            limit = min(max(1, int(data.get("limit") or PAGE_LIMIT)), PAGE_MAX)
            entries = self.server.store.read_page(session_id, before_seq=before_seq, limit=limit)
        except Exception as exc:  # noqa: BLE001 - any bad request is an error reply, one line
            reply.update(ok=False, message=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            self._reply(comm, reply)
            return
        page = _page_entries(entries)
        first = page[0]["seq"] if page else before_seq
        reply.update(
            ok=True,
            session_id=session_id,
            entries=page,
            first_seq=first,
            earlier=max(0, page[0]["seq"] - 1) if page else 0,  # an empty page: nothing before it either
        )
        self._reply(comm, reply)

    # -- writing ---------------------------------------------------------------
    def send(self, comm: Any, data: dict) -> dict:
        """Write the box's Message; answer ``sent`` and follow its session; the answer.

        ``comm`` None (the send came over the control channel from a comm this kernel does
        not know, chat_control.py): the Message is written, nobody is answered or followed.
        """
        rid = data.get("request_id")
        request_id = rid if isinstance(rid, str) and len(rid) <= MAX_ID_CHARS else ""
        try:
            sid, message = self._write(data)
        except ChatError as exc:
            return self._sent(comm, request_id, False, None, str(exc))
        except Exception as exc:  # noqa: BLE001 - the server's refusal, one line
            log.debug("chat send failed", exc_info=True)
            return self._sent(comm, request_id, False, None, _one_line(exc))
        answer = self._sent(comm, request_id, True, sid, message)
        if comm is not None:
            watch = self.watches.get(comm_key(comm))
            if watch is None or watch.session_id != sid:
                self.open(comm, sid)
        self._broadcast_soon()
        return answer

    def _write(self, data: dict) -> tuple[int, str]:
        from ..core.entries import EntryType

        text = data.get("text")
        if not isinstance(text, str):
            raise ChatError(f"send: text is the message (a string), not {_short(text)}")
        if len(text) > MAX_MESSAGE_CHARS:
            raise ChatError(f"send: the message is {len(text):,} characters; at most {MAX_MESSAGE_CHARS:,} are sent")
        if not text.strip():
            raise ChatError("send: nothing to send; write the message first")
        agent = _agent_name(data.get("agent"))
        new = data.get("new", False)
        if not isinstance(new, bool):
            raise ChatError(f"send: new is true or false, not {_short(new)}")
        server = self.server
        session_id = data.get("session_id")
        info = None
        if new:
            if agent is None:
                raise ChatError("send: a new chat needs @NAME (the agent to talk to)")
            self._check_agent(agent)
            sid = server.new_session(agent)
        elif session_id is not None:
            sid = _int_id(session_id, "send: session_id")
            try:
                info = server.store.session(sid)
            except StoreError:  # an unknown id: said in one line
                raise ChatError(f"send: there is no session {sid}") from None
            kind = str(enum_value(info.kind))
            if kind not in WRITABLE_KINDS:
                raise ChatError(
                    f"send: session {sid} is a {kind} session (its run writes it); "
                    f"talk to @{info.agent} in a chat session"
                )
            if agent is not None and agent != info.agent and kind != "room":
                sid, info = self._current(agent), None
        elif agent is not None:
            sid = self._current(agent)
        else:
            raise ChatError("send: say who gets it: open a session or start with @NAME")
        if info is None:
            info = server.store.session(sid)
        payload = {"origin": _origin()}
        if str(enum_value(info.kind)) == "room":
            server.rooms.say(sid, text, explicit=agent, sender="user", payload=payload)
            return sid, f"sent to room session {sid}" + (f" (@{agent} answers)" if agent else "")
        if info.agent not in server.agents and not server.served_elsewhere(sid):
            raise ChatError(
                f"send: no kernel serves session {sid} now and @{info.agent} is not defined here; "
                f"define it (%chaz agent {info.agent} --model M) to serve it from this kernel"
            )
        server.post(sid, EntryType.MESSAGE, text, sender="user", payload=payload)
        return sid, f"sent to @{info.agent} (session {sid})"

    def _check_agent(self, name: str) -> None:
        agents = getattr(self.server, "agents", {}) or {}
        if name not in agents:
            known = ", ".join("@" + n for n in sorted(agents)) or "none"
            raise ChatError(f"unknown agent @{name}; known agents: {known}")

    def _current(self, agent: str) -> int:
        """The agent's current session here (created on first use, as ``%chaz @NAME`` does)."""
        sid = self.server.current_session_id(agent)
        if sid is None:
            self._check_agent(agent)
            sid = self.server.current_session(agent)
        return int(sid)

    def _sent(self, comm: Any, request_id: Any, ok: bool, session_id: int | None, message: str) -> dict:
        rid = request_id if isinstance(request_id, str) and len(request_id) <= MAX_ID_CHARS else ""
        answer = {"type": "sent", "request_id": rid, "ok": ok, "session_id": session_id, "message": message}
        if comm is not None:
            self._reply(comm, answer)
        return answer


def _origin() -> dict[str, Any]:
    """Where the Message comes from: the notebook's kernel (as a cell's origin), via the sidebar."""
    try:
        from .controller import origin

        out = origin()
    except Exception:  # noqa: BLE001 - origin metadata is best effort
        out = {}
    out["cell_id"] = None  # the comm message's parent is no cell
    out["via"] = "sidebar"
    return out
