"""The session view shows a reply as it is streamed (notebook/views/session.py): throttled,
escaped, in the widget, the static HTML/text and the session JSON, and replaced by the
reply's entry when it lands."""

from __future__ import annotations

import asyncio

import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.notebook.views.session import MIME_TYPE, SessionView
from chaz_nb.server.streams import StreamHub
from waiting import until

EVIL = "<script>alert('x')</script>"


class FakeClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock the test moves: timers fire when the test says time passed."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.run_until_complete(asyncio.sleep(0))  # run whatever is due now


@pytest.fixture
def clock_loop():
    loop = FakeClockLoop()
    yield loop
    loop.close()


def running(_session_id: int) -> str:
    return "running"


def live_view(store, hub, loop, session_id):
    return SessionView(store, session_id, status=running, loop=loop, follow=True, streams=hub.subscribe)


def test_a_200_delta_stream_makes_at_most_one_widget_update_per_interval(store, clock_loop):
    sid = store.create_session("calc")
    hub = StreamHub()
    view = live_view(store, hub, clock_loop, sid)
    ack = store.append(sid, EntryType.ACK, "calc", "calc is working")
    for i in range(200):  # 200 deltas over 1 s of the view's clock
        hub.delta(sid, ack.id, f"w{i} ")
        clock_loop.advance(0.005)
    clock_loop.advance(view.interval)
    assert view.stats.stream_events == 200
    assert view.transcript.partial[2] == "".join(f"w{i} " for i in range(200))
    assert 5 <= view.stats.stream_updates <= 1.0 / view.interval + 2, view.stats  # ~10/s, not 200
    assert view.stats.flushes <= 1.0 / view.interval + 3
    view.close()


def test_streamed_text_is_escaped_in_the_widget_and_the_static_output(store):
    async def scenario():
        sid = store.create_session("calc")
        hub = StreamHub()
        view = live_view(store, hub, asyncio.get_running_loop(), sid)
        ack = store.append(sid, EntryType.ACK, "calc", "calc is working")
        hub.delta(sid, ack.id, "look: ")
        hub.delta(sid, ack.id, EVIL)
        await until(lambda: view.transcript.partial is not None, view.on_update, what="the partial reply")
        assert EVIL not in view.live.state["tail"] and "&lt;script&gt;" in view.live.state["tail"]
        assert EVIL not in view.html() and "look: &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in view.html()
        assert f"calc: look: {EVIL} …" in view.text()  # plain text is not HTML
        assert view.bundle()[MIME_TYPE]["stream"] == {"run_id": ack.id, "sender": "calc", "text": "look: " + EVIL}
        view.close()

    asyncio.run(scenario())


def test_the_reply_entry_replaces_the_partial_block(store):
    async def scenario():
        sid = store.create_session("calc")
        hub = StreamHub()
        view = live_view(store, hub, asyncio.get_running_loop(), sid)
        ack = store.append(sid, EntryType.ACK, "calc", "calc is working")
        hub.delta(sid, ack.id, "half a rep")
        await until(lambda: view.transcript.partial is not None, view.on_update, what="the partial reply")
        store.append(sid, EntryType.MESSAGE, "calc", "half a reply, whole now", payload={"run_id": ack.id})
        hub.clear(sid, ack.id)
        await until(lambda: view.transcript.rows, view.on_update, what="the reply row")
        assert view.transcript.partial is None and "stream" not in view.bundle()[MIME_TYPE]
        assert "half a rep<" not in view.html() and "half a reply, whole now" in view.html()
        assert "chaz-partial" not in view.live.state["tail"]
        view.close()
        assert not hub._listeners[sid]  # the view stopped following the stream too

    asyncio.run(scenario())


def test_a_stopped_stream_ends_in_a_stopped_row_that_keeps_the_text_so_far(store):
    async def scenario():
        sid = store.create_session("calc")
        hub = StreamHub()
        view = live_view(store, hub, asyncio.get_running_loop(), sid)
        ack = store.append(sid, EntryType.ACK, "calc", "calc is working")
        hub.delta(sid, ack.id, "half a " + EVIL)
        await until(lambda: view.transcript.partial is not None, view.on_update, what="the partial reply")
        store.append(sid, EntryType.ACK, "calc", "calc was stopped by user",
                     payload={"run_id": ack.id, "status": "cancelled", "partial_text": "half a " + EVIL})
        hub.clear(sid, ack.id)
        await until(lambda: view.transcript.rows, view.on_update, what="the stopped row")
        assert view.transcript.status is None and view.transcript.partial is None
        assert view.text().splitlines()[-1] == f"#2 ■ calc was stopped by user · it had written: half a {EVIL}"
        assert "working" not in view.text()  # the run is over: no "calc is working…" line
        assert EVIL not in view.html() and "it had written: half a &lt;script&gt;" in view.html()
        view.close()

    asyncio.run(scenario())


def test_a_silent_turn_ends_the_working_line(store):
    sid = store.create_session("calc")
    ack = store.append(sid, EntryType.ACK, "calc", "calc is working")
    store.append(sid, EntryType.ACK, "calc", "calc finished without a reply",
                 payload={"run_id": ack.id, "status": "silent"})
    view = SessionView(store, sid)
    assert view.text().splitlines()[1:] == ["#2 — calc finished without a reply"]


def test_a_200_delta_stream_updates_the_static_output_at_most_four_times_a_second(store, clock_loop, monkeypatch):
    # the display_id fallback (and the session JSON the JupyterLab renderer draws) is throttled
    # on its own, slower interval: the views read time.monotonic, here the loop's fake clock
    import types

    import IPython.display

    from chaz_nb.notebook.views import display as display_module
    from chaz_nb.notebook.views import session as session_module

    fake_time = types.SimpleNamespace(monotonic=clock_loop.time)
    monkeypatch.setattr(session_module, "time", fake_time)
    monkeypatch.setattr(display_module, "time", fake_time)
    shown: list[dict] = []
    monkeypatch.setattr(IPython.display, "display", lambda data, **kw: shown.append(data))
    monkeypatch.setattr(IPython.display, "update_display", lambda data, **kw: shown.append(data))
    sid = store.create_session("calc")
    hub = StreamHub()
    view = live_view(store, hub, clock_loop, sid)
    view.display()
    ack = store.append(sid, EntryType.ACK, "calc", "calc is working")
    for i in range(200):  # 200 deltas over 1 s of the view's clock
        hub.delta(sid, ack.id, f"w{i} ")
        clock_loop.advance(0.005)
    clock_loop.advance(view.interval)

    streamed = [d[MIME_TYPE]["stream"]["text"] for d in shown if "stream" in d[MIME_TYPE]]
    assert 2 <= len(streamed) <= 1.0 / view.stream_static_interval + 1, len(streamed)  # ~4/s, not 200
    assert [len(t) for t in streamed] == sorted(len(t) for t in streamed)  # growing
    assert view.stats.stream_events == 200
    view.close()


def test_a_key_in_streamed_text_is_masked_in_the_widget_the_static_output_and_the_session_json(store):
    """The reply's Message is redacted when it is written; the text streamed before it is shown
    (and kept in the notebook's output if the kernel dies mid-reply) with the same masking."""
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0"

    async def scenario():
        sid = store.create_session("calc")
        hub = StreamHub()
        view = live_view(store, hub, asyncio.get_running_loop(), sid)
        ack = store.append(sid, EntryType.ACK, "calc", "calc is working")
        hub.delta(sid, ack.id, "the key is sk-proj-")
        hub.delta(sid, ack.id, key[len("sk-proj-"):] + " ok")
        await until(lambda: view.transcript.partial is not None, view.on_update, what="the partial reply")
        shown = [view.live.state["tail"], view.html(), view.text(), str(view.bundle()[MIME_TYPE]["stream"])]
        for out in shown:
            assert key not in out and "[REDACTED]" in out, out
        view.close()

    asyncio.run(scenario())


def test_a_500_delta_stream_sends_the_open_widget_at_most_20_updates_a_second(store, clock_loop):
    """Issue 32: whatever the token rate, a view's widget is sent at most ~20 updates a second,
    each one message with the partial reply (the tail), not the rows."""
    sid = store.create_session("calc")
    hub = StreamHub()
    view = live_view(store, hub, clock_loop, sid)
    sent: list[dict] = []
    view.widget.send = sent.append  # the page's widget is open; record what goes on its comm
    ack = store.append(sid, EntryType.ACK, "calc", "calc is working")
    for i in range(500):  # 500 deltas over 1 s of the view's clock
        hub.delta(sid, ack.id, f"t{i} ")
        clock_loop.advance(0.002)
    clock_loop.advance(view.interval)
    assert view.stats.stream_events == 500
    assert 5 <= len(sent) <= 20 + 2, len(sent)  # ~10 a second (interval 0.1 s), never one per delta
    assert sum("tail" in m for m in sent) >= 5 and "t499 " in sent[-1]["tail"]
    assert all(len(m.get("rows", {}).get("set", {})) <= 1 for m in sent)  # the Ack's row once, not the list
    view.close()
