"""``kernel__run``'s core: run code in a namespace as a cell would, and say what it did.

A ``CodeHost`` is where the code runs: ``PlainHost`` over a namespace dict (a Server built
outside IPython), or the notebook's (``chaz_nb/notebook/kernel_host.py``: the user's
namespace, IPython's syntax, rich outputs, turns between cells). This module compiles and
runs the code (the last expression's value kept, as a cell's), formats the reply for the agent
under its data policy, and lists the namespace changes (``namespace.changes``).
"""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import linecache
import traceback
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .describe import safe_repr
from .policy import DataPolicy, Secrets, clip

_counter = itertools.count(1)


@dataclass
class CellOutput:
    """What running the code showed."""

    stdout: str = ""
    stderr: str = ""
    #: repr of the last expression's value (None: no value)
    result: str | None = None
    #: ``Type: message`` of the exception the code raised
    error: str | None = None
    traceback: str | None = None
    #: rich outputs (plots, HTML): their MIME types and sizes
    rich: list[dict[str, Any]] = field(default_factory=list)
    #: why the code was stopped (timeout, Interrupt, Stop); None when it ran to its end
    stopped: str | None = None
    #: the rich outputs themselves, as nbformat ``display_data`` (data, metadata), in order
    displays: list[dict[str, Any]] = field(default_factory=list)
    #: the last expression's value is among ``displays`` (it has a rich repr)
    result_displayed: bool = False


class CodeHost(Protocol):
    """Where ``kernel__run`` code runs, and what the read-only tools read."""

    namespace: MutableMapping[str, Any]
    #: names to leave out of listings (IPython's own); a mapping compares the objects too
    hidden: Mapping[str, Any] | Iterable[str]

    async def wait_turn(self) -> None:
        """Return when code may run now: no user's cell is running (or one only waits)."""

    def execute(self, code: str) -> CellOutput:
        """Run ``code`` on this thread (KeyboardInterrupt is the caller's to handle)."""

    def show(self, output: CellOutput) -> None:
        """Put the code's rich outputs where the person sees them."""

    def history(self, last: int) -> list[tuple[int, str, Any]]:
        """The last cells run: (number, code, the result's value or None)."""


def run_source(source: str, ns: MutableMapping[str, Any]) -> tuple[Any, bool]:
    """Run ``source`` in ``ns``; return (the last expression's value, whether there was one).

    Exceptions of the code (KeyboardInterrupt included) propagate; the source is kept in
    ``linecache`` so that tracebacks show its lines."""
    filename = f"<kernel__run-{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tree = ast.parse(source, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    # exec wants a dict: IPython's user_ns is one; any other mapping runs in a dict view of it
    scope: dict[str, Any] = ns if isinstance(ns, dict) else dict(ns)
    try:
        if tree.body:
            exec(compile(tree, filename, "exec"), scope)  # noqa: S102 - running the approved code is the tool
        if not isinstance(last, ast.Expr):
            return None, False
        expr = ast.Expression(last.value)
        return eval(compile(expr, filename, "eval"), scope), True  # noqa: S307 - as above
    finally:
        if scope is not ns:
            ns.clear()
            ns.update(scope)


def record_exception(out: CellOutput, exc: BaseException) -> None:
    """The exception and its traceback, the frames of this module left out."""
    out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, SyntaxError):
        out.traceback = "".join(traceback.format_exception_only(type(exc), exc))
        return
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    out.traceback = "".join(traceback.format_exception(type(exc), exc, tb))


class PlainHost:
    """A namespace dict: code runs on the loop's thread, stdout and stderr captured."""

    hidden: Mapping[str, Any] | Iterable[str] = ()

    def __init__(self, namespace: MutableMapping[str, Any]) -> None:
        self.namespace = namespace
        self._ran: list[tuple[int, str, Any]] = []

    async def wait_turn(self) -> None:
        return None

    def execute(self, code: str) -> CellOutput:
        out = CellOutput()
        stdout, stderr = io.StringIO(), io.StringIO()
        value: Any = None
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                value, has_value = run_source(code, self.namespace)
            if has_value and value is not None:
                out.result = safe_repr(value)
        except BaseException as exc:  # noqa: BLE001 - the code's failure is the agent's to read
            record_exception(out, exc)
        out.stdout, out.stderr = stdout.getvalue(), stderr.getvalue()
        self._ran.append((len(self._ran) + 1, code, value))
        return out

    def show(self, output: CellOutput) -> None:
        return None

    def history(self, last: int) -> list[tuple[int, str, Any]]:
        return self._ran[-last:] if last > 0 else []


def reply_text(out: CellOutput, changes: list[dict[str, Any]], policy: DataPolicy,
               secrets: Secrets | None = None) -> str:
    """What the agent reads: outputs (not under ``schema``), the error, the namespace changes."""
    parts: list[str] = []
    if out.stopped:
        parts.append(f"stopped: the code was {out.stopped}; KeyboardInterrupt was raised in it, "
                     "and the kernel goes on")
    if policy.values:
        for label, text in (("stdout", out.stdout), ("stderr", out.stderr)):
            if text:
                parts.append(f"{label}:\n{text.rstrip()}")
        if out.result is not None:
            parts.append(f"result: {out.result}")
    if out.error and not out.stopped:
        parts.append(f"error: {out.error}")
        if out.traceback:
            parts.append(f"traceback:\n{out.traceback.rstrip()}")
    if out.rich:
        shown = "; ".join(f"{', '.join(r['mime'])} ({r['bytes']:,} bytes)" for r in out.rich)
        parts.append(f"rich outputs (shown in the notebook): {shown}")
    if changes:
        parts.append("namespace: " + "; ".join(_change_line(c) for c in changes))
    if not parts:
        parts.append("ran; no output" if policy.values else "ran (this agent's data policy is schema: "
                     "only errors and namespace changes are sent)")
    return clip("\n".join(parts), policy.max_chars, secrets)


def _change_line(c: dict[str, Any]) -> str:
    # a frame's or an array's shape; a builtin's (str, list, dict: a type name without a module)
    # one number is its length ("str, length 4", not "str, shape 4")
    builtin = "." not in str(c.get("type", ""))
    if c.get("shape"):
        shape = f", length {c['shape'][0]}" if builtin and len(c["shape"]) == 1 else \
            f", shape {'x'.join(map(str, c['shape']))}"
    else:
        shape = ""
    return f"{c['change']} {c['name']} ({c['type']}{shape})"


def nb_outputs(out: CellOutput, secrets: Secrets | None = None) -> list[dict[str, Any]]:
    """What the code produced as nbformat outputs (a cell's), every text masked as the kernel's
    tools mask what they send (``Secrets.mask``: the store's redaction too); images as they are."""
    mask = (secrets or Secrets()).mask
    outputs: list[dict[str, Any]] = []
    for name, text in (("stdout", out.stdout), ("stderr", out.stderr)):
        if text:
            outputs.append({"output_type": "stream", "name": name, "text": mask(text)})
    for shown in out.displays:
        data = {mime: mask(value) if isinstance(value, str) and _is_text(mime) else value
                for mime, value in (shown.get("data") or {}).items()}
        outputs.append({"output_type": "display_data", "data": data, "metadata": shown.get("metadata") or {}})
    if out.result is not None and not out.result_displayed:
        outputs.append({"output_type": "execute_result", "execution_count": None,
                        "data": {"text/plain": mask(out.result)}, "metadata": {}})
    return outputs


def _is_text(mime: str) -> bool:
    return mime.startswith("text/") or mime.endswith(("json", "javascript", "+xml"))


#: how ``kernel__run`` reaches a running piece of code to stop it (``Interrupter.stop``)
Stopper = Callable[[str], bool]
