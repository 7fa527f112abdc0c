"""``kernel__variables`` and ``kernel__describe``: what the agent is told about a value.

A DataFrame (pandas; pyarrow and polars tables where installed): rows, columns with dtypes
and null counts, numeric summaries (min, mean, max: no sort; computed in chunks so the kernel's
loop keeps running; a long text column's nulls are estimated from a sample, marked ``~``)
and the first rows the data policy allows. A Series or numpy array: shape, dtype, summary,
first items. Anything else: its type and a clipped repr, computed under a
deadline (a repr that hangs is stopped, one that raises is named).
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import ToolError
from .interrupts import Interrupter
from .namespace import approx_bytes, shape_of, type_name, user_items
from .policy import REDACTED, DataPolicy, Secrets, clip, masked_frame, masked_tree, secret_name

#: seconds one repr of a user's object may take
REPR_DEADLINE = 2.0
#: characters of a repr kept (before the tool-output clip)
REPR_CHARS = 2_000


class ReprTimeout(Exception):
    """Raised inside a repr that ran past its deadline."""


@dataclass
class Egress:
    """What one tool result sends of the notebook's data (the ``data_egress`` view's row)."""

    variables: list[str] = field(default_factory=list)
    rows: int = 0
    columns: int = 0
    chars: int = 0

    def to_json(self, policy: DataPolicy) -> dict[str, Any]:
        return {"variables": self.variables, "rows": self.rows, "columns": self.columns,
                "chars": self.chars, "policy": policy.mode, "data_rows": policy.rows}


class DataToolError(ToolError):
    """A kernel tool's failure whose text may carry the notebook's data: sent under the same
    policy as a result, and recorded in the ``data_egress`` view with what it sent."""

    def __init__(self, message: str, egress: Egress) -> None:
        super().__init__(message)
        self.egress = egress


def nearest(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    if close:
        return f"nearest: {', '.join(close)}"
    return f"variables: {', '.join(names[:20]) or 'none'}{' …' if len(names) > 20 else ''}"


def lookup(ns: Mapping[str, Any], name: str, hidden: Any = ()) -> Any:
    """The user's variable ``name``; a ToolError listing the nearest names otherwise."""
    items = dict(user_items(ns, hidden))
    if name not in items:
        raise ToolError(f"no variable {name!r} in the notebook; {nearest(name, sorted(items))} "
                        "(kernel__variables lists them)")
    return items[name]


class _ClippedRepr(reprlib.Repr):
    """reprlib's clipping of containers and strings, with an object's own repr whole (then
    clipped): reprlib would hide a repr that raises behind ``<X instance at ...>``."""

    def repr_instance(self, x: Any, level: int) -> str:
        text = repr(x)
        return text if len(text) <= self.maxother else text[: self.maxother - 1] + "…"


def safe_repr(obj: Any, limit: int = REPR_CHARS) -> str:
    """``repr(obj)`` clipped, under a deadline; a repr that raises or hangs is named instead.

    Shown with the value under every secret-named key, field, column or index label masked
    first, whatever its type (``policy.masked_tree``)."""
    short = _ClippedRepr()
    short.maxstring = short.maxother = limit
    try:
        with Interrupter(REPR_DEADLINE, ReprTimeout, "a repr"):
            text = short.repr(masked_tree(obj))
    except ReprTimeout:
        return f"<{type_name(obj)}: its repr ran over {REPR_DEADLINE:g} s and was stopped>"
    except Exception as exc:  # noqa: BLE001 - the object's own __repr__ may raise anything
        return f"<{type_name(obj)}: its repr raised {type(exc).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def variables(ns: Mapping[str, Any], hidden: Any = (), limit: int | None = None) -> tuple[str, Egress]:
    """One line per user variable: name, type, shape or length, approximate memory.

    Lines stop once ``limit`` characters are written (the rest would be clipped anyway):
    a namespace of 10,000 names costs the lines sent, plus a count of the others."""
    lines = []
    names = []
    items = user_items(ns, hidden)
    used = 0
    for name, obj in items:
        shape = shape_of(obj)
        size = approx_bytes(obj)
        if shape and (len(shape) > 1 or is_frame_like(obj)):
            shown = "shape " + "x".join(map(str, shape))
        else:
            shown = f"len {shape[0]}" if shape else "-"
        line = " | ".join([name, type_name(obj), shown, _bytes(size) if size is not None else "-"])
        used += len(line) + 1
        if limit is not None and used > limit - 200:
            break
        lines.append(line)
        names.append(name)
    if not lines and not items:
        return "no variables in the notebook yet", Egress()
    text = "name | type | shape | memory\n" + "\n".join(lines)
    if len(names) < len(items):
        text += f"\n… and {len(items) - len(names):,} more (kernel__describe NAME describes any of them)"
    return text, Egress(variables=names)


def is_frame_like(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] in ("pandas", "numpy", "pyarrow", "polars")


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def describe(name: str, obj: Any, policy: DataPolicy, secrets: Secrets | None = None) -> tuple[str, Egress]:
    egress = Egress(variables=[name])
    if secret_name(name) or (secrets is not None and secrets.holds(obj)):
        lines = [f"variable {name}, type {type_name(obj)}", f"value {REDACTED} (its name says it holds a secret)"]
    else:
        module = type(obj).__module__.split(".")[0]
        if module == "pandas" and hasattr(obj, "columns"):
            lines = _pandas_frame(name, obj, policy, egress)
        elif module == "pandas" and hasattr(obj, "dtype"):
            lines = _pandas_frame(name, obj.to_frame(name=getattr(obj, "name", None) or name), policy, egress,
                                  kind="Series")
        elif module == "numpy" and hasattr(obj, "dtype") and hasattr(obj, "shape"):
            lines = _numpy(name, obj, policy, egress)
        elif module in ("pyarrow", "polars") and hasattr(obj, "schema"):
            lines = _other_table(name, obj, policy, egress)
        else:
            shape = shape_of(obj)
            lines = [f"{name}: {type_name(obj)}" + (f", length {shape[0]}" if shape else "")]
            if policy.values:
                text = safe_repr(obj)
                lines.append(f"repr: {text}")
                egress.rows = 1
    text = clip("\n".join(lines), policy.max_chars, secrets)
    egress.chars = len(text)
    return text, egress


def _pandas_frame(name: str, df: Any, policy: DataPolicy, egress: Egress, kind: str = "DataFrame") -> list[str]:
    rows, cols = df.shape
    egress.columns = cols
    lines = [f"{name}: pandas {kind}, {rows:,} rows x {cols} columns"]
    lines.append("column | dtype | nulls" + (" | min | mean | max" if policy.values else ""))
    sampled = False
    for col in df.columns:
        series = df[col]
        nulls, estimated = _null_count(series)
        sampled = sampled or estimated
        parts = [str(col), str(series.dtype), f"~{nulls}" if estimated else str(nulls)]
        if policy.values:
            parts += _summary(series) if not secret_name(col) else [REDACTED] * 3
        lines.append(" | ".join(parts))
    if sampled:
        lines.append(f"(~: estimated from {NULL_SAMPLE:,} rows drawn at random)")
    n = min(policy.row_limit, rows)
    if n:
        head = masked_frame(df.head(n))
        lines.append(f"first {n} rows:")
        lines.append(head.to_string(max_colwidth=80))
        egress.rows = n
    elif not policy.values:
        lines.append("(no values: this agent's data policy is schema)")
    return lines


#: rows per numpy/pandas call while summarising a column. One C call holds the GIL for its
#: whole length, and the tools run on a worker thread beside the kernel's loop: a 10M-row
#: column in one call stalled the loop for 330 ms (bench_kernel_tools.py, "loop stall").
CHUNK = 1 << 19
#: a column of Python objects (object dtype, pandas' python-backed str) longer than this has
#: its nulls counted on this many rows drawn at random: each value is checked one by one,
#: 0.4-0.7 s for 10M rows
NULL_SAMPLE = 250_000


def _chunks(n: int) -> range:
    return range(0, n, CHUNK)


def _null_count(series: Any) -> tuple[int, bool]:
    """(nulls, whether it is an estimate) of one column, in GIL-sized chunks."""
    n = len(series)
    if series.dtype.kind in "iub" and type(series.dtype).__module__ == "numpy":
        return 0, False  # a numpy int or bool column cannot hold a missing value
    python_objects = series.dtype.kind == "O" and getattr(series.dtype, "storage", None) != "pyarrow"
    if python_objects and n > NULL_SAMPLE:
        import numpy as np
        import pandas as pd

        # random rows, not every k-th: a column that repeats with period k would fool a stride
        rows = np.sort(np.random.default_rng(0).integers(0, n, NULL_SAMPLE))
        sample = series.to_numpy()[rows]
        found = sum(int(pd.isna(sample[i:i + CHUNK]).sum()) for i in _chunks(len(sample)))
        return round(found * n / len(sample)), True
    return sum(int(series.iloc[i:i + CHUNK].isna().sum()) for i in _chunks(n)), False


def _summary(series: Any) -> list[str]:
    """[min, mean, max] of a numeric or datetime column, read in chunks ("-" where none apply)."""
    import numpy as np
    import pandas as pd

    n = len(series)
    kind = getattr(series.dtype, "kind", "")
    if not n or not kind or kind not in "iufbM":
        return ["-", "-", "-"]
    if kind == "M":
        if not isinstance(series.dtype, np.dtype):  # tz-aware: pandas' own reductions
            low, high = series.min(), series.max()
            return [str(low), "-", str(high)]
        ticks = series.to_numpy().view("i8")
        lows, highs = [], []
        for i in _chunks(n):
            part = ticks[i:i + CHUNK]
            part = part[part != np.iinfo("i8").min]  # NaT
            if part.size:
                lows.append(part.min())
                highs.append(part.max())
        if not lows:
            return ["NaT", "-", "NaT"]
        unit = np.datetime_data(series.dtype)[0]
        return [str(pd.Timestamp(int(min(lows)), unit=unit)), "-", str(pd.Timestamp(int(max(highs)), unit=unit))]
    plain = isinstance(series.dtype, np.dtype)  # numpy-backed: no missing-value mask to apply
    values = series.to_numpy() if plain else None
    low, high, total, count = np.inf, -np.inf, 0.0, 0
    with np.errstate(all="ignore"):
        for i in _chunks(n):
            if values is not None and kind != "f":
                part = values[i:i + CHUNK]
                low, high = min(low, float(part.min())), max(high, float(part.max()))
                total += float(part.sum(dtype=np.float64))
                count += part.size
                continue
            part = values[i:i + CHUNK] if values is not None else \
                series.iloc[i:i + CHUNK].to_numpy(dtype=float, na_value=np.nan)
            missing = np.isnan(part)
            if not missing.any():  # the common case: plain reductions, no NaN handling
                low, high = min(low, float(part.min())), max(high, float(part.max()))
                total += float(part.sum())
                count += part.size
                continue
            seen = part.size - int(np.count_nonzero(missing))
            if seen:
                low, high = min(low, float(np.nanmin(part))), max(high, float(np.nanmax(part)))
                total += float(np.nansum(part))
                count += seen
    if not count:
        return ["nan", "nan", "nan"]
    return [_num(low), _num(total / count), _num(high)]


def _num(value: Any) -> str:
    return f"{float(value):.6g}"


def _numpy(name: str, arr: Any, policy: DataPolicy, egress: Egress) -> list[str]:
    import numpy as np

    lines = [f"{name}: numpy ndarray, shape {tuple(arr.shape)}, dtype {arr.dtype}, {arr.nbytes:,} bytes"]
    if policy.values and arr.size and arr.dtype.kind in "iufb":
        with np.errstate(all="ignore"):
            lines.append(f"min {_num(np.nanmin(arr))} | mean {_num(np.nanmean(arr))} | max {_num(np.nanmax(arr))}")
    n = min(policy.row_limit, arr.shape[0] if arr.ndim else 1)
    if n:
        lines.append(f"first {n}: " + np.array2string(arr[:n] if arr.ndim else arr, threshold=policy.row_limit * 20))
        egress.rows = n
    egress.columns = arr.shape[1] if arr.ndim > 1 else 1
    return lines


def _other_table(name: str, table: Any, policy: DataPolicy, egress: Egress) -> list[str]:
    shape = shape_of(table) or [0]
    schema = table.schema
    lines = [f"{name}: {type_name(table)}, {shape[0]:,} rows", f"schema: {schema}"]
    egress.columns = len(shape) > 1 and shape[1] or len(getattr(schema, "names", []) or [])
    n = min(policy.row_limit, shape[0])
    if n:
        head = table.slice(0, n) if hasattr(table, "slice") else table.head(n)
        lines += [f"first {n} rows:", str(_masked_table(head))]
        egress.rows = n
    return lines


def _masked_table(table: Any) -> Any:
    """A pyarrow or polars table with its secret-named columns' values replaced."""
    secret = [c for c in getattr(table, "column_names", None) or list(getattr(table, "columns", [])) if secret_name(c)]
    if not secret:
        return table
    if type(table).__module__.split(".")[0] == "polars":
        import polars

        return table.with_columns(*(polars.lit(REDACTED).alias(c) for c in secret))
    import pyarrow

    for c in secret:
        i = table.column_names.index(c)
        table = table.set_column(i, c, pyarrow.array([REDACTED] * table.num_rows))
    return table
