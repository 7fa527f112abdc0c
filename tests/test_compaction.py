import pytest

from chaz_nb.server.agents import Agent
from chaz_nb.server.compaction import CompactionError
from chaz_nb.core.entries import SUMMARY_PREFIX, Entry, EntryType as T, build_context, fit_to_budget
from chaz_nb.server import Server
from recording import Recording


async def chat(server, session, *texts):
    for text in texts:
        await (await server.send(session, text)).wait()


async def test_compact_needs_three_context_entries(store):
    server = Server(store, [Agent("bot")])
    s = server.current_session("bot")
    await chat(server, s, "one")  # two context entries: the question and the echo
    with pytest.raises(CompactionError) as info:
        await server.compact(s)
    assert str(info.value) == (
        f"nothing to compact in session {s}: 2 message(s) since the last Summary; compaction needs at least 3"
    )


async def test_compact_writes_a_summary_and_later_context_starts_there(store):
    backend = Recording()
    server = Server(store, [Agent("bot", system="Be brief.")], backend=backend)
    s = server.current_session("bot")
    await chat(server, s, "my name is Ada", "I like tea")
    summary = await server.compact(s, by="user")
    assert summary.entry_type is T.SUMMARY and summary.sender == "system"
    # the offline model answers a summarize request deterministically
    assert summary.content == (
        "Summary of earlier conversation:\n- user: my name is Ada\n- assistant: echo: my name is Ada\n"
        "- user: I like tea\n- assistant: echo: I like tea"
    )
    assert summary.payload["by"] == "user" and summary.payload["entries"] == 4
    assert summary.payload["prompt_tokens"] > 0 and summary.payload["completion_tokens"] > 0
    messages, options = backend.calls[-1]
    assert options["options"]["metadata"] == {"chaz_task": "summarize"}
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("Summarize the conversation")
    await chat(server, s, "what do you know?")
    context, _ = backend.calls[-1]
    assert context == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": SUMMARY_PREFIX + summary.content},
        {"role": "user", "content": "what do you know?"},
    ]
    # older entries stay in the store for audit
    assert [e.content for e in store.entries(s, types=[T.MESSAGE])][:2] == ["my name is Ada", "echo: my name is Ada"]
    # and a second compaction needs three new entries since this Summary
    with pytest.raises(CompactionError, match="2 message"):
        await server.compact(s)


async def test_agents_compact_tool_writes_their_summary(store):
    backend = Recording()
    agent = Agent("note", model="chaz/script",
                  script=[{"tool": "compact", "args": {"summary": "User is Ada; likes tea."}}, "noted"])
    server = Server(store, [agent], backend=backend)
    s = server.current_session("note")
    await chat(server, s, "I am Ada and I like tea")
    summary = [e for e in store.entries(s) if e.entry_type is T.SUMMARY][0]
    assert summary.sender == "note" and summary.content == "User is Ada; likes tea."
    assert summary.payload["by"] == "note" and summary.payload["run_id"] is not None
    await chat(server, s, "next")
    context, _ = backend.calls[2]  # the first model call of the second run
    assert context == [
        {"role": "user", "content": SUMMARY_PREFIX + "User is Ada; likes tea."},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "next"},
    ]


def _entry(seq, etype, sender, content):
    return Entry(id=seq, session_id=1, seq=seq, entry_type=etype, sender=sender, content=content)


def test_context_is_filled_newest_first_within_the_token_budget():
    entries = [
        _entry(1, T.MESSAGE, "user", "x" * 400),  # dropped: before the Summary
        _entry(2, T.SUMMARY, "system", "s" * 40),  # 10 tokens, always kept
        _entry(3, T.MESSAGE, "user", "a" * 40),
        _entry(4, T.MESSAGE, "bot", "b" * 40),
        _entry(5, T.MESSAGE, "user", "c" * 40),
    ]
    full = build_context(entries, "bot", "sys")  # system 1 token
    assert len(full) == 5
    trimmed = build_context(entries, "bot", "sys", context_tokens=40)  # 1 + 19 (Summary) + 10 + 10
    assert [m["content"][-1] for m in trimmed] == ["s", "s", "b", "c"]
    assert [m["content"][-1] for m in build_context(entries, "bot", "sys", context_tokens=39)] == ["s", "s", "c"]
    assert trimmed[0] == {"role": "system", "content": "sys"}
    # the newest message is kept even when it alone is over the budget
    assert fit_to_budget([{"role": "user", "content": "z" * 400}], 1) == [{"role": "user", "content": "z" * 400}]


async def test_server_budget_and_automatic_compaction(store):
    backend = Recording()
    server = Server(store, [Agent("bot")], backend=backend)
    s = server.current_session("bot")
    await chat(server, s, "a" * 80, "b" * 80)
    server.compaction.context_tokens = 50
    await chat(server, s, "c" * 80)
    context, _ = backend.calls[-1]
    assert [m["content"][-1] for m in context] == ["b", "c"]  # newest-first within 50 tokens
    server.compaction.context_tokens = None
    server.compaction.auto_compact_tokens = 60
    # after a run whose context passed 60 tokens, the server compacts before the next run
    await chat(server, s, "d")
    summaries = [e for e in store.entries(s) if e.entry_type is T.SUMMARY]
    assert len(summaries) == 1 and summaries[0].payload["by"] == "auto" and summaries[0].sender == "system"
    assert summaries[0].content.endswith("- user: d\n- assistant: echo: d")
    await chat(server, s, "e")
    context, _ = backend.calls[-1]
    assert context == [
        {"role": "user", "content": SUMMARY_PREFIX + summaries[0].content},
        {"role": "user", "content": "e"},
    ]
    assert len([e for e in store.entries(s) if e.entry_type is T.SUMMARY]) == 1  # small again: no new Summary
