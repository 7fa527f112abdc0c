"""In a real kernel: the live card of a kernel__run call shows the code after ``api_key=`` (its
text form and the HTML the widget draws), approving runs it, and the log keeps it with its hash."""

from __future__ import annotations

import hashlib
import json

import pytest

from kernel_harness import Kernel

#: (the literal is a secret the kernel holds, SHOP_TOKEN: one the model chose would not run masked)
HELD = "73104952618"
CODE = f"api_key={HELD};RAN=int(chr(55))"
AGENT = ("%chaz agent coder --model chaz/script --script "
         f"'[{{\"tool\": \"kernel__run\", \"args\": {{\"code\": \"{CODE}\"}}}}, \"done: {{result}}\"]'")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(str(tmp_path_factory.mktemp("kernel")), env={"CHAZ_DB": ":memory:", "SHOP_TOKEN": HELD})
    assert k.run("%load_ext chaz_nb").status == "ok"
    assert k.run(AGENT).status == "ok", k.run(AGENT).outputs
    yield k
    k.close()


def test_the_live_card_shows_the_code_after_a_key_name_and_the_log_keeps_what_ran(kernel):
    r = kernel.run("%chaz @coder go", timeout=60)
    assert r.status == "ok", r.outputs
    shown = "api_key=«REDACTED»;RAN=int(chr(55))"
    assert any(shown in t for t in r.texts()), r.texts()
    cards = [card for m in r.of("comm_msg")
             for card in m["content"]["data"].get("content", {}).get("cards", {}).values()]
    assert cards and all("api_key=«REDACTED»;RAN=int(chr(55))" in c["html"] and "[REDACTED]" not in c["html"]
                         for c in cards), cards
    assert all(c["edit"] == shown for c in cards)
    r = kernel.run("%chaz pending")
    assert "api_key=«REDACTED»;RAN=int(chr(55))" in r.stdout, r.stdout
    assert kernel.run("%chaz approve last").status == "ok"
    assert kernel.run("%chaz wait").status == "ok"
    r = kernel.run("import chaz_nb, json; print(RAN, json.dumps(chaz_nb.current().store.execute("
                   "'SELECT arguments, code_sha256 FROM tool_calls')[0]))")
    ran, row = r.stdout.strip().split(" ", 1)
    arguments, digest = json.loads(row)
    assert ran == "7" and json.loads(arguments) == {"code": shown}
    assert digest == hashlib.sha256(CODE.encode()).hexdigest()
