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
- the value under a secret-named key of any value, whatever its type (``masked_tree``: a dict
  key, a namedtuple or dataclass field, a Series or row label, a cell's dict; then rendered),
  and its leaves wherever they show in text;
- every value of a secret-named column that shows whole in text (looked up in the column);
- a literal assigned to, or passed as, a secret-named name in any text sent (a cell's
  ``password = "..."``, a repr's ``token='...'``, a dict's ``"api_key": "..."``);
- what the store's redaction masks (keys in the environment, provider key shapes).

Secrets are masked before any cut (a cut secret no longer matches).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
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
    if len(out) >= MAX_KNOWN or depth > WALK_DEPTH:
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
    if isinstance(value, Mapping):
        for item in islice(value.values(), MAX_KNOWN):
            _leaves(item, out, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in islice(value, MAX_KNOWN):
            _leaves(item, out, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value)[:MAX_KNOWN]:
            _leaves(getattr(value, f.name, None), out, depth + 1)
    elif type(value).__module__.split(".")[0] not in ("builtins", "pandas", "numpy"):
        for item in list((_attributes(value) or {}).values())[:MAX_KNOWN]:
            _leaves(item, out, depth + 1)


# ------------------------------------------------------------------ secret keys in structures

#: how deep, and how many nodes of the notebook's values, the walk for secret-named keys reads
#: per tool call (a part past either is rendered as it is, its literals still masked by text)
WALK_DEPTH = 6
WALK_NODES = 50_000


class _Mark:
    """What a value under a secret-named key is rendered as: ``[REDACTED]``, unquoted."""

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__


MARK = _Mark()


def _attributes(obj: Any) -> dict[str, Any] | None:
    """An object's own ``__dict__`` (read without running its code), or None."""
    try:
        attrs = object.__getattribute__(obj, "__dict__")
    except Exception:  # noqa: BLE001 - no __dict__ (slots, builtins)
        return None
    return attrs if isinstance(attrs, dict) else None


def _shown_dataclass(obj: Any, values: dict[str, Any]) -> Any:
    """A stand-in whose repr is the dataclass's default repr with ``values`` as its fields."""
    text = f"{type(obj).__qualname__}({', '.join(f'{k}={v!r}' for k, v in values.items())})"

    class Shown:
        def __repr__(self) -> str:
            return text

    return Shown()


@lru_cache(maxsize=4096)
def _cached_secret_name(name: str) -> bool:
    return secret_name(name)


def _secret_key(key: Any) -> bool:
    """``secret_name`` for a key met in a walk: only text (or a tuple of it) can be one, and the
    same keys repeat across a list of records."""
    if isinstance(key, str):
        return _cached_secret_name(key)
    return isinstance(key, tuple) and secret_name(key)


def masked_tree(obj: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """``obj`` as a tool may render it: the value under every secret-named key (a dict key, a
    namedtuple or dataclass field, a Series index label, a frame's column or index level)
    replaced by ``[REDACTED]`` whatever its type, at any depth up to ``WALK_DEPTH`` and for up
    to ``WALK_NODES`` nodes. ``obj`` itself is never changed: a part with nothing to mask is
    returned as it is, the others are new containers."""
    budget = budget if budget is not None else [WALK_NODES]
    budget[0] -= 1
    if budget[0] < 0 or depth > WALK_DEPTH:
        return obj
    if type(obj).__module__.split(".")[0] == "pandas":
        return masked_value(obj)
    if isinstance(obj, dict):
        new: dict[Any, Any] | None = None  # copied at the first change
        for key, value in obj.items():
            if budget[0] < 0:  # the rest as it is
                break
            shown = MARK if _secret_key(key) else masked_tree(value, depth + 1, budget)
            if shown is not value:
                new = new if new is not None else dict(obj)
                new[key] = shown
        if new is None:
            return obj
        if type(obj) is not dict:
            try:
                copy = type(obj)()
                copy.update(new)
                return copy
            except Exception:  # noqa: BLE001 - a subclass whose constructor needs arguments
                return new
        return new
    if isinstance(obj, tuple) and hasattr(obj, "_fields") and hasattr(obj, "_make"):  # a namedtuple
        shown_fields = [MARK if _secret_key(f) else masked_tree(v, depth + 1, budget)
                        for f, v in zip(obj._fields, obj, strict=False)]
        if all(a is b for a, b in zip(shown_fields, obj, strict=False)):
            return obj
        try:
            return obj._make(shown_fields)
        except Exception:  # noqa: BLE001 - a subclass that validates its fields
            return tuple(shown_fields)
    if type(obj) in (list, tuple, set, frozenset):
        items: list[Any] | None = None  # copied at the first change
        for i, value in enumerate(obj):
            if budget[0] < 0:  # the rest as it is
                break
            shown = masked_tree(value, depth + 1, budget)
            if shown is not value:
                items = items if items is not None else list(obj)
                items[i] = shown
        if items is None:
            return obj
        if type(obj) in (set, frozenset):  # the mark is no set member: shown as a list of them
            return items
        return type(obj)(items)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        params = getattr(type(obj), "__dataclass_params__", None)
        fields = [f for f in dataclasses.fields(obj) if f.repr]
        values = {f.name: MARK if _secret_key(f.name) else masked_tree(getattr(obj, f.name, None), depth + 1, budget)
                  for f in fields}
        if params is not None and params.repr and any(values[f.name] is not getattr(obj, f.name, None)
                                                       for f in fields):
            return _shown_dataclass(obj, values)
    return obj


#: values under secret-named keys collected per tool call (each is looked up as a whole token)
MAX_KEY_LEAVES = 100_000


def _key_leaves(value: Any, out: list[str]) -> None:
    """The leaves of one value under a secret-named key (``_leaves``: up to ``MAX_KNOWN`` of
    it), added to ``out`` while it holds fewer than ``MAX_KEY_LEAVES``."""
    if len(out) < MAX_KEY_LEAVES:
        found: list[str] = []
        _leaves(value, found)
        out.extend(found)


def _secret_leaves(obj: Any, out: list[str], columns: list[Any], depth: int, budget: list[int]) -> None:
    """The values under secret-named keys anywhere in ``obj`` (``out``), and the secret-named
    columns of its frames and Series (``columns``), bounded like ``masked_tree``."""
    budget[0] -= 1
    if budget[0] < 0 or depth > WALK_DEPTH:
        return
    module = type(obj).__module__.split(".")[0]
    if module == "pandas":
        if hasattr(obj, "columns"):
            columns.extend(obj[c] for c in [c for c in obj.columns if _secret_key(c)][:20])
            for c in obj.columns[:100]:  # cells holding dicts, lists, objects: their secret keys
                if getattr(obj[c].dtype, "kind", "") == "O" and not _secret_key(c):
                    for cell in obj[c].iloc[:max(0, budget[0])]:
                        if budget[0] < 0:
                            break
                        if not isinstance(cell, str):
                            _secret_leaves(cell, out, columns, depth + 1, budget)
        elif hasattr(obj, "to_frame") and getattr(obj, "name", None) is not None and _secret_key(obj.name):
            columns.append(obj)
        elif hasattr(obj, "to_frame"):
            for value in obj[_secret_labels(obj.index)].iloc[:MAX_KNOWN]:
                _key_leaves(value, out)
        return
    if isinstance(obj, Mapping):
        for key, value in islice(obj.items(), WALK_NODES):
            if _secret_key(key):
                _key_leaves(value, out)
            else:
                _secret_leaves(value, out, columns, depth + 1, budget)
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for name, value in zip(obj._fields, obj, strict=False):
            if _secret_key(name):
                _key_leaves(value, out)
            else:
                _secret_leaves(value, out, columns, depth + 1, budget)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for value in islice(obj, WALK_NODES):
            if budget[0] < 0:
                return
            _secret_leaves(value, out, columns, depth + 1, budget)
    elif module not in ("builtins", "numpy", "pyarrow", "polars", "duckdb") and not isinstance(obj, type):
        attrs = _attributes(obj)
        if dataclasses.is_dataclass(obj):
            attrs = {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}
        for name, value in islice((attrs or {}).items(), WALK_NODES):
            if _secret_key(name):
                _key_leaves(value, out)
            else:
                _secret_leaves(value, out, columns, depth + 1, budget)


#: a piece of text that may be one whole value of a secret column: a run between spaces,
#: quotes, brackets, commas and ``:``/``=``, or a quoted string's inside
_TOKEN = re.compile(r"[^\s'\"`,;:=()\[\]{}<>|]+|'([^'\n]+)'|\"([^\"\n]+)\"")
#: candidate tokens looked up per text (a longer text has its first ones looked up)
MAX_TOKENS = 200_000


@dataclass(frozen=True)
class Secrets:
    """What the notebook holds that no kernel tool sends: the values of its secret-named
    variables (and the objects themselves), the values under secret-named keys, fields and
    attributes of its values, and the secret-named columns of its frames (looked up whole),
    read when a tool is called."""

    values: tuple[str, ...] = ()
    objects: frozenset[int] = field(default_factory=frozenset)
    columns: tuple[Any, ...] = ()
    keyed: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, ns: Mapping[str, Any], hidden: Any = ()) -> Secrets:
        values: list[str] = []
        objects: set[int] = set()
        columns: list[Any] = []
        keyed: list[str] = []
        budget = [WALK_NODES]
        for name, obj in user_items(ns, hidden):
            if secret_name(name):
                objects.add(id(obj))
                _leaves(obj, values)
                module = type(obj).__module__.split(".")[0]
                if module == "pandas" and hasattr(obj, "columns"):
                    columns.extend(obj[c] for c in list(obj.columns)[:20])
                elif module == "pandas" and hasattr(obj, "to_frame"):
                    columns.append(obj)
                continue
            _secret_leaves(obj, keyed, columns, 0, budget)
        # the first values under secret keys, and a secret column's first values, are masked
        # wherever they appear (inside a longer word too); every one of them when it appears
        # whole (``_column_hits``)
        values.extend(keyed[:MAX_KNOWN])
        for column in columns:
            _leaves(list(column.iloc[:MAX_KNOWN]), values)
        return cls(tuple(sorted(set(values), key=len, reverse=True)), frozenset(objects), tuple(columns),
                   frozenset(keyed))

    def holds(self, obj: Any) -> bool:
        """Whether ``obj`` is the value of a secret-named variable."""
        return id(obj) in self.objects and obj is not None

    def mask(self, text: str) -> str:
        """``text`` with every secret this module knows of replaced by ``[REDACTED]``."""
        text = redact(text)
        # whole values first: a known value inside a longer one would break the longer one up
        for value in self._column_hits(text):
            text = text.replace(value, REDACTED)
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return _ASSIGNED.sub(_assigned, text) if "=" in text or ":" in text else text

    def _column_hits(self, text: str) -> list[str]:
        """The tokens of ``text`` that are whole values of a secret-named column: looked up in
        the column (one hash table of the tokens, one pass over the column), longest first."""
        if not self.columns and not self.keyed:
            return []
        tokens: set[str] = set()
        for match in _TOKEN.finditer(text):
            token = match.group(1) or match.group(2) or match.group(0)
            if len(token) >= MIN_KNOWN and token != REDACTED:
                tokens.add(token)
                if len(tokens) >= MAX_TOKENS:
                    break
        if not tokens:
            return []
        hits: set[str] = tokens & self.keyed
        numbers = {t for t in tokens if len(t) >= MIN_KNOWN_NUMBER and _NUMBER.fullmatch(t)}
        for column in self.columns:
            kind = getattr(column.dtype, "kind", "O")
            try:
                if kind in "iu":
                    wanted = [int(t) for t in numbers if "." not in t and "e" not in t.lower()]
                    found = {str(v) for v in column[column.isin(wanted)].unique()} if wanted else set()
                elif kind == "f":
                    wanted_f = [float(t) for t in numbers]
                    found = {t for t in numbers if float(t) in set(column[column.isin(wanted_f)].unique())}
                else:
                    found = {str(v) for v in column[column.isin(list(tokens))].unique()}
            except (TypeError, ValueError):  # a column of values isin cannot compare
                continue
            hits |= found & tokens
        return sorted(hits, key=len, reverse=True)


_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def clip(text: str, limit: int, secrets: Secrets | None = None) -> str:
    """``text`` masked (``Secrets.mask``: the store's redaction too), then cut to ``limit``
    characters with a note saying so."""
    text = (secrets or Secrets()).mask(text)
    if len(text) <= limit:
        return text
    note = f"\n… (clipped: {len(text):,} characters, {limit:,} sent)"
    return text[: max(0, limit - len(note))] + note


# ------------------------------------------------------------------ frames

#: rows of a frame whose cells are masked one by one (``masked_frame``)
MASKED_CELLS_ROWS = 1_000


def masked_frame(frame: Any) -> Any:
    """A pandas DataFrame with each secret-named column and index level's values replaced by
    ``[REDACTED]`` (the frame itself unchanged: a copy when anything is masked)."""
    columns = [c for c in frame.columns if secret_name(c)]
    levels = [i for i, n in enumerate(frame.index.names) if n is not None and secret_name(n)]
    labels = _secret_labels(frame.index)
    # a small frame's cells of dicts, lists, objects: masked like any value (a large one's are
    # masked in text by the values ``Secrets`` collects from them)
    cells = [c for c in frame.columns if c not in columns and len(frame) <= MASKED_CELLS_ROWS
             and getattr(frame[c].dtype, "kind", "") == "O"
             and any(not isinstance(v, str) and masked_tree(v) is not v for v in frame[c])]
    if not columns and not levels and not labels.any() and not cells:
        return frame
    frame = frame.copy()
    for c in columns:
        frame[c] = REDACTED
    for c in cells:
        frame[c] = frame[c].map(masked_tree)
    if labels.any():  # a row whose label is a secret name (a transposed frame: ``df.T``)
        frame = frame.astype(object)
        frame.loc[labels] = REDACTED
    if levels:
        import pandas as pd

        arrays = [frame.index.get_level_values(i) for i in range(frame.index.nlevels)]
        for i in levels:
            arrays[i] = pd.Index([REDACTED] * len(frame), name=frame.index.names[i])
        frame.index = pd.MultiIndex.from_arrays(arrays) if len(arrays) > 1 else arrays[0]
    return frame


def _secret_labels(index: Any) -> Any:
    """A boolean array: which labels of a pandas index (of text labels, at most ``WALK_NODES``)
    are secret names."""
    import numpy as np

    if index.nlevels != 1 or len(index) > WALK_NODES or index.dtype.kind not in "OSUT":
        return np.zeros(len(index), dtype=bool)
    return np.fromiter((secret_name(x) for x in index), dtype=bool, count=len(index))


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
        labels = _secret_labels(obj.index)
        if any(n is not None and secret_name(n) for n in obj.index.names) or labels.any():
            frame = masked_frame(obj.to_frame(name="__value__"))
            if labels.any():
                frame = frame.astype(object)
                frame.loc[labels, "__value__"] = REDACTED
            return frame["__value__"].rename(name)
    return obj


def secret_fields(type_text: str) -> bool:
    """Whether a DuckDB type (``STRUCT(a INTEGER, "password" VARCHAR)``) names a secret field."""
    return any(secret_name(word.strip('"')) for word in re.findall(r'"[^"]*"|[A-Za-z_][\w-]*', type_text))


def names_in(texts: Iterable[str]) -> set[str]:
    """Identifiers in ``texts`` (what a piece of code or SQL may name)."""
    return {w for t in texts for w in re.findall(r"[A-Za-z_]\w*", t)}


__all__ = ["DataPolicy", "FULL_ROWS", "REDACTED", "Secrets", "VALUE_CHARS", "clip", "masked_frame", "masked_tree",
           "masked_value", "names_in", "secret_fields", "secret_name"]
