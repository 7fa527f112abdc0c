"""What chaz_nb adds to a turn against a real model server (issue 29).

llama.cpp's llama-server with SmolLM2-135M-Instruct (built and fetched by ``.ci/llama.sh``;
started here on 127.0.0.1 with tests/fakes/llama_server.py), the same prompt shape both ways:

1. ``turn``: one whole (not streamed) turn through the Server (``send`` → reply Message, in a
   fresh session: system prompt + one user message) against a bare ``litellm.acompletion``
   with the same messages and options;
2. ``ttft``: time to first token, streamed: ``send`` → the first stream event a view gets,
   against a bare streaming ``acompletion`` → its first text chunk.

The two sides run interleaved (the order swapped every round) so the machine's noise hits
both alike; each round's prompt is new (``round N``), so neither side gets the other's
prompt cache. Medians; the ratio is Server / bare.

Run: python bench/bench_real_model.py [--rounds 15] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENAI_API_KEY", "sk-local")

from fakes.llama_server import LlamaServer, locate  # noqa: E402

from chaz_nb.core.store import SessionStore  # noqa: E402
from chaz_nb.engine.backends import litellm_ready  # noqa: E402
from chaz_nb.server import Server  # noqa: E402
from chaz_nb.server.agents import Agent  # noqa: E402

MODEL = "openai/smollm2"
SYSTEM = "Be brief."


def prompt(i: int) -> str:
    return f"Round {i}: say hello."


async def bench(base: str, rounds: int, max_tokens: int) -> None:
    litellm = await litellm_ready()
    options = {"max_tokens": max_tokens, "temperature": 0}
    store = SessionStore(":memory:")
    server = Server(store, [Agent("whole", model=MODEL, api_base=base, system=SYSTEM, stream=False,
                                  model_options=options),
                            Agent("streamed", model=MODEL, api_base=base, system=SYSTEM, model_options=options)])

    def messages(i: int) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt(i)}]

    async def server_turn(i: int) -> float:
        s = server.new_session("whole")
        start = time.perf_counter()
        reply = await (await server.send(s, prompt(i))).wait()
        took = time.perf_counter() - start
        assert reply is not None and reply.entry_type.value == "Message", reply
        return took

    async def bare_turn(i: int) -> float:
        start = time.perf_counter()
        response = await litellm.acompletion(model=MODEL, api_base=base, messages=messages(i), **options)
        took = time.perf_counter() - start
        assert response.choices[0].message.content is not None
        return took

    async def server_ttft(i: int) -> float:
        s = server.new_session("streamed")
        first = asyncio.get_running_loop().create_future()
        unsubscribe = server.subscribe_stream(s, lambda e: first.done() or e.done or first.set_result(
            time.perf_counter()))
        start = time.perf_counter()
        handle = await server.send(s, prompt(i))
        at = await first
        await handle.wait()
        unsubscribe()
        return at - start

    async def bare_ttft(i: int) -> float:
        start = time.perf_counter()
        response = await litellm.acompletion(model=MODEL, api_base=base, messages=messages(i), stream=True,
                                             stream_options={"include_usage": True}, **options)
        at = None
        async for chunk in response:
            if at is None and chunk.choices and chunk.choices[0].delta.content:
                at = time.perf_counter()
        assert at is not None
        return at - start

    await server_turn(10_000)  # warm-up: connections, the model's first prompt
    await bare_turn(10_001)
    for name, ours, bare, offset in (("turn (whole reply)", server_turn, bare_turn, 0),
                                     ("time to first token (streamed)", server_ttft, bare_ttft, 1000)):
        a: list[float] = []
        b: list[float] = []
        for r in range(rounds):
            i = offset + 2 * r
            if r % 2:
                b.append(await bare(i))
                a.append(await ours(i + 1))
            else:
                a.append(await ours(i))
                b.append(await bare(i + 1))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name:32s} Server {ma * 1000:8.1f} ms   bare litellm {mb * 1000:8.1f} ms   "
              f"ratio {ma / mb:5.2f}x   (+{(ma - mb) * 1000:.1f} ms, median of {rounds})")
    await server.stop()
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    found = locate()
    if isinstance(found, str):
        sys.exit(found)
    with tempfile.TemporaryDirectory() as tmp:
        llama = LlamaServer(*found, Path(tmp) / "llama-server.log", slots=1).start()
        try:
            print(f"llama-server {found[0]} · {found[1].name} · max_tokens {args.max_tokens}")
            asyncio.run(bench(llama.base, args.rounds, args.max_tokens))
        finally:
            llama.stop()


if __name__ == "__main__":
    main()
