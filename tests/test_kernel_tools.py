"""The kernel tool server over a namespace dict (chaz_nb/server/kernel/): what each tool sends
under each data policy, and how bad input ends (a one-line tool error; the namespace goes on)."""

from __future__ import annotations

import importlib
import re
import threading
import time

import numpy as np
import pandas as pd
import pytest

from chaz_nb.engine.tools import ToolReply
from chaz_nb.server.agents import Agent
from chaz_nb.server.kernel import KernelTools, PlainHost
from chaz_nb.server.ports import current_run

describe_mod = importlib.import_module("chaz_nb.server.kernel.describe")
query_mod = importlib.import_module("chaz_nb.server.kernel.query")


class Hangs:
    def __repr__(self) -> str:
        while True:
            pass


class Raises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


@pytest.fixture
def ns():
    return {
        "sales": pd.DataFrame({"region": ["north", "south", "north"] * 10, "amount": np.arange(30, dtype=float)}),
        "api_key": "sk-" + "a1b2c3d4" * 4,
        "arr": np.arange(100),
        "np": np,
        "_private": 1,
        "In": [],
    }


@pytest.fixture
def kernel(ns):
    return KernelTools(PlainHost(ns))


class _Ctx:
    """What the kernel's tools read of a run: its agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent


@pytest.fixture
def as_agent():
    """Call the tools as an agent defined with these fields would (each async test runs in a
    context of its own, so the setting ends with the test)."""

    def use(**kw):
        current_run.set(_Ctx(Agent("analyst", **kw)))  # type: ignore[arg-type]

    return use


async def call(kernel, tool_name, **args) -> ToolReply:
    tool = next(t for t in kernel.tools if t.name == tool_name)
    return await tool.run(args)


async def fails(kernel, tool_name, match, **args) -> ToolReply:
    """A read-only tool's failure: an error result (with its egress), whose text says ``match``."""
    reply = await call(kernel, tool_name, **args)
    assert reply.is_error and re.search(match, reply.text), reply.text
    assert "egress" in reply.payload
    return reply


async def test_variables_lists_the_users_names_types_and_shapes_never_values(kernel, ns):
    reply = await call(kernel, "kernel__variables")
    lines = reply.text.splitlines()
    assert lines[0] == "name | type | shape | memory"
    names = [line.split(" | ")[0] for line in lines[1:]]
    assert names == ["api_key", "arr", "sales"]  # no module, private name or IPython's In
    assert "sales | pandas.DataFrame | shape 30x2 |" in reply.text
    assert "north" not in reply.text and "a1b2c3d4" not in reply.text
    assert reply.payload["egress"]["variables"] == ["api_key", "arr", "sales"]


async def test_describe_a_frame_sends_the_rows_its_policy_allows(kernel, as_agent):
    reply = await call(kernel, "kernel__describe", name="sales")
    assert "sales: pandas DataFrame, 30 rows x 2 columns" in reply.text
    assert "amount | float64 | 0 | 0 | 14.5 | 29" in reply.text
    assert "first 10 rows:" in reply.text and reply.payload["egress"]["rows"] == 10
    as_agent(data="schema")
    reply = await call(kernel, "kernel__describe", name="sales")
    assert "north" not in reply.text and "14.5" not in reply.text and "first" not in reply.text
    assert "amount | float64 | 0" in reply.text and reply.payload["egress"]["rows"] == 0
    assert reply.payload["egress"]["policy"] == "schema"
    as_agent(data="full")
    reply = await call(kernel, "kernel__describe", name="sales")
    assert "first 30 rows:" in reply.text


async def test_secrets_never_leave_a_secret_named_variable_or_column(kernel, ns, monkeypatch):
    monkeypatch.setenv("WAREHOUSE_TOKEN", "tok-0123456789abcdef")
    ns["users"] = pd.DataFrame({"name": ["ann"], "password": ["hunter22"], "note": ["tok-0123456789abcdef"]})
    reply = await call(kernel, "kernel__describe", name="api_key")
    assert "a1b2c3d4" not in reply.text and "[REDACTED]" in reply.text
    reply = await call(kernel, "kernel__describe", name="users")
    assert "hunter22" not in reply.text and "tok-0123456789abcdef" not in reply.text and "ann" in reply.text
    reply = await call(kernel, "kernel__query", sql="SELECT * FROM users")
    assert "hunter22" not in reply.text and "tok-0123456789abcdef" not in reply.text
    ns["api_key"] = pd.DataFrame({"k": [1]})
    await fails(kernel, "kernel__query", "api_key holds a secret", sql="SELECT * FROM api_key")


async def test_an_unknown_name_lists_the_nearest_names(kernel):
    await fails(kernel, "kernel__describe", r"no variable 'sale' in the notebook; nearest: sales", name="sale")


async def test_a_repr_that_raises_or_hangs_is_named_and_the_call_ends(kernel, ns, monkeypatch):
    monkeypatch.setattr(describe_mod, "REPR_DEADLINE", 0.3)
    ns["bad"], ns["slow"] = Raises(), Hangs()
    reply = await call(kernel, "kernel__describe", name="bad")
    assert "its repr raised RuntimeError" in reply.text
    started = time.monotonic()
    reply = await call(kernel, "kernel__describe", name="slow")
    assert "its repr ran over 0.3 s and was stopped" in reply.text
    assert time.monotonic() - started < 5


async def test_query_groups_a_frame_by_its_variable_name(kernel, ns):
    sql = "SELECT region, sum(amount) AS total FROM sales GROUP BY 1 ORDER BY 1"
    reply = await call(kernel, "kernel__query", sql=sql)
    totals = ns["sales"].groupby("region")["amount"].sum()
    assert reply.text.splitlines() == ["region | total", f"north | {float(totals['north'])!r}",
                                       f"south | {float(totals['south'])!r}"]
    egress = reply.payload["egress"]
    assert (egress["variables"], egress["rows"], egress["columns"]) == (["sales"], 2, 2)
    reply = await call(kernel, "kernel__query", sql="SELECT count(*) AS n, max(value) AS top FROM arr")
    assert reply.text.splitlines() == ["n | top", "100 | 99"]


@pytest.mark.parametrize("sql, message", [
    ("COPY sales TO '/tmp/out.csv'", "kernel__query is read-only: COPY statements are refused"),
    ("CREATE TABLE t AS SELECT * FROM sales", "kernel__query is read-only: CREATE statements are refused"),
    ("SELECT * FROM read_csv('/etc/passwd')", "files and the network are off"),
    ("ATTACH '/tmp/x.duckdb'", "kernel__query is read-only: ATTACH statements are refused"),
    ("SELECT * FROM nowhere", "nowhere does not exist"),
    ("SELEC 1", "syntax error"),
])
async def test_query_that_writes_or_reads_files_or_is_wrong_is_a_one_line_error(kernel, sql, message):
    reply = await fails(kernel, "kernel__query", message, sql=sql)
    assert "\n" not in reply.text


async def test_query_under_the_schema_policy_says_why_it_refuses(kernel, as_agent):
    as_agent(data="schema")
    await fails(kernel, "kernel__query", "data policy is schema", sql="SELECT 1")


async def test_a_huge_result_costs_its_first_rows_only(kernel, as_agent):
    as_agent(data_rows=5)
    started = time.monotonic()
    reply = await call(kernel, "kernel__query", sql="SELECT range AS i, 'x' AS s FROM range(10000000000)")
    assert time.monotonic() - started < 10
    assert len(reply.text.splitlines()) == 1 + 5 + 1 and "more rows not sent" in reply.text
    assert reply.payload["egress"]["rows"] == 5


async def test_a_query_over_its_deadline_is_interrupted(kernel, monkeypatch):
    monkeypatch.setattr(query_mod, "QUERY_DEADLINE", 0.5)
    await fails(kernel, "kernel__query", "ran over 0.5 s and was stopped",
                sql="SELECT sum(hash(range)) FROM range(100000000000)")


async def test_binary_values_are_shown_by_size(kernel, ns):
    ns["blobs"] = pd.DataFrame({"b": [b"\x00\x01\xff" * 1000]})
    reply = await call(kernel, "kernel__query", sql="SELECT b FROM blobs")
    assert reply.text.splitlines() == ["b", "<3000 bytes>"]
    reply = await call(kernel, "kernel__run", code="bytes(range(256)) * 10_000")
    assert len(reply.text) < 5_000 and not reply.is_error


async def test_run_reports_output_value_and_namespace_changes(kernel, ns):
    reply = await call(kernel, "kernel__run", code=(
        "print('hello')\nbig = sales[sales.amount > 5]\nsales.loc[0, 'amount'] = -1.0\ndel arr\nlen(big)"
    ))
    assert not reply.is_error
    assert "stdout:\nhello" in reply.text and "result: 24" in reply.text
    changes = {c["name"]: c for c in reply.payload["namespace_changes"]}
    assert set(changes) == {"big", "sales", "arr"}
    big = changes["big"]
    assert (big["change"], big["type"], big["shape"]) == ("created", "pandas.DataFrame", [24, 2])
    assert changes["sales"]["change"] == "changed"  # changed in place: the fingerprint saw it
    assert changes["arr"]["change"] == "deleted" and changes["arr"]["fingerprint"] is None
    assert "big" in ns and "arr" not in ns


async def test_run_reports_no_change_of_a_dict_or_list_it_did_not_touch(kernel, ns):
    ns["cfg"] = {"region": "EU", "limits": {"rows": 10}, "tags": ["a", "b"]}
    ns["pairs"] = [("a", 1), ("b", 2)]
    reply = await call(kernel, "kernel__run", code="n = len(cfg)")
    assert [c["name"] for c in reply.payload["namespace_changes"]] == ["n"]
    reply = await call(kernel, "kernel__run", code="cfg['region'] = 'US'\npairs.append(('c', 3))")
    assert {c["name"]: c["change"] for c in reply.payload["namespace_changes"]} == {"cfg": "changed",
                                                                                    "pairs": "changed"}


async def test_run_with_a_syntax_error_or_an_exception_is_a_tool_error_with_its_traceback(kernel, ns):
    reply = await call(kernel, "kernel__run", code="def f(:\n  pass")
    assert reply.is_error and "SyntaxError" in reply.text
    reply = await call(kernel, "kernel__run", code="x = 1\n1 / 0")
    assert reply.is_error and "error: ZeroDivisionError: division by zero" in reply.text
    assert "line 2" in reply.text and "1 / 0" in reply.text and "kernel/run.py" not in reply.text
    assert ns["x"] == 1  # what ran before the error stays, as in a cell


async def test_run_under_schema_sends_only_errors_and_changes(kernel, as_agent):
    as_agent(data="schema")
    reply = await call(kernel, "kernel__run", code="print('secret sauce')\nz = 3\nz")
    assert "secret sauce" not in reply.text and "result" not in reply.text
    assert "created z (int)" in reply.text


async def test_code_that_loops_forever_is_stopped_at_its_timeout_and_the_namespace_goes_on(kernel, ns, as_agent):
    as_agent(code_timeout=0.5)
    started = time.monotonic()
    reply = await call(kernel, "kernel__run", code="n = 0\nwhile True:\n    n += 1")
    assert reply.is_error and "over its 0.5 s timeout" in reply.text and "the kernel goes on" in reply.text
    assert time.monotonic() - started < 5 and ns["n"] > 0
    reply = await call(kernel, "kernel__run", code="n = -1\nn")
    assert not reply.is_error and "result: -1" in reply.text


async def test_stop_from_another_thread_stops_running_code(kernel):
    def stop_soon():
        while not kernel.running:
            time.sleep(0.01)
        kernel.stop("stopped by user")

    stopper = threading.Thread(target=stop_soon)
    stopper.start()
    reply = await call(kernel, "kernel__run", code="import time\nwhile True:\n    time.sleep(0.01)")
    stopper.join()
    assert reply.is_error and "stopped by user" in reply.text
    assert not kernel.stop("again")  # nothing runs now


async def test_cells_lists_the_code_run_and_its_results(kernel, as_agent):
    await call(kernel, "kernel__run", code="a = 2")
    await call(kernel, "kernel__run", code="a * 21")
    reply = await call(kernel, "kernel__cells", last=1)
    assert reply.text == "[2]: a * 21\nOut[2]: 42"
    as_agent(data="schema")
    reply = await call(kernel, "kernel__cells")
    assert "42" not in reply.text and "[1]: a = 2" in reply.text
    await fails(kernel, "kernel__cells", "last must be from 1 to 100", last=0)


@pytest.fixture
def small_chunks(monkeypatch):
    """Summaries read columns in chunks (so the kernel's loop gets the GIL between them): make
    the chunks tiny, so a 1,000-row frame crosses many of them."""
    monkeypatch.setattr(describe_mod, "CHUNK", 64)
    monkeypatch.setattr(describe_mod, "NULL_SAMPLE", 300)


def _row(text: str, column: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(column + " | "))
    return line.split(" | ")


async def test_describe_summaries_read_in_chunks_match_pandas_with_missing_values(small_chunks):
    rng = np.random.default_rng(3)
    amount = rng.random(1_000) * 100
    amount[[5, 500, 999]] = np.nan
    day = pd.Series(pd.Timestamp("2026-01-01") + pd.to_timedelta(rng.integers(0, 365, 1_000), unit="D"))
    day.iloc[[0, 700]] = pd.NaT
    frame = pd.DataFrame({
        "amount": amount,
        "units": rng.integers(-50, 50, 1_000),
        "flag": rng.random(1_000) > 0.5,
        "maybe": pd.array([None if i % 7 == 0 else i for i in range(1_000)], dtype="Int64"),
        "day": day,
    })
    reply = await call(KernelTools(PlainHost({"frame": frame})), "kernel__describe", name="frame")
    for column in ("amount", "units", "flag", "maybe"):
        values = frame[column].astype("float64")
        expected = [str(int(frame[column].isna().sum())), f"{values.min():.6g}", f"{values.mean():.6g}",
                    f"{values.max():.6g}"]
        assert _row(reply.text, column)[2:] == expected, column
    assert _row(reply.text, "day")[2:] == ["2", str(day.min()), "-", str(day.max())]
    assert "~" not in reply.text  # no text column: every count is exact


async def test_describe_estimates_a_long_text_columns_nulls_from_a_sample_and_says_so(small_chunks):
    names = pd.Series(["ann", None, "bo", "cy"] * 250, dtype=object)  # 1,000 rows, 250 nulls
    short = pd.Series(["x", None] * 100, dtype=object)  # under the sample size: counted exactly
    reply = await call(KernelTools(PlainHost({"people": pd.DataFrame({"name": names}), "few": short})),
                       "kernel__describe", name="people")
    nulls = _row(reply.text, "name")[2]
    assert nulls.startswith("~") and abs(int(nulls[1:]) - 250) <= 60
    assert "(~: estimated from 300 rows drawn at random)" in reply.text
    reply = await call(KernelTools(PlainHost({"few": short})), "kernel__describe", name="few")
    assert _row(reply.text, "few")[2] == "100" and "~" not in reply.text
