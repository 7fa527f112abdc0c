"""A real language model in a real kernel (issue 29): `%chaz` against llama.cpp's llama-server
with SmolLM2-135M (tests/fakes/llama_server.py), as a user would set it up from the README:
a streamed turn grows on screen and ends as one Message with the server's own token counts;
a message over the server's window gets the Error that says what to do, and the next turn works.
"""

from __future__ import annotations

import ast

import pytest

from kernel_harness import Kernel
from test_llama_server import server_tokens
from view_text import rows

#: long enough for the view to show the reply part-written at least once (it is throttled)
MAX_TOKENS = 32
AGENT = '''%%chaz agent tiny
model = "openai/smollm2"
api_base = "{base}"
system = "Be brief."
[model_options]
max_tokens = {max_tokens}
temperature = 0
'''


@pytest.fixture(scope="module")
def kernel(llama, tmp_path_factory):
    k = Kernel(str(tmp_path_factory.mktemp("kernel")), env={"CHAZ_DB": ":memory:", "OPENAI_API_KEY": "sk-local"})
    for cell in ("%load_ext chaz_nb", "import chaz_nb", AGENT.format(base=llama.base, max_tokens=MAX_TOKENS)):
        r = k.run(cell, timeout=120)
        assert r.status == "ok", (cell, r.outputs)
    yield k
    k.close()


def latest(k: Kernel) -> str:
    r = k.run("s = chaz_nb.current(); e = s.store.latest(s.current_session('tiny')); "
              "print(e.entry_type.value, '|', ' '.join(e.content.split()))")
    return r.stdout.strip()


def test_a_streamed_turn_in_a_kernel(kernel, llama_log):
    r = kernel.run("%chaz @tiny Say hello.", timeout=120)

    assert r.status == "ok", r.outputs
    kind, _, text = latest(kernel).partition(" | ")
    assert kind == "Message" and text
    partials = [line[len("tiny: "):-len(" …")] for t in r.texts() for line in rows(t)
                if line.startswith("tiny: ") and line.endswith(" …")]
    # the view showed the reply part-written (a prefix of it; the last may be all of it, shown
    # while the reply's Message commits), then whole, without the mark of a reply being written
    assert partials and all(text.startswith(p.strip()) for p in partials), partials
    final = [line for line in rows(r.texts()[-1]) if line.startswith("tiny: ")]
    assert final and not final[-1].endswith(" …") and text.startswith(final[-1][len("tiny: "):].strip()[:20]), final
    r = kernel.run("s = chaz_nb.current(); print(s.store.execute('SELECT status, prompt_tokens, completion_tokens "
                   "FROM runs ORDER BY run_id DESC LIMIT 1')[0])")
    status, prompt, completion = ast.literal_eval(r.stdout.strip())
    expected = server_tokens(llama_log, [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Say hello."}])
    assert (status, prompt) == ("ok", expected) and 0 < completion <= MAX_TOKENS


def test_a_message_over_the_servers_window_in_a_kernel(kernel, llama_log):
    big = "The quick brown fox jumps over the lazy dog. " * 60
    r = kernel.run(f"%chaz @tiny {big}", timeout=120)

    shown = "\n".join(r.texts()) + r.stdout + r.stderr
    assert f"over the model's window of {llama_log.ctx} tokens" in shown, r.outputs
    assert "--context-tokens" in shown and "model_options" not in shown
    assert latest(kernel).startswith("Error | model call failed")
    assert kernel.run("%chaz @tiny Say hi.", timeout=120).status == "ok"
    assert latest(kernel).startswith("Message | ")


def test_stop_in_the_middle_of_a_streamed_reply_in_a_kernel(kernel, llama_log):
    r = kernel.run(AGENT.replace("tiny", "long").format(base=llama_log.base, max_tokens=120))
    assert r.status == "ok", r.outputs
    r = kernel.run("%chaz --no-wait @long Write a long story about a dragon and a knight.")
    display_id = r.of("display_data")[0]["content"]["transient"]["display_id"]

    def part_written(msg: dict) -> bool:  # the view shows the reply being written
        text = msg["content"].get("data", {}).get("text/plain", "")
        return (msg["msg_type"] == "update_display_data" and msg["content"]["transient"]["display_id"] == display_id
                and any(line.startswith("long: ") and line.endswith(" …") for line in text.splitlines()))

    kernel.wait_for(part_written)
    assert kernel.run("%chaz stop @long").status == "ok"
    assert kernel.run("%chaz wait", timeout=60).status == "ok"
    r = kernel.run("s = chaz_nb.current(); e = s.store.latest(s.current_session('long')); "
                   "print(e.entry_type.value, e.payload.get('status'), bool(e.payload.get('partial_text')))")
    assert r.stdout.strip() == "Ack cancelled True"  # stopped, and the text so far kept
    assert kernel.run("%chaz @long Say hi.", timeout=120).status == "ok"
    r = kernel.run("print(s.store.latest(s.current_session('long')).entry_type.value)")
    assert r.stdout.strip() == "Message"
