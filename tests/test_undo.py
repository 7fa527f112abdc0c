"""Undo an agent's step (issue 44 §3): ``Server.undo`` puts back the variables a ``kernel__run``
call created, rebound or deleted, the very objects (no copies), and writes the undo into the
session, where ``variable_changes`` lists it; what it cannot undo is named in one line before
anything is touched. On DuckDB and on PostgreSQL."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.errors import UndoRefused
from chaz_nb.server import Server, undo_of
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent
from chaz_nb.server.kernel.undo_book import UNDO_KEEP

from waiting import until


@pytest.fixture
def store(backend_store):
    return backend_store


def coder(*codes: str, **kw) -> Agent:
    script = [{"tool": "kernel__run", "args": {"code": c}} for c in codes] + ["done"]
    kw.setdefault("auto_approve", ["kernel__run"])
    return Agent("coder", model="chaz/script", script=script, tools=list(SAFE_DEFAULT_TOOLS), **kw)


async def ran(store, *codes: str, ns: dict | None = None, **kw):
    """A server whose coder ran ``codes`` (each one kernel__run call) in ``ns``; the server,
    its session, the namespace and the calls' ids in order."""
    server = Server(store, [coder(*codes, **kw)])
    ns = {} if ns is None else ns
    server.add_kernel(ns)
    s = server.current_session("coder")
    await (await server.send(s, "go")).wait()
    calls = [e.tool_call_id for e in store.entries(s) if e.entry_type is T.TOOL_CALL]
    return server, s, ns, calls


def user(ns: dict) -> dict:
    return {k: v for k, v in ns.items() if not k.startswith("_")}


def frame() -> pd.DataFrame:
    return pd.DataFrame({"region": ["north", "south", "north"], "amount": [1.0, 2.0, 4.0]})


def changes_of(store, undo: bool) -> list[tuple]:
    rows = store.execute("SELECT variable, change, type, shape, tool_call_id, agent, undo_of FROM variable_changes"
                         " ORDER BY result_entry_id, variable")
    out = [(r[0], r[1], r[2], json.loads(r[3]) if isinstance(r[3], str) else r[3], r[4], r[5], r[6]) for r in rows]
    return [r for r in out if (r[6] is not None) == undo]


async def test_created_rebound_and_deleted_variables_are_put_back_as_the_very_objects(store):
    sales, lookup = frame(), {"a": 1}
    server, s, ns, [call] = await ran(
        store, "top = sales.groupby('region').amount.sum()\nsales = sales.head(2)\ndel lookup",
        ns={"sales": sales, "lookup": lookup})
    assert "top" in ns and ns["sales"] is not sales and "lookup" not in ns
    outcome = server.undo(s)
    assert outcome.tool_call_id == call
    assert outcome.describe().startswith(f"undid kernel__run {call} (session {s}, #")
    assert "removed top" in outcome.done and "put back sales" in outcome.done and "put back lookup" in outcome.done
    # the same objects, not copies: a 10M-row frame costs nothing more to undo (bench/bench_undo.py)
    assert ns["sales"] is sales and ns["lookup"] is lookup and "top" not in ns
    assert len(server.kernel.undo_book) == 0  # an undone call's record lets go of its objects
    # the undo is in the log and in variable_changes, beside the call's own rows
    assert changes_of(store, undo=False) == [
        ("lookup", "deleted", "dict", [1], call, "coder", None),
        ("sales", "changed", "pandas.DataFrame", [2, 2], call, "coder", None),
        ("top", "created", "pandas.Series", [2], call, "coder", None),
    ]
    assert changes_of(store, undo=True) == [
        ("lookup", "created", "dict", [1], call, "user", call),
        ("sales", "changed", "pandas.DataFrame", [3, 2], call, "user", call),
        ("top", "deleted", "pandas.Series", [2], call, "user", call),
    ]
    # the hook a notebook cell of that call reads: the call was undone, by this entry
    [ack] = [e for e in store.entries(s) if undo_of(e) == call]
    assert server.undone_calls(s) == {call: ack}
    assert ack.entry_type is T.ACK and ack.sender == "user" and ack.run_id is None


async def test_a_second_undo_of_the_same_call_is_one_line_and_changes_nothing(store):
    server, s, ns, [call] = await ran(store, "x = 1")
    server.undo(s, call)
    ns["x"] = "mine"
    for args in ((s, call), (s, None)):
        with pytest.raises(UndoRefused, match=rf"^tool call {call} was already undone \(#\d+ in session {s}\); "
                                              "nothing was changed$"):
            server.undo(*args)
    assert ns["x"] == "mine"
    assert len(changes_of(store, undo=True)) == 1


async def test_an_object_changed_in_place_is_named_and_nothing_is_touched_unless_partial(store):
    sales = frame()
    server, s, ns, [call] = await ran(store, "sales['amount'] = sales['amount'] * 2\nextra = 3", ns={"sales": sales})
    entries = len(store.entries(s))
    with pytest.raises(UndoRefused) as refused:
        server.undo(s)
    assert str(refused.value) == (f"tool call {call}: cannot undo sales (changed in place); nothing was changed "
                                  "(--partial puts back the rest)")
    assert ns["extra"] == 3 and ns["sales"] is sales and len(store.entries(s)) == entries
    outcome = server.undo(s, partial=True)
    assert outcome.done == ["removed extra"] and outcome.skipped == ["sales (changed in place)"]
    assert "extra" not in ns and ns["sales"]["amount"].tolist() == [2.0, 4.0, 8.0]
    [ack] = server.undone_calls(s).values()
    assert ack.payload["partial"] is True and ack.payload["skipped"] == ["sales (changed in place)"]


async def test_a_file_written_and_a_module_imported_are_named_before_anything_is_touched(store, tmp_path):
    path = tmp_path / "out.csv"
    code = f"import colorsys\nwith open({str(path)!r}, 'w') as f:\n    f.write('a')\nn = 1"
    import sys
    sys.modules.pop("colorsys", None)
    server, s, ns, [call] = await ran(store, code)
    with pytest.raises(UndoRefused) as refused:
        server.undo(s)
    line = str(refused.value)
    assert "\n" not in line and f"a file written ({path})" in line and "a module imported (colorsys)" in line
    assert ns["n"] == 1
    server.undo(s, partial=True)
    assert "n" not in ns and path.exists()  # the file stays: undo puts back variables only


async def test_a_variable_changed_since_by_the_person_or_a_later_call_is_named_and_refused(store):
    server, s, ns, (first, second) = await ran(store, "a = 1\nb = 2", "b = b + 10")
    with pytest.raises(UndoRefused, match=rf"changed since: b \(by kernel__run {second}\); nothing was changed"):
        server.undo(s, first)
    ns["a"] = "person's"
    with pytest.raises(UndoRefused, match=r"changed since: a \(by you or other code\), b \(by kernel__run"):
        server.undo(s, first)
    assert user(ns) == {"a": "person's", "b": 12}
    # --partial leaves them as they are; here that is everything, so nothing is undone
    with pytest.raises(UndoRefused, match="left nothing undo can put back"):
        server.undo(s, first, partial=True)
    # undo the later call first: the earlier one is clean again, but for the person's a
    server.undo(s, second)
    assert ns["b"] == 2
    outcome = server.undo(s, first, force=True)
    assert outcome.done == ["removed a", "removed b"] and user(ns) == {}


@pytest.mark.parametrize("ref, message", [
    ("call_nope", "there is no tool call 'call_nope'; %chaz sql SELECT"),
    ("call_1_1", "tool call call_1_1 is a kernel__variables call, not kernel__run: only kernel__run changes"),
])
async def test_an_unknown_call_or_one_not_kernel_run_is_one_line(store, ref, message):
    server = Server(store, [Agent("coder", model="chaz/script", tools=list(SAFE_DEFAULT_TOOLS),
                                  script=[{"tool": "kernel__variables"}, "done"])])
    server.add_kernel({})
    s = server.current_session("coder")
    await (await server.send(s, "go")).wait()
    with pytest.raises(UndoRefused, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        server.undo(s, ref)
    with pytest.raises(UndoRefused, match=f"^session {s} has no kernel__run call that ran; nothing to undo$"):
        server.undo(s)


async def test_a_denied_call_never_ran_and_has_nothing_to_undo(store):
    server = Server(store, [coder("x = 1", auto_approve=[])])
    ns: dict = {}
    server.add_kernel(ns)
    s = server.current_session("coder")
    handle = await server.send(s, "go")
    await until(lambda: server.pending_approvals(), store.subscribe, what="the approval request")
    [req] = server.pending_approvals()
    server.decide(req["request_id"], "deny")
    await handle.wait()
    [call] = [e.tool_call_id for e in store.entries(s) if e.entry_type is T.TOOL_CALL]
    with pytest.raises(UndoRefused, match=f"^tool call {call} never ran \\(denied\\); nothing to undo$"):
        server.undo(s, call)
    # and the session's default is the last call that ran: none did
    with pytest.raises(UndoRefused, match=f"^session {s} has no kernel__run call that ran"):
        server.undo(s)


async def test_an_approved_call_is_undone_and_the_default_is_the_sessions_last(store):
    server = Server(store, [coder("x = 1", "y = 2", auto_approve=[])])
    ns: dict = {}
    server.add_kernel(ns)
    s = server.current_session("coder")
    handle = await server.send(s, "go")
    for _ in range(2):
        await until(lambda: server.pending_approvals(), store.subscribe, what="the approval request")
        [req] = server.pending_approvals()
        server.decide(req["request_id"], "approve")
    await handle.wait()
    assert server.undo(s).done == ["removed y"] and user(ns) == {"x": 1}


async def test_after_a_kernel_restart_the_before_state_is_gone_and_that_is_one_line(store):
    server, s, ns, [call] = await ran(store, "x = 1")
    await server.stop()
    # a new kernel on the same store: the log has the call, its objects died with the old one
    again = Server(store, [coder()])
    again.add_kernel({"x": 1})
    with pytest.raises(UndoRefused, match=rf"^the kernel restarted since tool call {call} ran: its before-state "
                                          "was in the old kernel's memory and is gone; nothing was changed$"):
        again.undo(s)
    await again.stop()


async def test_only_the_last_calls_of_a_session_are_kept_and_an_older_one_says_so(store):
    codes = [f"v{i} = {i}" for i in range(UNDO_KEEP + 1)]
    server, s, ns, calls = await ran(store, *codes)
    assert len(server.kernel.undo_book.records(s)) == UNDO_KEEP
    with pytest.raises(UndoRefused, match=rf"^tool call {calls[0]} can no longer be undone: undo keeps the last "
                                          f"{UNDO_KEEP} kernel__run calls of a session; nothing was changed$"):
        server.undo(s, calls[0])
    server.undo(s, calls[1])
    assert "v1" not in ns and "v0" in ns


async def test_the_before_state_is_released_with_the_server_and_on_request(store):
    import weakref

    old = frame()
    ref = weakref.ref(old)
    server, s, ns, [call] = await ran(store, "sales = sales.head(1)", ns={"sales": old})
    del old
    assert ref() is not None  # kept for undo: only by reference
    assert server.release_undo(s) == 1
    assert ref() is None  # released: nothing else held it
    with pytest.raises(UndoRefused, match="its before-state was released"):
        server.undo(s)
    await server.stop()



async def test_a_network_call_and_a_process_are_named_too(store):
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    code = (f"import socket, subprocess\nc = socket.create_connection(('127.0.0.1', {port}))\nc.close()\n"
            "subprocess.run(['true'])\nn = 1")
    try:
        server, s, ns, [call] = await ran(store, code)
    finally:
        listener.close()
    with pytest.raises(UndoRefused) as refused:
        server.undo(s)
    assert f"a network call (127.0.0.1:{port}), a process started (true)" in str(refused.value)
    assert ns["n"] == 1
    assert server.undo(s, partial=True).done == ["removed c", "removed n"]


async def test_stopping_the_server_releases_every_before_state(store):
    import weakref

    old = frame()
    ref = weakref.ref(old)
    server, s, ns, [call] = await ran(store, "sales = sales.head(1)", ns={"sales": old})
    del old
    assert ref() is not None
    await server.stop()  # the extension unloaded, the kernel shut down, another database
    assert ref() is None and len(server.kernel.undo_book) == 0


async def test_a_call_another_kernel_ran_after_this_one_started_is_that_kernels_to_undo(store):
    server, s, ns, [call] = await ran(store, "x = 1")
    await server.stop()
    other = Server(store, [coder()])
    other.add_kernel({"x": 1})
    other.kernel.undo_book.started = 0.0  # this kernel started before the call ran (a shared store)
    with pytest.raises(UndoRefused, match=rf"^tool call {call} ran in another kernel: only that kernel holds its "
                                          "before-state; nothing was changed$"):
        other.undo(s, call)
    await other.stop()
