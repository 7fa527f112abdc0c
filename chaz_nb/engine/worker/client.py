"""``WorkerBackend``: a ``ModelBackend`` whose calls run in the model worker process.

The kernel holds one end of a socket pair, the worker (``main.py``) the other; frames are
``protocol.py``'s. ``start`` spawns the worker (``%load_ext`` calls it, so litellm's import
there overlaps the user's typing) and needs no running loop; the connection's reader is a task
on the loop the calls come from (the kernel's). Calls are multiplexed by request id: text
deltas go to the call's ``on_delta`` as they arrive, the reply or the error (re-raised as the
same ``ProviderError``, its one line unchanged) ends it, and a cancelled call (Stop) sends
``cancel`` so that the worker cancels its task and the HTTP connection closes.

A worker that dies (killed, out of memory) fails each call waiting on it with one line that
says so, and a new worker is started at once; the run's entries are written by the kernel, so
nothing already written is lost. litellm is never imported in the kernel on this path.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence

from ...errors import ProviderError
from ..backends import REQUEST_LEAVING, DeltaCallback, ModelReply
from .protocol import decode_error, decode_reply, read_frame, write_frame

__all__ = ["WorkerBackend", "shared_backend"]

log = logging.getLogger(__name__)

#: the directory chaz_nb is imported from: the worker imports the same copy
#: the largest frame the reader takes (a long context is megabytes; protocol.MAX_FRAME bounds it)
_FRAME_LIMIT = 2**31 - 1
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@dataclass
class _Call:
    future: asyncio.Future[Any]
    model: str
    on_delta: DeltaCallback | None = None
    leaving: Any = None  # REQUEST_LEAVING's callback, called once as the request leaves
    #: the caller's context: its callbacks run in it, not in the reader task's (in a kernel the
    #: cell an output belongs to is a context variable: a view's update lands in its own cell)
    context: contextvars.Context | None = None


class _Process:
    """One worker process and the kernel's end of its socket pair."""

    def __init__(self, python: str) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            self.popen = subprocess.Popen(
                [python, "-m", "chaz_nb.engine.worker", str(theirs.fileno())],
                # no stdout: a kernel shows what reaches its file descriptors in the running cell
                # (stderr stays: the worker's log records, redacted as the kernel's are)
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                close_fds=True)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.sock = mine
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.read_task: asyncio.Task[None] | None = None
        self.opening: asyncio.Task[None] | None = None
        #: the descriptor the current loop's connection reads (a dup of ``sock``)
        self.connection: socket.socket | None = None
        self.ready = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_description(self) -> str:
        """How the process ended, as words (it may not be reaped yet: then only that it ended)."""
        code = self.popen.poll()
        if code is None:
            return "ended"
        if code < 0:
            try:
                return f"was killed ({signal.Signals(-code).name})"
            except ValueError:
                return f"was killed (signal {-code})"
        return f"exited with status {code}"

    def stop(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
        for sock in (self.connection, self.sock):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        if self.popen.poll() is None:
            with contextlib.suppress(OSError):
                self.popen.kill()
        with contextlib.suppress(Exception):
            self.popen.wait(timeout=5)


class WorkerBackend:
    """Model calls in the worker process (see the module docstring)."""

    #: ``complete`` takes ``on_delta`` (see ``ModelBackend``)
    streams = True

    def __init__(self, *, python: str | None = None, retry_after_cap: float | None = None,
                 backoff: float | None = None) -> None:
        self.python = python or sys.executable
        #: ``LiteLLMBackend``'s settings in the worker (None: its defaults)
        self.settings = {k: v for k, v in (("retry_after_cap", retry_after_cap), ("backoff", backoff))
                         if v is not None}
        self._lock = threading.Lock()
        self._process: _Process | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._calls: dict[int, _Call] = {}
        self._next_id = 0
        #: the environment as last sent (``_environment``'s form)
        self._env_sent: dict[Any, Any] | None = None
        #: workers started after one died (for tests and the status line)
        self.restarts = 0

    # ------------------------------------------------------------ process
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Spawn the worker now if none runs (no loop needed; ``%load_ext`` calls this); with
        ``loop``, its reader starts on that loop as soon as the loop runs."""
        with self._lock:
            if self._process is None:
                self._process = _Process(self.python)
                self._env_sent = None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._connect_soon, loop)

    @property
    def pid(self) -> int | None:
        """The worker's process id (None before ``start``)."""
        return self._process.pid if self._process is not None else None

    def loading(self) -> bool:
        """Whether a call would wait for litellm's import in the worker now."""
        process = self._process
        return process is None or not process.ready

    def close(self) -> None:
        """Stop the worker (calls still waiting fail as at a worker's death)."""
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            process.stop()
            self._fail_all("the model worker was stopped", None)

    def _connect_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        task = loop.create_task(self._connected())
        # (a failure here is the first call's to report)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _connected(self) -> _Process:
        """The running worker, its reader on this loop (one spawned if none runs)."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            self._leave_loop()
        self._loop = loop
        self.start()
        process = self._process
        assert process is not None
        if process.opening is None:
            process.opening = loop.create_task(self._open(process))
        # shielded: a call cancelled while the connection opens must not cancel the opening
        await asyncio.shield(process.opening)
        return process

    def _leave_loop(self) -> None:
        """Calls now come from another loop (tests run one per case; a kernel has one): the
        connection's reader belongs to the old one, so it is dropped and the same worker is
        reached again through another descriptor of its socket (calls of the old loop fail)."""
        process = self._process
        if process is None:
            return
        self._fail_all("the model worker's connection moved to another event loop", None)
        task, process.read_task = process.read_task, None
        if task is not None and not task.get_loop().is_closed():
            task.cancel()
        if process.connection is not None:
            with contextlib.suppress(OSError):
                process.connection.close()
        process.reader = process.writer = process.opening = process.connection = None

    async def _open(self, process: _Process) -> None:
        # a descriptor of its own per loop (see _leave_loop); the process keeps the original
        process.connection = process.sock.dup()
        reader, writer = await asyncio.open_unix_connection(sock=process.connection, limit=_FRAME_LIMIT)
        process.reader, process.writer = reader, writer
        process.read_task = asyncio.get_running_loop().create_task(self._read(process),
                                                                   name="chaz-model-worker-reader")

    async def _read(self, process: _Process) -> None:
        reader = process.reader
        assert reader is not None
        try:
            while True:
                message = await read_frame(reader)
                if message is None:
                    break
                self._dispatch(process, message)
        except asyncio.CancelledError:
            return
        except Exception:  # noqa: BLE001 - a frame that cannot be read: the connection is done
            log.exception("the model worker's connection failed")
        if self._process is process and process.reader is reader:  # died: fail its calls, restart
            await asyncio.get_running_loop().run_in_executor(None, _reap, process)
            with self._lock:
                if self._process is process:
                    self._process = None
            process.stop()
            # at once when it had been working (its litellm import overlaps the user's next
            # message); one that died before it was ready (it cannot start here) waits for the
            # next call, which then says why, rather than restarting in a loop
            again = process.ready and self._loop is not None and not self._loop.is_closed()
            self._fail_all(f"the model worker process {process.exit_description()} during the call", process,
                           restarted=again)
            self.restarts += 1
            if again:
                assert self._loop is not None
                self._connect_soon(self._loop)

    def _dispatch(self, process: _Process, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "ready":
            process.ready = True
            return
        call = self._calls.get(message.get("id", -1))
        if call is None:
            return  # a call cancelled meanwhile
        if op == "delta":
            if call.on_delta is not None:
                try:
                    _run_in(call.context, call.on_delta, message.get("text") or "")
                except Exception:  # a view's problem must not end the model call
                    log.exception("on_delta callback failed")
        elif op == "leaving":
            leaving, call.leaving = call.leaving, None
            if leaving is not None:
                _run_in(call.context, leaving)
        elif not call.future.done():
            if op == "reply":
                call.future.set_result(decode_reply(message.get("reply") or {}))
            elif op == "answer":
                call.future.set_result(message.get("value"))
            elif op == "error":
                call.future.set_exception(decode_error(message.get("error") or {}))

    def _fail_all(self, what: str, process: _Process | None, restarted: bool = True) -> None:
        then = ("a new worker has been started: send the message again" if restarted
                else "a new worker starts with the next message: send the message again")
        for ident, call in list(self._calls.items()):
            if call.future.done():
                continue
            message = f"{call.model}: {what}; {then}" if process is not None else f"{call.model}: {what}"
            call.future.set_exception(ProviderError(message, model=call.model, provider="chaz_nb", kind="worker_exit"))
            self._calls.pop(ident, None)

    # ------------------------------------------------------------ calls
    async def _request(self, message: dict[str, Any], call: _Call) -> Any:
        process = await self._connected()
        self._next_id += 1
        ident = message["id"] = self._next_id
        self._calls[ident] = call
        assert process.writer is not None
        try:
            write_frame(process.writer, message)
            return await call.future
        except asyncio.CancelledError:
            # (the awaited future is cancelled with the task: cancelled, not answered)
            answered = call.future.done() and not call.future.cancelled()
            if not answered and self._process is process and not process.writer.is_closing():
                write_frame(process.writer, {"op": "cancel", "id": ident})
            raise
        finally:
            self._calls.pop(ident, None)

    async def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        script: list[Any] | None = None,
        options: dict[str, Any] | None = None,
        on_delta: DeltaCallback | None = None,
    ) -> ModelReply:
        """One chat completion in the worker; streamed (text to ``on_delta``) when it is given."""
        loop = asyncio.get_running_loop()
        message: dict[str, Any] = {"op": "call", "model": model, "messages": messages,
                                   "tools": list(tools) if tools else None, "script": script,
                                   "options": options, "stream": on_delta is not None,
                                   "settings": self.settings}
        raw = _environment()
        if raw != self._env_sent:
            message["env"] = dict(os.environ)
            self._env_sent = raw
        call = _Call(loop.create_future(), model, on_delta, REQUEST_LEAVING.get(), contextvars.copy_context())
        reply = await self._request(message, call)
        assert isinstance(reply, ModelReply)
        return reply

    async def refuses_tools(self, model: str) -> bool:
        """Whether litellm's model info (in the worker) says ``model`` takes no tools."""
        loop = asyncio.get_running_loop()
        call = _Call(loop.create_future(), model)
        return bool(await self._request({"op": "ask", "what": "refuses_tools", "model": model}, call))


def _run_in(context: contextvars.Context | None, callback: Any, *args: Any) -> None:
    if context is None:
        callback(*args)
    else:
        context.run(callback, *args)


def _environment() -> dict[Any, Any]:
    """A snapshot of the environment to compare with the last one sent: the encoded mapping
    ``os.environ`` keeps (a C-level copy, ~20 µs) rather than decoding every variable a call."""
    data = getattr(os.environ, "_data", None)
    return dict(data) if isinstance(data, dict) else dict(os.environ)


def _reap(process: _Process) -> None:
    with contextlib.suppress(Exception):
        process.popen.wait(timeout=5)


_shared: WorkerBackend | None = None
_shared_lock = threading.Lock()


def shared_backend() -> WorkerBackend:
    """The kernel's one ``WorkerBackend`` (a reloaded extension keeps its worker)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WorkerBackend()
            atexit.register(_shared.close)
        return _shared
