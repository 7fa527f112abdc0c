"""Approved agent code becomes notebook cells (issue 44 §1): the server tells its subscribers of
each approved ``kernel__run`` that ran, with the code as logged, the outputs it produced and who
wrote and approved it; ``approved_code`` reads the same back from the log (on DuckDB and on
PostgreSQL); the kernel's switch and an agent's own turn it off."""

from __future__ import annotations

import hashlib
import json

import pytest

from chaz_nb.server import Server
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent

from waiting import until

FIRST = "import math\ntotal = sum(range(5))\nprint('built', total)\ntotal * 2"
SECOND = "total = total + 1"
EDITED = "total = total + 100"


@pytest.fixture
def store(backend_store):
    return backend_store


def make(store, **kw):
    agent = Agent("coder", model="chaz/script", tools=list(SAFE_DEFAULT_TOOLS), script=[
        {"tool": "kernel__run", "args": {"code": FIRST}},
        {"tool": "kernel__run", "args": {"code": SECOND}},
        "done: {result}"], **kw)
    server = Server(store, [agent])
    ns: dict = {}
    server.add_kernel(ns)
    return server, ns


async def approve_next(server, arguments=None):
    await until(lambda: server.pending_approvals(), server.store.subscribe, what="a pending approval")
    [request] = server.pending_approvals()
    ok, message = server.decide(request["request_id"], "approve", arguments=arguments)
    assert ok, message


def sha(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


async def test_an_approved_and_an_edited_run_are_told_as_cells_and_read_back_from_the_log(store):
    server, ns = make(store)
    told = []
    server.subscribe_cells(told.append)
    handle = await server.send(server.current_session("coder"), "go",
                               payload={"origin": {"cell_id": "cell-abc", "via": None}})
    await approve_next(server)
    await approve_next(server, {"code": EDITED})
    await handle.wait()
    await until(lambda: len(told) == 2, server.store.subscribe, what="two cells")
    assert ns["total"] == 110
    first, second = told
    assert first.code == FIRST and second.code == EDITED
    assert first.cell_id == second.cell_id == "cell-abc"
    assert first.metadata() == {"session": handle.session_id, "tool_call": first.tool_call, "agent": "coder",
                                "model": "chaz/script", "approved_by": "user", "edited": False,
                                "code_sha256": sha(FIRST)}
    assert second.metadata()["edited"] is True and second.metadata()["code_sha256"] == sha(EDITED)
    # the outputs as produced: the print, and the last expression's value
    assert first.outputs == [
        {"output_type": "stream", "name": "stdout", "text": "built 10\n"},
        {"output_type": "execute_result", "execution_count": None, "data": {"text/plain": "20"}, "metadata": {}}]
    assert second.outputs == []
    # a person reads the first line
    assert first.source().splitlines()[0] == (
        f"# chaz: written by @coder (chaz/script), approved by you — session {handle.session_id}, "
        f"call {first.tool_call}")
    assert second.source().splitlines()[0].startswith("# chaz: written by @coder (chaz/script), edited and approved")
    # the log gives the same cells (no outputs: the log keeps what the agent read)
    logged = server.approved_code(handle.session_id)
    assert [(c.code, c.metadata()) for c in logged] == [(c.code, c.metadata()) for c in told]
    # Run All of the cells in a fresh namespace makes the same variable
    fresh: dict = {}
    for cell in logged:
        exec(cell.source(), fresh)  # noqa: S102 - the test runs what a person would
    assert fresh["total"] == ns["total"]


async def test_denied_failed_and_switched_off_runs_are_no_cells(store):
    server, ns = make(store)
    told = []
    server.subscribe_cells(told.append)
    server.cells_enabled = False
    handle = await server.send(server.current_session("coder"), "go")
    await approve_next(server)  # off for the kernel: not told, but in the log
    await until(lambda: server.pending_approvals(), server.store.subscribe, what="the second call")
    [request] = server.pending_approvals()
    assert server.decide(request["request_id"], "deny")[0]
    await handle.wait()
    assert told == []
    assert [c.code for c in server.approved_code(handle.session_id)] == [FIRST]  # the denied one is none

    # an agent's own switch
    server.cells_enabled = True
    server.define_agent(Agent("quiet", model="chaz/script", tools=list(SAFE_DEFAULT_TOOLS), cells=False, script=[
        {"tool": "kernel__run", "args": {"code": "q = 1"}}, {"tool": "kernel__run", "args": {"code": "1/0"}},
        "done"]))
    handle = await server.send(server.current_session("quiet"), "go")
    await approve_next(server)
    await approve_next(server)  # raises: no cell (Run All would stop on it)
    await handle.wait()
    assert told == [] and ns["q"] == 1
    assert [c.code for c in server.approved_code(handle.session_id)] == ["q = 1"]


def test_an_unknown_session_is_the_stores_error(store):
    from chaz_nb.errors import StoreError

    server, _ = make(store)
    with pytest.raises(StoreError):
        server.approved_code(999)


async def test_a_secret_stays_masked_in_the_cell_and_its_outputs(store, monkeypatch):
    """The cell holds the code as the card showed it (a kernel-held key's literal masked) and its
    outputs masked: the key reaches neither."""
    secret = "sk-test-abcdefghijklmnopqrstuvwx0123"
    monkeypatch.setenv("SHOP_API_KEY", secret)
    code = f'key = "{secret}"\nprint("using", key)\nlen(key)'
    agent = Agent("coder", model="chaz/script", tools=list(SAFE_DEFAULT_TOOLS),
                  script=[{"tool": "kernel__run", "args": {"code": code}}, "done"])
    server = Server(store, [agent])
    ns: dict = {}
    server.add_kernel(ns)
    told = []
    server.subscribe_cells(told.append)
    handle = await server.send(server.current_session("coder"), "go")
    await approve_next(server)
    await handle.wait()
    await until(lambda: told, server.store.subscribe, what="the cell")
    [cell] = told
    assert ns["key"] == secret  # the code that ran had the key
    assert secret not in json.dumps(cell.to_json()) and "«REDACTED»" in cell.code
    assert cell.metadata()["code_sha256"] == sha(code)  # the hash of what ran, as the log's
    assert any("[REDACTED]" in o.get("text", "") for o in cell.outputs)


async def test_a_sidebar_chat_run_names_no_cell(store):
    """A Message from the sidebar chat (origin cell_id None): the cell goes at the notebook's end."""
    server, _ = make(store)
    told = []
    server.subscribe_cells(told.append)
    handle = await server.send(server.current_session("coder"), "go",
                               payload={"origin": {"cell_id": None, "via": "sidebar"}})
    await approve_next(server)
    await approve_next(server)
    await handle.wait()
    await until(lambda: len(told) == 2, server.store.subscribe, what="two cells")
    assert [c.to_json()["cell_id"] for c in told] == [None, None]
