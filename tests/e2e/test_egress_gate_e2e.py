"""End-to-end: the egress gate's card in JupyterLab (a real kernel, headless Chromium).

An agent on a model server the test runs (it records every request body) is defined with
``--egress ask`` and a host list that does not name that server: its ``kernel__query`` result
would leave, so the cell shows a card saying what (the variable, a preview) and where (the
model and host). The test clicks Deny, as a person would: the run goes on, the model reads one
line saying the data was withheld, and the value is in no request the server received.

Screenshots: ``<tmp_path>/shots`` and copies in /tmp/chaz_e2e_shots.
"""

from __future__ import annotations

import functools

import pytest
from waiting import poll

pytestmark = pytest.mark.e2e

_wait = functools.partial(poll, timeout=60)

VALUE = "zebra-7731"


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "outputs": [], "execution_count": None}


def test_the_egress_card_is_denied_by_a_click_and_nothing_leaves(lab, model_server):
    from fakes.openai_server import Call, Reply

    model_server.script(Reply(tool_calls=[Call("kernel__query", {"sql": "SELECT name FROM sales"})]),
                        Reply("nothing came through"))
    setup = ("%load_ext chaz_nb\nimport os\nimport pandas as pd\n"
             "os.environ['OPENAI_API_KEY'] = 'sk-test-not-real-000000000000'\n"
             f"sales = pd.DataFrame({{'name': ['{VALUE}']}})")
    agent = (f"%chaz agent scout --model openai/m --api-base {model_server.openai_base} --data full "
             "--egress ask --egress-host models.example.org")
    page = lab.page
    lab.write_notebook("egress.ipynb", [_code(setup), _code(agent), _code("%chaz @scout look at sales")])
    lab.open("egress.ipynb")
    lab.run_all(timeout=180)
    waiting = page.locator(".jp-Cell").nth(2)
    card = waiting.locator(".chaz-approval-widget")
    card.wait_for(timeout=60_000)
    _wait(lambda: "would send the notebook's data to openai/m at 127.0.0.1" in card.inner_text(),
          what="the card to say where the data would go")
    assert VALUE in card.inner_text() and "sales" in card.inner_text()  # what: the variable, a preview
    allow = card.get_by_role("button", name="Allow once")
    assert allow.count() == 1 and card.get_by_role("button", name="Allow for this session").count() == 1
    lab.shot("egress-card")
    card.get_by_role("button", name="Deny").click()
    _wait(lambda: len(model_server.chat_requests()) == 2, what="the run to go on after the deny")
    bodies = [r.raw for r in model_server.chat_requests()]
    assert not any(VALUE.encode() in b for b in bodies)
    assert b"[withheld:" in bodies[1]
    _wait(lambda: "nothing came through" in waiting.inner_text(), what="the reply")
    lab.shot("egress-denied")
    assert lab.page_errors == []


def test_the_egress_card_in_the_sidebar_allows_for_the_session(lab, model_server):
    """The same request in the Chaz sidebar: it says where the data would go, has no Edit, and
    "Allow for this session" lets this and the agent's next send to that host go unasked."""
    from fakes.openai_server import Call, Reply

    query = Call("kernel__query", {"sql": "SELECT name FROM sales"})
    model_server.script(Reply(tool_calls=[query]), Reply(tool_calls=[query]), Reply("seen it twice"))
    setup = ("%load_ext chaz_nb\nimport os\nimport pandas as pd\n"
             "os.environ['OPENAI_API_KEY'] = 'sk-test-not-real-000000000000'\n"
             f"sales = pd.DataFrame({{'name': ['{VALUE}']}})")
    agent = (f"%chaz agent scout --model openai/m --api-base {model_server.openai_base} --data full "
             "--egress-host models.example.org")
    lab.write_notebook("egress-side.ipynb", [_code(setup), _code(agent), _code("%chaz @scout look at sales")])
    lab.open("egress-side.ipynb")
    lab.run_all(timeout=180)
    lab.palette("Chaz: show sessions")
    lab.wait_sidebar_status("connected", timeout=60)
    cards = lab.pending_cards()
    _wait(lambda: cards.count() == 1, what="the egress request in the sidebar")
    side = cards.first
    _wait(lambda: "would send the notebook's data to openai/m at 127.0.0.1" in side.inner_text(),
          what="where the data would go")
    assert side.locator(".chaz-edit").count() == 0
    lab.shot("egress-sidebar")
    side.get_by_role("button", name="Allow for this session").click()
    _wait(lambda: len(model_server.chat_requests()) == 3, what="both results sent, asked once")
    bodies = [r.raw for r in model_server.chat_requests()]
    assert [VALUE.encode() in b for b in bodies] == [False, True, True]
    _wait(lambda: cards.count() == 0, what="no pending cards")
    assert lab.page_errors == []
