"""The user's variables: which names count, their type, shape, approximate size and a cheap
fingerprint, and the changes between two snapshots of a namespace.

Everything here is cheap by design (``bench/bench_kernel_tools.py``): no value is copied,
nothing walks a large object. Shapes and sizes are read only for types whose attributes are
known to be plain (pandas, numpy, pyarrow, polars, the builtin containers); any other object
is not asked (its ``__len__`` or ``__getattr__`` is the user's code, and may hang).
"""

from __future__ import annotations

import hashlib
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: IPython's own names in a kernel's namespace (private ``_``-names are left out anyway)
IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython", "open"})
#: modules whose objects' ``shape``, ``nbytes`` and ``len`` are plain attributes
DATA_MODULES = ("pandas", "numpy", "pyarrow", "polars")
_SIZED = (str, bytes, bytearray, list, tuple, dict, set, frozenset, range)
#: items a fingerprint samples of a large object
SAMPLE = 32


def type_name(obj: Any) -> str:
    t = type(obj)
    module = t.__module__
    return t.__qualname__ if module in ("builtins", "__main__") else f"{module.split('.')[0]}.{t.__qualname__}"


def is_data(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] in DATA_MODULES


def is_user_variable(name: str, obj: Any, hidden: Mapping[str, Any] | Iterable[str] = ()) -> bool:
    """A name the agent is told about: not private, not a module, not IPython's or chaz_nb's."""
    if name.startswith("_") or name in IPYTHON_NAMES or isinstance(obj, types.ModuleType):
        return False
    if name in hidden and (not isinstance(hidden, Mapping) or hidden[name] is obj):
        return False
    return not type(obj).__module__.startswith("chaz_nb")


def user_items(ns: Mapping[str, Any], hidden: Mapping[str, Any] | Iterable[str] = ()) -> list[tuple[str, Any]]:
    """(name, value) of the user's variables, sorted by name.

    ``list(ns.items())`` is one call under the GIL: a cell changing the namespace meanwhile
    cannot break the iteration."""
    return sorted((n, v) for n, v in list(ns.items()) if is_user_variable(n, v, hidden))


def shape_of(obj: Any) -> list[int] | None:
    """Shape of a frame or array, length of a builtin container; None for anything else."""
    if is_data(obj):
        shape = getattr(obj, "shape", None)
        if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
            return list(shape)
        num_rows = getattr(obj, "num_rows", None)  # a pyarrow ChunkedArray has no shape
        return [num_rows] if isinstance(num_rows, int) else None
    if isinstance(obj, _SIZED) and type(obj) in _SIZED:  # a subclass's __len__ is user code
        return [len(obj)]
    return None


def approx_bytes(obj: Any) -> int | None:
    """Approximate memory of a value (shallow: a list's items are not walked)."""
    try:
        if is_data(obj):
            usage = getattr(obj, "memory_usage", None)
            if callable(usage) and type(obj).__module__.startswith("pandas"):
                total = usage(index=True, deep=False)
                return int(total.sum()) if hasattr(total, "sum") else int(total)
            for attr in ("nbytes", "estimated_size"):
                value = getattr(obj, attr, None)
                value = value() if callable(value) else value
                if isinstance(value, int):
                    return value
            return None
        if type(obj) in (*_SIZED, int, float, bool, complex, type(None)):
            return sys.getsizeof(obj)
    except Exception:  # noqa: BLE001 - a size is a nicety; never fail the listing for it
        return None
    return None


def fingerprint(obj: Any) -> str:
    """A short hash that changes when the value does, reading at most ``SAMPLE`` items.

    Large frames and arrays are sampled (shape, dtypes and evenly spaced rows), never hashed
    whole, so a change in a row between two samples can go unseen: cheap, not exact."""
    h = hashlib.blake2b(digest_size=8)
    h.update(type_name(obj).encode())
    try:
        _feed(h, obj)
    except Exception:  # noqa: BLE001 - an object that cannot be sampled: its identity only
        h.update(str(id(obj)).encode())
    return h.hexdigest()


def _feed(h: Any, obj: Any) -> None:
    module = type(obj).__module__.split(".")[0]
    if module == "numpy" and hasattr(obj, "dtype") and hasattr(obj, "shape"):
        h.update(f"{obj.shape}{obj.dtype}".encode())
        flat = obj.reshape(-1) if obj.flags.c_contiguous else obj.ravel(order="K")
        if flat.size:
            step = max(1, flat.size // SAMPLE)
            h.update(flat[::step][:SAMPLE].tobytes() if flat.dtype != object else repr(flat[::step][:SAMPLE]).encode())
        return
    if module == "pandas" and hasattr(obj, "shape"):
        h.update(f"{obj.shape}".encode())
        if hasattr(obj, "columns"):
            h.update(repr(list(obj.columns)).encode() + repr(list(obj.dtypes)).encode())
        else:
            h.update(repr(obj.dtype).encode())
        n = obj.shape[0]
        if n:
            step = max(1, n // SAMPLE)
            rows = obj.iloc[::step].iloc[:SAMPLE]
            h.update(repr(rows.to_numpy().tolist()).encode())
        return
    if isinstance(obj, (str, bytes, bytearray)):
        data = obj.encode("utf-8", "surrogatepass") if isinstance(obj, str) else bytes(obj)
        if len(data) > 1 << 16:
            step = len(data) // SAMPLE
            data = str(len(data)).encode() + b"".join(data[i : i + 64] for i in range(0, len(data), step))
        h.update(data)
        return
    if isinstance(obj, (int, float, complex, bool, type(None))):
        h.update(repr(obj).encode())
        return
    if type(obj) in (list, tuple, dict, set, frozenset):
        # a dict's items are (key, value) pairs made afresh at each look: each side is read on
        # its own, so an untouched dict keeps its fingerprint (its pairs' ids never did)
        items: list[Any] | None = [(k, v) for k, v in obj.items()][:SAMPLE] if isinstance(obj, dict) \
            else list(obj) if len(obj) <= SAMPLE else None
        if items is None:
            seq = list(obj)[:: max(1, len(obj) // SAMPLE)][:SAMPLE] if not isinstance(obj, (list, tuple)) \
                else obj[:: max(1, len(obj) // SAMPLE)][:SAMPLE]
            items = [len(obj), *seq]
        h.update(repr([len(obj), *(_token(i) for i in items[: SAMPLE + 1])]).encode())
        return
    h.update(str(id(obj)).encode())


def _token(item: object) -> object:
    """What a container's fingerprint reads of one item: a scalar's value, a pair's two sides,
    anything else its type and identity (a nested object changed in place is not seen)."""
    if isinstance(item, (int, float, str, bool, type(None))):
        return item
    if type(item) is tuple and len(item) == 2:
        return tuple(_token(side) for side in item)
    return type(item).__name__, id(item)


@dataclass(frozen=True)
class Seen:
    """One variable as a snapshot saw it."""

    ident: int
    type: str
    shape: list[int] | None
    fingerprint: str


def snapshot(ns: Mapping[str, Any], hidden: Mapping[str, Any] | Iterable[str] = ()) -> dict[str, Seen]:
    return {
        name: Seen(id(obj), type_name(obj), shape_of(obj), fingerprint(obj))
        for name, obj in user_items(ns, hidden)
    }


def changes(before: Mapping[str, Seen], after: Mapping[str, Seen]) -> list[dict[str, Any]]:
    """Each variable created, changed (rebound or its fingerprint moved) or deleted."""
    out: list[dict[str, Any]] = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        change = "created" if old is None else "deleted" if new is None else "changed"
        seen = new or old
        assert seen is not None
        out.append({"name": name, "change": change, "type": seen.type, "shape": seen.shape,
                    "fingerprint": None if new is None else new.fingerprint})
    return out
