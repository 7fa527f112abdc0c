"""``%chaz cells`` and ``%chaz export``: an agent's approved code as notebook cells, without the
lab extension (issue 44 §1).

- ``%chaz cells SESSION``: the session's approved ``kernel__run`` code that ran, as cells: one
  is put in a new cell below (``set_next_input``), several are printed as one block (each starts
  with its ``# chaz:`` line) to copy.
- ``%chaz cells off|on``: the lab extension's cells for this kernel (every agent); an agent's
  own switch is ``%chaz agent NAME --no-cells`` / ``--cells``.
- ``%chaz export SESSION --notebook PATH [--force]``: a new notebook: the session's Messages as
  markdown cells, the approved code as code cells with the ``chaz`` metadata, in log order.
"""

from __future__ import annotations

import html
import os
from typing import Any

from IPython.core.error import UsageError

from ...core.controls import shown_controls
from .args import HelpShown, split_words
from .host import MagicsHost
from .turns import parse_session

CELLS_USAGE = "usage: %chaz cells [SESSION] | %chaz cells off|on"
EXPORT_USAGE = "usage: %chaz export [SESSION] --notebook PATH [--force]"


class CellsCommands(MagicsHost):
    """Mixin of ChazMagics: ``_cmd_cells`` and ``_cmd_export``."""

    def _cmd_cells(self, rest: str) -> None:
        state = self.state
        server = state.server
        words = rest.split()
        if len(words) > 1:
            raise UsageError(f"%chaz cells takes one SESSION, or off or on; {CELLS_USAGE}")
        if words and words[0] in ("off", "on"):
            server.cells_enabled = words[0] == "on"
            print("approved agent code now becomes a cell below the cell that asked" if server.cells_enabled else
                  "approved agent code no longer becomes cells here (the log keeps it: %chaz cells SESSION)")
            return
        sid = parse_session(server, rest, state.last_session, "cells")
        cells = server.approved_code(sid)
        if not cells:
            print(f"session {sid} has no approved kernel__run code that ran")
            return
        if len(cells) == 1:
            self.shell.set_next_input(cells[0].source(), replace=False)
            print(f"session {sid}: 1 approved cell, put in a new cell below")
            return
        print(f"# session {sid}: {len(cells)} approved cells, in log order\n")
        print("\n\n".join(cell.source() for cell in cells))

    def _cmd_export(self, rest: str) -> None:
        from .usage import export_parser

        state = self.state
        server = state.server
        try:
            args = export_parser().parse_args(split_words(rest))
        except HelpShown:
            return
        if not args.notebook:
            raise UsageError(f"%chaz export needs --notebook PATH; {EXPORT_USAGE}")
        sid = parse_session(server, args.session, state.last_session, "export")
        path = os.path.abspath(os.path.expanduser(args.notebook))
        if not path.endswith(".ipynb"):
            raise UsageError(f"%chaz export: {args.notebook} is not a .ipynb path; name one like session.ipynb")
        if os.path.exists(path) and not args.force:
            raise UsageError(f"%chaz export: {args.notebook} exists; pick another PATH or add --force to replace it")
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            raise UsageError(f"%chaz export: the folder {folder} does not exist; create it first")
        try:
            import nbformat
        except ImportError:
            raise UsageError("%chaz export needs nbformat: pip install nbformat") from None
        nb, code_cells, messages = session_notebook(server, sid)
        nbformat.validate(nb)
        tmp = f"{path}.chaz-tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            nbformat.write(nb, f)
        os.replace(tmp, path)  # a notebook there is replaced whole or not at all
        print(f"session {sid}: {messages} messages and {code_cells} approved cells written to {args.notebook}")


def session_notebook(server: Any, sid: int) -> tuple[Any, int, int]:
    """The session as an nbformat v4 notebook; with how many code and markdown cells."""
    import nbformat.v4 as v4

    from ...server import ApprovedCode

    cells: list[Any] = [v4.new_markdown_cell(f"# chaz session {sid}\n\nExported from the session log: the messages, "
                                             "and the agents' code a person approved, in log order.")]
    code_cells = messages = 0
    for item in server.session_record(sid):
        if isinstance(item, ApprovedCode):
            cells.append(v4.new_code_cell(item.source(), metadata={"chaz": item.metadata()}))
            code_cells += 1
        else:
            cells.append(v4.new_markdown_cell(message_markdown(item.sender, item.content),
                                              metadata={"chaz": {"session": sid, "seq": item.seq}}))
            messages += 1
    nb = v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    return nb, code_cells, messages


def message_markdown(sender: str, content: str) -> str:
    """A Message as markdown: who wrote it, then its text as text (escaped, controls named)."""
    lines = [html.escape(shown_controls(line)) for line in (content or "").splitlines()] or [""]
    body = "\n".join(f"> {line}" if line else ">" for line in lines)
    return f"**{html.escape(shown_controls(sender))}**:\n\n{body}"
