"""The data policy of the kernel's tools: how much of the notebook's values an agent is sent,
and what it is never sent. Every tool that carries kernel data (``kernel__variables``,
``kernel__describe``, ``kernel__query``, ``kernel__cells``, ``kernel__run``'s outputs and
``%chaz --with`` attachments) sends its text through this module, results and errors alike.

How much, per agent (``Agent.data`` / ``Agent.data_rows``, ``%chaz agent --data``):

- ``schema``: names, types, shapes and counts; no values (``kernel__query`` refuses).
- ``sample``: plus up to ``data_rows`` rows (default 10) of a frame, a query result or an array.
- ``full``: rows up to the tool-output clip (``Agent.max_tool_output``).

What never, under any mode (``Secrets``):

- the value of a variable, a column, an index level or a struct field whose *name* says it
  holds a credential (``secret_name``: ``password``, ``db_password``, ``apiKey``, ``API-KEY``,
  ``secret_access_key``, ``auth_token``...). ``kernel__query`` sees such columns already
  replaced by ``[REDACTED]`` (query.py), so no SQL can compute anything from them;
- the values those secret-named variables hold, wherever they show up again (a cell's
  ``Out[n]``, a repr, printed output, an error);
- a literal assigned to, or passed as, a secret-named name in any text sent (a cell's
  ``password = "..."``, a repr's ``token='...'``, a dict's ``"api_key": "..."``);
- what the store's redaction masks (keys in the environment, provider key shapes).

Secrets are masked before any cut (a cut secret no longer matches).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.redaction import REDACTED, is_credential_field, is_secret_name, redact
from ...engine.runtime import DEFAULT_MAX_TOOL_OUTPUT
from ..agents import DEFAULT_DATA_ROWS
from ..ports import current_run
from .namespace import user_items

if TYPE_CHECKING:  # pragma: no cover
    from ..agents import Agent

#: the most rows ``full`` fetches of one result (the text is clipped well before, as a rule)
FULL_ROWS = 100_000
#: characters of one value sent (a longer one is cut, and the result says so)
VALUE_CHARS = 200


@dataclass(frozen=True)
class DataPolicy:
    mode: str = "sample"
    rows: int = DEFAULT_DATA_ROWS
    max_chars: int = DEFAULT_MAX_TOOL_OUTPUT

    @classmethod
    def of(cls, agent: Agent | None) -> DataPolicy:
        if agent is None:
            return cls()
        return cls(agent.data, agent.data_rows, agent.max_tool_output or DEFAULT_MAX_TOOL_OUTPUT)

    @classmethod
    def current(cls) -> DataPolicy:
        """The policy of the agent whose run calls the tool (the default outside a run)."""
        ctx = current_run.get()
        return cls.of(ctx.agent if ctx is not None else None)

    @property
    def values(self) -> bool:
        """Whether any value may be sent."""
        return self.mode != "schema"

    @property
    def row_limit(self) -> int:
        if self.mode == "schema":
            return 0
        return FULL_ROWS if self.mode == "full" else self.rows

    def to_json(self) -> str:
        return self.mode if self.mode != "sample" else f"sample:{self.rows}"


# ------------------------------------------------------------------ secret names

#: a word of a name that says the value is a credential on its own
_SECRET_WORDS = frozenset({"password", "passwords", "passwd", "passphrase", "pwd", "secret", "secrets",
                           "token", "credential", "credentials", "apikey", "privatekey", "accesskey",
                           "secretkey", "authorization", "bearer"})
#: two words in a row that do (``api_key``, ``API-KEY``, ``apiKey``, ``private key``)
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"),
                           ("auth", "key"), ("signing", "key"), ("session", "key"), ("client", "secret"),
                           ("pass", "word"), ("pass", "phrase")})
#: parts of a name written without separators (``dbpassword``, ``myapikey``)
_SECRET_PARTS = ("password", "passwd", "passphrase", "apikey", "privatekey", "accesskey", "secretkey")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[A-Za-z]+|[0-9]+")


def secret_name(name: Any) -> bool:
    """A variable, column, index level or field whose name says it holds a credential: its
    values are never sent. Any spelling: ``password``, ``db_password``, ``apiKey``,
    ``API-KEY``, ``x_api_key``, ``AWS_SECRET_ACCESS_KEY``, ``auth token``, ``('creds', 'pwd')``."""
    text = str(name)
    if is_secret_name(text) or is_credential_field(text) or is_secret_name(text.upper()):
        return True
    lowered = text.lower()
    if any(part in lowered for part in _SECRET_PARTS):
        return True
    words = [w.lower() for w in _WORD.findall(_CAMEL.sub(" ", text))]
    if any(w in _SECRET_WORDS for w in words):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(words, words[1:], strict=False))


# ------------------------------------------------------------------ secret values in text

_QUOTED = r"""[rRbBuUfF]{0,2}(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""
#: ``NAME = value``, ``NAME: value``, ``"NAME": value``, ``NAME: type = value``, ``obj.NAME=value``,
#: ``env["NAME"] = value``: the value is masked when NAME is a secret name (``_assigned``)
_ASSIGNED = re.compile(
    r"""(?P<name>(?<![\w.\-])[A-Za-z_][\w.\-]*|'[^'\n]{1,100}'|"[^"\n]{1,100}")\]?\s*"""
    r"""(?::[ \t]*[A-Za-z_][\w.\[\], |]{0,80}?[ \t]*(?==(?!=)))?"""
    rf"""(?P<op>==|!=|:|=)[ \t]*(?P<value>(?P<quoted>{_QUOTED})|[^\s,;(){{}}\[\]'"]+)""")
_NOT_VALUES = frozenset({"None", "True", "False", "null", "true", "false", REDACTED})
#: characters of a known secret value that are replaced wherever they appear (shorter ones
#: would mask ordinary words)
MIN_KNOWN = 4
MIN_KNOWN_NUMBER = 6
#: leaves of a secret-named container whose values are collected
MAX_KNOWN = 200


def _assigned(match: re.Match[str]) -> str:
    name, value = match.group("name"), match.group("value")
    if not secret_name(name.strip("'\"")) or value in _NOT_VALUES or value.startswith(REDACTED):
        return match.group(0)
    end = match.end("value")
    if match.group("quoted") is None and end < len(match.string) and match.string[end] in "([.":
        return match.group(0)  # a call or an attribute that computes the value: code, not the value
    start = match.start("value") - match.start(0)
    return match.group(0)[:start] + REDACTED


def _leaves(value: Any, out: list[str], depth: int = 0) -> None:
    if len(out) >= MAX_KNOWN or depth > 4:
        return
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = str(value)
        # a number is masked wherever it appears only when it is long (a count of 1000 in a
        # result is no key; a 6-digit PIN is)
        if len(text) >= (MIN_KNOWN if isinstance(value, str) else MIN_KNOWN_NUMBER):
            out.append(text)
        return
    if type(value) is dict:
        for item in list(value.values())[:MAX_KNOWN]:
            _leaves(item, out, depth + 1)
    elif type(value) in (list, tuple, set, frozenset):
        for item in list(value)[:MAX_KNOWN]:
            _leaves(item, out, depth + 1)


@dataclass(frozen=True)
class Secrets:
    """What the notebook holds that no kernel tool sends: the values of its secret-named
    variables (and the objects themselves), read when a tool is called."""

    values: tuple[str, ...] = ()
    objects: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def of(cls, ns: Mapping[str, Any], hidden: Any = ()) -> Secrets:
        values: list[str] = []
        objects: set[int] = set()
        for name, obj in user_items(ns, hidden):
            if secret_name(name):
                objects.add(id(obj))
                _leaves(obj, values)
            elif type(obj).__module__.split(".")[0] == "pandas" and hasattr(obj, "columns"):
                # a secret column's first values: code run may print them (a list, a dict)
                for column in [c for c in obj.columns if secret_name(c)][:20]:
                    _leaves(list(obj[column].iloc[:MAX_KNOWN]), values)
        return cls(tuple(sorted(set(values), key=len, reverse=True)), frozenset(objects))

    def holds(self, obj: Any) -> bool:
        """Whether ``obj`` is the value of a secret-named variable."""
        return id(obj) in self.objects and obj is not None

    def mask(self, text: str) -> str:
        """``text`` with every secret this module knows of replaced by ``[REDACTED]``."""
        text = redact(text)
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return _ASSIGNED.sub(_assigned, text) if "=" in text or ":" in text else text


def clip(text: str, limit: int, secrets: Secrets | None = None) -> str:
    """``text`` masked (``Secrets.mask``: the store's redaction too), then cut to ``limit``
    characters with a note saying so."""
    text = (secrets or Secrets()).mask(text)
    if len(text) <= limit:
        return text
    note = f"\n… (clipped: {len(text):,} characters, {limit:,} sent)"
    return text[: max(0, limit - len(note))] + note


# ------------------------------------------------------------------ frames

def masked_frame(frame: Any) -> Any:
    """A pandas DataFrame with each secret-named column and index level's values replaced by
    ``[REDACTED]`` (the frame itself unchanged: a copy when anything is masked)."""
    columns = [c for c in frame.columns if secret_name(c)]
    levels = [i for i, n in enumerate(frame.index.names) if n is not None and secret_name(n)]
    if not columns and not levels:
        return frame
    frame = frame.copy()
    for c in columns:
        frame[c] = REDACTED
    if levels:
        import pandas as pd

        arrays = [frame.index.get_level_values(i) for i in range(frame.index.nlevels)]
        for i in levels:
            arrays[i] = pd.Index([REDACTED] * len(frame), name=frame.index.names[i])
        frame.index = pd.MultiIndex.from_arrays(arrays) if len(arrays) > 1 else arrays[0]
    return frame


def masked_value(obj: Any) -> Any:
    """A pandas DataFrame or Series as ``masked_frame`` shows it; anything else unchanged."""
    module = type(obj).__module__.split(".")[0]
    if module != "pandas":
        return obj
    if hasattr(obj, "columns") and hasattr(obj, "index"):
        return masked_frame(obj)
    if hasattr(obj, "to_frame") and hasattr(obj, "index"):
        name = getattr(obj, "name", None)
        if name is not None and secret_name(name):
            return obj.map(lambda _: REDACTED) if len(obj) else obj
        if any(n is not None and secret_name(n) for n in obj.index.names):
            frame = masked_frame(obj.to_frame(name="__value__"))
            return frame["__value__"].rename(name)
    return obj


def secret_fields(type_text: str) -> bool:
    """Whether a DuckDB type (``STRUCT(a INTEGER, "password" VARCHAR)``) names a secret field."""
    return any(secret_name(word.strip('"')) for word in re.findall(r'"[^"]*"|[A-Za-z_][\w-]*', type_text))


def names_in(texts: Iterable[str]) -> set[str]:
    """Identifiers in ``texts`` (what a piece of code or SQL may name)."""
    return {w for t in texts for w in re.findall(r"[A-Za-z_]\w*", t)}


__all__ = ["DataPolicy", "FULL_ROWS", "REDACTED", "Secrets", "VALUE_CHARS", "clip", "masked_frame", "masked_value",
           "names_in", "secret_fields", "secret_name"]
