"""A real kernel that is shut down leaves no MCP server process behind (the process table)."""

from __future__ import annotations

import json

import psutil

from kernel_harness import Kernel

LIST_SERVERS = """
import json, psutil
print(json.dumps([p.pid for p in psutil.Process().children(recursive=True)
                  if "mcp_server_time" in " ".join(p.cmdline())]))
"""


def test_kernel_shutdown_ends_every_mcp_server_process(tmp_path):
    k = Kernel(str(tmp_path), env={"CHAZ_DB": ":memory:"})
    try:
        k.run("%load_ext chaz_nb")
        out = k.run("import sys\n%chaz mcp add time --wait -- {sys.executable} -m mcp_server_time", timeout=120)
        assert "ready" in out.stdout, out.texts
        pids = json.loads(k.run(LIST_SERVERS).stdout.strip().splitlines()[-1])
        assert len(pids) == 1
        procs = [psutil.Process(pid) for pid in pids]
    finally:
        k.close()  # the kernel is killed: no unload, no clean stop
    # the server reads EOF on its stdin once the kernel is gone and exits
    gone, alive = psutil.wait_procs(procs, timeout=30)
    assert alive == [], f"orphaned MCP server processes: {alive}"
