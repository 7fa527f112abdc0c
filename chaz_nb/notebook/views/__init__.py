"""Live views in the notebook: ipywidgets with a static HTML fallback.

``base.py`` is the one live-view base (subscribe / throttle / finish) every view builds on;
``session.py`` (a session's transcript), ``approval.py`` (an approval request), ``audit.py``
(the audit table), ``display.py`` (escaping and the static fallback).
"""
