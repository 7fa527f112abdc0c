"""A small jupyter_client harness: run cells in a real kernel and collect their messages."""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

from jupyter_client.manager import KernelManager


@dataclass
class CellResult:
    status: str = ""
    outputs: list[dict[str, Any]] = field(default_factory=list)  # iopub messages (not status)
    error: dict[str, Any] | None = None

    def of(self, *types: str) -> list[dict[str, Any]]:
        return [m for m in self.outputs if m["msg_type"] in types]

    @property
    def stdout(self) -> str:
        return "".join(m["content"]["text"] for m in self.of("stream") if m["content"]["name"] == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(m["content"]["text"] for m in self.of("stream") if m["content"]["name"] == "stderr")

    def texts(self) -> list[str]:
        """text/plain of every display / update / result, in order."""
        return [
            m["content"]["data"].get("text/plain", "")
            for m in self.of("display_data", "update_display_data", "execute_result")
        ]


class Kernel:
    """A python3 kernel of this venv, started in ``cwd``."""

    def __init__(self, cwd: str, env: dict[str, str] | None = None) -> None:
        # unix sockets, not TCP ports: a port that jupyter_client found free can be taken by
        # another process before the kernel binds it ("Address already in use", seen when
        # several test runs start kernels on one machine); an ipc path is this kernel's own
        # (an absolute path: the kernel runs in ``cwd``, this process elsewhere)
        self._sockets = tempfile.mkdtemp(prefix="chaz-kernel-")
        self.km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(self._sockets, "k"))
        full_env = dict(os.environ)
        full_env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        full_env.pop("CHAZ_DB", None)
        full_env.pop("CHAZ_MODEL", None)
        full_env.update(env or {})
        # the kernel must import this checkout of chaz_nb
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        full_env["PYTHONPATH"] = os.pathsep.join([root, full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.km.start_kernel(cwd=cwd, env=full_env, extra_arguments=[])
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.background: list[dict[str, Any]] = []  # iopub messages of finished cells

    def send_execute(self, code: str, metadata: dict[str, Any] | None = None) -> str:
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        msg = self.kc.session.msg("execute_request", content, metadata=metadata or {})
        self.kc.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def collect(self, msg_id: str, timeout: float = 60) -> CellResult:
        result = CellResult()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"cell {msg_id} did not finish in {timeout}s")
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                self.background.append(msg)
                continue
            if msg["msg_type"] == "status":
                if msg["content"]["execution_state"] == "idle":
                    break
                continue
            if msg["msg_type"] == "execute_input":
                continue
            result.outputs.append(msg)
            if msg["msg_type"] == "error":
                result.error = msg["content"]
        while True:
            reply = self.kc.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                result.status = reply["content"]["status"]
                return result

    def run(self, code: str, timeout: float = 60, metadata: dict[str, Any] | None = None) -> CellResult:
        return self.collect(self.send_execute(code, metadata), timeout)

    def drain(self, seconds: float) -> list[dict[str, Any]]:
        """iopub messages that arrive in the next ``seconds`` while no cell runs."""
        out = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                out.append(self.kc.get_iopub_msg(timeout=left))
            except queue.Empty:
                break
        return out

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60) -> list[dict[str, Any]]:
        """iopub messages up to and including the first one ``predicate`` accepts.

        The event itself (a background view's final update, a widget row) is what a test
        waits on; ``timeout`` only bounds a failure.
        """
        out = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no such iopub message in {timeout}s; saw {[m['msg_type'] for m in out]}")
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except queue.Empty:
                continue
            out.append(msg)
            if predicate(msg):
                return out

    def close(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)
            shutil.rmtree(self._sockets, ignore_errors=True)
