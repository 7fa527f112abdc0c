"""How every ``%chaz`` sub-command reads its line: the rules, written once.

* Words are split as a shell would (``shlex``): quotes group words, and an open quote is one
  ``UsageError`` that says to close it.
* Options are parsed by ``CommandParser`` (argparse without abbreviations): an unknown or
  malformed option is one ``UsageError`` line ending in the sub-command's usage, never a
  ``SystemExit``; ``--help`` prints the usage and raises ``HelpShown``, which the magic
  catches to return quietly.
* A sub-command's usage line is made from its parser (``usage_of``), so a flag added to a
  parser is in the usage and in ``%chaz help`` at once.
* Free text (a message, a reason, a SQL query) is not split: the sub-command takes the rest of
  the line verbatim.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
from typing import NoReturn
from collections.abc import Callable, Sequence

from IPython.core.error import UsageError


class HelpShown(Exception):
    """``--help`` was asked for and the usage printed: the magic returns without output.

    Control flow of the magics, not an error a user sees, so it is not in chaz_nb.errors.
    """


class CommandParser(argparse.ArgumentParser):
    """argparse whose errors are one-line UsageErrors (never SystemExit)."""

    def __init__(self, prog: str, usage: str | None = None, add_help: bool = True) -> None:
        super().__init__(prog=prog, usage=usage, add_help=add_help, allow_abbrev=False)

    def error(self, message: str) -> NoReturn:
        # "unrecognized arguments: --modle x": the nearest flag this sub-command takes
        flags = [o for a in self._actions for o in a.option_strings]
        unknown = re.findall(r"(?<![\w-])(--?[\w-]+)", message.partition("unrecognized arguments:")[2])
        hint = did_you_mean(unknown[0], flags) if unknown else ""
        raise UsageError(f"%chaz {self.prog}: {message}{hint}; usage: {self.usage}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise HelpShown()

    def format_usage(self) -> str:
        return self._with_literal_usage(super().format_usage)

    def format_help(self) -> str:
        return self._with_literal_usage(super().format_help)

    def _with_literal_usage(self, format_: Callable[[], str]) -> str:
        # argparse fills a usage in with ``usage % {"prog": ...}``: the "%chaz" of ours is
        # literal text ("%c requires int or char" was what ``--help`` printed)
        usage = self.usage
        if usage is not None:
            self.usage = usage.replace("%", "%%")
        try:
            return format_()
        finally:
            self.usage = usage


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """`` (did you mean --model?)`` for the nearest of ``candidates`` (difflib), else ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_option(where: str, token: str, flags: Sequence[str], usage: str) -> UsageError:
    """The one line for an option a sub-command does not take, with the nearest one it does."""
    return UsageError(f"{where}: unknown option {token}{did_you_mean(token, flags)}; {usage}")


_TOML_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


def toml_error(exc: Exception, where: str) -> UsageError:
    """A TOML body's error, its line counted from the cell's first line (the ``%%chaz`` line is
    line 1, so the body's line N is the cell's N + 1), as a person finds it in the cell."""
    text = _TOML_LINE.sub(lambda m: f"(at line {int(m[1]) + 1} of the cell, column {m[2]})", str(exc))
    return UsageError(f"{where}: bad TOML: {text}")


def split_words(line: str, usage: str | None = None) -> list[str]:
    """The line's words, shell-style; an open quote is a UsageError (with ``usage`` if given)."""
    try:
        return shlex.split(line)
    except ValueError as exc:
        if usage is None:
            raise UsageError(
                f"%chaz: cannot parse the line ({exc}); close the quote, or %chaz help for the usage"
            ) from None
        raise UsageError(f"cannot parse the line ({exc}); {usage}") from None


def usage_of(parser: argparse.ArgumentParser) -> str:
    """``agent NAME [--model M] ...``: a sub-command's usage from its parser's own arguments.

    The usage lines are made from the parser rather than written beside it, so a flag added
    to the parser is in ``%chaz``'s usage and ``%chaz help`` too (they once drifted apart).
    """
    parts = [parser.prog]
    # argparse has no public list of a parser's arguments; _actions is the documented-by-use one
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        metavar = action.metavar or action.dest.upper()
        if not action.option_strings:
            parts.append({"?": f"[{metavar}]", "*": f"[{metavar} ...]"}.get(str(action.nargs), str(metavar)))
        elif action.nargs == 0:
            parts.append(f"[{action.option_strings[0]}]")
        else:
            parts.append(f"[{action.option_strings[0]} {metavar}]")
    return " ".join(parts)


def table(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows as left-aligned text columns (the first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
