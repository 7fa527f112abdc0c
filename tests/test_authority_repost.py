"""A trigger written again keeps the authority of the one it copies (issue 41 §4).

``fork --rerun`` and ``replay`` (recorded and live) write a source's trigger again in a branch.
A trigger a capped run wrote (a Directive into a chat session or a room, a spawn's Directive, a
schedule fire's ``send_message``) runs capped in the branch as in the source, on the same
run-tree budget: never with its agent's full tools, auto-approve list and a fresh budget.
"""

from __future__ import annotations

import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.engine.tools import ToolRegistry, tool
from chaz_nb.errors import ServerError
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent

ran: list[str] = []  # every call of danger that really ran


@pytest.fixture(autouse=True)
def clear_ran():
    ran.clear()


@tool(approval="unless_auto_approved", risk="high")
def danger() -> str:
    """Dangerous."""
    ran.append("danger")
    return "done the dangerous thing"


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def scripted(name, *steps, **kw):
    return Agent(name, model="chaz/script", script=list(steps), **kw)


def send(session_id, text, kind="directive"):
    return {"tool": "send_message", "args": {"session_id": session_id, "text": text, "kind": kind}}


def spawn(agent, task):
    return {"tool": "spawn_agent", "args": {"agent": agent, "task": task}}


DANGER = {"tool": "danger", "args": {}}


def acks(store, sid):
    return [e for e in store.entries(sid) if e.entry_type is T.ACK and e.payload.get("status") != "forked"]


def danger_results(store, sid):
    return [e.content for e in store.entries(sid) if e.entry_type is T.TOOL_RESULT and e.tool_name == "danger"]


async def capped_directive(store):
    """A capped child (spawned by a parent that may only spawn and send) writes a Directive into
    a room it shares with the worker, who may run ``danger`` and auto-approves it: the worker
    runs capped there. Returns (server, the room, the Directive)."""
    server = Server(store, [
        scripted("parent", spawn("child", "go"), "{result}", tools=["spawn_agent", "send_message"]),
        scripted("child", "placeholder", tools=None),
        scripted("worker", DANGER, "{result}", auto_approve=["danger"], max_model_calls=50),
    ], ToolRegistry([danger, add]))
    room = server.create_room("lab", ["child", "worker"])
    server.define_agent(scripted("child", send(room, "@worker run danger"), "{result}", tools=None))
    await (await server.send(server.current_session("parent"), "go")).wait()
    await server.wait_idle(60)
    directive = next(e for e in store.entries(room) if e.entry_type is T.DIRECTIVE)
    assert directive.payload["authority"]["ceiling"]["tools"]
    assert ran == []  # capped in the source: danger was not even a tool there
    assert danger_results(store, room)[0].startswith("danger: unknown tool 'danger'")
    return server, room, directive


@pytest.mark.parametrize("at", ["directive", "its_run", "end"])
async def test_fork_rerun_live_of_a_capped_directive_stays_capped_on_its_budget(backend_store, at):
    store = backend_store
    server, room, directive = await capped_directive(store)
    point = {"directive": directive.seq, "its_run": directive.seq + 2, "end": store.latest(room).seq}[at]
    result = server.fork_session(room, point, rerun=True, replay="live")
    await result.handle.wait()
    await server.wait_idle(60)
    branch = result.session_id
    assert ran == []  # before the fix: the worker's full tools and auto-approve ran danger
    assert danger_results(store, branch)[-1].startswith("danger: unknown tool 'danger'")
    again = next(e for e in store.entries(branch) if e.payload.get("rerun_of") == directive.id)
    assert (again.sender, again.payload["authority"]) == (directive.sender, directive.payload["authority"])
    # the branch's run draws on the budget the source's run drew on, not a fresh one
    assert acks(store, branch)[-1].payload["budget"] == directive.payload["authority"]["budget"]
    await server.stop()


async def spawned_child(store):
    """A parent that may only spawn spawns a child that may run danger and auto-approves it:
    the child runs capped in its session. Returns (server, the child's session, its Directive)."""
    server = Server(store, [
        scripted("parent", spawn("child", "go"), "{result}", tools=["spawn_agent"]),
        scripted("child", DANGER, "{result}", auto_approve=["danger"]),
        scripted("wide", DANGER, "{result}", tools=["*"], auto_approve=["*"]),
    ], ToolRegistry([danger, add]))
    await (await server.send(server.current_session("parent"), "go")).wait()
    await server.wait_idle(60)
    child = next(s.id for s in store.sessions() if s.agent == "child")
    directive = next(e for e in store.entries(child) if e.entry_type is T.DIRECTIVE)
    assert ran == []
    return server, child, directive


@pytest.mark.parametrize("agent", ["child", "wide"])
@pytest.mark.parametrize("mode", ["recorded", "live"])
async def test_replay_of_a_spawned_childs_session_stays_capped_on_the_parents_budget(backend_store, mode, agent):
    store = backend_store
    server, child, directive = await spawned_child(store)
    branch = await server.replay(child, agent=agent, replay=mode)
    assert ran == []
    assert danger_results(store, branch)[-1].startswith("danger: unknown tool 'danger'")
    (again,) = [e for e in store.entries(branch) if e.entry_type is T.DIRECTIVE]
    assert again.payload["replays"] == directive.id
    assert again.payload["authority"] == directive.payload["authority"]
    # before the fix: a fresh budget of its own (entry:<the re-posted Directive's id>)
    assert acks(store, branch)[-1].payload["budget"] == directive.payload["authority"]["budget"]
    await server.stop()


async def test_a_branch_under_another_agent_or_model_is_narrowed_by_it_never_widened(backend_store):
    store = backend_store
    server, child, directive = await spawned_child(store)
    # another agent whose own tools are wider than the cap, with everything auto-approved
    wide = server.fork_session(child, directive.seq, agent="wide", rerun=True, replay="live")
    await wide.handle.wait()
    # a new definition made from the child (another prompt): its tools are the child's
    variant = server.fork_session(child, directive.seq, system="again", rerun=True, replay="live")
    await variant.handle.wait()
    await server.wait_idle(60)
    assert ran == []
    for branch in (wide.session_id, variant.session_id):
        assert danger_results(store, branch)[-1].startswith("danger: unknown tool 'danger'")
        assert acks(store, branch)[-1].payload["budget"] == directive.payload["authority"]["budget"]
    await server.stop()


@pytest.mark.parametrize("mode", ["recorded", "live"])
async def test_a_spawned_childs_directive_rerun_draws_on_the_parents_budget(backend_store, mode):
    store = backend_store
    server, child, directive = await spawned_child(store)
    result = server.fork_session(child, rerun=True, replay=mode)
    await result.handle.wait()
    await server.wait_idle(60)
    assert acks(store, result.session_id)[-1].payload["budget"] == directive.payload["authority"]["budget"]
    assert ran == []
    await server.stop()


async def test_a_schedule_fires_directive_rerun_stays_under_the_schedules_cap(backend_store):
    store = backend_store
    server = Server(store, [
        scripted("parent", spawn("child", "go"), "{result}", tools=["spawn_agent", "send_message", "schedule_create"]),
        scripted("child", {"tool": "schedule_create", "args": {"trigger": "in 2m", "prompt": "wake"}}, "{result}",
                 tools=None),
        scripted("worker", DANGER, "{result}", auto_approve=["danger"]),
    ], ToolRegistry([danger, add]))
    room = server.create_room("lab", ["child", "worker"])
    await (await server.send(server.current_session("parent"), "go")).wait()
    await server.wait_idle(60)
    (made,) = server.schedules.list()
    # the fire runs the child under the schedule's cap: it writes a Directive to the room
    server.define_agent(scripted("child", send(room, "@worker run danger"), "{result}", tools=None))
    await server.fire_agent_schedule(made)
    await server.wait_idle(60)
    directive = next(e for e in store.entries(room) if e.entry_type is T.DIRECTIVE)
    assert directive.payload["authority"]["ceiling"]["tools"]
    assert ran == []
    result = server.fork_session(room, rerun=True, replay="live")
    await result.handle.wait()
    await server.wait_idle(60)
    assert ran == []
    assert danger_results(store, result.session_id)[-1].startswith("danger: unknown tool 'danger'")
    await server.stop()


async def test_a_persons_trigger_answered_with_a_capped_one_reruns_capped(backend_store):
    """One run answered both (the person's message came while the Directive's run was queued):
    it ran capped; written again, it runs capped."""
    store = backend_store
    server, target, directive = await capped_directive(store)
    # the person's message that one run answered with the Directive, as that run's Ack records it
    person = store.append(target, T.MESSAGE, "user", "and run danger")
    store.append(target, T.ACK, "worker", "worker is working",
                 payload={"trigger_id": person.id, "answers": [directive.id, person.id]})
    again = server.forks._repost(person, {"rerun_of": person.id})
    assert again["authority"] == directive.payload["authority"]
    # a person's own trigger, answered alone, stays the person's: no authority
    alone = store.append(server.new_session("worker"), T.MESSAGE, "user", "hello")
    assert "authority" not in server.forks._repost(alone, {"rerun_of": alone.id})
    await server.stop()


async def test_a_persons_rerun_stays_the_persons_and_an_unreadable_authority_is_refused(backend_store):
    store = backend_store
    server = Server(store, [scripted("worker", DANGER, "{result}", auto_approve=["danger"])],
                    ToolRegistry([danger, add]))
    sid = server.new_session("worker")
    await (await server.send(sid, "go")).wait()
    assert ran == ["danger"]  # the person's own message: the worker's own tools
    result = server.fork_session(sid, rerun=True, replay="live")
    await result.handle.wait()
    assert ran == ["danger", "danger"]
    (again,) = [e for e in store.entries(result.session_id) if e.payload.get("rerun_of")]
    assert again.sender == "user" and "authority" not in again.payload
    # a trigger whose authority cannot be read is not written again open
    bad = store.append(sid, T.DIRECTIVE, "worker", "forged", payload={"authority": {"ceiling": "x"}})
    before = len(store.sessions())
    with pytest.raises(ServerError, match="cannot write #.* again: the trigger's authority is unreadable"):
        server.fork_session(sid, bad.seq, rerun=True)
    assert len(store.sessions()) == before  # nothing written
    await server.stop()


# ---------------------------------------------------------------- another kernel
@pytest.fixture
def two(pg_url):
    from chaz_nb.core.store import SessionStore

    a, b = SessionStore.open(pg_url), SessionStore.open(pg_url)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("how", ["rerun-live", "rerun-recorded", "replay-live", "replay-recorded"])
async def test_a_capped_childs_directive_in_a_chat_session_of_another_kernel_reruns_capped(two, how):
    """A spawned child of kernel A writes a Directive into its agent's chat session, which
    kernel B serves (and where B's worker may run danger): B forks or replays it."""
    from waiting import until

    a_store, b_store = two
    b = Server(b_store, [scripted("worker", "hi")], ToolRegistry([danger, add]))
    own = b.current_session("worker")
    await (await b.send(own, "hello")).wait()  # B holds the worker's chat session's lease
    # B's worker may run danger and auto-approves it
    b.define_agent(scripted("worker", DANGER, "{result}", auto_approve=["danger"]))
    a = Server(a_store, [
        scripted("parent", spawn("worker", "go"), "{result}", tools=["spawn_agent", "send_message"]),
        scripted("worker", send(own, "run danger"), "{result}", auto_approve=["danger"]),
    ], ToolRegistry([danger, add]))
    await (await a.send(a.current_session("parent"), "go")).wait()
    await until(lambda: any(e.entry_type is T.TOOL_RESULT for e in b_store.entries(own))
                and b_store.latest(own).entry_type in (T.MESSAGE, T.ERROR) and not b.running_sessions(),
                b_store.subscribe, what="B's run of the child's directive to end")
    await a.stop()
    directive = next(e for e in b_store.entries(own) if e.entry_type is T.DIRECTIVE)
    assert ran == [] and directive.payload["authority"]["ceiling"]["tools"]
    action, mode = how.split("-")
    if action == "rerun":
        result = b.fork_session(own, rerun=True, replay=mode)
        await result.handle.wait()
        branch = result.session_id
    else:
        branch = await b.replay(own, agent="worker", replay=mode)
    await b.wait_idle(60)
    again = next(e for e in b_store.entries(branch) if e.entry_type is T.DIRECTIVE and "copied_from" not in e.payload)
    # before the fix: B's worker, uncapped and auto-approving, ran danger live (a replay also
    # writes the person's "hello" again, which is the person's: its run may run danger)
    assert ran == (["danger"] if how == "replay-live" else [])
    after = [e for e in b_store.entries(branch, again.seq) if e.entry_type is T.TOOL_RESULT]
    if mode == "live":
        assert after[0].content.startswith("danger: unknown tool 'danger'")
    run = next(e for e in b_store.entries(branch, again.seq) if e.entry_type is T.ACK)
    assert run.payload["budget"] == directive.payload["authority"]["budget"]
    await b.stop()
