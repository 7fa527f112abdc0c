"""The model worker's wire: length-prefixed pickles of plain dicts, and the reply/error forms.

Kernel to worker: ``{"op": "call", "id", "model", "messages", "tools", "script", "options",
"stream", "env"}`` (``env``: the kernel's environment, sent only when it changed, so a key set
with ``%env`` reaches the next call), ``{"op": "cancel", "id"}`` (Stop: the worker cancels that
call's task and its HTTP connection closes), ``{"op": "ask", "id", "what", "model"}`` (a
question about a model litellm's model info answers: ``refuses_tools``).

Worker to kernel: ``{"op": "ready"}`` once litellm is imported and warmed up; per call
``{"op": "leaving", "id"}`` as the request leaves (``REQUEST_LEAVING``), ``{"op": "delta",
"id", "text"}`` per piece of streamed text, then one ``{"op": "reply", "id", "reply"}`` or
``{"op": "error", "id", "error"}``; ``{"op": "answer", "id", "value"}`` for an ``ask``.

Both ends are this user's own processes on a socket pair no one else holds, so pickle is safe
here; only dicts, lists, strings and numbers are sent (no class of this package), so the two
ends need not agree on more than this module.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

from ...errors import ProviderError
from ..backends import ModelReply, ToolCallRequest, Usage

__all__ = ["decode_error", "decode_reply", "encode_error", "encode_reply", "read_frame", "write_frame"]

_HEADER = struct.Struct(">I")
#: the largest frame either end accepts (a context of megabytes is fine; a corrupt length is not)
MAX_FRAME = 1 << 30


def frame(message: dict[str, Any]) -> bytes:
    """``message`` as bytes on the wire: its length, then its pickle."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def write_frame(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(frame(message))


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message, or None at the end of the stream (the other end has gone)."""
    try:
        header = await reader.readexactly(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        if size > MAX_FRAME:
            raise ValueError(f"model worker frame of {size} bytes")
        body = await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    message = pickle.loads(body)
    if not isinstance(message, dict):
        raise ValueError("model worker frame is not a dict")
    return message


def encode_reply(reply: ModelReply) -> dict[str, Any]:
    return {"content": reply.content,
            "tool_calls": [[c.id, c.name, c.arguments] for c in reply.tool_calls],
            "usage": reply.usage.to_json()}


def decode_reply(data: dict[str, Any]) -> ModelReply:
    usage = data.get("usage") or {}
    return ModelReply(
        content=str(data.get("content") or ""),
        tool_calls=[ToolCallRequest(id=i, name=n, arguments=a) for i, n, a in data.get("tool_calls") or ()],
        usage=Usage(prompt_tokens=int(usage.get("prompt_tokens") or 0),
                    completion_tokens=int(usage.get("completion_tokens") or 0),
                    cost_usd=usage.get("cost_usd")),
    )


def encode_error(exc: BaseException) -> dict[str, Any]:
    """A failed call as plain data: a ``ProviderError`` field by field, anything else by its
    class name and text (what the runtime's one-line reason is made of)."""
    if isinstance(exc, ProviderError):
        return {"provider_error": True, "message": str(exc), "model": exc.model, "provider": exc.provider,
                "kind": exc.kind, "status": exc.status, "attempts": exc.attempts,
                "partial_text": exc.partial_text, "extra": dict(exc.extra), "head": exc.head}
    return {"provider_error": False, "type": type(exc).__name__, "message": str(exc),
            "timeout": isinstance(exc, (asyncio.TimeoutError, TimeoutError))}


#: the classes made for errors of other kinds, one per name (``type(exc).__name__`` reads the same)
_REMOTE: dict[str, type[Exception]] = {}


class RemoteCallError(Exception):
    """A model call's failure in the worker that is not a ``ProviderError`` (an offline model's
    own exception): re-raised under its class name, with its text."""


def decode_error(data: dict[str, Any]) -> BaseException:
    """The exception ``encode_error`` described, as the kernel raises it."""
    if data.get("provider_error"):
        return ProviderError(str(data.get("message") or ""), model=str(data.get("model") or ""),
                             provider=str(data.get("provider") or ""), kind=str(data.get("kind") or "error"),
                             status=data.get("status"), attempts=int(data.get("attempts") or 1),
                             partial_text=data.get("partial_text"), extra=data.get("extra") or {},
                             head=data.get("head"))
    message = str(data.get("message") or "")
    if data.get("timeout"):
        return asyncio.TimeoutError(message) if message else asyncio.TimeoutError()
    name = str(data.get("type") or "Exception")
    cls = _REMOTE.get(name)
    if cls is None:
        cls = _REMOTE[name] = type(name, (RemoteCallError,), {"__module__": __name__})
    return cls(message)
