"""``%load_ext chaz_nb``: the Server on the kernel's own event loop, plus the magics.

Loading opens the DuckDB store (``$CHAZ_DB``, else ``.chaz/sessions.duckdb`` under the
working directory), builds a Server with the default agent ``assistant`` (model
``$CHAZ_MODEL``, else the offline ``chaz/echo``), attaches it to the running loop, registers
``%chaz`` / ``%%chaz`` and prints one line. When another kernel holds the file, this kernel
says so in that line and uses a file of its own (``.chaz/sessions-<pid>.duckdb`` beside it).

This module imports nothing heavy at import time. Model calls run in the model worker process
(``engine/worker``), which loading starts and does not wait for: litellm (seconds to import) is
imported there while the user types, and never in the kernel. ``CHAZ_MODEL_WORKER=0`` keeps
litellm in the kernel instead, imported in a background thread (``litellm_loader.start_import``).
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any
from . import controller
from .controller import (  # noqa: F401  (the extension's public names, as before)
    DEFAULT_AGENT,
    DEFAULT_DB,
    DEFAULT_MODEL,
    ExtensionState,
    current,
    current_state,
    default_db,
    default_model,
    origin,
)
from ..errors import NotLoadedError  # noqa: F401 - re-exported (the extension's public names)







def fallback_db(path: str) -> str:
    """The file a kernel uses when ``path`` is held by another process."""
    root, ext = os.path.splitext(path)
    return f"{root}-{os.getpid()}{ext or '.duckdb'}"


def open_store(path: str) -> tuple[Any, str]:
    """Open the store at ``path``; if another kernel holds it, a file of this kernel's own.

    Returns ``(store, note)``; ``note`` is empty, or says why another file is used.
    """
    from ..errors import StoreLockedError
    from ..server import SessionStore

    try:
        return SessionStore.open(path), ""
    except StoreLockedError:
        if path == ":memory:":  # pragma: no cover - memory is never locked
            raise
    alt = fallback_db(path)
    try:
        return SessionStore(alt), held_note(path, alt)
    except StoreLockedError:  # pragma: no cover - our own pid file, locked: very unlikely
        return SessionStore(":memory:"), held_note(path, ":memory:")


SHARE_HINT = "set CHAZ_DB=postgresql://... to share sessions between notebooks"


def held_note(path: str, alt: str) -> str:
    """The one line saying a DuckDB file is held, which file this kernel uses, and how to share."""
    return f"{path} is held by another kernel; this kernel uses {alt} ({SHARE_HINT})"


def build_server(store: Any, loop: Any, agents: Any = None, tools: Any = None) -> Any:
    """A Server on ``store`` running its agents on ``loop``: the agents kept in the store
    (server/agent_book.py), ``agents`` (kept there too) and the built-in default agent."""
    from ..server import SAFE_DEFAULT_TOOLS, Agent, Server
    from ..engine.tools import ToolRegistry

    registry = ToolRegistry()
    if tools is not None:  # carry the user's tools over (config db=...), not the built-ins
        for name in tools.names():
            if name not in ("spawn_agent", "spawn_worker") and not name.startswith("kernel__"):
                registry.register(tools.get(name))
    server = Server(store, tools=registry, keep_agents=True, backend=model_backend())
    # the built-in default: never kept, and one defined with %chaz agent assistant wins
    server.roster.define_built_in(Agent(DEFAULT_AGENT, model=default_model(), tools=list(SAFE_DEFAULT_TOOLS)))
    for agent in (agents or {}).values():
        server.define_agent(agent)
    server.attach_loop(loop)
    return server


def _describe(store: Any, server: Any, note: str = "") -> str:
    model = server.agents[DEFAULT_AGENT].model if DEFAULT_AGENT in server.agents else "?"
    where = store.path
    kept = [n for n in getattr(server, "agents_loaded", []) if n != DEFAULT_AGENT]
    back = f" · agents kept here: {', '.join('@' + n for n in kept)} (%chaz agents)" if kept else ""
    from ..server import sharing

    role = sharing.role_of(store)
    back += f" · acting as {role} (%chaz whoami)" if role is not None else ""
    if note:
        return f"chaz_nb: {note} · agent {DEFAULT_AGENT} uses {model}{back}"
    return f"chaz_nb: sessions in {where} · agent {DEFAULT_AGENT} uses {model}{back}"


_MAGIC_LINE = re.compile(r"^(?P<indent>[ \t]*)%chaz(?:[ \t]+(?P<args>.*?))?[ \t]*$")


def protect_question_marks(lines: list[str]) -> list[str]:
    """Input transformer: a ``%chaz`` line that ends with ``?`` is a question, not help.

    IPython reads ``%chaz @assistant who are you?`` as a request for help on ``you``
    (``you?``). Before its help transformer runs, turn such a line into the call IPython would
    make for the magic anyway: ``get_ipython().run_line_magic('chaz', '...')``.
    """
    first = next((line for line in lines if line.strip()), "")
    if first.lstrip().startswith("%%"):
        return lines  # a cell magic: its body is passed as it is
    out = []
    for line in lines:
        if line.rstrip().endswith("?"):
            m = _MAGIC_LINE.match(line.rstrip("\r\n"))
            if m:
                nl = line[len(line.rstrip("\r\n")) :]
                line = f"{m.group('indent')}get_ipython().run_line_magic('chaz', {m.group('args') or ''!r}){nl}"
        out.append(line)
    return out


def load_ipython_extension(ip: Any) -> None:
    from .kernel_loop import get_loop
    from .magics.core import ChazMagics

    previous = controller.loaded_state()
    if previous is not None:
        unload_ipython_extension(previous.shell)
    loop = get_loop()
    store, note = open_store(default_db())
    try:
        server = build_server(store, loop)
    except Exception:  # re-raised: only the store is closed first
        store.close()
        raise
    _add_kernel(server, ip)
    line = _describe(store, server, note)
    state = ExtensionState(shell=ip, loop=loop, server=server, db_line=line, reopen=reopen)
    magics = ChazMagics(ip, state_getter=current_state)
    ip.register_magics(magics)
    state.magics = magics
    cleanup = getattr(ip, "input_transformers_cleanup", None)
    if cleanup is not None and protect_question_marks not in cleanup:
        cleanup.append(protect_question_marks)
    controller.set_state(state)
    _connect_sidebar(state)
    _connect_stop_control(state)
    _watch_cells(ip)
    print(line)
    _start_schedules(state)
    _start_model_worker(server, loop)


def _watch_cells(ip: Any) -> None:
    """After each cell, a kept agent's tool that the cell defined joins the server."""
    from .magics.agents import after_cell

    events = getattr(ip, "events", None)
    if events is None:
        return
    _unwatch_cells(ip)
    callback = after_cell(ip)
    events.register("post_run_cell", callback)
    ip._chaz_after_cell = callback


def _unwatch_cells(ip: Any) -> None:
    callback = getattr(ip, "_chaz_after_cell", None)
    if callback is not None:
        with contextlib.suppress(Exception):  # unloading: never fail for it
            ip.events.unregister("post_run_cell", callback)
        ip._chaz_after_cell = None


def _add_kernel(server: Any, shell: Any) -> None:
    """The notebook as the ``kernel`` tool server (kernel__variables, ..., kernel__run)."""
    from .kernel_host import NotebookHost

    server.add_kernel(NotebookHost(shell))


def model_backend() -> Any:
    """The notebook's model backend: the model worker process (``engine/worker``), so that
    litellm is never imported in the kernel; ``CHAZ_MODEL_WORKER=0`` keeps litellm in the
    kernel's process (``LiteLLMBackend``, as before the worker)."""
    if os.environ.get("CHAZ_MODEL_WORKER", "").strip() == "0":
        from ..engine.backends import LiteLLMBackend

        return LiteLLMBackend()
    from ..engine.worker import shared_backend

    return shared_backend()


def _start_model_worker(server: Any, loop: Any) -> None:
    """Start the model worker (or, in-process, litellm's import off the loop) now, so that the
    first turn finds litellm imported."""
    start = getattr(server.backend, "start", None)
    if callable(start):
        try:
            start(loop)
        except Exception as exc:  # noqa: BLE001 - the first call starts it again and says why it cannot
            print(f"chaz_nb: the model worker did not start: {str(exc).splitlines()[0] if str(exc) else exc!r}")
        return
    from ..engine.litellm_loader import start_import

    start_import()


def _start_schedules(state: ExtensionState) -> None:
    """Start the scheduler on the kernel loop: schedules kept from an earlier kernel fire again."""
    try:
        state.server.schedules.start()
    except Exception as exc:  # noqa: BLE001 - never fail the load for it; say so in one line
        print(f"chaz_nb: schedules are not running: {str(exc).splitlines()[0] if str(exc) else exc!r}")


def _connect_sidebar(state: ExtensionState) -> None:
    """The JupyterLab sidebar's comm target (a no-op without a kernel)."""
    try:
        from . import labcomm

        state.unregister_comm = labcomm.register_comm_target(state.shell, state.server)
    except Exception:  # noqa: BLE001 - the sidebar is optional; never fail the load for it
        state.unregister_comm = None


def _connect_stop_control(state: ExtensionState) -> None:
    """Stop and the sidebar chat's send over the kernel's control channel, so they act while a
    cell waits (stop_control.py, chat_control.py)."""
    try:
        from . import chat_control, stop_control

        kernel = getattr(state.shell, "kernel", None)
        uninstalls = [stop_control.install(kernel, state.loop), chat_control.install(kernel, state.loop)]

        def uninstall() -> None:
            for undo in uninstalls:
                undo()

        state.unregister_stop = uninstall
    except Exception:  # noqa: BLE001 - optional like the sidebar; never fail the load for it
        state.unregister_stop = None


def _disconnect_sidebar(state: ExtensionState) -> None:
    if state.unregister_comm is not None:
        # unloading: a comm manager already gone must not stop the unload
        with contextlib.suppress(Exception):
            state.unregister_comm()
        state.unregister_comm = None


def _stop_server(state: ExtensionState) -> None:
    from .kernel_loop import run_sync

    kernel = getattr(state.server, "kernel", None)
    close = getattr(getattr(kernel, "host", None), "close", None)
    if close is not None:
        close()  # its cell events go with the server

    for view in state.views:
        # unloading: a view failing to finish must not stop the unload
        with contextlib.suppress(Exception):
            view.finish()
    state.views.clear()
    try:
        run_sync(state.server.stop(), state.loop)
    finally:
        state.server.store.close()


def unload_ipython_extension(ip: Any) -> None:
    """Stop every run, close the database, remove the magics."""
    state = controller.loaded_state()
    controller.set_state(None)
    if state is None:
        return
    _disconnect_sidebar(state)
    if state.unregister_stop is not None:
        with contextlib.suppress(Exception):  # unloading: never stop the unload for it
            state.unregister_stop()
        state.unregister_stop = None
    _unwatch_cells(ip)
    try:
        _stop_server(state)
    finally:
        cleanup = getattr(ip, "input_transformers_cleanup", None)
        if cleanup is not None and protect_question_marks in cleanup:
            cleanup.remove(protect_question_marks)
        mm = getattr(ip, "magics_manager", None)
        if mm is not None:
            for kind in ("line", "cell"):
                mm.magics[kind].pop("chaz", None)


def reopen(path: str) -> str:
    """``%chaz config db=PATH``: move this kernel to another database (agents, tools kept)."""
    state = current_state()
    old = state.server
    store, note = open_store(path)
    _disconnect_sidebar(state)
    # the old server is replaced whatever its stop() says
    with contextlib.suppress(Exception):
        _stop_server(state)
    # this kernel's agents go along (and are kept in the new store); the built-in one is made anew
    carried = {n: a for n, a in old.agents.items() if old.roster.origin.get(n) != "built-in"}
    state.server = build_server(store, state.loop, agents=carried, tools=old.tools)
    _add_kernel(state.server, state.shell)
    state.last_session = None
    state.room = None
    state.db_line = _describe(store, state.server, note)
    _connect_sidebar(state)
    _start_schedules(state)
    return state.db_line


async def ask(text: str, *, display: bool = True, directive: bool = False, **kwargs: Any) -> Any:
    """``await chaz_nb.ask("@NAME text")``: write a Message and await the run's outcome.

    Returns the outcome Entry (the reply Message, an Error, or None for a silent turn). With
    ``display=True`` the turn is shown live, as ``%chaz`` does. The run is shielded: cancelling
    the await (an interrupt) leaves it running.
    """
    from .magics.core import parse_address
    from .magics.turns import ask_turn

    state = current_state()
    name, body = parse_address(text, state.server)
    handle, view = await ask_turn(state, name, body, directive=directive, display=display)
    try:
        if handle is None:
            return None
        from .kernel_loop import waiting

        with waiting():  # the cell only awaits the run: an agent's kernel__run may take its turn
            return await handle.wait()
    finally:
        if view is not None:
            view.flush(final=True)


def __getattr__(name: str) -> Any:
    # ``extension._state``: the loaded state lives in controller.py now (tests read it here)
    if name == "_state":
        return controller.loaded_state()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
