"""Live views in the notebook: widgets with a static HTML fallback.

``base.py`` is the one live-view base (subscribe / throttle / finish) every view builds on;
``session.py`` (a session's transcript; its live part is ONE anywidget: ``session_live.py``
keeps its state, ``live.py`` is the widget, ``static/session.js`` its front end),
``stop_button.py`` (the Stop row's state), ``approval.py`` (an approval request's card),
``audit.py`` (the audit table, ipywidgets), ``display.py`` (escaping and the static fallback).
"""
