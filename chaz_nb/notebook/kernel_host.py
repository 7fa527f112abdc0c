"""The notebook as the ``kernel`` tool server's host (server/kernel/): the user's namespace,
IPython's cell history and syntax, rich outputs, and turns between the user's cells.

``kernel__run`` code never runs at the same time as a user's cell. IPython's
``pre_run_cell``/``post_run_cell`` events say when a cell runs; the code waits for its turn
until none does, or until the running cell only waits on a run (``%chaz @x`` and
``%chaz wait`` drive the loop inside ``kernel_loop.wait_run``: the code then runs there, on
the main thread, and its outputs land in that cell). Rich outputs (a ``display()``, a
matplotlib figure the code made, a last value with an HTML or image repr) are captured
while the code runs, reported to the agent by type and size, then displayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ToolError
from ..server import CellOutput, record_exception, run_source, safe_repr
from . import kernel_loop

#: seconds between two checks of whether the user's cell has ended (the event wakes sooner)
TURN_POLL = 0.1


class NotebookHost:
    """``CodeHost`` over an IPython shell (see the module docstring)."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.namespace = shell.user_ns
        self.hidden: Mapping[str, Any] | Iterable[str] = getattr(shell, "user_ns_hidden", {}) or {}
        self._cells = 0  # cells running now (a cell can run another: %run, run_cell)
        self._ended: asyncio.Event | None = None
        self._captured: list[Any] = []
        self._parent: dict[str, Any] | None = None
        self._deferred: list[Any] = []
        events = getattr(shell, "events", None)
        if events is not None:
            events.register("pre_run_cell", self._pre_run_cell)
            events.register("post_run_cell", self._post_run_cell)

    def close(self) -> None:
        events = getattr(self.shell, "events", None)
        if events is not None:
            for name, fn in (("pre_run_cell", self._pre_run_cell), ("post_run_cell", self._post_run_cell)):
                with contextlib.suppress(ValueError):  # not registered (closed twice)
                    events.unregister(name, fn)

    def _pre_run_cell(self, info: Any = None) -> None:
        self._cells += 1
        # the cell's request: rich outputs of agent code go to the cell that runs (or last ran)
        kernel = getattr(self.shell, "kernel", None)
        if kernel is not None:
            with contextlib.suppress(Exception):  # not an ipykernel (a terminal): no parent
                self._parent = kernel.get_parent("shell")
        if self._deferred:  # made between cells: shown at the top of this cell
            deferred, self._deferred = self._deferred, []
            self._display(deferred)

    def _post_run_cell(self, result: Any = None) -> None:
        self._cells = max(0, self._cells - 1)
        if self._cells == 0 and self._ended is not None:
            self._ended.set()

    @property
    def cell_running(self) -> bool:
        return self._cells > 0

    async def wait_turn(self) -> None:
        while self.cell_running and not kernel_loop.only_waiting():
            self._ended = asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ended.wait(), TURN_POLL)
        if threading.current_thread() is not threading.main_thread():
            raise ToolError("kernel__run runs on the kernel's main thread; this server's loop is on another thread")

    def execute(self, code: str) -> CellOutput:
        from IPython.utils.capture import capture_output

        out = CellOutput()
        figures = _figure_numbers()
        with capture_output(stdout=True, stderr=True, display=True) as captured:
            try:
                source = self.shell.transform_cell(code)
                value, has_value = run_source(source, self.namespace)
                if has_value and value is not None:
                    out.result = safe_repr(value)
                    out.result_displayed = self._display_rich(value)
            except BaseException as exc:  # noqa: BLE001 - the code's failure is the agent's to read
                record_exception(out, exc)
            finally:
                _show_new_figures(figures)
        out.stdout, out.stderr = captured.stdout, captured.stderr
        self._captured = list(captured.outputs)
        out.rich = [{"mime": sorted(o.data), "bytes": sum(_size(v) for v in o.data.values())}
                    for o in self._captured]
        out.displays = [{"data": dict(o.data), "metadata": dict(o.metadata or {})} for o in self._captured]
        return out

    def _display_rich(self, value: Any) -> bool:
        """A last value with a rich repr (HTML, an image) is displayed, as a cell shows it;
        whether it was."""
        try:
            data, _metadata = self.shell.display_formatter.format(value)
        except Exception:  # noqa: BLE001 - the value's own _repr_*_ may raise
            return False
        if set(data) - {"text/plain"}:
            from IPython.display import display

            display(value)
            return True
        return False

    def show(self, output: CellOutput) -> None:
        """Display the captured outputs in the cell running now; made between cells, at the
        top of the next cell (a frontend drops outputs sent to a cell that has finished)."""
        captured, self._captured = self._captured, []
        if not self.cell_running:
            self._deferred.extend(captured)
            return
        self._display(captured)

    def _display(self, captured: list[Any]) -> None:
        # ipykernel 7 keeps the request an output belongs to in a context variable, and the
        # run's task has the context of the cell that started it: without the parent set here,
        # a plot made while ``%chaz wait`` waits would be sent to that earlier, finished cell.
        publisher = getattr(self.shell, "display_pub", None)
        token = None
        if self._parent is not None and publisher is not None and hasattr(publisher, "set_thread_parent"):
            token = publisher.set_thread_parent(self._parent)
        try:
            for rich in captured:
                with contextlib.suppress(Exception):  # a display that fails must not fail the tool call
                    rich.display()
        finally:
            if token is not None and publisher is not None:
                publisher.reset_thread_parent(token)

    def history(self, last: int) -> list[tuple[int, str, Any]]:
        manager = getattr(self.shell, "history_manager", None)
        if manager is None:
            return []
        inputs = manager.input_hist_raw
        outputs = manager.output_hist
        out: list[tuple[int, str, Any]] = []
        for number in range(len(inputs) - 1, 0, -1):
            if len(out) >= last:
                break
            code = inputs[number]
            if code.strip():
                out.append((number, code, outputs.get(number)))
        return out[::-1]


def _figure_numbers() -> set[int]:
    plt = sys.modules.get("matplotlib.pyplot")
    return set(plt.get_fignums()) if plt is not None else set()


def _show_new_figures(before: set[int]) -> None:
    """Figures the code made are displayed (as the inline backend does at a cell's end) and closed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    from IPython.display import display

    for number in sorted(set(plt.get_fignums()) - before):
        figure = plt.figure(number)
        try:
            display(figure)
        finally:
            plt.close(figure)


def _size(value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else len(repr(value))
