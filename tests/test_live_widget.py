"""The live view's one widget (notebook/views/live.py) and its front end (static/session.js)."""

from __future__ import annotations

import re
from pathlib import Path

from chaz_nb.notebook.views import live
from chaz_nb.notebook.views.stop_button import SESSION_CLASS

ROOT = Path(__file__).resolve().parents[1]
ESM = (ROOT / "chaz_nb/notebook/views/static/session.js").read_text(encoding="utf-8")


def test_the_widget_speaks_anywidgets_front_end_protocol():
    """live.py names anywidget's front-end model and view without importing the package (its
    psygnal costs the kernel ~5 MB): an anywidget that renames them fails here."""
    import anywidget

    ours = live.widget_class()(dict.fromkeys(live.STATE_KEYS, ""))
    class Theirs(anywidget.AnyWidget):
        _esm = "export default {}"
        _css = ".x{}"

    theirs = Theirs()
    try:
        for name in ("_model_name", "_model_module", "_model_module_version",
                     "_view_name", "_view_module", "_view_module_version"):
            assert getattr(ours, name) == getattr(theirs, name), name
        for trait in ("_esm", "_css", "_anywidget_id"):  # the traits anywidget's front end reads
            assert theirs.trait_metadata(trait, "sync") and ours.trait_metadata(trait, "sync")
        assert ours._esm == ESM and "chaz-session-view" in ours._css
        state = ours.get_state()
        assert set(live.STATE_KEYS) <= set(state)  # the rows go with the open and a state request
        assert ours.layout is ours.layout  # the kernel's shared Layout: no widget of its own
    finally:
        ours.close()
        theirs.close()


def test_the_stop_button_carries_the_class_the_lab_extension_reads():
    ts = (ROOT / "labextension/src/stop.ts").read_text(encoding="utf-8")
    assert f"export const SESSION_CLASS = '{SESSION_CLASS}';" in ts
    assert '"jupyter-button widget-button chaz-btn mod-danger chaz-stop chaz-stop-session-" + s.session' in ESM
    assert 'button("■ Stop", "mod-danger chaz-stop")' in ESM  # button.chaz-stop: stop.ts's selector


def test_every_event_the_page_sends_is_one_the_kernel_handles():
    sent = set(re.findall(r'event: "(\w+)"', ESM))
    assert sent == {"stop", "earlier", "decide", "approve_edited", "shown"}
    handled = (ROOT / "chaz_nb/notebook/views/session_live.py").read_text(encoding="utf-8")
    for event in sent:
        assert f'"{event}"' in handled, event


def test_a_change_is_one_message_with_only_what_changed():
    sent: list[dict] = []
    events: list[dict] = []
    w = live.LiveWidget({"head": "", "earlier": "", "rows": ["a", "b"], "cards": {}, "tail": "",
                         "stop": None, "footer": ""}, events.append)
    w.set_rows(["a", "b", "c"], [2])  # before the comm opens: goes with the open, no message
    assert not w.opened and not w.pending
    widget = w.widget
    widget.send = sent.append
    assert widget.chaz_state["rows"] == ["a", "b", "c"]
    w.set_rows(["a", "B", "c", "d"], [1, 3])
    w.set("tail", "<i>working</i>")
    w.set_card("r1", {"row": 0, "html": "x", "done": False})
    assert w.push() and not w.push()  # one message; nothing left to send
    assert sent == [{"tail": "<i>working</i>", "cards": {"r1": {"row": 0, "html": "x", "done": False}},
                     "rows": {"set": {"1": "B", "3": "d"}, "n": 4}}]
    w.reset()
    assert w.push() and sent[-1]["reset"]["rows"] == ["a", "B", "c", "d"]
    w.event({"event": "stop"})
    assert events == [{"event": "stop"}]
    w.close()
    assert w.closed and w.widget is None
