"""Reading a view's text/plain as a person reads its rows."""

from __future__ import annotations

import re

_SEQ = re.compile(r"^#\d+ ")


def unseq(line: str) -> str:
    """A transcript row without its leading ``#SEQ `` (what ``--at`` takes), for tests that
    check a row's words rather than its place in the log."""
    return _SEQ.sub("", line, count=1)


def rows(text: str) -> list[str]:
    """The lines of a view's text, each without its ``#SEQ `` prefix."""
    return [unseq(line) for line in text.splitlines()]
