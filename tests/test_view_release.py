"""A finished `%chaz` view lets go (issue 32 §2): its output is the static transcript, and the
kernel holds none of its widgets (nor their Layout and Style widgets) once nothing in it waits
for a person. Through IPython's test shell (globalipapp), offline ``chaz/*`` models."""

from __future__ import annotations

import pytest

from chaz_nb.notebook import controller
from chaz_nb.notebook.views.display import WIDGET_MIME

from ipython_harness import ip, park_janitor


def live_widgets() -> int:
    """How many widgets the kernel holds (ipywidgets 8: ``widget._instances``; 7: ``Widget.widgets``)."""
    from ipywidgets.widgets import widget

    registry = getattr(widget, "_instances", None)
    return len(registry if registry is not None else widget.Widget.widgets)


@pytest.fixture
def outputs(monkeypatch):
    """Every display and display update the shell publishes: ``(data, display_id, update)``."""
    seen: list[tuple[dict, str | None, bool]] = []
    publish = ip.display_pub.publish

    def record(data, metadata=None, source=None, *, transient=None, update=False, **kw):
        seen.append((data, (transient or {}).get("display_id"), update))
        return publish(data, metadata=metadata, transient=transient, update=update, **kw)

    monkeypatch.setattr(ip.display_pub, "publish", record)
    return seen


def final_output(outputs: list, display_id: str) -> dict:
    return [data for data, did, _ in outputs if did == display_id][-1]


def test_finished_turns_hold_no_widgets_and_their_output_is_the_html_transcript(chaz, outputs, monkeypatch):
    from chaz_nb.notebook.views import base

    monkeypatch.setattr(base, "DISPLAY_CAP", 0.0)  # live at once (chaz/echo sends no request to wait for)
    ip.run_line_magic("chaz", "@assistant warm up")  # first-use imports and caches
    before = live_widgets()
    for n in range(6):
        ip.run_line_magic("chaz", f"@assistant hello <b>{n}</b>")
        assert live_widgets() == before, f"after {n + 1} finished turns the kernel holds more widgets"
    # the views are let go too: nothing keeps a finished one
    assert [v for v in controller.current_state().views if not v.following] == []

    display_id = outputs[-1][1]
    assert display_id is not None
    shown = [data for data, did, update in outputs if did == display_id and not update]
    assert WIDGET_MIME in shown[0], "the cell showed the live view while it ran"
    last = final_output(outputs, display_id)
    assert WIDGET_MIME not in last
    html = last["text/html"]
    assert "hello &lt;b&gt;5&lt;/b&gt;" in html  # the rows, escaped
    assert "application/vnd.chaz.session+json" in last and "hello <b>5</b>" in last["text/plain"]


def test_a_parked_view_keeps_its_card_and_stop_until_the_decision_then_lets_go(chaz, outputs):
    ip.run_line_magic("chaz", "@assistant warm up")
    before = live_widgets()

    sid = park_janitor(chaz)
    [view] = [v for v in controller.current_state().views if v.session_id == sid]
    # a person is asked: the view is live, its card's buttons and its Stop row work
    assert view.following and view.widget is not None
    [card] = view._approval_widgets.values()
    assert card.request_id in view.widget.chaz_state["cards"] and not card.decided  # drawn in the one widget
    assert view.stop_button is not None and view.stop_button.visible and not view.stop_button.disabled
    assert live_widgets() > before
    assert WIDGET_MIME in outputs[-1][0]

    view.frontend_event("decide", request_id=card.request_id, decision="approve")  # the card's Approve
    ip.run_line_magic("chaz", f"wait {sid}")  # the run is over
    assert chaz.session_status(sid) == "idle"
    assert live_widgets() == before
    assert [v for v in controller.current_state().views if not v.following] == []
    parked_cell = final_output(outputs, view.display_id)
    assert WIDGET_MIME not in parked_cell
    assert "wipe" in parked_cell["text/html"]


def test_a_turn_makes_one_widget_and_no_layout_or_style_of_its_own(chaz, monkeypatch):
    from ipywidgets import Layout, Widget
    from ipywidgets.widgets.widget_style import Style

    from chaz_nb.notebook.views import base

    # the view opens at once, not once the model request has left: chaz/echo sends none, and
    # its run would be over (a static output, no widget) before the cap
    monkeypatch.setattr(base, "DISPLAY_CAP", 0.0)
    ip.run_line_magic("chaz", "@assistant warm up")  # the kernel's shared Layout and Styles exist now
    made: list = []
    monkeypatch.setattr(Widget, "_widget_construction_callback", made.append)
    ip.run_line_magic("chaz", "@assistant hello")
    looks = [type(w).__name__ for w in made if isinstance(w, (Layout, Style))]
    assert looks == [], looks  # the view's one widget uses the kernel's shared Layout
    assert [type(w).__name__ for w in made] == ["SessionWidget"]  # rows, cards and Stop: one widget


def test_a_shared_look_that_was_closed_is_made_again_and_never_closed_with_a_view():
    import ipywidgets as w

    from chaz_nb.notebook.views.display import close_widget, plain

    first = w.HTML("a", **plain("HTMLStyle"))
    close_widget(first)
    assert first.comm is None and plain()["layout"].comm is not None  # the shared one stays open
    plain()["layout"].close()  # e.g. Widget.close_all()
    second = w.HTML("b", **plain("HTMLStyle"))
    assert second.layout.comm is not None and second.layout is not first.layout
    close_widget(second)
