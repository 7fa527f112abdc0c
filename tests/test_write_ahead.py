"""The log is write-ahead: a tool runs only once its ToolCall is committed (issue 24, section 3).

A tool that reads the store when it starts (through another cursor / the reader connection,
so only committed rows count) finds its own ToolCall there, and its siblings' of the same
step (one commit). A store that refuses the ToolCall means the tool never runs: the run ends
with an Error that says why. A process killed inside a tool leaves the tool's ToolCall in the
log. The Ack and the tool events written behind are hurried by the tool, not waited out.
"""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.core.store import SessionStore
from chaz_nb.engine.backends import ModelReply, ToolCallRequest
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent

HELPER = Path(__file__).parent / "helpers" / "dies_in_tool.py"


@pytest.fixture
def store(backend_store):
    return backend_store


class ParallelModel:
    """Each model call takes the next step: a list of arguments is one call of ``tool`` per
    argument (ids c0, c1, ... in the step), a string the answer; "done" once they run out."""

    def __init__(self, tool_name: str, *steps: list[dict] | str) -> None:
        self.tool_name, self.steps = tool_name, list(steps)

    async def complete(self, model, messages, tools=None, *, script=None, options=None):
        step = self.steps.pop(0) if self.steps else "done"
        if isinstance(step, str):
            return ModelReply(step)
        return ModelReply("", [ToolCallRequest(f"c{i}", self.tool_name, json.dumps(a)) for i, a in enumerate(step)])


def committed_calls(store) -> list[str]:
    """The ToolCall ids committed in ``store``, read as another connection would."""
    return sorted(r[0] for r in store.read("SELECT tool_call_id FROM entries WHERE entry_type = 'ToolCall'"))


async def test_a_tool_starts_only_once_its_toolcall_and_its_siblings_are_committed(store):
    seen: dict[int, list[str]] = {}

    @tool
    async def probe(n: int) -> str:
        """Reads the log as it starts."""
        seen[n] = committed_calls(store)
        return "ok"

    server = Server(store, [Agent("a", tools=["probe"])], ToolRegistry([probe]),
                    backend=ParallelModel("probe", [{"n": 0}, {"n": 1}, {"n": 2}]))
    reply = await asyncio.wait_for((await server.send(server.new_session("a"), "go")).wait(), 30)
    assert reply is not None and reply.content == "done"
    assert seen == {n: ["c0", "c1", "c2"] for n in range(3)}  # the whole step, before any tool
    calls = [e for e in store.entries(reply.session_id) if e.entry_type is T.TOOL_CALL]
    assert [e.tool_call_id for e in calls] == ["c0", "c1", "c2"]


async def test_a_sync_tool_in_its_thread_finds_its_toolcall_committed(store):
    seen: list[list[str]] = []

    @tool
    def probe(n: int) -> str:
        """Reads the log from its worker thread."""
        seen.append([e.tool_call_id for e in store.entries(session) if e.entry_type is T.TOOL_CALL])
        return "ok"

    server = Server(store, [Agent("a", tools=["probe"])], ToolRegistry([probe]),
                    backend=ParallelModel("probe", [{"n": 0}]))
    session = server.new_session("a")
    await asyncio.wait_for((await server.send(session, "go")).wait(), 30)
    assert seen == [["c0"]]


async def test_a_toolcall_the_store_refuses_means_the_tool_never_runs_and_the_run_says_why(store):
    ran: list[str] = []

    @tool
    async def deploy(target: str) -> str:
        """Has an effect."""
        ran.append(target)
        return "deployed"

    plain = store.redact

    def refusing(text: str) -> str:
        if "refuse-me" in text:
            raise ValueError("this text cannot be stored")
        return plain(text)

    store.redact = refusing
    server = Server(store, [Agent("a", tools=["deploy"])], ToolRegistry([deploy]), backend=ParallelModel(
        "deploy", [{"target": "prod"}, {"target": "refuse-me"}], [{"target": "staging"}], "done"))
    session = server.new_session("a")
    outcome = await asyncio.wait_for((await server.send(session, "go")).wait(), 30)
    assert ran == []  # neither call of the step ran: they are committed together or not at all
    assert outcome is not None and outcome.entry_type is T.ERROR
    assert "not run" in outcome.content and "this text cannot be stored" in outcome.content
    assert "deploy" in outcome.content
    assert outcome.payload["run_id"] is not None and outcome.payload["tool_call_ids"] == ["c0", "c1"]
    types = [e.entry_type for e in store.entries(session)]
    assert types == [T.MESSAGE, T.ACK, T.ERROR]  # no ToolCall, no ToolResult, one closing Error
    assert store.read("SELECT status FROM runs") == [("error",)]
    store.redact = plain  # the session is not stuck: the next message is answered
    reply = await asyncio.wait_for((await server.send(session, "again")).wait(), 30)
    assert reply.content == "done" and ran == ["staging"]


async def test_a_tool_hurries_the_ack_and_its_toolcall_rather_than_waiting_out_their_windows(store, monkeypatch):
    """The Ack (written behind) and the event writer's gathering window are both cut short by
    a tool that waits on them: with hour-long windows the run still ends at once."""
    from chaz_nb.core import writer
    from chaz_nb.server import events

    monkeypatch.setattr(events, "EVENT_COMMIT_WINDOW", 3600)
    write_behind = type(store).write_behind
    monkeypatch.setattr(type(store), "write_behind", lambda self, items, window=3600: write_behind(self, items, window))
    assert writer.COMMIT_WINDOW < 1

    @tool
    async def probe() -> str:
        """Does nothing."""
        return "ok"

    server = Server(store, [Agent("a", tools=["probe"])], ToolRegistry([probe]),
                    backend=ParallelModel("probe", [{}]))
    session = server.new_session("a")
    reply = await asyncio.wait_for((await server.send(session, "go")).wait(), 10)
    assert reply.content == "done"
    assert [e.entry_type for e in store.entries(session)] == [T.MESSAGE, T.ACK, T.TOOL_CALL, T.TOOL_RESULT, T.MESSAGE]


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_a_process_killed_inside_a_tool_leaves_its_toolcall_in_the_log(kind, tmp_path, request):
    """The tool's side effect (a file) happens, then the process dies at once: the log must
    show the call that had the effect."""
    target = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "s.duckdb")
    effect = tmp_path / "effect.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), *sys.path])}
    proc = subprocess.run([sys.executable, str(HELPER), target, str(effect)], env=env, timeout=120,
                          capture_output=True, text=True)
    assert proc.returncode == 17, proc.stderr  # it died in the tool, as planned
    assert effect.read_text() == "done"  # the tool's effect happened
    store = SessionStore.open(target)
    try:
        calls = store.read("SELECT tool_name, tool_call_id FROM entries WHERE entry_type = 'ToolCall'")
        assert calls == [("touch", "c0")]
    finally:
        store.close()
