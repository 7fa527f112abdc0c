"""The model worker process: ``LiteLLMBackend`` on a loop of its own, serving one kernel.

Started by ``client.WorkerBackend`` as ``python -m chaz_nb.engine.worker FD``, where ``FD`` is
its end of a socket pair. It imports litellm at once (``litellm_loader.start_import``: the
import overlaps the user's typing) and says ``ready`` when it is done; each ``call`` runs as a
task of its own (retries, fault classification and stream assembly are ``LiteLLMBackend``'s, as
in the kernel before), ``cancel`` cancels that task (the HTTP connection closes), and the end
of the socket (the kernel gone) ends the process. The frames: ``protocol.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from typing import Any

from ..backends import REQUEST_LEAVING, LiteLLMBackend, refuses_tools
from ..litellm_loader import litellm_ready, start_import
from .protocol import encode_error, encode_reply, read_frame, write_frame

log = logging.getLogger(__name__)


class _Worker:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        #: one LiteLLMBackend per settings (retry_after_cap, backoff) a client asked for
        self.backends: dict[tuple[tuple[str, float], ...], LiteLLMBackend] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}

    def send(self, message: dict[str, Any]) -> None:
        if not self.writer.is_closing():
            write_frame(self.writer, message)

    def dispatch(self, message: dict[str, Any]) -> None:
        op, ident = message.get("op"), message.get("id")
        if op == "call" and isinstance(ident, int):
            env = message.get("env")
            if isinstance(env, dict):
                _apply_env(env)
            self.tasks[ident] = self.loop.create_task(self.call(ident, message))
        elif op == "cancel" and isinstance(ident, int):
            task = self.tasks.get(ident)
            if task is not None:
                task.cancel()
        elif op == "ask" and isinstance(ident, int):
            self.tasks[ident] = self.loop.create_task(self.ask(ident, message))

    async def call(self, ident: int, message: dict[str, Any]) -> None:
        def leaving() -> None:  # litellm's pre-call hook, maybe on one of its threads
            self.loop.call_soon_threadsafe(self.send, {"op": "leaving", "id": ident})

        def on_delta(text: str) -> None:
            self.send({"op": "delta", "id": ident, "text": text})

        REQUEST_LEAVING.set(leaving)  # (this task's own context)
        settings = {k: float(v) for k, v in (message.get("settings") or {}).items()
                    if k in ("retry_after_cap", "backoff")}
        key = tuple(sorted(settings.items()))
        backend = self.backends.get(key)
        if backend is None:
            backend = self.backends[key] = LiteLLMBackend(**settings)
        try:
            reply = await backend.complete(
                message["model"], message["messages"], message.get("tools"), script=message.get("script"),
                options=message.get("options"), on_delta=on_delta if message.get("stream") else None)
            self.send({"op": "reply", "id": ident, "reply": encode_reply(reply)})
        except asyncio.CancelledError:
            pass  # Stop: the kernel's side has already ended the run
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the kernel as it was raised
            self.send({"op": "error", "id": ident, "error": encode_error(exc)})
        finally:
            self.tasks.pop(ident, None)

    async def ask(self, ident: int, message: dict[str, Any]) -> None:
        try:
            value: Any = None
            if message.get("what") == "refuses_tools":
                value = refuses_tools(await litellm_ready(), str(message.get("model") or ""))
            self.send({"op": "answer", "id": ident, "value": value})
        except Exception as exc:  # noqa: BLE001 - an answer that failed is an error, not a dead worker
            self.send({"op": "error", "id": ident, "error": encode_error(exc)})
        finally:
            self.tasks.pop(ident, None)


def _apply_env(env: dict[str, str]) -> None:
    """The kernel's environment as this process's (a key set with ``%env`` counts from the
    next call, as it did with litellm in the kernel)."""
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    # the worker's own: litellm never fetches its price map from the network (litellm_loader)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


async def serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    worker = _Worker(writer)
    importing = asyncio.wrap_future(start_import())

    def imported(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            worker.send({"op": "ready"})

    importing.add_done_callback(imported)
    while True:
        message = await read_frame(reader)
        if message is None:  # the kernel has gone: so does its worker
            break
        worker.dispatch(message)
    for task in list(worker.tasks.values()):
        task.cancel()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    # Jupyter's "interrupt kernel" signals the kernel's process group, this process included:
    # an interrupt stops the kernel's wait, never the model calls of other runs
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(serve(int(args[0])))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # not waiting for litellm's import thread or its logging worker


if __name__ == "__main__":
    main()
