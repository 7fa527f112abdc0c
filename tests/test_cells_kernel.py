"""Approved agent code as notebook cells, through a real kernel (issue 44 §1), on DuckDB and
PostgreSQL: the lab comm's ``cell`` message names the cell that asked and carries the code, its
outputs and the ``chaz`` metadata; ``%chaz cells`` gives the code without the lab extension;
``%chaz export`` writes a valid notebook whose Run All in a fresh kernel makes the same variable."""

from __future__ import annotations

import json
import uuid

import nbformat
import pytest

from kernel_harness import Kernel

FIRST = "sales = [3, 4, 5]\ntop = max(sales) * 10\nprint(\"top is\", top)\ntop"
SECOND = "top = top + 1"
EDITED = "top = top + 7"
SCRIPT = json.dumps([{"tool": "kernel__run", "args": {"code": FIRST}},
                     {"tool": "kernel__run", "args": {"code": SECOND}}, "done: {result}"])


@pytest.fixture(params=["duckdb", "postgres"])
def kernel(request, tmp_path):
    db = str(tmp_path / "chaz.duckdb") if request.param == "duckdb" else request.getfixturevalue("pg_url")
    k = Kernel(str(tmp_path), env={"CHAZ_DB": db})
    assert k.run("%load_ext chaz_nb").status == "ok"
    yield k
    k.close()


def open_cells_comm(kernel: Kernel) -> str:
    """What the lab extension does for each notebook: a ``chaz`` comm with role ``cells``."""
    comm_id = uuid.uuid4().hex
    msg = kernel.kc.session.msg("comm_open", {"comm_id": comm_id, "target_name": "chaz", "data": {"role": "cells"}})
    kernel.kc.shell_channel.send(msg)
    return comm_id


def one_line(r) -> str:
    """A UsageError's one line (IPython prints it on stderr)."""
    [line] = r.stderr.strip().splitlines()
    return line


def cell_messages(messages, comm_id):
    return [m["content"]["data"] for m in messages
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id
            and m["content"]["data"].get("type") == "cell"]


def build(kernel: Kernel, agent: str = "coder", extra: str = "") -> tuple[int, list]:
    """An agent builds ``top`` through an approved and an edited kernel__run; the session id and
    every iopub message seen meanwhile."""
    seen = []
    r = kernel.run(f"%chaz agent {agent} --model chaz/script {extra}--script '{SCRIPT}'")
    assert r.status == "ok", r.outputs
    r = kernel.run(f"%chaz @{agent} build top", metadata={"cellId": "asking-cell"})  # returns parked
    assert r.status == "ok", r.outputs
    seen += r.outputs
    r = kernel.run(f"import chaz_nb; s = chaz_nb.current(); sid = s.current_session({agent!r}); print(sid)")
    sid = int(r.stdout.strip())
    for approve in ("%chaz approve last", f"%chaz approve last --args {json.dumps({'code': EDITED})}"):
        r = kernel.run(approve)
        assert r.status == "ok", r.outputs
        seen += r.outputs
        # the wait returns when the run parks again (the next call) or ends
        for _ in range(20):
            r = kernel.run(f"%chaz wait {sid}")
            seen += r.outputs
            if kernel.run("print(s.session_status(sid))").stdout.strip() in ("parked", "idle"):
                break
    r = kernel.run(f"%chaz wait {sid}")
    seen += r.outputs
    assert kernel.run("print(s.session_status(sid))").stdout.strip() == "idle"
    return sid, seen


def test_approved_code_reaches_the_notebook_as_cells_and_exports_as_a_notebook(kernel, tmp_path):
    comm_id = open_cells_comm(kernel)
    sid, seen = build(kernel)
    assert kernel.run("print(top)").stdout.strip() == "57"
    messages = cell_messages(seen + kernel.background + kernel.drain(0.5), comm_id)
    assert len(messages) == 2, [m["msg_type"] for m in seen]
    first, second = messages
    assert first["cell_id"] == second["cell_id"] == "asking-cell"
    assert first["session_id"] == sid
    meta = first["metadata"]["chaz"]
    assert {k: meta[k] for k in ("session", "agent", "model", "approved_by", "edited")} == {
        "session": sid, "agent": "coder", "model": "chaz/script", "approved_by": "user", "edited": False}
    assert second["metadata"]["chaz"]["edited"] is True
    assert first["source"].splitlines()[0].startswith("# chaz: written by @coder (chaz/script), approved by you")
    assert first["source"].endswith(FIRST) and second["source"].endswith(EDITED)
    assert first["outputs"] == [
        {"output_type": "stream", "name": "stdout", "text": "top is 50\n"},
        {"output_type": "execute_result", "execution_count": None, "data": {"text/plain": "50"}, "metadata": {}}]

    # without the lab extension: %chaz cells prints both, in log order
    r = kernel.run(f"%chaz cells {sid}")
    assert r.status == "ok"
    assert r.stdout.count("# chaz: written by @coder") == 2
    assert r.stdout.index(FIRST.splitlines()[0]) < r.stdout.index(EDITED)

    # %chaz export: a valid notebook; Run All in a fresh kernel makes the same top
    path = tmp_path / "out" / "session.ipynb"
    r = kernel.run(f"%chaz export {sid} --notebook {path}")
    assert r.status == "error" and "does not exist" in one_line(r)  # the folder first
    path.parent.mkdir()
    r = kernel.run(f"%chaz export {sid} --notebook {path}")
    assert r.status == "ok" and "2 approved cells" in r.stdout, r.outputs
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    kinds = [c.cell_type for c in nb.cells]
    assert kinds.count("code") == 2 and "markdown" in kinds
    codes = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.metadata["chaz"]["edited"] for c in codes] == [False, True]
    assert any("build top" in c.source for c in nb.cells if c.cell_type == "markdown")
    # the message comes before the code it asked for
    assert kinds.index("code") > next(i for i, c in enumerate(nb.cells) if "build top" in c.source)
    r = kernel.run(f"%chaz export {sid} --notebook {path}")
    assert r.status == "error" and "--force" in one_line(r)
    assert kernel.run(f"%chaz export {sid} --notebook {path} --force").status == "ok"
    r = kernel.run(f"%chaz export 9999 --notebook {tmp_path / 'x.ipynb'}")
    assert r.status == "error" and "no session 9999" in one_line(r)

    assert run_all(nb, tmp_path) == "57"


def run_all(nb, cwd) -> str:
    """Run All of the exported notebook in a fresh kernel (nbclient when installed, else the
    harness's kernel cell by cell); what ``print(top)`` says at the end."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    nb.cells.append(nbformat.v4.new_code_cell("print(top)"))
    try:
        from nbclient import NotebookClient
    except ImportError:
        fresh = Kernel(str(cwd))
        try:
            for cell in nb.cells:
                if cell.cell_type == "code":
                    result = fresh.run(cell.source)
                    assert result.status == "ok", result.outputs
            return result.stdout.strip()
        finally:
            fresh.close()
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return "".join(o.get("text", "") for o in nb.cells[-1].outputs).strip()


def test_the_switches_keep_approved_code_out_of_the_notebook(kernel):
    comm_id = open_cells_comm(kernel)
    r = kernel.run("%chaz cells off")
    assert "no longer" in r.stdout
    sid, seen = build(kernel)
    assert cell_messages(seen + kernel.background + kernel.drain(0.5), comm_id) == []
    kernel.background.clear()
    # the log keeps it: one session's code, as cells
    r = kernel.run(f"%chaz cells {sid}")
    assert r.stdout.count("# chaz: written by") == 2
    # the kernel's switch on, the agent's own off
    kernel.run("%chaz cells on")
    sid, seen = build(kernel, "quiet", "--no-cells ")
    assert cell_messages(seen + kernel.background + kernel.drain(0.5), comm_id) == []
    # --cells / --no-cells alone change only that switch, and it is kept with the agent
    kept = "from chaz_nb.server.agent_book import AgentBook; a = AgentBook(s.store).load()['quiet']; "
    r = kernel.run("%chaz agent quiet --cells")
    assert "chaz/script" in r.stdout and "does not become cells" not in r.stdout, r.stderr
    assert kernel.run(kept + "print(a.cells, bool(a.script))").stdout.strip() == "True True"
    r = kernel.run("%chaz agent quiet --no-cells")
    assert "its approved code does not become cells" in r.stdout, r.stderr
    assert kernel.run(kept + "print(a.cells, bool(a.script))").stdout.strip() == "False True"
