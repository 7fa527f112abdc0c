"""A part from outside the package: registered with Server.add_part, built on Server.port."""

from __future__ import annotations

from chaz_nb import Agent, Server
from chaz_nb.core.entries import Entry, EntryType
from chaz_nb.server.ports import Part, ServerPort

from waiting import until


class Tally(Part):
    """Counts the person's Messages per session and notes each run it saw end."""

    name = "tally"

    def __init__(self, port: ServerPort) -> None:
        self.port = port
        self.messages: dict[int, int] = {}
        self.finished: list[tuple[int, str]] = []

    def on_write(self, entry: Entry) -> None:
        if entry.entry_type is EntryType.MESSAGE and entry.sender == "user":
            self.messages[entry.session_id] = self.messages.get(entry.session_id, 0) + 1

    async def after_run(self, session_id: int, agent: Agent) -> None:
        self.finished.append((session_id, agent.name))


async def test_a_part_added_from_outside_gets_the_port_and_every_hook(store):
    server = Server(store, [Agent("assistant")])
    tally = server.add_part(Tally(server.port))
    assert server.port.part("tally") is tally  # found by name through the port, like the built-ins
    assert tally.port.store is store
    sid = server.current_session("assistant")
    reply = await (await server.send(sid, "hello")).wait()
    assert reply.content == "echo: hello"
    assert tally.messages == {sid: 1}
    await until(lambda: tally.finished == [(sid, "assistant")], store.subscribe, what="after_run")
    await server.stop()
    store.append(sid, EntryType.MESSAGE, "user", "after stop")
    assert tally.messages == {sid: 1}  # stop() unsubscribes the added part too


class Briefing(Part):
    """Builds every run's context itself: a fixed system note, then the person's last Message."""

    name = "briefing"

    def __init__(self, port: ServerPort) -> None:
        self.port = port

    async def run_messages(self, session_id: int, agent: Agent, invocation=None):
        last = self.port.store.latest(session_id)
        return [{"role": "system", "content": "briefed"}, {"role": "user", "content": f"briefed: {last.content}"}]


async def test_a_part_added_from_outside_builds_the_runs_context_over_the_built_in_one(store):
    server = Server(store, [Agent("assistant")])
    server.add_part(Briefing(server.port))
    sid = server.current_session("assistant")
    reply = await (await server.send(sid, "hello")).wait()
    assert reply.content == "echo: briefed: hello"  # the echo model answered the part's context
    await server.stop()
