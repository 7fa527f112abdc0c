"""A planted API key never reaches the session database file or any notebook output."""

from __future__ import annotations

import json
from pathlib import Path

from kernel_harness import Kernel

KEY = "sk-planted-0123456789abcdefghijklmnopqrstuv"
CUSTOM = "zq-custom-secret-value-987654321"

CELLS = [
    "%load_ext chaz_nb",
    '''
import chaz_nb, os

@chaz_nb.tool
def leak(what: str) -> str:
    """Returns secrets from the environment, as a careless tool might."""
    if what == "raise":
        raise RuntimeError("auth failed with Authorization: Bearer " + os.environ["MY_SERVICE_TOKEN"])
    return f"OPENAI_API_KEY={os.environ['OPENAI_API_KEY']} token={os.environ['MY_SERVICE_TOKEN']}"
''',
    "%chaz agent leaky --model chaz/script --tools leak --script "
    "'[[{\"tool\": \"leak\", \"args\": {\"what\": \"env\"}}, {\"tool\": \"leak\", \"args\": {\"what\": \"raise\"}}], "
    "\"I found: {result}\"]'",
    f"%chaz @leaky my key is {KEY}, please check it",
    # a secret as a JSON key of a tool call's arguments (the model chose it)
    '''
_keyed = chaz_nb.current().define_agent(chaz_nb.Agent("keyed", model="chaz/script", tools=["leak"], script=[
    {"tool": "leak", "args": {"what": "env", os.environ["MY_SERVICE_TOKEN"]: 1}}, "done: {result}"]))
''',
    "%chaz @keyed go",
    # a chaz_nb traceback on the kernel's stderr (a failing on_write callback is logged)
    '''
def _trips(entry):
    if entry.content == "trip":
        raise RuntimeError("callback saw " + os.environ["OPENAI_API_KEY"])

_unsubscribe = chaz_nb.current().store.subscribe(_trips)
chaz_nb.current().store.append(chaz_nb.current().current_session("assistant"), "Ack", "note", "trip")
_unsubscribe()
''',
    "%chaz log",
    "%chaz sql SELECT content, payload FROM entries ORDER BY id",
    "%chaz audit",
    "%unload_ext chaz_nb",
]


def test_planted_key_is_in_no_output_and_not_in_the_database(tmp_path):
    k = Kernel(str(tmp_path), env={"OPENAI_API_KEY": KEY, "MY_SERVICE_TOKEN": CUSTOM})
    try:
        outputs = []
        for cell in CELLS:
            r = k.run(cell, timeout=120)
            assert r.status == "ok", (cell, r.outputs)
            outputs.append(r.outputs)
        outputs.append(k.drain(1.0) + k.background)
    finally:
        k.close()
    text = json.dumps(outputs, default=str)
    logged = json.dumps(outputs[CELLS.index(next(c for c in CELLS if "_trips" in c))], default=str)
    assert "Traceback" in logged and "RuntimeError: callback saw [REDACTED]" in logged
    assert "[REDACTED]" in text  # the outputs did show where a secret was
    assert KEY not in text and CUSTOM not in text
    data = b"".join(p.read_bytes() for p in Path(tmp_path, ".chaz").iterdir() if p.is_file())
    assert data, "no database file was written"
    assert KEY.encode() not in data and CUSTOM.encode() not in data
