"""Code a tool gets (``kernel__run``, or any call whose one argument is ``code``), shown as code.

The approval card, the session view and ``%chaz approve --edit`` use it: a call whose arguments
are exactly ``{"code": TEXT}`` is shown as a code block (monospace, line numbers) instead of
JSON. Every line is HTML-escaped and each character that reorders or hides text is named
(``<U+202E>``), as the approval card names them in JSON arguments.
"""

from __future__ import annotations

import re
from typing import Any

from ...core.controls import name_hidden
from .display import esc

#: lines of code drawn in a view (the log has all of them)
MAX_CODE_LINES = 400

CODE_CSS = (
    ".chaz-code{margin:2px 0;padding:2px 0;font-family:var(--jp-code-font-family,monospace);"
    "font-size:var(--jp-code-font-size,12px);background:var(--jp-cell-editor-background,#f7f7f7);"
    "border:1px solid var(--jp-border-color2,#ddd);border-radius:2px;overflow-x:auto}"
    ".chaz-code-line{display:block;white-space:pre}"
    ".chaz-code-no{display:inline-block;min-width:2.5em;padding-right:.6em;text-align:right;"
    "color:var(--jp-ui-font-color3,#999);user-select:none}"
)


def code_of(arguments: Any) -> str | None:
    """The code of a call whose arguments are exactly ``{"code": TEXT}``; else None."""
    if isinstance(arguments, dict) and list(arguments) == ["code"] and isinstance(arguments["code"], str):
        return arguments["code"]
    return None


#: characters of one line drawn on one row; the rest goes on rows marked ``↪``
WRAP_CHARS = 160
#: a run of this many blanks inside a line (of ``_LEAD_BLANKS`` at its start) is shown as its count
_INNER_BLANKS = re.compile(r"(?<=\S)[ \t\u00a0\u2000-\u200a\u3000]{16,}")
_LEAD_BLANKS = re.compile(r"^[ \t\u00a0\u2000-\u200a\u3000]{64,}")
CONTINUED = "↪"


def _blanks(match: re.Match[str]) -> str:
    return f"⟨{len(match.group(0)):,} blanks⟩"


def code_rows(code: str, max_lines: int = MAX_CODE_LINES) -> tuple[list[tuple[str, str]], int]:
    """``code`` as the rows a view draws, (number, text), and how many lines were left out.

    Nothing that runs is out of sight: a long run of blanks (``x = 1`` then 3,000 spaces, then
    a call) is shown as ``⟨3,000 blanks⟩``, and a line longer than ``WRAP_CHARS`` goes on
    rows numbered ``↪``, where a card would otherwise need scrolling sideways to see it."""
    lines = name_hidden(code).split("\n")
    rows: list[tuple[str, str]] = []
    for n, line in enumerate(lines[:max_lines], 1):
        line = _LEAD_BLANKS.sub(_blanks, _INNER_BLANKS.sub(_blanks, line))
        rows.append((str(n), line[:WRAP_CHARS]))
        rows += [(CONTINUED, line[i:i + WRAP_CHARS]) for i in range(WRAP_CHARS, len(line), WRAP_CHARS)]
    return rows, max(0, len(lines) - max_lines)


def code_html(code: str, max_lines: int = MAX_CODE_LINES) -> str:
    """``code`` as an escaped, numbered code block (hidden characters named, long lines marked)."""
    shown, more = code_rows(code, max_lines)
    rows = "".join(
        f"<span class='chaz-code-line'><span class='chaz-code-no'>{esc(n)}</span>{esc(line)}</span>"
        for n, line in shown
    )
    tail = ""
    if more:
        tail = f"<span class='chaz-code-line chaz-code-more'>… {more} more lines (%chaz log has them)</span>"
    return f"<pre class='chaz-code'>{rows}{tail}</pre>"


def code_text(code: str, max_lines: int = MAX_CODE_LINES) -> str:
    """``code`` as numbered plain-text lines (hidden characters named, long lines marked)."""
    shown, more = code_rows(code, max_lines)
    width = max((len(n) for n, _ in shown), default=1)
    out = [f"{n:>{width}} │ {line}" for n, line in shown]
    if more:
        out.append(f"… {more} more lines (%chaz log has them)")
    return "\n".join(out)
