"""One durable commit in front of a turn's model call (issue 32 §3), guarantees kept.

A timeline of the statements that write (each one a durable commit on DuckDB, which runs in
autocommit) from the moment a ``%chaz @a hi`` cell starts to the moment the model is called:
the trigger's commit is the only one. The run's Ack and its budget row commit (in one
transaction) while the call is in flight. The trigger is committed before the call, the reply before the cell returns, a
ToolCall before its tool acts.
"""

from __future__ import annotations

import asyncio

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.engine.backends import ModelReply, ToolCallRequest
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent

from ipython_harness import ip

WRITES = ("INSERT", "UPDATE", "DELETE", "COMMIT", "CREATE", "DROP", "ALTER")


class Timeline:
    """A DuckDB connection that records each commit: a statement that writes (autocommit: one
    commit each), or the statements of a transaction, joined by " + ", at its ``COMMIT``."""

    def __init__(self, con) -> None:
        self.con = con
        self.commits: list[str] = []
        self.marks: list[tuple[str, int]] = []
        self.open: list[str] | None = None  # the statements of the transaction under way

    def execute(self, query, *args, **kwargs):
        text = query.strip()
        if text.upper().startswith("BEGIN TRANSACTION;"):
            self.open, text = [], text.split(";", 1)[1].strip()
        elif text.upper().startswith("BEGIN"):
            self.open, text = [], ""
        if text.upper() == "COMMIT" and self.open is not None:
            self.commits.append(" + ".join(self.open))
            self.open = None
        elif text.upper().startswith(WRITES):
            what = " ".join(text.split()[:3])
            if self.open is not None:
                self.open.append(what)
            else:
                self.commits.append(what)
        return self.con.execute(query, *args, **kwargs)

    def mark(self, what: str) -> None:
        self.marks.append((what, len(self.commits)))

    def __getattr__(self, name):
        return getattr(self.con, name)


class Recording:
    """A model that records the commits made before each call, and what the log held then."""

    def __init__(self, timeline: Timeline, store, steps: list[ModelReply]) -> None:
        self.timeline, self.store, self.steps = timeline, store, list(steps)
        self.before_calls: list[list[str]] = []
        self.logged_at_call: list[list[str]] = []

    async def complete(self, model, messages, tools=None, *, script=None, options=None):
        self.before_calls.append(list(self.timeline.commits))
        self.logged_at_call.append([r[0] for r in self.store.read("SELECT entry_type FROM entries ORDER BY id")])
        await asyncio.sleep(0)  # (the request is on the wire: the loop runs)
        return self.steps.pop(0) if self.steps else ModelReply("done")


def test_a_cells_turn_commits_once_before_the_model_call(chaz):
    store = chaz.store
    ip.run_line_magic("chaz", "@assistant warm up")  # the session exists: a later turn's path
    timeline = Timeline(store._con)
    model = Recording(timeline, store, [ModelReply("hello back")])
    chaz.port.backend = model
    store._con = timeline
    try:
        ip.run_line_magic("chaz", "@assistant hi")
    finally:
        store._con = timeline.con
    [before] = model.before_calls
    assert before == ["INSERT INTO entries"]  # the trigger, nothing else: no Ack, no budget row
    assert model.logged_at_call[0][-1] == "Message"  # the trigger is committed when the model is called
    # the Ack and the budget row commit while the call is in flight (one transaction, issue 30);
    # the reply before the cell returns
    assert timeline.commits[1:] == ["INSERT INTO run_budgets + INSERT INTO entries", "INSERT INTO entries"]
    session = chaz.current_session("assistant")
    assert [e.entry_type for e in store.entries(session)][-3:] == [T.MESSAGE, T.ACK, T.MESSAGE]
    assert store.entries(session)[-1].content == "hello back"
    [[calls]] = store.read("SELECT model_calls FROM run_budgets WHERE id = ?",
                           [f"entry:{store.entries(session)[-3].id}"])
    assert calls == 1  # the first call is counted in the row written with the Ack


async def test_a_toolcall_is_committed_before_its_tool_acts_and_the_budget_before_the_second_call(store):
    timeline = Timeline(store._con)
    acted_after: list[list[str]] = []

    @tool
    def look(q: str) -> str:
        """Look."""
        acted_after.append([r[0] for r in store.read("SELECT entry_type FROM entries ORDER BY id")])
        return "seen"

    model = Recording(timeline, store, [ModelReply("", [ToolCallRequest("c1", "look", '{"q": "x"}')]),
                                        ModelReply("found it")])
    server = Server(store, [Agent("a", tools=["look"])], ToolRegistry([look]), backend=model)
    session = server.new_session("a")
    store._con = timeline
    try:
        reply = await (await server.send(session, "go")).wait()
    finally:
        store._con = timeline.con
    assert reply is not None and reply.content == "found it"
    first, second = model.before_calls
    assert first == ["INSERT INTO entries"]
    # the row (with the Ack) and the second call's charge are committed before that call is made
    assert "INSERT INTO run_budgets + INSERT INTO entries" in second and second[-1] == "UPDATE run_budgets SET"
    assert acted_after == [["Message", "Ack", "ToolCall"]]
    [[calls]] = store.read("SELECT model_calls FROM run_budgets")
    assert calls == 2


@pytest.mark.parametrize("how", ["post", "send"])
async def test_post_and_send_return_the_run_when_on_write_is_deferred(store, how):
    """A trigger written from inside an on_write callback: its own callbacks run only after
    that one returns, yet the writer gets its run's handle (the engine starts it from the
    committed entry, not from its callback having run)."""
    server = Server(store, [Agent("a", model="chaz/echo")])
    session = server.new_session("a")
    other = server.new_session("a")
    handles: list = []
    tasks: list = []

    def on_write(entry) -> None:
        if entry.session_id == other and not handles and not tasks:
            if how == "post":
                handles.append(server.post(session, T.MESSAGE, "from a callback"))
            else:
                tasks.append(asyncio.ensure_future(server.send(session, "from a callback")))

    store.subscribe(on_write)
    store.append(other, T.MESSAGE, "a", "note")  # (an agent's Message: no run)
    if tasks:
        handles.append(await tasks[0])
    [handle] = handles
    assert handle is not None
    reply = await asyncio.wait_for(handle.wait(), 30)
    assert reply is not None and reply.content == "echo: from a callback"
    await server.wait_idle(30)
    acks = [e for e in store.entries(session) if e.entry_type is T.ACK]
    assert len(acks) == 1  # one run: the deferred callback does not start a second


@pytest.mark.parametrize("stream", [False, True])
async def test_the_ack_commits_while_a_litellm_request_is_on_the_wire(store, monkeypatch, stream):
    """Through litellm's real OpenAI provider: the Ack is committed once the request has left
    (litellm's pre-call hook, then the loop idle), not at its window and not with the reply. The
    model server answers only once it has seen the Ack committed (the window is an hour here)."""
    import threading

    from fakes.openai_server import FakeModelServer, Reply

    from chaz_nb.server import run

    monkeypatch.setattr(run, "ACK_WINDOW", 3600.0)
    ack_committed = threading.Event()
    store.subscribe(lambda e: e.entry_type is T.ACK and ack_committed.set())

    class Gated(FakeModelServer):
        seen: list[bool] = []

        def _next(self, model):
            self.seen.append(ack_committed.wait(10))  # (a thread of the server: the loop runs on)
            return Reply("on the wire")

    model = Gated()
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
        server = Server(store, [Agent("a", model="openai/fake", api_base=model.openai_base, stream=stream)])
        session = server.new_session("a")
        reply = await asyncio.wait_for((await server.send(session, "hi")).wait(), 60)
    finally:
        model.close()
    assert Gated.seen == [True]
    assert reply is not None and reply.content == "on the wire"
    assert [e.entry_type for e in store.entries(session)] == [T.MESSAGE, T.ACK, T.MESSAGE]


@pytest.mark.parametrize("stream", [False, True])
def test_a_turns_view_opens_once_its_model_request_is_on_the_wire(chaz, monkeypatch, stream):
    """A real litellm request: the cell's view is not displayed in front of the request (its
    open cost the turn ~3 ms of the loop and the GIL, which litellm's request preparation on
    its worker thread shares) but once litellm has handed the request to its HTTP client, while
    it is on the wire: the model server answers only once the view is on screen, live."""
    import threading

    from fakes.openai_server import FakeModelServer, Reply

    from chaz_nb.engine import backends
    from chaz_nb.engine.worker import WorkerBackend
    from chaz_nb.notebook.views import base
    from chaz_nb.notebook.views.display import WIDGET_MIME, StaticFallbackView

    monkeypatch.setattr(base, "DISPLAY_CAP", 3600.0, raising=False)  # (a first streamed call loads a tokenizer)
    left, shown = threading.Event(), threading.Event()
    on_leaving = backends._on_leaving

    def leaving_seen(leaving):
        def both() -> None:
            left.set()
            leaving()

        return on_leaving(both)

    monkeypatch.setattr(backends, "_on_leaving", leaving_seen)  # (litellm in this process)
    # the notebook's default: litellm in the model worker, which says "leaving" over its socket
    dispatch = WorkerBackend._dispatch

    def dispatch_seen(self, process, message):
        if message.get("op") == "leaving":
            left.set()
        return dispatch(self, process, message)

    monkeypatch.setattr(WorkerBackend, "_dispatch", dispatch_seen)
    bundles: list[tuple[bool, dict]] = []
    display = StaticFallbackView.display

    def recording(view):
        bundles.append((left.is_set(), view.bundle()))
        shown.set()
        return display(view)

    monkeypatch.setattr(StaticFallbackView, "display", recording)

    class Gated(FakeModelServer):
        def _next(self, model):
            assert shown.wait(10)  # (a thread of the server: the kernel loop runs on)
            return Reply("on the wire")

    model = Gated()
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
        flag = "" if stream else " --no-stream"
        ip.run_line_magic("chaz", f"agent a --model openai/fake --api-base {model.openai_base}{flag}")
        ip.run_line_magic("chaz", "@a hello")
    finally:
        model.close()
    # displayed once, after the request left, while the run went on: the live widget with it
    [(request_left, bundle)] = bundles
    assert request_left and WIDGET_MIME in bundle
    session = chaz.current_session("a")
    assert [e.entry_type for e in chaz.store.entries(session)] == [T.MESSAGE, T.ACK, T.MESSAGE]
    assert chaz.store.entries(session)[-1].content == "on the wire"


def test_a_turn_over_before_its_view_opened_shows_the_static_output_once(chaz, monkeypatch):
    """An offline model sends no HTTP request: a run over at once ends the cell with its static
    output displayed once, and no widget opened for it."""
    from chaz_nb.notebook.views import base
    from chaz_nb.notebook.views.display import WIDGET_MIME, StaticFallbackView

    monkeypatch.setattr(base, "DISPLAY_CAP", 3600.0)  # (the run is over long before)
    bundles: list[dict] = []
    display = StaticFallbackView.display
    monkeypatch.setattr(StaticFallbackView, "display", lambda view: (bundles.append(view.bundle()), display(view))[1])
    ip.run_line_magic("chaz", "agent e --model chaz/echo")
    ip.run_line_magic("chaz", "@e hi")
    [bundle] = bundles
    assert "echo: hi" in bundle["text/plain"] and WIDGET_MIME not in bundle
