"""The Stop button of the live session view (notebook/views/stop_button.py), clicked headlessly.

``Button.click()`` fires the button's on_click handlers from Python, as a click in the browser
does through the widget's comm. The run is a real one on the Server: parked on a slow model
call over the wire fixture, or parked on an approval; the click ends it with a cancelled Ack,
and the row is gone once the run is over.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from fakes.openai_server import Slow
from chaz_nb.core.entries import EntryType as T
from chaz_nb.engine.backends import LiteLLMBackend
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.notebook.views.session import SessionView
from chaz_nb.notebook.views.stop_button import StopButton
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent
from waiting import until
from view_text import rows


@tool(approval="always", risk="high")
def deploy(target: str) -> str:
    """Deploy to a target."""
    return f"deployed {target}"


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-stop-button")


def live_view(server: Server, session_id: int) -> SessionView:
    """The view a ``%chaz @NAME`` cell shows (magics/turns.py: open_view), on this loop."""
    return SessionView(server.store, session_id, status=server.session_status, follow=True,
                       approvals=server, streams=server.subscribe_stream, stop=server.request_stop)


async def click_and_wait_for_the_end(server: Server, view: SessionView, session_id: int):
    button = view.stop_button
    await until(lambda: button.visible, view.on_update, what="the Stop row of the running session")
    assert button.visible and not button.disabled
    assert view.widget.chaz_state["stop"]["shown"]  # the page's Stop row is drawn
    view.frontend_event("stop")  # the page's Stop button (model.send), handled as the widget's comm does
    assert button.disabled  # one click is one stop request
    await until(lambda: not view.following and server.session_status(session_id) == "idle",
                server.store.subscribe, view.on_update, what="the stopped run's end")
    return button


async def test_clicking_stop_ends_a_run_waiting_on_a_slow_model_call(store, model_server):
    model_server.script(Slow(600))
    server = Server(store, [Agent("w", model="openai/w-model", api_base=model_server.openai_base)],
                    backend=LiteLLMBackend(backoff=0.01))
    s = server.current_session("w")
    view = live_view(server, s)
    handle = await server.send(s, "think hard")
    await asyncio.to_thread(model_server.wait_for_requests, 1, 120)

    button = await click_and_wait_for_the_end(server, view, s)

    [stopped] = button.stopped
    ack, closing = store.entries(s, types=[T.ACK])
    assert (stopped.session_id, stopped.run_id, stopped.was) == (s, ack.id, "running")
    assert closing.payload["status"] == "cancelled" and closing.payload["stopped_by"] == "user"
    assert await handle.wait() is None
    assert not button.visible and button.disabled  # the run is over: no Stop row
    assert rows(view.text())[-1] == "■ w was stopped by user"  # not "w is working…"
    assert "Stop" not in view.html()  # the static form has no button


async def test_clicking_stop_ends_a_run_parked_on_an_approval(store):
    agent = Agent("ops", model="chaz/script", tools=["deploy"],
                  script=[{"tool": "deploy", "args": {"target": "prod"}}, "shipped: {result}"])
    server = Server(store, [agent], ToolRegistry([deploy]))
    s = server.current_session("ops")
    view = live_view(server, s)
    await server.send(s, "ship it")
    await until(lambda: server.session_status(s) == "parked", store.subscribe, what="the approval")
    await until(lambda: view.transcript.open_requests(), view.on_update, what="the view showing the parked run")

    button = await click_and_wait_for_the_end(server, view, s)

    assert button.stopped[0].was == "parked"
    assert store.entries(s, types=[T.ACK])[-1].payload["status"] == "cancelled"
    [(decision,)] = store.execute("SELECT decision FROM approvals WHERE session_id = ?", [s])
    assert decision == "timed_out" and server.pending_approvals() == []
    assert not store.entries(s, types=[T.MESSAGE], after_seq=1)  # the tool never ran, no reply


def test_a_click_when_nothing_runs_says_so_and_a_failing_stop_is_one_line():
    calls = []

    def nothing(session_id, by):
        calls.append((session_id, by))
        return []

    button = StopButton(nothing, 7)
    button.show(True)
    button.click()
    assert calls == [(7, "user")] and "nothing was running" in button.note

    def broken(session_id, by):
        raise RuntimeError("no session 7 <b>")

    failing = StopButton(broken, 7)
    failing.click()  # never raises into the widget's comm
    assert "could not stop: no session 7 &lt;b&gt;" in failing.note
    assert not failing.disabled  # the person may try again
    button.close()
    failing.close()


def test_a_waiting_cells_stop_row_says_when_a_click_acts_until_a_frontend_says_hello():
    from chaz_nb.notebook.views import stop_button as sb

    button = StopButton(lambda sid, by: [], 7)
    try:
        assert "chaz-stop-session-7" in button.classes  # the lab extension reads it
        assert button.state()["session"] == 7  # session.js puts it in the button's class
        assert button.note == "" and "wait" not in button.tip
        button.set_waiting(True)
        assert "Stop acts when this cell stops waiting" in button.note
        assert "when the cell's wait ends" in button.tip
        sb.set_control_delivery(True)  # chaz_stop_hello: clicks act during the wait
        assert button.note == "" and "wait" not in button.tip
        sb.set_control_delivery(False)
        button.set_waiting(False, interrupted=True)
        assert "stopped waiting: the run goes on" in button.note
        assert sb.live_buttons(7) == [button]
    finally:
        sb.set_control_delivery(False)
        button.close()
    assert sb.live_buttons(7) == []


async def test_a_click_delivered_on_another_thread_stops_on_the_kernel_loop():
    loop = asyncio.get_running_loop()
    seen: list[int] = []
    done = asyncio.Event()

    def stop(session_id, by):
        seen.append(threading.get_ident())
        loop.call_soon(done.set)
        return []

    button = StopButton(stop, 3, loop=loop)
    try:
        await asyncio.to_thread(button._clicked)  # a comm message handled on a kernel subshell
        await asyncio.wait_for(done.wait(), 10)
        assert seen == [threading.get_ident()]
    finally:
        button.close()
