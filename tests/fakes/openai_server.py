"""A model provider on a real socket: OpenAI chat-completions and Ollama's ``/api/chat``.

Agents reach it through ordinary litellm model strings (``openai/NAME`` with
``api_base=server.openai_base``, ``ollama_chat/NAME`` with ``api_base=server.ollama_base``),
so every request goes through litellm's real provider code, the OpenAI SDK and httpx, as it
would to a hosted model. Nothing here imitates litellm; this is the other end of the wire.

A test queues what the server answers, in order (per model name, else a shared queue):

    server.script(Reply("hello"), Reply(tool_calls=[Call("add", {"a": 1})]), RateLimit(0.05))
    server.script(Reply("child says hi"), model="child-model")

Each request takes the next item: a :class:`Reply` (served as JSON, as SSE when the request
asks for ``stream: true``, as NDJSON for Ollama) or a fault (:class:`RateLimit`,
:class:`ServerError`, :class:`DropMidStream`, :class:`StallMidStream`, :class:`Slow`). Every request is recorded
(:attr:`requests`: method, path, headers, parsed body) so a test can assert what litellm sent.
A request that finds its queue empty gets HTTP 500 and is counted in :attr:`unscripted`.

The server runs in threads (``ThreadingHTTPServer``): requests are served concurrently and
the test's event loop is never involved. Slow replies wait on an event that :meth:`close`
sets, so closing never waits for a sleeping handler.
"""

from __future__ import annotations

import collections
import contextlib
import json
import select
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


# ------------------------------------------------------------- the script
@dataclass
class Call:
    """A tool call in a reply. ``raw`` sends argument text as it is (malformed JSON, say)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    raw: str | None = None
    id: str | None = None

    @property
    def arguments(self) -> str:
        return self.raw if self.raw is not None else json.dumps(self.args)


@dataclass
class Reply:
    """An assistant reply: text and/or tool calls (several = parallel calls).

    When streamed, the text goes out word by word and each tool call's arguments in
    ``arg_pieces`` fragments across separate chunks; ``usage`` rides in the last chunk.
    ``chunk_delay`` (seconds) spaces the chunks, for tests that watch a stream arrive.
    """

    text: str = ""
    tool_calls: list[Call] = field(default_factory=list)
    prompt_tokens: int = 11
    completion_tokens: int = 7
    arg_pieces: int = 3
    chunk_delay: float = 0.0
    delay: float = 0.0  # before the response starts


@dataclass
class RateLimit:
    """HTTP 429 with a ``retry-after`` header (seconds, may be fractional)."""

    retry_after: float = 0.05
    message: str = "Rate limit reached for requests"


@dataclass
class ServerError:
    """An HTTP error status (500 by default) with an OpenAI-style error body."""

    status: int = 500
    message: str = "The server had an error while processing your request."


@dataclass
class DropMidStream:
    """Start a reply, then close the connection before it is complete.

    Streamed: ``after_chunks`` chunks of ``reply`` are sent first. Not streamed: the headers
    promise a body longer than what is sent before the socket closes.
    """

    reply: Reply = field(default_factory=lambda: Reply("this reply is cut off half way through"))
    after_chunks: int = 2


@dataclass
class StallMidStream:
    """Start a streamed reply, then go quiet (connection open) until the server closes.

    ``after_chunks`` chunks of ``reply`` are sent first (the role chunk counts): a stream the
    user sees part of, for tests that stop a run in the middle of it.
    """

    reply: Reply = field(default_factory=lambda: Reply("this reply stops half way through"))
    after_chunks: int = 3


@dataclass
class Slow:
    """Answer only after ``seconds`` (longer than the client's timeout, in a fault test)."""

    seconds: float
    reply: Reply = field(default_factory=lambda: Reply("too late"))


Item = Reply | RateLimit | ServerError | DropMidStream | StallMidStream | Slow


@dataclass
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any
    raw: bytes
    at: float = field(default_factory=time.monotonic)  # arrival

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None


# ------------------------------------------------------------- the server
class FakeModelServer:
    """OpenAI chat-completions (``/v1/chat/completions``) and Ollama ``/api/chat`` on 127.0.0.1."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str | None, collections.deque[Item]] = collections.defaultdict(collections.deque)
        self.requests: list[Recorded] = []
        self.unscripted: list[Recorded] = []
        #: what ``GET /props`` answers, as llama.cpp's server does (None: 404, as other servers)
        self.props: dict[str, Any] | None = None
        #: the ``GET /props`` asked (chaz_nb's template check, server/template_caps.py): kept
        #: apart from ``requests``, which counts what a model was asked
        self.props_requests: list[Recorded] = []
        self._arrived = threading.Condition(self._lock)
        self._closing = threading.Event()
        #: stalled streams whose client closed the connection (a stopped call: ``wait_disconnected``)
        self.disconnects = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="fake-model-server", daemon=True
        )
        self._thread.start()

    # addresses
    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def openai_base(self) -> str:
        """``api_base`` for ``openai/NAME`` models."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def ollama_base(self) -> str:
        """``api_base`` for ``ollama_chat/NAME`` models."""
        return f"http://127.0.0.1:{self.port}"

    # scripting
    def script(self, *items: Item, model: str | None = None) -> None:
        """Queue what the next requests (for ``model``, or any model) are answered with."""
        with self._lock:
            self._queues[model].extend(items)

    def pending(self) -> int:
        """Scripted items not served yet."""
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def _next(self, model: str | None) -> Item | None:
        with self._lock:
            for key in (model, None):
                queue = self._queues.get(key)
                if queue:
                    return queue.popleft()
        return None

    def _record(self, rec: Recorded) -> None:
        with self._arrived:
            self.requests.append(rec)
            self._arrived.notify_all()

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[Recorded]:
        """Block until ``n`` requests have arrived (for tests that watch from another thread)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= n, timeout):
                raise TimeoutError(f"{len(self.requests)} of {n} requests arrived in {timeout} s")
            return list(self.requests)

    def _disconnected(self) -> None:
        with self._arrived:
            self.disconnects += 1
            self._arrived.notify_all()

    def wait_disconnected(self, timeout: float = 10.0, n: int = 1) -> None:
        """Block until ``n`` stalled streams have seen their client close the connection."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: self.disconnects >= n, timeout):
                raise TimeoutError(f"{self.disconnects} of {n} stalled streams saw their client go in {timeout} s")

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith(("/chat/completions", "/api/chat"))]

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeModelServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ------------------------------------------------------------- wire formats
def _openai_message(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return message


def _usage(reply: Reply) -> dict[str, int]:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens}


def openai_completion(reply: Reply, model: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": _openai_message(reply),
                     "finish_reason": "tool_calls" if reply.tool_calls else "stop", "logprobs": None}],
        "usage": _usage(reply),
    }


def _pieces(text: str, n: int) -> list[str]:
    if n <= 1 or len(text) < n:
        return [text]
    size = -(-len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _words(text: str) -> list[str]:
    out, word = [], ""
    for ch in text:
        word += ch
        if ch == " ":
            out.append(word)
            word = ""
    return out + ([word] if word else [])


def openai_chunks(reply: Reply, model: str, include_usage: bool) -> list[dict[str, Any]]:
    """The SSE ``data:`` objects of a streamed reply, as OpenAI sends them.

    Role first; text word by word; each tool call opens with id and name, then its arguments
    in fragments (the calls one after another, with their ``index``); a finish chunk; usage
    in a last chunk with no choices when the request asked ``stream_options.include_usage``
    (else on the finish chunk, as several OpenAI-compatible servers do).
    """
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:16]}", int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": w}) for w in _words(reply.text)]
    for i, call in enumerate(reply.tool_calls):
        call_id = call.id or f"call_{uuid.uuid4().hex[:12]}"
        out.append(chunk({"tool_calls": [{"index": i, "id": call_id, "type": "function",
                                          "function": {"name": call.name, "arguments": ""}}]}))
        for piece in _pieces(call.arguments, reply.arg_pieces):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    finish = "tool_calls" if reply.tool_calls else "stop"
    if include_usage:
        out.append(chunk({}, finish))
        out.append({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [], "usage": _usage(reply)})
    else:
        out.append(chunk({}, finish, usage=_usage(reply)))
    return out


def _ollama_message(reply: Reply, content: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text if content is None else content}
    if reply.tool_calls:
        # Ollama sends arguments as an object, not as JSON text
        message["tool_calls"] = [
            {"function": {"name": c.name, "arguments": c.args if c.raw is None else c.raw}}
            for c in reply.tool_calls
        ]
    return message


def ollama_final(reply: Reply, model: str, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": model, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "message": message, "done": True, "done_reason": "stop",
        "total_duration": 1000, "load_duration": 10, "prompt_eval_count": reply.prompt_tokens,
        "eval_count": reply.completion_tokens,
    }


def ollama_lines(reply: Reply, model: str) -> list[dict[str, Any]]:
    """NDJSON objects of a streamed Ollama reply: text word by word, tool calls whole, then done."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = [{"model": model, "created_at": created, "message": {"role": "assistant", "content": w}, "done": False}
           for w in _words(reply.text)]
    if reply.tool_calls:
        tool_message = _ollama_message(reply, content="")
        out.append({"model": model, "created_at": created, "message": tool_message, "done": False})
    out.append(ollama_final(reply, model, {"role": "assistant", "content": ""}))
    return out


# ------------------------------------------------------------- HTTP side
def _handler_for(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, as real providers use
        # Headers and body go out in separate writes: with Nagle on, the client's delayed ACK
        # holds the body back ~40 ms per request, which would drown any measurement.
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:  # quiet in test output
            pass

        def do_GET(self) -> None:
            if self.path == "/props":
                server.props_requests.append(Recorded(self.command, self.path,
                                                      {k.lower(): v for k, v in self.headers.items()}, None, b""))
                if server.props is not None:
                    self._json(200, server.props)
                else:
                    self._json(404, {"error": {"message": "no route /props", "type": "not_found"}})
                return
            self._record(b"")
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": []})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            rec = self._record(raw)
            body = rec.body if isinstance(rec.body, dict) else {}
            if self.path.endswith("/chat/completions"):
                dialect = "openai"
            elif self.path.endswith("/api/chat"):
                dialect = "ollama"
            else:
                self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            model = body.get("model") or ""
            item = server._next(model)
            if item is None:
                server.unscripted.append(rec)
                self._error(500, f"fake model server: nothing scripted for model {model!r}", dialect)
                return
            stream = bool(body.get("stream"))
            # the client gave up (a timeout test): nothing more to send
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._serve(item, dialect, model, stream, body)

        # -- one scripted item
        def _serve(self, item: Item, dialect: str, model: str, stream: bool, body: dict[str, Any]) -> None:
            if isinstance(item, RateLimit):
                self._error(429, item.message, dialect, code="rate_limit_exceeded",
                            headers={"retry-after": f"{item.retry_after:g}",
                                     "retry-after-ms": str(int(item.retry_after * 1000))})
                return
            if isinstance(item, ServerError):
                self._error(item.status, item.message, dialect)
                return
            if isinstance(item, Slow):
                if server._closing.wait(item.seconds):
                    return
                item = item.reply
            if isinstance(item, DropMidStream):
                self._drop(item, dialect, model, stream, body)
                return
            if isinstance(item, StallMidStream):
                assert stream and dialect == "openai", "StallMidStream is an OpenAI stream"
                self._streaming("text/event-stream")
                for event in openai_chunks(item.reply, model, True)[: item.after_chunks]:
                    self._chunk(f"data: {json.dumps(event)}\n\n".encode())
                if self._client_gone_before_closing():
                    server._disconnected()
                    return
                self._hang_up()
                return
            assert isinstance(item, Reply)
            if item.delay and server._closing.wait(item.delay):
                return
            if dialect == "openai":
                if stream:
                    include = bool((body.get("stream_options") or {}).get("include_usage"))
                    self._sse(openai_chunks(item, model, include), item.chunk_delay)
                else:
                    self._json(200, openai_completion(item, model))
            else:
                if stream:
                    self._ndjson(ollama_lines(item, model), item.chunk_delay)
                else:
                    self._json(200, ollama_final(item, model, _ollama_message(item)))

        def _drop(self, item: DropMidStream, dialect: str, model: str, stream: bool, body: dict[str, Any]) -> None:
            if stream:
                events = (openai_chunks(item.reply, model, True) if dialect == "openai"
                          else ollama_lines(item.reply, model))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream" if dialect == "openai" else "application/x-ndjson")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for event in events[: item.after_chunks]:
                    line = f"data: {json.dumps(event)}\n\n" if dialect == "openai" else json.dumps(event) + "\n"
                    self._chunk(line.encode())
            else:
                payload = json.dumps(openai_completion(item.reply, model) if dialect == "openai"
                                     else ollama_final(item.reply, model, _ollama_message(item.reply))).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self._hang_up()

        def _client_gone_before_closing(self) -> bool:
            """Wait until the server closes (False) or the client closes the connection (True)."""
            while not server._closing.is_set():
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable:
                    try:
                        if not self.connection.recv(1, socket.MSG_PEEK):
                            return True
                    except OSError:
                        return True
            return False

        def _hang_up(self) -> None:
            # a hard close (no chunked terminator, body short of content-length)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        # -- writers
        def _record(self, raw: bytes) -> Recorded:
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            rec = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw)
            server._record(rec)
            return rec

        def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, dialect: str, code: str | None = None,
                   headers: dict[str, str] | None = None) -> None:
            if dialect == "openai":
                obj: Any = {"error": {"message": message, "type": "server_error" if status >= 500 else "requests",
                                      "param": None, "code": code}}
            else:
                obj = {"error": message}
            self._json(status, obj, headers)

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _streaming(self, content_type: str) -> None:
            self.send_response(200)
            self.send_header("content-type", content_type)
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()

        def _sse(self, events: list[dict[str, Any]], delay: float) -> None:
            self._streaming("text/event-stream")
            for event in events:
                self._chunk(f"data: {json.dumps(event)}\n\n".encode())
                if delay and server._closing.wait(delay):
                    self._hang_up()
                    return
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

        def _ndjson(self, lines: list[dict[str, Any]], delay: float) -> None:
            self._streaming("application/x-ndjson")
            for line in lines:
                self._chunk((json.dumps(line) + "\n").encode())
                if delay and server._closing.wait(delay):
                    self._hang_up()
                    return
            self.wfile.write(b"0\r\n\r\n")

    return Handler
