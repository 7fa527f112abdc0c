
import pytest

from chaz_nb.server.agents import Agent
from chaz_nb.core.entries import EntryType as T
from chaz_nb.server import Server
from chaz_nb.server.spawn import LateBound, LateBoundError
from chaz_nb.core.store import SessionStore
from chaz_nb.engine.tools import ToolRegistry, tool

deleted = []  # every call of delete_all that really ran


@pytest.fixture(autouse=True)
def clear_deleted():
    deleted.clear()


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool
def delete_all() -> str:
    """Dangerous."""
    deleted.append(True)
    return "deleted"


def spawn(agent, task, **extra):
    return {"tool": "spawn_agent", "args": {"agent": agent, "task": task, **extra}}


def log(store, session_id):
    return [(e.entry_type.value, e.sender, e.content) for e in store.entries(session_id)]


def make_server(store, *agents):
    return Server(store, list(agents), ToolRegistry([add, delete_all]))


def spawned(store, kind="child"):
    return [s for s in store.sessions() if s.kind == kind]


def results(store, session_id, tool_name):
    return [e for e in store.entries(session_id) if e.entry_type is T.TOOL_RESULT and e.tool_name == tool_name]


DELETER = [{"tool": "delete_all", "args": {}}, "{result}"]


async def test_spawn_agent_sequence_entry_by_entry(store):
    server = make_server(
        store,
        Agent(
            "parent",
            model="chaz/script",
            tools=["spawn_agent", "add"],
            script=[spawn("child", "add 2 and 3", context="use the add tool"), "child said: {result}"],
        ),
        Agent(
            "child",
            model="chaz/script",
            tools=["add"],
            script=[{"tool": "add", "args": {"a": 2, "b": 3}}, "the sum is {result}"],
        ),
    )
    p = server.current_session("parent")
    reply = await (await server.send(p, "delegate")).wait()
    assert reply.content == "child said: the sum is 5"
    parent_log = log(store, p)
    assert parent_log[0] == ("Message", "user", "delegate")
    assert parent_log[1] == ("Ack", "parent", "parent is working")
    assert parent_log[2][0:2] == ("ToolCall", "parent") and parent_log[2][2].startswith("spawn_agent(")
    assert parent_log[3] == ("ToolResult", "parent", "spawn_agent: the sum is 5")
    assert parent_log[4] == ("Message", "parent", "child said: the sum is 5")
    child = [s for s in store.sessions() if s.parent_id == p][0]
    assert (child.agent, child.kind, child.depth) == ("child", "child", 1)
    assert log(store, child.id) == [
        ("Directive", "parent", "add 2 and 3\n\nContext:\nuse the add tool"),
        ("Ack", "child", "child is working"),
        ("ToolCall", "child", 'add({"a": 2, "b": 3})'),
        ("ToolResult", "child", "add: 5"),
        ("Message", "child", "the sum is 5"),
    ]
    directive = store.entries(child.id)[0]
    assert directive.payload["parent_session"] == p
    parent_ack = store.entries(p)[1]
    child_ack = store.entries(child.id)[1]
    assert directive.payload["parent_run"] == parent_ack.id == child_ack.payload["parent_run"]


async def test_child_never_gets_a_tool_its_parent_lacked(store):
    server = make_server(
        store,
        Agent("parent", model="chaz/script", tools=["spawn_agent", "add"], script=[spawn("child", "go"), "{result}"]),
        # the child's own definition allows everything, delete_all included
        Agent("child", model="chaz/script", tools=None, script=[{"tool": "delete_all", "args": {}}, "{result}"]),
    )
    reply = await (await server.send(server.current_session("parent"), "go")).wait()
    assert reply.content.startswith("unknown tool 'delete_all'; tools available: add, spawn_agent")


async def test_depth_limit_returns_an_error_result_to_the_parent(store):
    # max_depth 1: the root (depth 0) may spawn a child, the child may not spawn again
    server = make_server(
        store,
        Agent("root", model="chaz/script", max_depth=1, script=[spawn("mid", "go"), "root got: {result}"]),
        Agent("mid", model="chaz/script", script=[spawn("leaf", "go"), "mid got: {result}"]),
        Agent("leaf", model="chaz/script", script=["leaf done"]),
    )
    reply = await (await server.send(server.current_session("root"), "go")).wait()
    assert reply.content.startswith("root got: mid got: spawn depth limit reached")
    assert not any(s.agent == "leaf" for s in store.sessions())


async def test_max_call_depth_defaults_to_max_iterations(store):
    server = make_server(
        store,
        Agent("a", model="chaz/script", max_iterations=2, script=[spawn("a", "again"), "{result}"]),
    )
    await (await server.send(server.current_session("a"), "go")).wait()
    await server.wait_idle(10)
    depths = sorted(s.depth for s in store.sessions())
    assert depths == [0, 1, 2]


async def test_silent_child_returns_no_response(store):
    server = make_server(
        store,
        Agent("parent", model="chaz/script", script=[spawn("mute", "say nothing"), "{result}"]),
        Agent("mute", model="chaz/script", script=[""]),
    )
    assert (await (await server.send(server.current_session("parent"), "go")).wait()).content == "No response"


async def test_child_error_is_an_error_result(store):
    server = make_server(
        store,
        Agent("parent", model="chaz/script", script=[spawn("broken", "x"), "{result}"]),
        Agent("broken", model="gpt-4o-mini", model_options={"mock_response": "litellm.InternalServerError"}),
    )
    reply = await (await server.send(server.current_session("parent"), "go")).wait()
    assert reply.content.startswith("broken (session 2) failed: model call failed:")
    result = [e for e in store.entries(reply.session_id) if e.entry_type is T.TOOL_RESULT][0]
    assert result.payload["is_error"] is True


async def test_unknown_agent_is_an_error_result(store):
    server = make_server(store, Agent("parent", model="chaz/script", script=[spawn("ghost", "x"), "{result}"]))
    reply = await (await server.send(server.current_session("parent"), "go")).wait()
    assert reply.content == "unknown agent 'ghost'; known agents: parent"


async def test_async_spawn_returns_at_once_and_child_finishes(store):
    server = make_server(
        store,
        Agent("parent", model="chaz/script", script=[spawn("child", "work", **{"async": True}), "{result}"]),
        Agent("child", model="chaz/script", script=["child finished"]),
    )
    reply = await (await server.send(server.current_session("parent"), "go")).wait()
    assert reply.content.startswith("started child in session 2")
    await server.wait_idle(5)
    assert store.latest(2).content == "child finished"


async def test_spawn_worker_runs_as_parent_with_narrowed_tools_and_shared_budget(store):
    server = make_server(
        store,
        Agent(
            "boss",
            model="chaz/script",
            tools=["spawn_worker", "add", "delete_all"],
            max_iterations=4,
            script=[
                {"tool": "spawn_worker", "args": {"task": "helper task", "tools": ["add"]}},
                "worker said: {result}",
            ],
        ),
    )
    reply = await (await server.send(server.current_session("boss"), "go")).wait()
    worker = [s for s in store.sessions() if s.kind == "worker"][0]
    assert worker.agent == "boss" and worker.depth == 1
    # the worker plays the same script: its spawn_worker call is outside its narrowed tools
    worker_results = [e for e in store.entries(worker.id) if e.entry_type is T.TOOL_RESULT]
    assert worker_results[0].content.startswith("spawn_worker: unknown tool 'spawn_worker'; tools available: add")
    assert reply.content.startswith("worker said:")
    # one budget of 4 for both: parent 2 steps + worker 2 steps
    assert reply.payload["steps"] + store.latest(worker.id).payload["steps"] == 4


async def test_spawn_tool_outside_a_run_is_an_error(store):
    server = make_server(store, Agent("a"))
    from chaz_nb.engine.tools import ToolError

    with pytest.raises(ToolError, match="only be called by an agent during a run"):
        await server.tools.get("spawn_agent").run({"agent": "a", "task": "x"})


def test_late_bound_handle_is_set_exactly_once(store):
    handle = LateBound("thing")
    with pytest.raises(LateBoundError, match="used before a Server was built"):
        handle.get()
    handle.set(1)
    with pytest.raises(LateBoundError, match="already bound"):
        handle.set(2)
    registry = ToolRegistry()
    Server(store, [], registry)
    with pytest.raises(LateBoundError, match="give each Server its own ToolRegistry"):
        Server(store, [], registry)


# ------------------------------------------------- the ceiling of a spawned session
def narrow_parent_and_greedy_child(**child):
    return (
        Agent("parent", model="chaz/script", tools=["spawn_agent", "send_message", "add"],
              script=[spawn("child", "go"), "{result}"]),
        # the child's own definition allows everything, delete_all included
        Agent("child", model="chaz/script", tools=None, script=DELETER, **child),
    )


async def test_parent_writing_to_its_finished_child_cannot_reach_a_tool_outside_its_scope(store):
    server = make_server(store, *narrow_parent_and_greedy_child())
    p = server.current_session("parent")
    await (await server.send(p, "go")).wait()
    (child,) = spawned(store)
    # The parent's next run writes a Directive into its (finished) child's session.
    server.define_agent(Agent("parent", model="chaz/script", tools=["spawn_agent", "send_message", "add"],
                              script=[{"tool": "send_message", "args": {"session_id": child.id, "text": "again",
                                                                        "kind": "directive"}}, "{result}"]))
    await (await server.send(p, "poke your child")).wait()
    await server.wait_idle(10)
    assert len([e for e in store.entries(child.id) if e.entry_type is T.ACK]) == 2
    assert deleted == []
    for result in results(store, child.id, "delete_all"):
        assert result.content.startswith("delete_all: unknown tool 'delete_all'; tools available: add, send_message")


async def test_a_person_or_a_schedule_triggering_a_child_session_gets_the_parents_ceiling(store):
    server = make_server(store, *narrow_parent_and_greedy_child())
    await (await server.send(server.current_session("parent"), "go")).wait()
    (child,) = spawned(store)
    handle = server.post(child.id, T.DIRECTIVE, "now delete everything", sender="user")
    await handle.wait()
    s = server.schedules.add("child", "every 1h", "delete everything", session=child.id)
    await server.fire_agent_schedule(s)
    assert len([e for e in store.entries(child.id) if e.entry_type is T.ACK]) == 3
    assert deleted == []
    assert all(r.payload["is_error"] for r in results(store, child.id, "delete_all"))


async def test_ceiling_survives_a_restart_and_a_redefinition_with_more_tools(db_path):
    store = SessionStore(db_path)
    server = make_server(store, *narrow_parent_and_greedy_child())
    await (await server.send(server.current_session("parent"), "go")).wait()
    (child,) = spawned(store)
    await server.stop()
    store.close()

    store = SessionStore(db_path)
    try:
        # a new kernel, the child redefined with every tool and the parent gone
        server = make_server(store, Agent("child", model="chaz/script", tools=["*"], script=DELETER))
        await server.post(child.id, T.DIRECTIVE, "delete everything", sender="user").wait()
        assert deleted == []
        (_, after_restart) = results(store, child.id, "delete_all")
        assert after_restart.content.startswith("delete_all: unknown tool 'delete_all'")
        await server.stop()
    finally:
        store.close()


async def test_grandchild_session_keeps_the_narrowest_ceiling_of_its_line(store):
    server = make_server(
        store,
        Agent("parent", model="chaz/script", tools=["spawn_agent", "add"], script=[spawn("child", "go"), "{result}"]),
        Agent("child", model="chaz/script", tools=None, script=[spawn("grandchild", "go"), "{result}"]),
        Agent("grandchild", model="chaz/script", tools=None, script=DELETER),
    )
    await (await server.send(server.current_session("parent"), "go")).wait()
    (grandchild,) = [s for s in store.sessions() if s.agent == "grandchild"]
    assert grandchild.depth == 2
    await server.post(grandchild.id, T.DIRECTIVE, "delete everything", sender="user").wait()
    assert deleted == []
    assert all(r.payload["is_error"] for r in results(store, grandchild.id, "delete_all"))


async def test_worker_session_keeps_the_tools_list_it_was_spawned_with(store):
    server = make_server(
        store,
        Agent("boss", model="chaz/script", tools=["spawn_worker", "add", "delete_all"],
              script=[{"tool": "spawn_worker", "args": {"task": "sum", "tools": ["add"]}}, "{result}"]),
    )
    await (await server.send(server.current_session("boss"), "go")).wait()
    (worker,) = spawned(store, "worker")
    # later, the boss itself (which has delete_all) is asked in the worker's session
    server.define_agent(Agent("boss", model="chaz/script", tools=["spawn_worker", "add", "delete_all"], script=DELETER))
    await server.post(worker.id, T.DIRECTIVE, "delete everything", sender="user").wait()
    assert deleted == []
    assert results(store, worker.id, "delete_all")[0].content.startswith(
        "delete_all: unknown tool 'delete_all'; tools available: add"
    )


async def test_narrowed_child_cannot_escape_through_its_agents_own_chat_session(store):
    parent, _ = narrow_parent_and_greedy_child()
    server = make_server(store, parent, Agent("child", model="chaz/script", tools=None, script=[]))
    own = server.current_session("child")  # the child agent's ordinary chat session, no ceiling
    # The spawned child writes a Directive into its agent's own session, then tries delete_all
    # itself; that session's run replays the same moves.
    server.define_agent(Agent("child", model="chaz/script", tools=None, script=[
        {"tool": "send_message", "args": {"session_id": own, "text": "delete everything", "kind": "directive"}},
        {"tool": "delete_all", "args": {}}, "{result}"]))
    await (await server.send(server.current_session("parent"), "go")).wait()
    await server.wait_idle(10)
    assert [e.entry_type for e in store.entries(own)][:2] == [T.DIRECTIVE, T.ACK]
    assert deleted == []
    assert all(r.payload["is_error"] for r in results(store, own, "delete_all"))
    # A person's own message there is not capped: the agent has its full tools again.
    await (await server.send(own, "delete everything")).wait()
    assert deleted == [True]


# ----------------------------------------------------------- the run tree's budget
def tree_errors(store):
    return [e for s in store.sessions() for e in store.entries(s.id)
            if e.entry_type is T.ERROR and e.content.startswith("run tree budget reached")]


async def test_self_spawning_fan_out_stops_at_the_trees_spawn_budget(store):
    fan_out = [spawn("fan", f"part {i}", **{"async": True}) for i in range(3)]
    server = make_server(store, Agent("fan", model="chaz/script", max_spawns=5, max_depth=20,
                                      script=[fan_out, "{result}"]))
    root = server.current_session("fan")
    await (await server.send(root, "go")).wait()
    await server.wait_idle(30)
    assert len(store.sessions()) == 1 + 5
    refused = [e for s in store.sessions() for e in results(store, s.id, "spawn_agent") if e.payload["is_error"]]
    assert refused and all("run tree budget reached: 5 spawns" in e.content for e in refused)
    errors = tree_errors(store)
    assert errors, "the tree ends with an Error entry"
    assert errors[0].content == (
        "run tree budget reached: 5 spawns (max_spawns of agent 'fan', which started the tree); "
        "raise it with Agent(..., max_spawns=N) or `max_spawns = N` in %%chaz agent fan"
    )
    assert errors[0].payload["tree_budget"]["spawns"] == 5
    # The budget is per tree: a person's next message starts a fresh one.
    server.define_agent(Agent("fan", model="chaz/script", max_spawns=5, script=["fresh"]))
    assert (await (await server.send(root, "again")).wait()).content == "fresh"


async def test_model_call_budget_covers_children_and_the_parent_gets_a_tool_error(store):
    adds = [{"tool": "add", "args": {"a": i, "b": 1}} for i in range(3)]
    server = make_server(
        store,
        Agent("root", model="chaz/script", max_model_calls=3, script=[spawn("child", "count"), "{result}"]),
        Agent("child", model="chaz/script", script=[*adds, "done"]),
    )
    root = server.current_session("root")
    reply = await (await server.send(root, "go")).wait()
    (child,) = spawned(store)
    message = ("run tree budget reached: 3 model calls (max_model_calls of agent 'root', which started the tree); "
               "raise it with Agent(..., max_model_calls=N) or `max_model_calls = N` in %%chaz agent root")
    # root 1 call + child 2 calls; the child's 3rd call of the tree's 4 is refused
    assert store.latest(child.id).entry_type is T.ERROR and store.latest(child.id).content == message
    (spawn_result,) = results(store, root, "spawn_agent")
    assert spawn_result.payload["is_error"] and message in spawn_result.content
    assert reply.entry_type is T.ERROR and reply.content == message
    assert reply.payload["tree_budget"]["model_calls"] == 3


async def test_budget_follows_a_run_that_another_run_of_the_tree_triggered(store):
    # No spawn at all: session 1's run writes a Directive into session 2 (same agent), whose
    # run writes one back. Four model calls at the least; the tree has three.
    ping = [
        {"tool": "send_message", "args": {"session_id": sid, "text": "ping", "kind": "directive"}} for sid in (1, 2)
    ]
    server = make_server(store, Agent("pinger", model="chaz/script", max_model_calls=3, script=[ping, "{result}"]))
    first, second = server.new_session("pinger"), server.new_session("pinger")
    assert (first, second) == (1, 2)
    await (await server.send(first, "start")).wait()
    await server.wait_idle(30)
    assert [e.entry_type for e in store.entries(second)][:2] == [T.DIRECTIVE, T.ACK]
    (error, *_) = tree_errors(store)
    assert error.content.startswith("run tree budget reached: 3 model calls (max_model_calls of agent 'pinger'")


def test_tree_budget_limits_are_validated_and_default_out_of_reach():
    agent = Agent("a")
    assert (agent.max_spawns, agent.max_model_calls) == (50, 500)
    with pytest.raises(ValueError, match="max_spawns must be an integer >= 0"):
        Agent("a", max_spawns=-1)
    with pytest.raises(ValueError, match="max_model_calls must be an integer >= 1"):
        Agent("a", max_model_calls=0)


async def test_room_member_writing_to_a_child_session_of_the_room_gets_its_ceiling(store):
    server = make_server(
        store,
        Agent("boss", model="chaz/script", tools=["spawn_agent", "add"], script=[spawn("child", "go"), "{result}"]),
        Agent("child", model="chaz/script", tools=None, script=DELETER),
        Agent("peer", model="chaz/script", tools=None, script=[]),
    )
    room = server.create_room("lab", ["boss", "peer"])
    await server.post(room, T.MESSAGE, "@boss delegate").wait()
    (child,) = spawned(store)
    assert child.parent_id == room
    # another member of the room, who has every tool, re-triggers the room's child session
    server.define_agent(Agent("peer", model="chaz/script", tools=None, script=[
        {"tool": "send_message", "args": {"session_id": child.id, "text": "delete everything", "kind": "directive"}},
        "{result}"]))
    await server.post(room, T.MESSAGE, "@peer poke the child").wait()
    await server.wait_idle(10)
    assert len([e for e in store.entries(child.id) if e.entry_type is T.ACK]) == 2
    assert deleted == []
    assert all(r.payload["is_error"] for r in results(store, child.id, "delete_all"))


async def test_narrowed_child_cannot_schedule_itself_out_of_its_ceiling(store):
    server = make_server(
        store,
        Agent(
            "parent",
            model="chaz/script",
            tools=["spawn_agent", "schedule_create"],
            script=[spawn("child", "go"), "{result}"],
        ),
        Agent(
            "child",
            model="chaz/script",
            tools=None,
            script=[
                {
                    "tool": "schedule_create",
                    "args": {"trigger": "every 1h", "prompt": "delete everything", "session": "fresh"},
                },
                "{result}",
            ],
        ),
    )
    await (await server.send(server.current_session("parent"), "go")).wait()
    (schedule,) = server.schedules.list("child")
    server.define_agent(Agent("child", model="chaz/script", tools=None, script=DELETER))
    fire = await server.fire_agent_schedule(schedule)
    assert store.session(fire.session_id).kind == "schedule"
    assert deleted == []
    assert results(store, fire.session_id, "delete_all")[0].content.startswith("delete_all: unknown tool 'delete_all'")


async def test_schedules_a_tree_creates_count_as_its_spawns(store):
    create = [{"tool": "schedule_create", "args": {"trigger": f"every {n}h", "prompt": "wake", "session": "fresh"}}
              for n in (1, 2)]
    server = make_server(store, Agent("planner", model="chaz/script", max_spawns=1, script=[create, "{result}"]))
    reply = await (await server.send(server.current_session("planner"), "plan")).wait()
    assert len(server.schedules.list("planner")) == 1
    refused = [r for r in results(store, reply.session_id, "schedule_create") if r.payload["is_error"]]
    assert len(refused) == 1 and "run tree budget reached: 1 spawn (max_spawns of agent 'planner'" in refused[0].content
    assert reply.entry_type is T.ERROR
