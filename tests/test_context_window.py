"""A run's context window: newest first from the latest Summary, as far as the token budget
reaches, on both back ends (chaz_nb/core/window.py, issue 14)."""

import pytest

import chaz_nb.core.store.postgres as pgstore_module
import chaz_nb.core.store.duckdb as store_module
import chaz_nb.core.store.log_cache as log_cache
from chaz_nb.core.entries import CONTEXT_TYPES, SUMMARY_PREFIX, EntryType as T, build_context
from chaz_nb.core.store import NewEntry
from chaz_nb.core.window import DEFAULT_CONTEXT_TOKENS
from chaz_nb.errors import AgentError
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent
from recording import Recording
from test_compaction import chat


def fill(store, sid, count, start=0, text="m"):
    """``count`` Messages of 40 characters (10 tokens) each, user and bot in turn."""
    store.append_many(
        NewEntry(sid, T.MESSAGE, "user" if i % 2 == 0 else "bot", f"{text}{i:05d}".ljust(40, "."))
        for i in range(start, start + count)
    )


def contents(entries):
    return [e.content.rstrip(".") for e in entries]


def test_the_window_is_the_newest_entries_within_the_budget(backend_store):
    sid = backend_store.create_session("bot")
    fill(backend_store, sid, 50)
    window = backend_store.context_window(sid, 100)  # ten entries of 10 tokens
    assert contents(window) == [f"m{i:05d}" for i in range(40, 50)]
    assert not window.complete
    whole = backend_store.context_window(sid, 10_000)
    assert len(whole) == 50 and whole.complete
    # the newest entry is kept even when it alone is over the budget
    assert contents(backend_store.context_window(sid, 1)) == ["m00049"]


def test_the_summary_boundary_holds_inside_and_beyond_the_budget(backend_store):
    sid = backend_store.create_session("bot")
    fill(backend_store, sid, 30)
    assert backend_store.context_window(sid, 50)[0].content.startswith("m00025")  # no Summary yet
    backend_store.append(sid, T.SUMMARY, "system", "the first thirty")
    fill(backend_store, sid, 30, start=30)
    # a budget past the Summary: nothing older than it
    window = backend_store.context_window(sid, 10_000)
    assert window[0].entry_type is T.SUMMARY and contents(window[1:]) == [f"m{i:05d}" for i in range(30, 60)]
    assert window.complete
    # a budget that ends before it: the Summary is still the head
    window = backend_store.context_window(sid, 50)
    assert window[0].content == "the first thirty"
    assert contents(window[1:]) == [f"m{i:05d}" for i in range(55, 60)]


def test_a_tool_call_and_its_results_are_kept_or_dropped_together(backend_store):
    sid = backend_store.create_session("bot")
    tools = [T.TOOL_CALL, T.TOOL_RESULT, *CONTEXT_TYPES]
    backend_store.append_many([
        NewEntry(sid, T.MESSAGE, "user", "q" * 40),
        NewEntry(sid, T.TOOL_CALL, "bot", "a" * 40, tool_call_id="c1", tool_name="add"),
        NewEntry(sid, T.TOOL_CALL, "bot", "b" * 40, tool_call_id="c2", tool_name="add"),
        NewEntry(sid, T.TOOL_RESULT, "bot", "1" * 40, tool_call_id="c1", tool_name="add"),
        NewEntry(sid, T.TOOL_RESULT, "bot", "2" * 40, tool_call_id="c2", tool_name="add"),
        NewEntry(sid, T.MESSAGE, "bot", "r" * 40),
    ])
    # 40 tokens reach back to the call c2 but not c1: c1's result goes with its call
    window = backend_store.context_window(sid, 40, types=tools)
    assert [(e.entry_type, e.tool_call_id) for e in window] == [
        (T.TOOL_CALL, "c2"), (T.TOOL_RESULT, "c2"), (T.MESSAGE, None)]
    # 30 tokens reach neither call: no result without its call
    assert [e.content[0] for e in backend_store.context_window(sid, 30, types=tools)] == ["r"]
    assert len(backend_store.context_window(sid, 1000, types=tools)) == 6
    # by default the window holds the context types only
    assert [e.entry_type for e in backend_store.context_window(sid, 1000)] == [T.MESSAGE, T.MESSAGE]


def test_the_context_from_the_window_is_the_context_from_the_whole_log(backend_store):
    sid = backend_store.create_session("bot")
    for round_ in range(3):
        backend_store.append_many(
            NewEntry(sid, [T.MESSAGE, T.ACK, T.DIRECTIVE, T.MESSAGE][i % 4], ["user", "bot", "boss", "ann"][i % 4],
                     "x" * (i * 7 % 90))
            for i in range(40 * round_, 40 * round_ + 40)
        )
        backend_store.append(sid, T.SUMMARY, "system", f"summary {round_}")
    fill(backend_store, sid, 25)
    log = backend_store.entries(sid)
    for budget in (1, 7, 60, 333, 5000):
        for labels in (frozenset(), frozenset({"ann"})):
            window = backend_store.context_window(sid, budget)
            assert build_context(window, "bot", "sys", labels, context_tokens=budget) == \
                build_context(log, "bot", "sys", labels, context_tokens=budget)


def test_a_long_session_is_not_read_whole(backend_store, monkeypatch):
    """The window of a 3,000-entry session reads a few hundred rows, not the session."""
    sid = backend_store.create_session("bot")
    fill(backend_store, sid, 3000)
    built = []
    for module, name in ((store_module, "entry_from_row"), (pgstore_module, "entry_from_row")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda row, original=original: built.append(row[2]) or original(row))
    if isinstance(backend_store, store_module.SessionStore):
        backend_store._logs.clear()  # cold: nothing of the session in memory
    window = backend_store.context_window(sid, 200)
    assert contents(window) == [f"m{i:05d}" for i in range(2980, 3000)]
    assert 0 < len(built) <= 1100 and min(built) > 1000


def test_the_duckdb_cache_holds_a_bounded_window_of_a_long_session(store, monkeypatch):
    monkeypatch.setattr(log_cache, "LOG_CACHE_MAX_ENTRIES", 100)
    monkeypatch.setattr(log_cache, "LOG_CACHE_BYTES", 40_000)
    sessions = [store.create_session("bot") for _ in range(3)]
    for sid in sessions:
        fill(store, sid, 500)
        assert contents(store.entries(sid, after_seq=495)) == [f"m{i:05d}" for i in range(495, 500)]
        fill(store, sid, 20, start=500)
        window = store._logs.get(sid)
        assert window is not None and len(window.entries) <= 100
    assert store._logs.nbytes <= 40_000 and len(store._logs) < 3
    for sid in sessions:
        # what the cache no longer holds comes from the file, whole and in order
        assert [e.seq for e in store.entries(sid)] == list(range(1, 521))
        assert contents(store.entries(sid, after_seq=510)) == [f"m{i:05d}" for i in range(510, 520)]


async def test_an_old_entry_beyond_the_budget_is_not_sent_to_the_model(backend_store):
    backend = Recording()
    server = Server(backend_store, [Agent("bot", context_tokens=60)], backend=backend)
    s = server.current_session("bot")
    await chat(server, s, "old " + "o" * 76, "mid " + "m" * 76)
    await chat(server, s, "new")
    context, _ = backend.calls[-1]
    # "new" 1 token + "echo: mid…" 22 + "mid …" 20; "echo: old…" would pass 60
    assert [m["content"][:3] for m in context] == ["mid", "ech", "new"]
    assert all("ooo" not in m["content"] for m in context)
    await server.compact(s)
    await chat(server, s, "after")
    context, _ = backend.calls[-1]
    assert context[0]["content"].startswith(SUMMARY_PREFIX) and context[-1]["content"] == "after"
    await server.stop()


async def test_the_server_default_budget_and_the_agents_own(store):
    backend = Recording()
    server = Server(store, [Agent("bot"), Agent("wide", context_tokens=100_000)], backend=backend)
    assert server.compaction.context_tokens == DEFAULT_CONTEXT_TOKENS == 32_000
    s = server.current_session("bot")
    # 50k tokens (the agent's own Message: it starts no run): over the default budget
    store.append(s, T.MESSAGE, "bot", "y" * 200_000)
    await chat(server, s, "hi")
    context, _ = backend.calls[-1]
    assert [m["content"] for m in context] == ["hi"]
    w = server.current_session("wide")
    store.append(w, T.MESSAGE, "wide", "y" * 200_000)
    await chat(server, w, "hi")
    context, _ = backend.calls[-1]
    assert [len(m["content"]) for m in context] == [200_000, 2]
    with pytest.raises(AgentError, match="context_tokens must be a positive integer"):
        Agent("x", context_tokens=0)
    await server.stop()


def test_context_tokens_from_the_magic_and_toml(chaz):
    from ipython_harness import ip

    ip.run_line_magic("chaz", "agent short --context-tokens 500")
    assert chaz.agents["short"].context_tokens == 500
    ip.run_cell_magic("chaz", "agent long", "context_tokens = 64000\n")
    assert chaz.agents["long"].context_tokens == 64000


def test_a_summary_older_than_the_cached_window_still_heads_the_context(backend_store, monkeypatch):
    monkeypatch.setattr(log_cache, "LOG_CACHE_MAX_ENTRIES", 10)
    sid = backend_store.create_session("bot")
    fill(backend_store, sid, 4)
    backend_store.append(sid, T.SUMMARY, "system", "early")
    backend_store.entries(sid, after_seq=90)  # the cache, where there is one, holds seq 96..
    fill(backend_store, sid, 100, start=4)
    window = backend_store.context_window(sid, 30)
    assert [e.content for e in window[:1]] == ["early"]
    assert contents(window[1:]) == ["m00101", "m00102", "m00103"]
    assert len(backend_store.context_window(sid, 10_000)) == 101


async def test_a_fire_in_a_long_session_reads_its_window_not_the_session(backend_store, monkeypatch):
    server = Server(backend_store, [Agent("bot", context_tokens=100)])
    sid = server.current_session("bot")
    # the agent's own entries: they start no run
    backend_store.append_many(NewEntry(sid, T.ACK, "bot", f"old run {i}") for i in range(2000))
    backend_store.append_many(NewEntry(sid, T.MESSAGE, "bot", f"note {i}") for i in range(20))
    schedule = server.schedules.add("bot", "every 1h", "wake up", session=sid)
    built = []
    for module, name in ((store_module, "entry_from_row"), (pgstore_module, "entry_from_row")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda row, original=original: built.append(row[2]) or original(row))
    fire = await server.fire_agent_schedule(schedule)
    assert fire.status == "ok" and fire.reply.content == "echo: wake up"
    ack = backend_store.entries(sid, after_seq=2020)[0]
    assert ack.payload["fire_id"] == fire.id and fire.run_id == ack.id  # the fire's run is found
    assert len(built) <= 1100  # and the 2,000 old Acks are not read for it (DuckDB: its cache window)
    await server.stop()
