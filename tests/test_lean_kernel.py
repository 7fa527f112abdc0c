"""A lean kernel (issue 32): ``%load_ext chaz_nb`` imports only what a turn needs.

The optional parts load when first used: the MCP SDK when a server starts, psycopg and
pglast with a PostgreSQL store or its ``%chaz sql`` check, the schedules' trigger parser with
the first schedule, pandas with ``%chaz sql -o``; litellm's tiktoken tokenizer (~40 MB) with the
first streamed call, never in a kernel that only asks for whole replies; ``kernel__query``'s
module and the read-only SQL check with the first query or ``%chaz sql``. Each check runs in
a fresh interpreter, since this test process has imported all of them already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: what ``%load_ext chaz_nb`` (and the background import of litellm it starts) must not import
OPTIONAL = (
    "mcp",
    "psycopg",
    "pglast",
    "chaz_nb.server.schedules.cron",
    "pandas",
    "litellm.litellm_core_utils.default_encoding",
    # kernel__query's DuckDB instance and the read-only SQL check: with the first query
    "chaz_nb.server.kernel.query",
    "chaz_nb.core.sqlquery",
)


def run_shell(tmp_path, body: str, env: dict[str, str] | None = None) -> dict:
    """Run ``body`` in a fresh IPython shell after ``%load_ext chaz_nb``; the dict it prints last."""
    script = (
        textwrap.dedent("""
        import json, sys
        from IPython.testing.globalipapp import get_ipython
        ip = get_ipython()
        ip.run_line_magic("load_ext", "chaz_nb")
        from chaz_nb.engine import litellm_loader
        litellm_loader.start_import().result(timeout=300)  # litellm and its warm-up: done
        OPTIONAL = %r
        out = {"loaded": [m for m in OPTIONAL if m in sys.modules]}
        def cell(code):
            result = ip.run_cell(code)
            if not result.success:
                raise SystemExit(f"cell failed: {code!r}: {result.error_in_exec or result.error_before_exec!r}")
    """)
        % (OPTIONAL,)
        + textwrap.dedent(body)
        + "\nprint(json.dumps(out))\n"
    )
    full = dict(
        os.environ,
        PYTHONPATH=ROOT,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        CHAZ_DB=str(tmp_path / "sessions.duckdb"),
        **(env or {}),
    )
    full.pop("CHAZ_MODEL", None)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=full, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_load_ext_imports_no_optional_part(tmp_path):
    out = run_shell(tmp_path, "")
    assert out["loaded"] == []


def test_a_whole_reply_turn_builds_no_tokenizer(tmp_path, model_server):
    """Over the OpenAI wire, as a hosted model: a whole reply needs no tokenizer; a streamed one
    builds it (litellm counts the prompt when a stream starts). With litellm in the kernel
    (``CHAZ_MODEL_WORKER=0``): by default neither litellm nor its tokenizer is ever in the kernel
    (tests/test_model_worker.py)."""
    from fakes.openai_server import Reply

    model_server.script(Reply("whole"), Reply("streamed"))
    api = model_server.openai_base
    out = run_shell(
        tmp_path,
        f"""
        cell("%chaz agent w --model openai/fake --api-base {api} --no-stream")
        cell("%chaz @w hello")
        out["after"] = [m for m in OPTIONAL if m in sys.modules]
        cell("%chaz agent s --model openai/fake --api-base {api}")
        cell("%chaz @s hello")
        out["streamed"] = [m for m in OPTIONAL if m in sys.modules]
    """,
        env={"OPENAI_API_KEY": "sk-test", "CHAZ_MODEL_WORKER": "0"},
    )
    assert out["loaded"] == [] and out["after"] == []
    assert out["streamed"] == ["litellm.litellm_core_utils.default_encoding"]
    assert len(model_server.chat_requests()) == 2


def test_mcp_server_starts_after_a_lean_load(tmp_path):
    out = run_shell(
        tmp_path,
        """
        import chaz_nb
        TIME = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
        cell(f"import chaz_nb\\nserver = chaz_nb.current()\\nserver.add_mcp_server('time', command={TIME!r})")
        cell("conn = await server.mcp.wait_settled('time', timeout=120)")
        conn = ip.user_ns["conn"]
        out.update(state=conn.state, reason=conn.reason, tools=conn.tools, mcp="mcp" in sys.modules)
        cell("await server.remove_mcp_server('time')")
    """,
    )
    assert out["loaded"] == []
    assert out["state"] == "ready", out["reason"]
    assert "time__get_current_time" in out["tools"] and out["mcp"]


def test_postgres_store_and_schedule_after_a_lean_load(tmp_path, pg_url):
    out = run_shell(
        tmp_path,
        f"""
        from chaz_nb.core.entries import EntryType
        from chaz_nb.core.store import SessionStore
        store = SessionStore.open({pg_url!r})
        sid = store.create_session("lean")
        store.append(sid, EntryType.MESSAGE, "user", "hello")
        out["pg"] = [e.content for e in store.entries(sid)]
        store.close()
        cell("%chaz agent w --model chaz/echo")
        cell("import chaz_nb; s = chaz_nb.current().schedules.add('w', 'every 1h', 'wake up')")
        out["next"] = ip.user_ns["s"].next_fire_at is not None
        out["after"] = sorted(m for m in ("psycopg", "chaz_nb.server.schedules.cron") if m in sys.modules)
    """,
    )
    assert out["loaded"] == []
    assert out["pg"] == ["hello"]
    assert out["next"] and out["after"] == ["chaz_nb.server.schedules.cron", "psycopg"]


async def test_an_mcp_server_whose_sdk_cannot_be_imported_fails_with_the_reason(monkeypatch):
    """The SDK is imported when the first server starts: an import that fails is that server's
    failure (state and one-line reason), not a task that never settles."""
    import chaz_nb.server.mcp as mcp_part
    from chaz_nb.core.store import SessionStore
    from chaz_nb.server import Server

    def no_sdk():
        raise ImportError("No module named 'mcp'")

    monkeypatch.setattr(mcp_part, "_sdk", no_sdk)
    server = Server(SessionStore(":memory:"))
    try:
        server.add_mcp_server("time", command=[sys.executable, "-m", "mcp_server_time"])
        conn = await server.mcp.wait_settled("time", timeout=30)
        assert conn.state == "failed"
        assert conn.reason == "ImportError: No module named 'mcp'"
    finally:
        await server.stop()


def test_kernel_query_imports_its_module_when_first_called(tmp_path):
    """kernel__query is registered at load; its module (and the SQL check) comes with the call."""
    out = run_shell(
        tmp_path,
        """
        import asyncio
        import chaz_nb
        server = chaz_nb.current()
        tool = server.tools.get("kernel__query")
        out["registered"] = tool is not None
        ip.user_ns["nums"] = [1, 2, 3]
        reply = asyncio.run(tool.run({"sql": "SELECT 42 AS answer"})) if tool else None
        out["reply"] = getattr(reply, "text", str(reply))
        out["after"] = [m for m in OPTIONAL if m in sys.modules]
    """,
    )
    assert out["loaded"] == [] and out["registered"]
    assert "42" in out["reply"]
    assert out["after"] == ["chaz_nb.server.kernel.query", "chaz_nb.core.sqlquery"]
