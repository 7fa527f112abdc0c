"""``@NAME text``: the message line of ``%chaz`` and ``chaz_nb.ask``, read into (agent, text, wait)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from .args import unknown_option
from .turns import check_agent

if TYPE_CHECKING:  # pragma: no cover
    from ...server import Server

#: ``@NAME``, and a fork's variant of an agent, ``@analyst@gpt-4o`` (server/fork.py)
AGENT_NAME = re.compile(r"@([A-Za-z][A-Za-z0-9_-]*(?:@[A-Za-z0-9_.-]+)?)")


def parse_message_line(line: str, where: str = "%chaz") -> tuple[str, str, bool]:
    """``[--no-wait] @NAME [--no-wait] text`` -> (name, text, wait). The text is kept verbatim."""
    rest = line.strip()
    wait = True
    name = None
    while rest:
        m = re.match(r"(\S+)(\s+|$)", rest)
        assert m is not None
        token = m.group(1)
        if token == "--no-wait":
            wait = False
        elif token.startswith("--"):
            raise unknown_option(where, token, ["--no-wait", "--with"],
                                 "the options before the text: --no-wait, --with a,b")
        elif name is None and token.startswith("@"):
            nm = AGENT_NAME.fullmatch(token)
            if nm is None:
                raise UsageError(f"{where}: {token} is not an agent name (@ then letters, digits, _ or -)")
            name = nm.group(1)
        else:
            break
        rest = rest[m.end():]
    if name is None:
        raise UsageError(f"{where}: say which agent, e.g. {where} @assistant hello (%chaz help shows the usage)")
    return name, rest.strip(), wait


def take_with(line: str, where: str = "%chaz") -> tuple[str, list[str] | None]:
    """``--with a,b`` among the options before the text -> (the line without it, the names).

    Only the leading options are read: ``--with`` inside the message text stays text."""
    rest = line.strip()
    kept: list[str] = []
    names: list[str] | None = None
    while rest:
        m = re.match(r"(\S+)(\s+|$)", rest)
        assert m is not None
        token = m.group(1)
        if token == "--with":
            rest = rest[m.end():]
            value = re.match(r"(\S+)(\s+|$)", rest)
            if value is None:
                raise UsageError(f"{where}: --with needs variable names, e.g. --with sales,orders")
            names = [n.strip() for n in value.group(1).split(",") if n.strip()]
            bad = [n for n in names if not n.isidentifier()]
            if bad or not names:
                raise UsageError(f"{where}: --with takes variable names separated by commas, not {value.group(1)!r}")
            rest = rest[value.end():]
            continue
        if not (token.startswith("--") or (token.startswith("@") and not any(k.startswith("@") for k in kept))):
            break
        kept.append(token)
        rest = rest[m.end():]
    return " ".join([*kept, rest]).strip(), names


def parse_address(text: str, server: Server | None = None) -> tuple[str, str]:
    """``"@NAME text"`` -> (NAME, text), checked against the server's agents."""
    name, body, _ = parse_message_line(text, where="chaz_nb.ask")
    if server is not None:
        check_agent(server, name)
    if not body:
        raise UsageError(f"chaz_nb.ask: nothing to send to @{name}")
    return name, body
