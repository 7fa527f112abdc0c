"""Authority travels with the entry, between REAL kernels (test_authority.py has the in-process
forms): a capped worker's Directive served by another kernel stays capped, a capped child's room
mention lends its peer nothing, and one run tree's model-call budget holds across two kernels.

The agents and the ``danger`` tool are defined in each kernel through its Server (the kernel's
own registry and store); waits are on the kernel store's events (``waiting.until`` run inside
the kernel, subscribed to ``store.subscribe``), never on fixed sleeps.
"""

from __future__ import annotations

import json
import os

import pytest

from kernel_harness import Kernel

psycopg = pytest.importorskip("psycopg")

TESTS = os.path.dirname(os.path.abspath(__file__))

SETUP = f'''
import json, sys
sys.path.insert(0, {TESTS!r})
import chaz_nb
from chaz_nb.core.entries import EntryType as T
from chaz_nb.server.agents import Agent
from waiting import until

server = chaz_nb.current()

@chaz_nb.tool(approval="unless_auto_approved", risk="high")
def danger() -> str:
    """Dangerous."""
    return "done the dangerous thing"

server.tools.register(danger)  # (%%chaz agent registers a notebook's tools by name; this is its API form)

def send(session_id, text, kind="message"):
    return {{"tool": "send_message", "args": {{"session_id": session_id, "text": text, "kind": kind}}}}

def scripted(name, *steps, **kw):
    return Agent(name, model="chaz/script", script=list(steps), **kw)
'''


def start(cwd, env: dict[str, str] | None = None) -> Kernel:
    os.makedirs(cwd)
    k = Kernel(str(cwd), env=env)
    try:
        ok(k, "%load_ext chaz_nb")
        ok(k, SETUP)
    except BaseException:
        k.close()
        raise
    return k


@pytest.fixture
def pg_kernels(pg_url, tmp_path):
    """Two kernels on the test PostgreSQL database."""
    started: list[Kernel] = []
    try:
        for name in ("a", "b"):
            started.append(start(tmp_path / name, {"CHAZ_DB": pg_url}))
        yield started
    finally:
        for k in started:
            k.close()


@pytest.fixture
def duck_kernel(tmp_path):
    k = start(tmp_path / "k")
    try:
        yield k
    finally:
        k.close()


def ok(k: Kernel, code: str, timeout: float = 90) -> str:
    r = k.run(code, timeout=timeout)
    assert r.status == "ok", (code, r.stdout, r.stderr, r.outputs)
    return r.stdout + "\n".join(r.texts())


def rows(url: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as con:
        return con.execute(query, params).fetchall()


def danger_results(url: str, sid: int) -> list[str]:
    return [c for (c,) in rows(url, "SELECT content FROM entries WHERE session_id = %s AND entry_type = 'ToolResult'"
                                    " AND tool_name = 'danger' ORDER BY seq", (sid,))]


def test_a_capped_workers_directive_served_by_another_kernel_stays_capped(pg_kernels, pg_url):
    a, b = pg_kernels
    # B defines the agent with danger, auto-approved, and serves its chat session
    ok(b, 'server.define_agent(scripted("boss", {"tool": "danger", "args": {}}, "{result}", '
          'tools=["danger", "send_message"], auto_approve=["danger"]))')
    assert "done the dangerous thing" in ok(b, "%chaz @boss hello")  # a person's trigger may run it
    sid = int(ok(b, 'print(server.current_session("boss"))').strip())
    # in A the same agent (A's own: keep=False) spawns a worker limited to send_message; the worker (playing the same
    # script) sends a Directive into the session B serves, then so does the parent
    ok(a, f'server.define_agent(scripted("boss", {{"tool": "spawn_worker", "args": {{"task": "tell B", '
          f'"tools": ["send_message"]}}}}, send({sid}, "run danger", "directive"), "{{result}}", '
          f'tools=["spawn_worker", "send_message"], auto_approve=["danger"]), keep=False)')
    ok(a, "%chaz @boss go")
    directives = rows(pg_url, "SELECT id, payload::text FROM entries WHERE session_id = %s"
                              " AND entry_type = 'Directive' ORDER BY seq", (sid,))
    assert len(directives) == 2, directives
    ceilings = [json.loads(p)["authority"]["ceiling"]["tools"] for _, p in directives]
    assert ceilings[0][-1] == ["send_message"], ceilings  # the worker's, narrowed
    assert all("danger" not in level for c in ceilings for level in c), ceilings
    last = directives[-1][0]
    # B wakes on each Directive (LISTEN/NOTIFY); wait in B for its run of the last one to end
    log = lambda: rows(pg_url, "SELECT id, entry_type, sender, left(content, 60), run_id FROM entries"  # noqa: E731
                               " WHERE session_id = %s ORDER BY seq", (sid,))
    r = b.run(f'''
def answered():
    es = server.store.entries({sid})
    end = es[-1]  # a run ends with its reply, an Error, or a closing Ack (no reply)
    return end.id > {last} and (end.entry_type in (T.MESSAGE, T.ERROR)
                                or end.entry_type is T.ACK and end.run_id != end.id)
await until(answered, server.store.subscribe, what="B's runs of the Directives to end", timeout=30)
await server.wait_idle(30)
''', timeout=120)
    assert r.status == "ok", (r.error["evalue"], "\n".join(map(str, log())))
    results = danger_results(pg_url, sid)
    assert results[0] == "danger: done the dangerous thing"  # the person's run only
    assert len(results) >= 2 and all(r.startswith("danger: unknown tool 'danger'") for r in results[1:]), results
    woken = rows(pg_url, "SELECT count(*) FROM runs WHERE session_id = %s AND trigger_type = 'Directive'", (sid,))
    assert woken[0][0] >= 1


def test_a_capped_childs_room_mention_does_not_let_the_peer_run_danger(duck_kernel):
    k = duck_kernel
    out = ok(k, '''
server.define_agent(scripted("parent", {"tool": "spawn_agent", "args": {"agent": "child", "task": "go"}},
                             "{result}", tools=["spawn_agent", "send_message"]))
server.define_agent(scripted("peer", {"tool": "danger", "args": {}}, "{result}",
                             tools=["danger", "send_message"], auto_approve=["danger"]))
server.define_agent(scripted("child"))
room = server.create_room("lab", ["peer", "child"])
server.define_agent(scripted("child", send(room, "@peer run danger"), "{result}", tools=None))
await (await server.send(server.current_session("parent"), "go")).wait()
def peer_done():
    es = server.store.entries(room)
    acks = [e for e in es if e.entry_type is T.ACK and e.sender == "peer"]
    return acks and es[-1].entry_type in (T.MESSAGE, T.ERROR)
await until(peer_done, server.store.subscribe, what="the peer's turn in the room", timeout=30)
await server.wait_idle(30)
capped = [(e.sender, e.content) for e in server.store.entries(room)
          if e.entry_type is T.TOOL_RESULT and e.tool_name == "danger"]
await server.rooms.say(room, "@peer go").wait()  # a person's own mention is not capped
print(json.dumps({"capped": capped, "after": [e.content for e in server.store.entries(room)
                  if e.entry_type is T.TOOL_RESULT and e.tool_name == "danger"][len(capped):]}))
''')
    got = json.loads(out.strip().splitlines()[-1])
    assert got["capped"] and all(s == "peer" and c.startswith("danger: unknown tool 'danger'")
                                 for s, c in got["capped"]), got
    assert got["after"] == ["danger: done the dangerous thing"], got


def test_two_kernels_waking_each_other_stop_at_the_trees_max_model_calls(pg_kernels, pg_url):
    a, b = pg_kernels
    limit = 10
    # each kernel's pinger is its own (keep=False): on a shared store a kept definition is the store's
    there = int(ok(b, 'server.define_agent(scripted("pinger", "hi"), keep=False)\n'
                      'there = server.new_session("pinger")\n'
                      'await (await server.send(there, "hello")).wait()\n'  # B holds its lease
                      'print(there)').strip())
    here = int(ok(a, 'server.define_agent(scripted("pinger", "hi"), keep=False)\nprint(server.new_session("pinger"))')
               .strip())
    # each run writes a Directive into the other kernel's session (twice: one landing during the
    # run moves the scripted model's position), so runs alternate between the kernels
    ping = ('server.define_agent(scripted("pinger", *[send({target}, "ping", "directive")] * 2, "{{result}}", '
            f'tools=["send_message"], max_model_calls={limit}), keep=False)')
    ok(a, ping.format(target=there))
    ok(b, ping.format(target=here))
    ok(a, f'''
await server.send({here}, "start")
def exhausted():
    return any(e.entry_type is T.ERROR and e.content.startswith("run tree budget reached")
               for sid in ({here}, {there}) for e in server.store.entries(sid))
await until(exhausted, server.store.subscribe, what="the tree to reach its budget", timeout=30)
await server.wait_idle(30)
''', timeout=120)
    ok(b, "await server.wait_idle(30)")
    tree = [r[0] for r in rows(pg_url, "SELECT DISTINCT payload->>'budget' FROM entries WHERE entry_type = 'Ack'"
                                       " AND session_id IN (%s, %s) AND payload->>'budget' IS NOT NULL",
                               (here, there))]
    budgets = rows(pg_url, "SELECT model_calls, max_model_calls, exhausted FROM run_budgets WHERE id = ANY(%s)",
                   (tree,))
    spent = [b for b in budgets if b[1] == limit]
    assert len(spent) == 1 and spent[0][0] <= limit and spent[0][2], budgets
    # the model calls the runs made, as the runs view reports them, in both kernels' sessions
    runs = rows(pg_url, "SELECT session_id, coalesce(steps, 0) FROM runs WHERE session_id IN (%s, %s)"
                        " AND started_at >= (SELECT min(created_at) FROM entries WHERE session_id = %s"
                        " AND content = 'start')", (here, there, here))
    assert {s for s, _ in runs} == {here, there}  # both kernels ran part of the tree
    assert sum(n for _, n in runs) <= limit, runs
