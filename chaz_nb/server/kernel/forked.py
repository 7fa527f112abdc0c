"""Run one function in a forked child whose memory is bounded, and take back what it returns.

``kernel__query`` runs each query this way (query.py): DuckDB's ``memory_limit`` bounds its
operators, but one value built by one function (``repeat('x', 3e9)``, ``lpad`` to a huge
width, ``range(...)`` as one list) is allocated outside it and grew the kernel by gigabytes,
or ended it. In a child, whatever the query builds dies with the child.

``os.fork()`` gives the child the notebook's frames copy-on-write: nothing is copied or
shipped, the child reads them in place. The child bounds its own memory to what it maps
already plus a budget (``RLIMIT_DATA`` on Linux: private writable memory, which is what an
allocator takes; ``RLIMIT_AS`` would also count the address space the kernel's threads
reserve and never use), runs the function, pickles its return value (or its exception's class
name and message) to a pipe and leaves with ``os._exit``: no atexit handler, no flush of the
parent's streams (ipykernel's stdout is a zmq stream whose thread is not in the child).

The parent waits on the pipe off the kernel loop (the caller is a worker thread), kills the
child (SIGKILL) at the deadline and reaps it whatever happens: no zombie is left.
Where ``os.fork`` does not exist (Windows), ``FORKS`` is False and callers run in process.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import pickle
import selectors
import signal
import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: whether queries can run in a child process (Linux and macOS)
FORKS = hasattr(os, "fork") and sys.platform in ("linux", "darwin")
if sys.platform == "linux":  # counts private writable mappings in RLIMIT_DATA (since 4.7)
    import resource


#: the threads a child runs at most (the query instance's ``threads``), for its CPU time bound
CHILD_THREADS = 2


class ChildTimedOut(Exception):
    """The child ran past its deadline and was killed."""


class ChildDied(Exception):
    """The child ended without sending a result: killed by a signal (``signum``), or out of
    memory before it could say so."""

    def __init__(self, signum: int | None, code: int | None) -> None:
        super().__init__(f"signal {signum}" if signum is not None else f"exit code {code}")
        self.signum = signum
        self.code = code


class ChildFailed(Exception):
    """The function raised in the child: its exception's class name and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def run_forked(fn: Callable[[], T], *, memory_mb: int, deadline: float) -> T:
    """``fn()`` run in a forked child whose memory may grow by at most ``memory_mb`` MB.

    Raises ``ChildFailed`` (fn raised), ``ChildTimedOut`` (over ``deadline`` seconds) or
    ``ChildDied`` (a signal, or its memory ran out before it could answer)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected (it never returns)
        _child(fn, read_end, write_end, memory_mb, deadline)
    os.close(write_end)
    killed = False
    done = False
    chunks: list[bytes] = []
    try:
        chunks, killed = _read_until(read_end, pid, time.monotonic() + deadline)
        _, status = os.waitpid(pid, 0)
        done = True
    finally:
        os.close(read_end)
        if not done:  # the wait itself failed (never expected): the child goes, and is reaped
            _kill(pid)
            os.waitpid(pid, 0)
    if killed:
        raise ChildTimedOut()
    if os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0 or not chunks:
        raise ChildDied(os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                        os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)
    outcome = pickle.loads(b"".join(chunks))  # noqa: S301 - written by our own child, just now
    if outcome[0] == "raised":
        raise ChildFailed(outcome[1], outcome[2])
    result: T = outcome[1]
    return result


def _read_until(fd: int, pid: int, end: float) -> tuple[list[bytes], bool]:
    """What the child writes until it closes the pipe; SIGKILL at ``end`` (then True)."""
    chunks: list[bytes] = []
    with selectors.DefaultSelector() as sel:  # not select(): the kernel's fds may pass 1024
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = end - time.monotonic()
            if left <= 0:
                _kill(pid)
                return chunks, True
            if not sel.select(left):
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                return chunks, False
            chunks.append(data)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone (its zombie is still ours to reap)
        os.kill(pid, signal.SIGKILL)


def _child(fn: Callable[[], object], read_end: int, write_end: int, memory_mb: int,
           deadline: float) -> None:  # pragma: no cover
    """In the child: bound memory, run ``fn``, send the outcome, leave without cleanup."""
    code = 0
    try:
        os.close(read_end)
        faulthandler.disable()  # a crash of the child is the parent's to tell, on no stream of the kernel's
        # the collector would walk (and so copy) every object of the kernel's heap
        gc.disable()
        # an interrupt of the kernel (sent to its process group) ends the query
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _bound_memory(memory_mb, deadline)
        try:
            outcome: tuple[object, ...] = ("returned", fn())
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as text
            outcome = ("raised", type(exc).__name__, str(exc))
        try:
            data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - a value pickle cannot write: say so, not "no result"
            data = pickle.dumps(("raised", type(exc).__name__, f"the result could not be sent back: {exc}"))
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view):]
    except BaseException:  # noqa: BLE001 - no result: the parent reads the exit code
        code = 1
    finally:
        os._exit(code)


def _bound_memory(memory_mb: int, deadline: float) -> None:
    """Let the process's private writable memory grow by ``memory_mb`` MB from now, and its
    CPU time be what its threads can use before the parent kills it at ``deadline`` (so a
    child whose parent never killed it, a kernel that ended meanwhile, still ends)."""
    if sys.platform != "linux":  # macOS enforces neither RLIMIT_DATA nor RLIMIT_AS
        return
    soft = _status_kb("VmData") * 1024 + (memory_mb << 20)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    cpu = int((CHILD_THREADS + 1) * deadline) + 10
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard == resource.RLIM_INFINITY or cpu < hard:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, hard))


def _status_kb(field: str) -> int:
    """A ``/proc/self/status`` figure, in kB (0 where it cannot be read)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
