"""nbval settings for the example notebooks (``pytest --nbval notebooks/``).

Two gaps of nbval 0.11 are closed here, so that nbval checks what a saved notebook shows:

1. nbval ignores ``update_display_data`` (it prints "unhandled iopub msg"). Jupyter frontends
   and nbclient apply it to the output with the same ``display_id``; a ``%chaz`` turn is
   displayed when it starts and brought up to date that way, so without this nbval would
   compare the turn as it was before the agent ran. Here an update replaces the data of the
   cell's earlier output, as a frontend does.
2. nbval's sanitizers only see strings; the ``application/vnd.chaz.session+json`` output is a
   JSON object. It is compared as sorted JSON text, through the same sanitizers.

The sanitizers (``nbval_sanitize.cfg``) only rewrite timestamps, durations and ids.
"""

from __future__ import annotations

import json
import os
from collections import deque

import nbval.plugin as _nbval

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_SANITIZE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nbval_sanitize.cfg")

#: examples/run_notebook.py writes NAME.out.ipynb beside each notebook it runs (git ignores
#: them): those are executed copies, not examples, so nbval does not check them.
collect_ignore_glob = ["*.out.ipynb"]


def pytest_configure(config):
    if getattr(config.option, "nbval_sanitize_with", None) is None:
        config.option.nbval_sanitize_with = _SANITIZE


_get_kernel_message = _nbval.IPyNbFile.get_kernel_message


def _get_kernel_message_applying_updates(self, timeout=None, stream="iopub"):
    """Read a cell's iopub messages up to its idle status, applying display updates.

    nbval copies a display's data when it reads the display message, so the update is applied
    before the message is handed over: the messages up to the next idle status are read
    ahead, each ``update_display_data`` replaces the data of the earlier ``display_data``
    with its ``display_id`` (and is dropped), then the messages are handed out in order.
    """
    if stream != "iopub":
        return _get_kernel_message(self, timeout=timeout, stream=stream)
    queue = self.__dict__.setdefault("_chaz_queue", deque())
    if queue:
        return queue.popleft()
    displays = self.__dict__.setdefault("_chaz_displays", {})
    while True:
        try:
            msg = _get_kernel_message(self, timeout=timeout, stream=stream)
        except Exception:
            if queue:
                return queue.popleft()
            raise
        kind = msg.get("msg_type")
        content = msg.get("content") or {}
        display_id = (content.get("transient") or {}).get("display_id")
        if kind == "display_data" and display_id:
            displays.setdefault(display_id, []).append(content)
        elif kind == "update_display_data":
            for earlier in displays.get(display_id, []):
                earlier["data"] = content.get("data") or {}
                earlier["metadata"] = content.get("metadata") or {}
            continue
        queue.append(msg)
        if kind == "status" and content.get("execution_state") == "idle":
            return queue.popleft()


_sanitize = _nbval.IPyNbCell.sanitize


def _sanitize_json_too(self, s):
    if isinstance(s, (dict, list)):
        s = json.dumps(s, sort_keys=True, indent=1, ensure_ascii=False)

    return _sanitize(self, s)


_nbval.IPyNbFile.get_kernel_message = _get_kernel_message_applying_updates
_nbval.IPyNbCell.sanitize = _sanitize_json_too
