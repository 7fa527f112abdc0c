"""Code a tool gets (``kernel__run``, or any call whose one argument is ``code``), shown as code.

The approval card, the session view and ``%chaz approve --edit`` use it: a call whose arguments
are exactly ``{"code": TEXT}`` is shown as a code block (monospace, line numbers) instead of
JSON. Every line is HTML-escaped and each character that reorders or hides text is named
(``<U+202E>``), as the approval card names them in JSON arguments.
"""

from __future__ import annotations

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


def code_html(code: str, max_lines: int = MAX_CODE_LINES) -> str:
    """``code`` as an escaped, numbered code block (hidden characters named)."""
    lines = name_hidden(code).split("\n")
    shown = lines[:max_lines]
    rows = "".join(
        f"<span class='chaz-code-line'><span class='chaz-code-no'>{n}</span>{esc(line)}</span>"
        for n, line in enumerate(shown, 1)
    )
    more = len(lines) - len(shown)
    tail = ""
    if more:
        tail = f"<span class='chaz-code-line chaz-code-more'>… {more} more lines (%chaz log has them)</span>"
    return f"<pre class='chaz-code'>{rows}{tail}</pre>"


def code_text(code: str, max_lines: int = MAX_CODE_LINES) -> str:
    """``code`` as numbered plain-text lines (hidden characters named)."""
    lines = name_hidden(code).split("\n")
    width = len(str(min(len(lines), max_lines)))
    out = [f"{n:>{width}} │ {line}" for n, line in enumerate(lines[:max_lines], 1)]
    if len(lines) > max_lines:
        out.append(f"… {len(lines) - max_lines} more lines (%chaz log has them)")
    return "\n".join(out)
