"""What the kernel tools' data policy hides stays hidden on every tool (server/kernel/policy.py):
secret-named columns, index levels and variables, whatever SQL computes from them, whatever a
cell shows of them; each value's size is bounded before Python holds it; numbers arrive as the
query gave them; errors are sent under the same policy and recorded in the egress ledger."""

from __future__ import annotations

import json
import tracemalloc

import pandas as pd
import pytest

from chaz_nb.core.entries import EntryType as T
from chaz_nb.engine.tools import ToolReply
from chaz_nb.server import Server
from chaz_nb.server.agents import SAFE_DEFAULT_TOOLS, Agent
from chaz_nb.server.kernel import KernelTools, PlainHost
from chaz_nb.server.kernel.policy import secret_name
from chaz_nb.server.ports import current_run

#: two values a secret column may hold: a result computed from the column must not tell them apart
SECRETS = ("zebra-7731-pw", "quail-0042-xyz-longer")
#: spellings of a secret column's name (a key, a password, nested, camel case, a header)
SECRET_COLUMNS = ("password", "db_password", "apiKey", "API-KEY", "userPassword", "auth_token")


class _Ctx:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent


def kernel_over(ns: dict) -> KernelTools:
    return KernelTools(PlainHost(ns))


async def call(kernel: KernelTools, tool_name: str, **args) -> ToolReply:
    tool = next(t for t in kernel.tools if t.name == tool_name)
    return await tool.run(args)


def users(column: str, secret: str) -> pd.DataFrame:
    return pd.DataFrame({"name": ["ann", "bo", "cy"], column: [secret, secret + "2", secret[::-1]],
                         "amount": [1.5, 2.25, 3.0]})


# The family of the trick: an alias, a function, pieces, an error, a cast, a concat, a regexp,
# list and struct functions, an aggregate, hash comparisons, window functions, SELECT *, a CTE,
# a subquery, a filter, a whole row as a struct, and DuckDB's own summary.
FAMILY = [
    "SELECT {c} AS p FROM users",
    "SELECT upper({c}) AS u, lower({c}) AS l, reverse({c}) AS r FROM users",
    "SELECT substr({c}, 1, 9) AS a, substr({c}, 10) AS b, {c}[1:3] AS c FROM users",
    "SELECT error({c}) FROM users",
    "SELECT CAST({c} AS INT) FROM users",
    "SELECT TRY_CAST({c} AS DATE) AS d, {c}::BLOB AS b FROM users",
    "SELECT {c} || '!' AS x, concat('<', {c}, '>') AS y, format('{{}}', {c}) AS z FROM users",
    "SELECT regexp_extract({c}, '[0-9]+') AS n, regexp_matches({c}, '^zebra') AS z FROM users",
    "SELECT list_value({c}) AS l, struct_pack(p := {c}) AS s, [{c}, 'x'] AS k, {{'k': {c}}} AS m FROM users",
    "SELECT string_agg({c}, ',') AS s, list({c}) AS l, max({c}) AS m, min({c}) AS n FROM users",
    "SELECT md5({c}) = md5('zebra-7731-pw') AS hit, hash({c}) AS h, sha256({c}) AS s FROM users",
    "SELECT lag({c}) OVER (ORDER BY name) AS a, first_value({c}) OVER () AS b FROM users",
    "SELECT * FROM users",
    "WITH t AS (SELECT {c} AS x FROM users) SELECT x, length(x) AS n FROM t",
    "SELECT (SELECT max({c}) FROM users) AS m, (SELECT count(*) FROM users WHERE {c} LIKE 'z%') AS n",
    "SELECT name FROM users WHERE {c} LIKE 'zebra%' AND NOT starts_with({c}, 'q')",
    "SELECT count(DISTINCT {c}) AS d, sum(length({c})) AS n, bool_or({c} IS NULL) AS z FROM users",
    "SELECT ascii({c}) AS a, unicode({c}) AS u, strlen({c}) AS n, levenshtein({c}, 'zebra') AS d FROM users",
    "SELECT name FROM users ORDER BY {c} LIMIT 1",
    "SELECT users FROM users",
    "SUMMARIZE users",
]


def _quote(column: str) -> str:
    return '"' + column + '"'


@pytest.mark.parametrize("column", SECRET_COLUMNS)
@pytest.mark.parametrize("template", FAMILY)
async def test_no_query_computes_anything_from_a_secret_named_column(column, template):
    """The same query over two frames that differ only in the secret column gets the same
    reply, result or error, word for word: no SQL reads those values."""
    sql = template.format(c=_quote(column))
    replies = []
    for secret in SECRETS:
        reply = await call(kernel_over({"users": users(column, secret)}), "kernel__query", sql=sql)
        for value in SECRETS:
            assert value not in reply.text and value[:9] not in reply.text and value[9:] not in reply.text
        replies.append((reply.text, reply.is_error))
    assert replies[0] == replies[1], sql


async def test_the_original_frame_is_reachable_by_no_name_in_the_querys_catalog():
    kernel = kernel_over({"users": users("password", SECRETS[0])})
    reply = await call(kernel, "kernel__query",
                       sql="SELECT view_name, sql FROM duckdb_views() WHERE NOT internal UNION ALL "
                           "SELECT table_name, sql FROM duckdb_tables()")
    assert not reply.is_error and SECRETS[0] not in reply.text
    # DuckDB's Python replacement scan (a frame found by its name among the caller's locals,
    # the raw one among them) is off: file access is off on the query's instance
    for sql in ("SELECT * FROM obj", 'SELECT * FROM "table"', "SELECT * FROM df", "SELECT * FROM rel"):
        reply = await call(kernel, "kernel__query", sql=sql)
        assert reply.is_error and "does not exist" in reply.text and SECRETS[0] not in reply.text
    for sql in ("SELECT * FROM pandas_scan()", "SELECT * FROM arrow_scan(1, 2, 3)",
                "SELECT * FROM python_arrow_scan()"):
        reply = await call(kernel, "kernel__query", sql=sql)
        assert reply.is_error and "by their names" in reply.text
        assert reply.payload["egress"]["chars"] == len(reply.text)


async def test_a_struct_column_with_a_secret_field_is_hidden_whole_and_a_frame_named_in_a_string_too():
    frame = pd.DataFrame({"name": ["ann"], "creds": [{"user": "u", "pass_word": SECRETS[0]}]})
    kernel = kernel_over({"users": frame})
    for sql in ("SELECT creds.pass_word AS x, creds::VARCHAR AS s, to_json(creds) AS j FROM users",
                "SELECT * FROM query_table('users')", "SELECT struct_extract(creds, 'pass_word') FROM users"):
        reply = await call(kernel, "kernel__query", sql=sql)
        assert SECRETS[0] not in reply.text and "does not exist" not in reply.text, reply.text
    reply = await call(kernel, "kernel__query", sql="PRAGMA table_info('users')")
    assert not reply.is_error and "creds" in reply.text


async def test_a_map_column_hides_the_values_under_secret_looking_keys():
    frame = pd.DataFrame({"name": ["ann", "bo"], "m": [{"user": "u"}, {"db_password": SECRETS[0], "x": "y"}]})
    kernel = kernel_over({"users": frame})
    for sql in ("SELECT m, m['db_password'] AS p, map_values(m) AS v, m::VARCHAR AS s FROM users",
                "SELECT list_filter(map_values(m), lambda v: v LIKE 'zebra%') AS z FROM users",
                "SELECT count(*) AS n FROM users WHERE m['db_password'] LIKE 'zebra%'"):
        reply = await call(kernel, "kernel__query", sql=sql)
        assert not reply.is_error and SECRETS[0] not in reply.text, reply.text
    reply = await call(kernel, "kernel__query",
                       sql="SELECT count(*) AS n FROM users WHERE m['db_password'] LIKE 'zebra%'")
    assert reply.text.splitlines() == ["n", "0"]
    reply = await call(kernel, "kernel__query", sql="SELECT m['x'] AS x FROM users ORDER BY name")
    assert reply.text.splitlines() == ["x", "NULL", "y"]


async def test_a_secret_named_index_is_hidden_from_describe_and_query():
    frame = users("note", "plain").set_index(pd.Index(["ix-" + SECRETS[0], "iy-1", "iz-2"], name="api_key"))
    kernel = kernel_over({"users": frame})
    reply = await call(kernel, "kernel__describe", name="users")
    assert "ix-" not in reply.text and "[REDACTED]" in reply.text and "ann" in reply.text
    for sql in ("SELECT * FROM users", "SELECT * FROM users WHERE api_key LIKE 'ix%'"):
        reply = await call(kernel, "kernel__query", sql=sql)
        assert "ix-" not in reply.text
    # a MultiIndex: the secret level only
    multi = frame.set_index("name", append=True)
    reply = await call(kernel_over({"users": multi}), "kernel__describe", name="users")
    assert "ix-" not in reply.text and "ann" in reply.text


@pytest.mark.parametrize("name", ["password", "db_password", "apiKey", "API-KEY", "x_api_key", "AWS_SECRET_ACCESS_KEY",
                                  "auth_token", "client_secret", "PrivateKey", "pass_word", ("creds", "pwd")])
def test_secret_names_in_every_spelling(name):
    assert secret_name(name)


@pytest.mark.parametrize("name", ["region", "amount", "max_tokens", "n_tokens", "keyboard", "passport", "tokenizer",
                                  "primary_key", "key"])
def test_ordinary_names_are_not_secret(name):
    assert not secret_name(name)


async def test_cells_send_nothing_that_describe_hides():
    """kernel__cells: a secret-named variable through Out[n], a password column through a
    frame's printed repr, a cell that assigns a secret; kernel__run's own result likewise."""
    ns = {"users": users("password", SECRETS[0])}
    kernel = kernel_over(ns)
    cells = [
        f'db_password = "{SECRETS[1]}"',
        "db_password",
        "users",
        "users.password",
        f"conn = dict(host='db', password='{SECRETS[0]}x')",
        "conn",
        "f'{db_password}!'",
        "print(db_password)",
        "users.password.tolist(), users.to_dict()",
    ]
    replies = [await call(kernel, "kernel__run", code=code) for code in cells]
    reply = await call(kernel, "kernel__cells", last=20)
    for text in [reply.text, *(r.text for r in replies)]:
        for value in SECRETS:
            assert value not in text, text
    assert "Out[3]:" in reply.text and "ann" in reply.text  # the frame is shown, its column masked
    assert "db_password = [REDACTED]" in reply.text
    egress = reply.payload["egress"]
    assert egress["variables"] == ["conn", "db_password", "users"] and egress["rows"] == 6
    reply = await call(kernel, "kernel__describe", name="conn")
    assert SECRETS[0] not in reply.text and "'host': 'db'" in reply.text


async def test_kernel_run_egress_names_the_variables_its_reply_carries():
    kernel = kernel_over({"sales": users("note", "x"), "other": 1})
    reply = await call(kernel, "kernel__run", code="top = sales.amount.sum()\ntop")
    egress = reply.payload["egress"]
    assert egress["variables"] == ["sales", "top"] and egress["rows"] == 1
    assert "6.75" in reply.text


async def test_one_huge_value_is_cut_by_duckdb_before_python_holds_it():
    """Today a 1-row policy sent 202 characters of ``repeat('x', N)`` but held all N in the
    kernel: the value is cut in the query now, and the reply says so."""
    current_run.set(_Ctx(Agent("analyst", data_rows=1)))  # type: ignore[arg-type]
    kernel = kernel_over({})
    tracemalloc.start()
    try:
        reply = await call(kernel, "kernel__query",
                           sql="SELECT repeat('x', 50000000) AS s, [range(0, 5000000)] AS l, 1 AS n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, f"{peak:,} bytes held in Python"
    header, row, *notes = reply.text.splitlines()
    assert header == "s | l | n"
    s, lst, n = row.split(" | ")
    assert len(s) == 200 and s.endswith("…") and lst.endswith("…") and n == "1"
    assert any("values longer than 200 characters were cut" in line for line in notes)


async def test_a_wide_and_long_result_is_bounded_by_the_tool_output():
    current_run.set(_Ctx(Agent("analyst", data="full", max_tool_output=2_000)))  # type: ignore[arg-type]
    columns = ", ".join(f"repeat('y', 1000) AS c{i}" for i in range(1_000))
    tracemalloc.start()
    try:
        reply = await call(kernel_over({}), "kernel__query", sql=f"SELECT {columns} FROM range(100000)")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000 and len(reply.text) <= 2_000
    assert "more columns not sent" in reply.text or "clipped" in reply.text


async def test_numbers_dates_and_decimals_arrive_as_the_query_gave_them():
    frame = pd.DataFrame({"revenue": [37_463_269.85, 0.1], "day": pd.to_datetime(["2026-01-02", "2026-01-03"])})
    sql = ("SELECT round(sum(revenue) - 0.1, 2) AS total, 1e-7 AS tiny, 12345678901.25::DOUBLE AS big, "
           "0.1::REAL AS r, 37463269.85::DECIMAL(18,2) AS d, min(day)::DATE AS first_day, "
           "123456789012345678 AS i, 'nan'::DOUBLE AS nan FROM sales")
    reply = await call(kernel_over({"sales": frame}), "kernel__query", sql=sql)
    assert reply.text.splitlines() == ["total | tiny | big | r | d | first_day | i | nan",
                                       "37463269.85 | 1e-07 | 12345678901.25 | 0.1 | 37463269.85 | 2026-01-02 | "
                                       "123456789012345678 | nan"]


async def test_a_query_error_that_quotes_a_value_is_sent_under_the_policy_and_recorded():
    ns = {"items": pd.DataFrame({"code": ["zebra-7731", "12"] + ["7"] * 20})}
    reply = await call(kernel_over(ns), "kernel__query", sql="SELECT CAST(code AS INT) AS n FROM items")
    assert reply.is_error and "zebra-7731" in reply.text  # one value, as one row of a result
    egress = reply.payload["egress"]
    assert (egress["variables"], egress["rows"], egress["chars"]) == (["items"], 1, len(reply.text))
    current_run.set(_Ctx(Agent("analyst", data_rows=0)))  # type: ignore[arg-type]
    reply = await call(kernel_over(ns), "kernel__query", sql="SELECT CAST(code AS INT) AS n FROM items")
    assert reply.is_error and "zebra" not in reply.text and "sends no rows" in reply.text
    assert reply.payload["egress"]["rows"] == 0


# ------------------------------------------------------------------ through a Server, on both stores

@pytest.fixture
def store(backend_store):
    return backend_store


async def test_on_each_store_no_secret_reaches_the_log_and_every_error_is_a_ledger_row(store):
    script = [
        {"tool": "kernel__query", "args": {"sql": 'SELECT "apiKey" AS k, substr("apiKey", 1, 9) AS p FROM users'}},
        {"tool": "kernel__query", "args": {"sql": 'SELECT CAST("apiKey" AS INT) FROM users'}},
        {"tool": "kernel__query", "args": {"sql": "SELECT CAST(name AS INT) FROM users"}},
        {"tool": "kernel__describe", "args": {"name": "nope"}},
        {"tool": "kernel__cells", "args": {"last": 5}},
        "done: {result}",
    ]
    agent = Agent("analyst", model="chaz/script", script=script, tools=list(SAFE_DEFAULT_TOOLS))
    server = Server(store, [agent])
    ns = {"users": users("apiKey", SECRETS[0])}
    server.add_kernel(ns)
    s = server.current_session("analyst")
    await (await server.send(s, "look")).wait()
    results = [e for e in store.entries(s) if e.entry_type is T.TOOL_RESULT]
    assert [bool(e.payload.get("is_error")) for e in results] == [False, True, True, True, False]
    dump = json.dumps([e.payload for e in store.entries(s)])
    assert SECRETS[0] not in dump and SECRETS[0][:9] not in dump
    rows = store.execute("SELECT via, rows_sent, chars_sent, variables FROM data_egress ORDER BY entry_id")
    assert [(r[0], r[1]) for r in rows] == [("kernel__query", 3), ("kernel__query", 0), ("kernel__query", 1),
                                            ("kernel__describe", 0), ("kernel__cells", 0)]
    assert "ann" in results[2].payload["output"]  # CAST(name AS INT): the value it quotes, recorded
    assert [r[2] for r in rows] == [len(e.payload["output"]) for e in results]
    assert json.loads(rows[2][3]) if isinstance(rows[2][3], str) else rows[2][3] == ["users"]


async def test_a_recorded_replay_on_another_model_is_a_ledger_row_naming_that_model(store):
    query = {"tool": "kernel__query", "args": {"sql": "SELECT name, amount FROM users ORDER BY 1"}}
    analyst = Agent("analyst", model="chaz/script", script=[query, "done: {result}"], tools=list(SAFE_DEFAULT_TOOLS))
    critic = Agent("critic", model="chaz/script", api_base="https://other.example.com/v1",
                   script=[query, "again: {result}"], tools=list(SAFE_DEFAULT_TOOLS))
    server = Server(store, [analyst, critic])
    server.add_kernel({"users": users("note", "plain")})
    s = server.current_session("analyst")
    await (await server.send(s, "look")).wait()
    branch = await server.replay(s, agent="critic")
    [result] = [e for e in store.entries(branch) if e.entry_type is T.TOOL_RESULT and "replayed_from" in e.payload]
    assert "ann | 1.5" in result.payload["output"]
    rows = store.execute("SELECT session_id, agent, host, rows_sent, chars_sent FROM data_egress"
                         " WHERE session_id = ? AND entry_id = ?", [branch, result.id])
    assert rows == [(branch, "critic", "other.example.com", 3, len(result.payload["output"]))]
    await server.stop()


async def test_an_attachment_is_a_ledger_row_of_the_run_that_read_it(store):
    """``%chaz @analyst --with users``: the Message is written before its run; its egress row
    names that run (it was NULL)."""
    agent = Agent("analyst", model="chaz/script", script=["ok"], tools=list(SAFE_DEFAULT_TOOLS))
    server = Server(store, [agent])
    server.add_kernel({"users": users("password", SECRETS[0])})
    s = server.current_session("analyst")
    block, extra = server.kernel.attach(["users"], agent)
    assert SECRETS[0] not in block and "ann" in block
    await (await server.send(s, "look\n\n" + block, payload=extra)).wait()
    [run_id] = [r[0] for r in store.execute("SELECT run_id FROM runs WHERE session_id = ?", [s])]
    rows = store.execute("SELECT via, run_id, variables FROM data_egress WHERE session_id = ?", [s])
    assert [(r[0], r[1]) for r in rows] == [("attachment", run_id)]
    await server.stop()


async def test_a_forks_copied_context_sent_to_another_model_is_a_ledger_row(store):
    query = {"tool": "kernel__query", "args": {"sql": "SELECT name, amount FROM users ORDER BY 1"}}
    analyst = Agent("analyst", model="chaz/script", script=[query, "done: {result}"], tools=list(SAFE_DEFAULT_TOOLS))
    critic = Agent("critic", model="chaz/script", api_base="https://other.example.com/v1", script=["seen"] * 3,
                   tools=list(SAFE_DEFAULT_TOOLS))
    server = Server(store, [analyst, critic])
    server.add_kernel({"users": users("note", "plain")})
    s = server.current_session("analyst")
    await (await server.send(s, "look")).wait()
    end = store.entries(s)[-1].seq
    same = server.fork_session(s, end, say="and again?")  # the same model and host: no new send
    forked = server.fork_session(s, end, agent="critic", say="what do you make of it?")
    for branch in (same, forked):
        await branch.handle.wait()
    other = forked.session_id
    await (await server.send(other, "more?")).wait()  # its second run: sent already
    rows = store.execute("SELECT session_id, agent, host, variables, rows_sent FROM data_egress"
                         " WHERE via = 'fork_context'")
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == [(other, "critic", "other.example.com", 3)]
    assert (json.loads(rows[0][3]) if isinstance(rows[0][3], str) else rows[0][3]) == ["users"]
    await server.stop()
