"""The live-view base (chaz_nb/notebook/views/base.py): every live view follows, throttles and
finishes the same way."""

from __future__ import annotations

import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.notebook.views.audit import AuditView
from chaz_nb.notebook.views.base import LiveView
from chaz_nb.notebook.views.session import SessionView


def _views(store, sid):
    return [
        SessionView(store, sid, status=lambda _sid: "running", follow=True),
        AuditView(store, sid, interval=0.05),
    ]


@pytest.mark.parametrize("which", [0, 1], ids=["session", "audit"])
async def test_finishing_a_live_view_stops_following_and_tells_its_listeners(store, which):
    sid = store.create_session("assistant", "chat")
    view = _views(store, sid)[which]
    assert isinstance(view, LiveView) and view.following
    told = []
    view.on_update(told.append)
    view.finish()
    assert not view.following
    assert told == [view]  # on_update's contract: "and when the view finishes"
    store.append(sid, EntryType.MESSAGE, "user", "after the end")
    assert not view.following  # a write after finish does not bring it back
