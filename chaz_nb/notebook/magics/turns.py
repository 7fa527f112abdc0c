"""A turn from a cell: check the agent, pick the session, write the trigger, show and wait.

Shared by every sub-command that talks to an agent or follows a session (``%chaz @NAME``,
``%chaz wait``, ``%chaz log``, rooms, ``%chaz compact``, ``%chaz audit``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ...errors import StoreError
from ..views.session import DEFAULT_PAGE

if TYPE_CHECKING:  # pragma: no cover
    from ...server import Server
    from ..controller import ExtensionState


def check_agent(server: Server, name: str) -> None:
    # a shared store: the agent as the store defines it now (another kernel may have defined,
    # redefined or forgotten it a moment ago, its notice still on the way); one row
    server.refresh_agents(name)
    if name not in server.agents:
        known = ", ".join("@" + n for n in sorted(server.agents)) or "none"
        raise UsageError(
            f"unknown agent @{name}; known agents: {known} "
            f"(define it with %chaz agent {name} --model chaz/echo)"
        )


def parse_session(server: Server, arg: str, last: int | None, what: str) -> int:
    arg = arg.strip()
    if not arg:
        if last is None:
            raise UsageError(f"%chaz {what}: no session yet; talk to an agent first (%chaz @assistant hello)")
        return last
    if arg.startswith("@"):
        name = arg[1:]
        if server.current_session_id(name) is None:  # (one chosen with %chaz use needs no definition)
            check_agent(server, name)
        return server.current_session(name)
    try:
        sid = int(arg)
    except ValueError:
        raise UsageError(f"%chaz {what}: SESSION is a session id or @NAME, not {arg!r}") from None
    try:
        server.store.session(sid)
    except StoreError as exc:
        if "not shared" in str(exc) or "may not" in str(exc):  # a team's store: whose it is, what to ask
            raise UsageError(f"%chaz {what}: {exc}") from None
        raise UsageError(f"%chaz {what}: there is no session {sid}; see %chaz sessions") from None
    return sid


def open_view(
    state: ExtensionState,
    session: int,
    *,
    after_seq: int = 0,
    follow: bool | None = None,
    title: str | None = None,
    page: int | None = DEFAULT_PAGE,
    before_seq: int | None = None,
) -> Any:
    """A view of a session on the kernel loop; kept in ``state.views`` while it follows the log
    (so unloading the extension finishes it).

    ``follow=True`` is a cell that drives the session (a turn, a wait): the view covers that
    cell's part of the run. An earlier cell's view still following the session ends where it
    is and this one starts after it, so every cell keeps its own step of the story; the
    footer says where the whole log is.

    ``page``: the view reads the newest ``page`` entries (of its part of the log) and loads
    earlier ones a page at a time ("show earlier"); ``None`` reads them all. ``before_seq``:
    a window of the log that ends before that seq.
    """
    from ..views.session import SessionView

    server = state.server
    footer = None
    if follow is True:
        for earlier in state.views:
            if getattr(earlier, "session_id", None) == session and getattr(earlier, "following", False):
                after_seq = max(after_seq, earlier.hand_over())
        footer = f"full log: %chaz log {session}"
    view = SessionView(
        server.store,
        session,
        status=server.session_status,
        after_seq=after_seq,
        loop=state.loop,
        follow=follow,
        approvals=server,
        title=title,
        footer=footer,
        cell=follow is True,
        page=page,
        before_seq=before_seq,
        streams=getattr(server, "subscribe_stream", None),
        stop=getattr(server, "request_stop", None),
        loading=getattr(server, "model_library_loading", None),
    )
    if view.following:
        state.views[:] = [v for v in state.views if v.following]
        state.views.append(view)
    return view


def send_turn(
    state: ExtensionState, name: str, text: str, *, directive: bool = False, display: bool = True,
    attach: list[str] | None = None, waits: bool = False,
) -> tuple[Any, Any]:
    """Write the Message (or Directive) from this cell; return (run handle, view or None).

    ``waits``: the cell waits for the run next (``wait_session``): the view opens once the
    model request is on the wire rather than in front of it (``LiveView.display_later``).
    """
    from ..kernel_loop import run_sync

    session, text, payload, view = _prepare_turn(state, name, text, display=display, attach=attach)
    # through the group commit, on the kernel loop (the run's own entries commit there too): the
    # cell's one durable commit in front of the model call (issue 32)
    handle = run_sync(state.server.send(session, text, sender="user", payload=payload, directive=directive),
                      state.loop)
    _show_turn(state, session, view, handle=handle if waits else None)
    return handle, view


async def ask_turn(
    state: ExtensionState, name: str, text: str, *, directive: bool = False, display: bool = True,
) -> tuple[Any, Any]:
    """``send_turn`` for code that awaits (``chaz_nb.ask``): the same write, awaited."""
    session, text, payload, view = _prepare_turn(state, name, text, display=display)
    handle = await state.server.send(session, text, sender="user", payload=payload, directive=directive)
    _show_turn(state, session, view)
    return handle, view


def _prepare_turn(
    state: ExtensionState, name: str, text: str, *, display: bool, attach: list[str] | None = None,
) -> tuple[int, str, dict[str, Any], Any]:
    """Check the agent, pick the session, build the payload, open the view: (session, text, payload, view)."""
    from ..controller import origin

    server = state.server
    server.refresh_agents(name)  # a shared store: as the store defines it now
    if server.current_session_id(name) is None:  # a session chosen with %chaz use: served elsewhere
        check_agent(server, name)
    if not text.strip():
        raise UsageError(f"%chaz: nothing to send to @{name}; write the text after @{name}")
    session = server.current_session(name)
    if name not in server.agents and not server.served_elsewhere(session):
        raise UsageError(
            f"%chaz: no kernel serves session {session} now and @{name} is not defined here; "
            f"define it (%chaz agent {name} --model M) to serve the session from this kernel"
        )
    payload: dict[str, Any] = {"origin": origin(state.shell)}
    if attach:
        block, extra = attachments(server, name, attach, session)
        text = f"{text.rstrip()}\n\n{block}"
        payload.update(extra)
    latest = server.store.latest(session)
    view = None
    if display:
        view = open_view(state, session, after_seq=latest.seq if latest else 0, follow=True)
    return session, text, payload, view


def _show_turn(state: ExtensionState, session: int, view: Any, *, handle: Any = None) -> None:
    """``handle``: the cell waits for this run next, and its view opens once the run's model
    request has left (the loop then idle, the request on the wire; see ``display_later``)."""
    state.last_session = session
    if view is None:
        return
    view.flush()  # the trigger in the view's state (the run's entries follow from the loop)
    when_sent = getattr(handle, "when_request_sent", None)  # (a run served elsewhere: none)
    if when_sent is None:
        view.display()
    else:
        when_sent(view.display_later())


def attachments(server: Any, name: str, names: list[str], session: int | None = None) -> tuple[str, dict[str, Any]]:
    """``--with a,b``: the variables' descriptions under @name's data policy (kernel tools).

    Where @name's egress rule does not let them go as they are (``ask``, ``deny``: the egress
    gate), their record waits (``egress_pending``): the run that reads the Message asks, or
    withholds them, and records the send before its request leaves."""
    from ...errors import ToolError

    kernel = getattr(server, "kernel", None)
    if kernel is None:
        raise UsageError("%chaz --with: this kernel has no kernel tools (load chaz_nb with %load_ext)")
    try:
        block: str
        extra: dict[str, Any]
        block, extra = kernel.attach(names, server.agents.get(name))
    except ToolError as exc:
        raise UsageError(f"%chaz --with: {exc}") from None
    gate, agent = getattr(server, "egress_gate", None), server.agents.get(name)
    if gate is not None and agent is not None and session is not None and isinstance(extra.get("egress"), dict):
        verdict = gate.verdict(session, agent)
        if verdict.decision in ("allow", "allow_session"):
            extra["egress"].update({"decision": verdict.decision, "decided_by": verdict.why})
        else:
            extra["egress_pending"] = extra.pop("egress")
    return block, extra



def wait_session(state: ExtensionState, session: int, handle: Any, view: Any) -> None:
    """Wait for the run. Ctrl-C (the kernel's Interrupt) ends the wait, not the run: a live
    view says so on its Stop row and keeps following the run; without one, WaitInterrupted.

    If it parks, the view says so (the tool row waits for approval, the card says what to do)
    and keeps saying the truth as it changes; only without a view is a line printed (stdout
    cannot be updated, so it would contradict the view later)."""
    from ...errors import WaitInterrupted
    from ..kernel_loop import wait_run

    from ...server import REMOTE_POLL_INTERVAL, RemoteRun

    server = state.server
    # A run another kernel serves is followed by its status (read from the log): the wait also
    # ends, rather than hang, if that kernel dies before it answers (its lease frees). That
    # status moves with the session's entries, so they wake the wait; the slow poll is for the
    # serving kernel's death, which no entry announces (remote.py).
    future = handle.future if handle is not None and not isinstance(handle, RemoteRun) else None
    elsewhere = future is None and server.served_elsewhere(session)
    if view is not None:
        view.set_waiting(True)  # the Stop row says whether a click can act during the wait
    try:
        outcome = wait_run(
            is_done=lambda: server.session_status(session) == "idle",  # (also a run served elsewhere)
            is_parked=lambda: server.session_status(session) == "parked",
            future=future,
            loop=state.loop,
            wake=server.session_writes(session) if elsewhere else None,
            poll_interval=REMOTE_POLL_INTERVAL if elsewhere else None,
        )
    except BaseException:
        if view is not None:
            view.show()  # the cell ends here: its view is in its output (send_turn's waits)
        raise
    finally:
        if view is not None:
            view.set_waiting(False)
    if view is not None:
        if outcome.state == "interrupted":
            view.set_waiting(False, interrupted=True)
        view.flush(final=True)  # a run that is over: the static output, the widgets closed
        view.show()  # not displayed yet (a run over before the loop was idle): its static output
        if not view.following:  # let go of it (a view that still follows stays, see open_view)
            state.views[:] = [v for v in state.views if v.following]
    if outcome.state == "parked" and view is None:
        asks = [p for p in server.pending_approvals() if p.get("session_id") == session]
        what = ", ".join(f"{p.get('tool_name')} (risk {p.get('risk_level')})" for p in asks) or "an approval"
        print(
            f"⚠ session {session} is waiting for a person to approve {what}: click Approve or Deny "
            f"above, or run %chaz approve last / %chaz deny last --reason R; the run resumes once "
            f"it is decided. %chaz wait {session} waits again."
        )
    elif outcome.state == "interrupted" and view is not None:
        # the view says so (its Stop row: "stopped waiting: the run goes on") and keeps following
        # the run, as a --no-wait cell's does: no error output in the notebook (issue 26)
        return
    elif outcome.state == "interrupted":
        raise WaitInterrupted(
            f"stopped waiting: session {session} keeps running and every entry is kept; "
            f"%chaz wait {session} waits again, %chaz log {session} shows it"
        )
