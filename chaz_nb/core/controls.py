"""Control characters shown as text: what an agent, a tool or an MCP server wrote, made visible.

A tool's output, an MCP result or a server's stderr can hold ANSI escapes (colours that hide
text, cursor moves that overwrite a line, OSC 8 links whose target differs from their text) and
bidirectional or zero-width characters (a right-to-left override makes ``/srv/\u202etxt.sgol``
read as ``/srv/logs.txt``). Every surface a person reads them on (approval cards, the text/plain
form of views, the stream output of the magics, ``%chaz mcp list``, ``%chaz log``, ``%chaz
pending``) shows each such character by name, ``<U+001B>``, instead of obeying it. Newlines,
tabs and a CR before a newline are kept.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import TextIO

#: C0 controls but tab and newline, DEL and the C1 controls, a CR not ending a line, and the
#: characters that reorder or hide text (bidi controls, zero-width characters, BOM)
_CONTROLS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
    "|\r(?!\n)"
)


def shown_controls(text: str) -> str:
    """``text`` with every control, bidi and zero-width character named (``<U+202E>``)."""
    if text.isascii() and text.isprintable():
        return text  # the common case, ~50x faster than the substitution
    return _CONTROLS.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def name_hidden(text: str) -> str:
    """``text`` with each control, bidi and zero-width character named (``<U+202E>``), as the
    approval card shows it (views that show code a tool gets use it too)."""
    return shown_controls(text)


class ShownControlsStream:
    """A text stream that writes to ``inner`` with control characters shown (``shown_controls``)."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(shown_controls(text))
        return len(text)

    def __getattr__(self, name: str) -> object:  # flush, isatty, encoding... of the stream it wraps
        return getattr(self.inner, name)


@contextlib.contextmanager
def showing_controls() -> Iterator[None]:
    """While inside: what is printed to stdout and stderr has its control characters shown."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ShownControlsStream(out), ShownControlsStream(err)
    try:
        yield
    finally:
        # (restored only if still ours: code inside may have replaced them for good reasons)
        if isinstance(sys.stdout, ShownControlsStream) and sys.stdout.inner is out:
            sys.stdout = out
        if isinstance(sys.stderr, ShownControlsStream) and sys.stderr.inner is err:
            sys.stderr = err
