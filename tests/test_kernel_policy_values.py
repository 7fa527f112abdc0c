"""The data policy (server/kernel/policy.py) on values whose secrets are not a secret-named
variable's: a secret-named key whose value is a list, a tuple, a dict or an object, at any
depth, in any tool's text; and every value of a secret-named column, not only its first rows."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import os
import signal
import time
from collections import namedtuple

import pandas as pd
import pytest

from chaz_nb.server.agents import Agent
from chaz_nb.server.kernel import KernelTools, PlainHost
from chaz_nb.server.kernel.policy import REDACTED, Secrets
from waiting import poll

query_mod = importlib.import_module("chaz_nb.server.kernel.query")

Conn = namedtuple("Conn", "host token")


@dataclasses.dataclass
class Account:
    user: str
    api_key: list[str]


class Holder:
    def __init__(self) -> None:
        self.name = "svc"
        self.password = ["HOLDER-PW-77"]


#: each value is a secret under a secret-named key, as a list, a tuple, a dict, nested deeper,
#: in a namedtuple, a dataclass, an object's attribute, a Series label, a list of records
LEAKS = ("hunter2-LIST", "tok-TUPLE-9", "NESTED-KEY-1", "NT-TOKEN-31", "DC-KEY-55", "HOLDER-PW-77",
         "SERIES-PW-8", "REC-PW-123")


def notebook() -> dict:
    return {
        "cfg": {"password": ["hunter2-LIST"], "token": ("tok-TUPLE-9",), "nested": {"api_key": {"v": "NESTED-KEY-1"}},
                "host": "db.example"},
        "conn": Conn("db.example", {"value": "NT-TOKEN-31"}),
        "acct": Account("ann", ["DC-KEY-55"]),
        "holder": Holder(),
        "row": pd.Series({"user": "ann", "password": "SERIES-PW-8"}),
        "records": [{"user": "bo", "password": {"old": "REC-PW-123"}}],
    }


async def call(kernel: KernelTools, tool_name: str, **args):
    tool = next(t for t in kernel.tools if t.name == tool_name)
    return await tool.run(args)


def assert_hidden(text: str) -> None:
    for value in LEAKS:
        assert value not in text, text


async def test_describe_and_with_hide_every_value_under_a_secret_named_key_whatever_its_type():
    ns = notebook()
    kernel = KernelTools(PlainHost(ns))
    for name in ns:
        reply = await call(kernel, "kernel__describe", name=name)
        assert_hidden(reply.text)
    text = (await call(kernel, "kernel__describe", name="cfg")).text
    # the structure is shown, well formed, with the mark in place of each secret value
    assert "{'host': 'db.example', 'nested': {'api_key': [REDACTED]}, 'password': [REDACTED], " \
           "'token': [REDACTED]}" in text.replace("\n", "") or (
        "'password': [REDACTED]" in text and "'nested': {'api_key': [REDACTED]}" in text and "db.example" in text)
    assert "Conn(host='db.example', token=[REDACTED])" in (await call(kernel, "kernel__describe", name="conn")).text
    assert "Account(user='ann', api_key=[REDACTED])" in (await call(kernel, "kernel__describe", name="acct")).text
    attached, _ = kernel.attach(list(ns), Agent(name="a", model="m"))
    assert_hidden(attached)
    assert "ann" in attached


async def test_cells_and_run_outputs_hide_them_as_out_and_as_printed_text():
    ns = notebook()
    kernel = KernelTools(PlainHost(ns))
    codes = ["cfg", "cfg['password']", "print(cfg['nested'])", "conn.token", "acct.api_key", "holder.password",
             "holder", "row", "row['password']", "records", "print(records[0]['password']['old'])", "str(cfg)"]
    replies = [await call(kernel, "kernel__run", code=code) for code in codes]
    for reply in replies:
        assert_hidden(reply.text)
    reply = await call(kernel, "kernel__cells", last=20)
    assert_hidden(reply.text)
    assert "Out[" in reply.text


def big_frame(rows: int) -> pd.DataFrame:
    return pd.DataFrame({"user": [f"u{i}" for i in range(rows)], "password": [f"pw{i:07d}xyz" for i in range(rows)]})


@pytest.mark.parametrize("code", [
    "big.password.iloc[250]", "big.password.tolist()[-3:]", "big.T.iloc[:, -3:]",
    "big.rename(columns={'password': 'p'}).tail(2)", "print(big.password.iloc[-1])", "list(big.password)[-5:]",
    "big.set_index('password').tail(2)", "dict(zip(big.user, big.password))['u299']",
])
async def test_every_value_of_a_secret_column_is_hidden_not_only_its_first_rows(code):
    ns = {"big": big_frame(300)}
    kernel = KernelTools(PlainHost(ns))
    reply = await call(kernel, "kernel__run", code=code)
    for i in (250, 297, 298, 299):
        assert f"pw{i:07d}xyz" not in reply.text, reply.text
    assert REDACTED in reply.text
    cells = await call(kernel, "kernel__cells", last=5)
    assert "pw0000299xyz" not in cells.text and "pw0000250xyz" not in cells.text


def test_a_million_row_secret_column_is_looked_up_fast():
    frame = big_frame(1_000_000)
    text = repr(frame.password.tail(20).tolist()) + " and some ordinary words " * 2000
    start = time.perf_counter()
    secrets = Secrets.of({"big": frame})
    masked = secrets.mask(text)
    took = time.perf_counter() - start
    assert "pw0999999xyz" not in masked and "pw0999980xyz" not in masked and "ordinary" in masked
    assert took < 2.0, took  # ~0.2-0.4 s measured; the bound leaves room for a shared machine


async def test_a_query_that_builds_a_huge_value_fails_at_the_memory_limit_with_one_clear_line():
    """string_agg of 400 MB took 1.4 GB of the kernel's memory before the result was cut: the
    query's DuckDB now holds at most its memory limit, spills nowhere, and says so in one line
    (an error row of the egress ledger, like any other)."""
    kernel = KernelTools(PlainHost({}))
    reply = await call(kernel, "kernel__query",
                       sql="SELECT length(string_agg(repeat('y', 1000), '')) AS n FROM range(400000)")
    assert reply.is_error and "\n" not in reply.text
    assert "Out of Memory" in reply.text and "512MB" in reply.text and "400000000" not in reply.text
    assert reply.payload["egress"]["chars"] == len(reply.text)
    settings = await call(kernel, "kernel__query", sql="SELECT current_setting('threads') AS t, "
                                                       "current_setting('max_temp_directory_size') AS m")
    assert settings.text.splitlines()[1].split(" | ")[0] == "2", settings.text


def peak_rss_reset() -> None:
    """Start this process's peak resident memory (VmHWM) from what it holds now."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM:"))


def children() -> dict[int, str]:
    """This process's children and their state letter (``Z``: ended, never reaped)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                found[int(entry)] = fields[0]
    return found


def zombies() -> list[int]:
    """This process's children that ended and were never reaped."""
    return [pid for pid, state in children().items() if state == "Z"]


#: one value built by one function, outside DuckDB's memory_limit: each took the kernel's
#: memory (repeat of 3e9: 5.8 GB; range of 3e8 as one list: 14.7 GB), a larger one ended it
BIG_VALUES = [
    "SELECT repeat('x', 3000000000) AS s",
    "SELECT length(repeat('x', 3000000000)) AS n",
    "SELECT repeat(repeat('x', 100000), 30000) AS s",
    "SELECT printf('%*d', 2000000000, 1) AS s",
    "SELECT format('{:>2000000000}', 1) AS s",
    "SELECT range(300000000) AS l",
    "SELECT generate_series(0, 300000000) AS l",
    "SELECT list_resize([1], 300000000) AS l",
    "SELECT repeat([1, 2, 3], 100000000) AS l",
    "SELECT string_agg(repeat('y', 1000), '') AS s FROM range(3000000)",
    "SELECT bar(1, 0, 2, 2000000000) AS b",
]
#: lpad and rpad build their value a character at a time (a minute for 2e9): the deadline
#: ends them, and with them what they built
SLOW_BIG_VALUES = ["SELECT lpad('a', 2000000000, 'b') AS s", "SELECT rpad('a', 2000000000, 'b') AS s"]


@pytest.mark.skipif(not query_mod.FORKS, reason="the query runs in process where the kernel cannot fork")
@pytest.mark.parametrize("sql", BIG_VALUES + SLOW_BIG_VALUES)
async def test_one_huge_value_ends_in_one_line_and_the_kernel_does_not_grow(sql, monkeypatch):
    """Under a 1-row policy the result is a few characters, but the value was built in full in
    the kernel's own memory before it was cut: now the query's own process holds it, bounded."""
    if sql in SLOW_BIG_VALUES:
        monkeypatch.setattr(query_mod, "QUERY_DEADLINE", 2.0)
    kernel = KernelTools(PlainHost({"sales": pd.DataFrame({"region": ["north"], "amount": [1.0]})}))
    peak_rss_reset()
    before = peak_rss_mb()
    reply = await call(kernel, "kernel__query", sql=sql)
    grew = peak_rss_mb() - before
    assert reply.is_error and "\n" not in reply.text, reply.text
    budget = f"{query_mod.QUERY_PROCESS_MEMORY_MB} MB in all"
    assert ("Out of Memory" in reply.text and budget in reply.text or "ran over 2 s" in reply.text
            or "Max bar width" in reply.text), reply.text
    assert grew < 200, f"the kernel grew by {grew} MB"
    after = await call(kernel, "kernel__query", sql="SELECT region, amount FROM sales")
    assert after.text.splitlines() == ["region | amount", "north | 1.0"]
    assert zombies() == []


@pytest.mark.skipif(not query_mod.FORKS, reason="the query runs in process where the kernel cannot fork")
@pytest.mark.parametrize("ending", [signal.SIGKILL, signal.SIGSEGV, "MemoryError"])
async def test_a_query_whose_process_dies_says_what_it_needed_in_one_line(ending, monkeypatch):
    """The query's process ends without a result (killed by the system, a signal, Python's
    own MemoryError past the bound): one line, and the next query runs."""
    def dies(sql, tables, policy):
        if ending == "MemoryError":
            return bytearray(8 << 30)  # past the bound: this process may grow by 2048 MB
        os.kill(os.getpid(), ending)
        return None

    monkeypatch.setattr(query_mod, "_execute", lambda con, sql, tables, policy: dies(sql, tables, policy))
    kernel = KernelTools(PlainHost({}))
    reply = await call(kernel, "kernel__query", sql="SELECT 1 AS x")
    assert reply.is_error and reply.text == (
        "the query needed more than 2048 MB (kernel__query may hold 2048 MB): filter or aggregate before "
        "building large values, or add LIMIT"), reply.text
    monkeypatch.undo()
    assert (await call(kernel, "kernel__query", sql="SELECT 1 AS x")).text == "x\n1"
    assert zombies() == []


@pytest.mark.skipif(not query_mod.FORKS, reason="the query runs in process where the kernel cannot fork")
async def test_a_query_killed_at_its_deadline_is_reaped_and_the_next_one_runs(monkeypatch):
    monkeypatch.setattr(query_mod, "QUERY_DEADLINE", 0.5)
    kernel = KernelTools(PlainHost({}))
    reply = await call(kernel, "kernel__query", sql="SELECT sum(hash(range)) FROM range(100000000000)")
    assert reply.is_error and reply.text == "the query ran over 0.5 s and was stopped"
    assert zombies() == []
    assert (await call(kernel, "kernel__query", sql="SELECT 2 AS y")).text == "y\n2"


def live_children() -> list[int]:
    """This process's children still running (not zombies)."""
    return [pid for pid, state in children().items() if state != "Z"]


async def test_a_stopped_run_ends_its_query_process_at_once():
    """Stop cancels the run; the query's process is killed then, not at its 60 s deadline."""
    kernel = KernelTools(PlainHost({}))
    before = set(live_children())
    task = asyncio.ensure_future(call(kernel, "kernel__query", sql="SELECT sum(hash(range)) FROM range(100000000000)"))
    # (a process has no event to wait on: its appearance is polled, off the loop's thread)
    await asyncio.to_thread(poll, lambda: set(live_children()) - before, 30, "the query's process")
    task.cancel()
    stopped = time.monotonic()
    await asyncio.to_thread(poll, lambda: not (set(live_children()) - before), 30, "the query's process to end")
    assert time.monotonic() - stopped < 10  # (its deadline is 60 s)
    await asyncio.to_thread(poll, lambda: zombies() == [], 10, "the child reaped")
    assert (await call(kernel, "kernel__query", sql="SELECT 2 AS y")).text == "y\n2"


@pytest.mark.parametrize("sql", [
    "SELECT json_extract_string(config, '$.password') AS x FROM users",
    "SELECT json_extract(config, '$.nested.api_key') AS x FROM users",
    "SELECT config FROM users",
    "SELECT regexp_extract(config, 'password\": \"([^\"]+)', 1) AS x FROM users",
    "SELECT substr(config, 14, 11) AS x FROM users",
])
async def test_json_text_in_a_column_hides_the_values_under_secret_keys_from_sql(sql):
    import json

    frame = pd.DataFrame({"id": [1, 2, 3], "config": [
        json.dumps({"password": "hunter2-AAA", "host": "db"}),
        json.dumps({"nested": {"api_key": ["K1-SECRET", "K2-SECRET"]}, "a": 1}),
        str({"token": "TOK-PY-1", "b": 2})]})
    kernel = KernelTools(PlainHost({"users": frame}))
    reply = await call(kernel, "kernel__query", sql=sql)
    for value in ("hunter2-AAA", "K1-SECRET", "K2-SECRET", "TOK-PY-1"):
        assert value not in reply.text, reply.text
    host = await call(kernel, "kernel__query", sql="SELECT json_extract_string(config, '$.host') AS h FROM users "
                                                  "WHERE id = 1")
    assert host.text == "h\ndb"


@pytest.mark.parametrize("rows", [1, 5000])
async def test_a_frames_cells_of_dicts_hide_their_secret_keys_values_small_frame_or_large(rows):
    opts = [{"signing_key": [f"SIGN-LIST-{i}"], "a": 1} for i in range(rows)]
    frame = pd.DataFrame({"id": range(rows), "opts": opts})
    kernel = KernelTools(PlainHost({"m": frame}))
    texts = [(await call(kernel, "kernel__describe", name="m")).text]
    for code in ("m", "m.opts.iloc[-1]", "print(m.opts.iloc[rows - 1]['signing_key'])".replace("rows", str(rows))):
        texts.append((await call(kernel, "kernel__run", code=code)).text)
    for text in texts:
        assert "SIGN-LIST-" not in text, text
