"""``%chaz fork``, ``%chaz replay``, ``%chaz compare`` and the sessions tree in IPython's shell."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from ipython_harness import ip

TOOL = '''
import chaz_nb
calls = []

@chaz_nb.tool
def lookup(city: str) -> str:
    """The weather."""
    calls.append(city)
    return f"{city}: sunny"
'''


@pytest.fixture
def session(chaz, capsys):
    ip.run_cell(TOOL).raise_error()
    ip.run_line_magic("chaz", "agent analyst --model chaz/script --tools lookup --script "
                              "'[{\"tool\": \"lookup\", \"args\": {\"city\": \"Oslo\"}}, "
                              "\"<b>bold</b> \\u001b[2J \\u202eevil {result}\"]'")
    ip.run_line_magic("chaz", "@analyst weather?")
    capsys.readouterr()
    return chaz.current_session("analyst")


def test_fork_prints_where_the_branch_comes_from_and_sessions_show_the_tree(chaz, session, capsys):
    ip.run_line_magic("chaz", f"fork {session} --at 2")
    out = capsys.readouterr().out
    assert out.startswith(f"session 2: forked from session {session} at #2 (2 entries copied; "
                          "1 open run(s)/request(s) closed there as forked), agent @analyst")
    ip.run_line_magic("chaz", "sessions")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "forked"
    assert lines[2].startswith("  └ 2") and lines[2].endswith("forked from session 1 at #2")


@pytest.mark.parametrize("line, words", [
    ("fork 1 --at 40", "%chaz fork: cannot fork session 1 at 40: its entries are #1-#5"),
    ("fork 9", "%chaz fork: there is no session 9"),
    ("fork 1 --say hi --rerun", "either says something new"),
    ("fork 1 --replay sometimes", "replay must be recorded or live"),
    ("replay 1", "say which model (--model M) or agent"),
    ("compare 1", "give two sessions"),
])
def test_bad_fork_lines_are_one_line_usage_errors_that_write_nothing(chaz, session, line, words):
    before = (len(chaz.store.sessions()), len(chaz.store.entries(session)))
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")) as err:
        ip.run_line_magic("chaz", line)
    assert "\n" not in str(err.value)
    assert (len(chaz.store.sessions()), len(chaz.store.entries(session))) == before


def test_replay_and_compare_show_escaped_agent_text_and_run_no_tool(chaz, session, capsys):
    ip.run_line_magic("chaz", f"replay {session} --model chaz/script")
    assert "every trigger replayed by @analyst@chaz-script" in capsys.readouterr().out
    assert ip.user_ns["calls"] == ["Oslo"]
    from chaz_nb.notebook.views.compare import CompareView

    view = CompareView(chaz.compare(session, 2))
    html, text = view.html(), view.text()
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html
    assert "\x1b" not in html + text and "\\x1b[2J" in text and "<U+202E>" in text
    assert "the same tool calls on both sides" in text


def test_compare_after_a_fork_made_mid_run_shows_what_the_source_did_after_the_point(chaz, session, capsys):
    # the source: #1 weather?, #2 Ack, #3 lookup(Oslo), #4 its result, #5 the reply; forked at #2
    ip.run_line_magic("chaz", f"fork {session} --at 2 --model chaz/echo --say 'and tomorrow?'")
    capsys.readouterr()
    ip.run_line_magic("chaz", f"compare {session} 2")
    out = capsys.readouterr().out
    assert "the same tool calls on both sides" not in out
    assert "#2 (open at the fork point #2, went on after it; totals: the whole run)" in out
    assert 'lookup({"city": "Oslo"})  ◀ first difference' in out  # the source's call after #2
    assert "→ <b>bold</b> \\x1b[2J <U+202E>evil Oslo: sunny" in out  # and its reply
    from chaz_nb.notebook.views.compare import CompareView

    html = CompareView(chaz.compare(session, 2)).html()
    assert "no runs" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html and "\u202e" not in html


def test_log_and_the_cell_views_show_each_rows_seq_for_fork_at(chaz, session, capsys, monkeypatch):
    import IPython.display

    shown: list[dict] = []
    monkeypatch.setattr(IPython.display, "display", lambda data, **kw: shown.append(data))
    monkeypatch.setattr(IPython.display, "update_display", lambda data, **kw: shown.append(data))
    ip.run_line_magic("chaz", f"log {session}")
    data = shown[-1]
    lines = data["text/plain"].splitlines()
    # #1 weather?, #2 its run's Ack (a status, no row), #3 the call (its result folded in), #5 the reply
    assert lines[1] == "#1 user: weather?"
    assert lines[2].startswith('#3   ⚙ lookup({"city": "Oslo"})')
    assert lines[3] == "#5 analyst: <b>bold</b> <U+001B>[2J <U+202E>evil Oslo: sunny"
    html = data["text/html"]
    seq = ("<span class='chaz-seq' title='entry #{0} of the session: %chaz fork SESSION --at {0} branches "
           "from here'>#{0}</span>")
    assert html.count("class='chaz-seq'") == 3
    for n, badge in ((1, "message"), (3, "tool"), (5, "message")):
        assert seq.format(n) + f"<span class='chaz-badge chaz-badge-{badge}'>" in html
    assert "<b>bold</b>" not in html and "\x1b" not in html and "\u202e" not in html  # the reply, escaped
    # a turn's cell view: the rows it shows, with their seqs (its last form, once the run ended)
    ip.run_line_magic("chaz", "@analyst again?")
    cell = shown[-1]["text/plain"]
    assert "#6 user: again?" in cell and "#8   ⚙ lookup(" in cell


def test_replay_and_fork_take_api_base_so_a_local_model_is_called_there(chaz, session, capsys, model_server,
                                                                       monkeypatch):
    from fakes.openai_server import Call, Reply

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-not-checked")
    model_server.script(Reply(tool_calls=[Call("lookup", {"city": "Oslo"})]), Reply(text="local: sunny"))
    ip.run_line_magic("chaz", f"replay {session} --model openai/smol --api-base {model_server.openai_base} "
                              "--system 'Be brief.'")
    assert "every trigger replayed by @analyst@openai-smol-prompt-" in capsys.readouterr().out
    branch = chaz.store.session(chaz.store.sessions()[-1].id)
    assert chaz.store.latest(branch.id).content == "local: sunny"
    requests = model_server.chat_requests()
    assert len(requests) == 2 and requests[0].body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert ip.user_ns["calls"] == ["Oslo"]  # the call was answered from the recording
    assert chaz.agents[branch.agent].api_base == model_server.openai_base
    # a fork with another server alone: a definition named after its host
    ip.run_line_magic("chaz", f"fork {session} --at 1 --api-base {model_server.openai_base}")
    out = capsys.readouterr().out
    assert f"agent @analyst@127.0.0.1-{model_server.port} (a new definition)" in out


def test_a_bad_api_base_on_replay_is_one_line_that_writes_nothing(chaz, session):
    before = len(chaz.store.sessions())
    with pytest.raises(UsageError, match=r"^%chaz replay: cannot make analyst@openai-smol: .*api_base must be an "
                                         r"http:// or https:// URL") as err:
        ip.run_line_magic("chaz", f"replay {session} --model openai/smol --api-base ftp://nowhere")
    assert "\n" not in str(err.value) and len(chaz.store.sessions()) == before
