"""Model calls in the model worker process (chaz_nb/engine/worker): what the kernel sees.

The notebook's model calls run in a process of their own: the kernel never imports litellm,
a worker killed mid-call ends that run with one line and is replaced (the next turn works,
nothing written is lost), and Stop cancels the call in the worker (its HTTP connection
closes). The wire behaviour both ways (in the kernel's process and in the worker) is
tests/test_backends_wire.py's and tests/test_stopping.py's, parametrized over ``wire_backend``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

from fakes.openai_server import Reply, Slow, StallMidStream
from chaz_nb.core.entries import EntryType as T
from chaz_nb.engine.worker import WorkerBackend
from chaz_nb.server import Server
from chaz_nb.server.agents import Agent
from kernel_harness import Kernel
from view_text import rows
from waiting import until


def chat_arrived(model_server, timeout: float = 120) -> None:
    """Block until a chat request has arrived (other requests, such as a GET of the server's
    /props, may come first)."""
    n = 1
    while not model_server.chat_requests():
        model_server.wait_for_requests(n, timeout)
        n += 1


def kinds(store, session_id: int) -> list[str]:
    return [e.entry_type.value for e in store.entries(session_id)]


async def test_a_worker_killed_mid_call_ends_the_run_with_one_line_and_the_next_turn_works(store, model_server):
    backend = WorkerBackend()
    try:
        model_server.script(Slow(600), Reply("back again"))
        server = Server(store, [Agent("w", model="openai/fake", api_base=model_server.openai_base)],
                        backend=backend)
        s = server.current_session("w")
        handle = await server.send(s, "hello")
        await asyncio.to_thread(chat_arrived, model_server)
        killed = backend.pid
        assert killed is not None
        os.kill(killed, signal.SIGKILL)

        error = await asyncio.wait_for(handle.wait(), 60)
        assert error.entry_type is T.ERROR and "\n" not in error.content
        assert "the model worker process was killed (SIGKILL) during the call" in error.content
        assert "send the message again" in error.content
        assert kinds(store, s) == ["Message", "Ack", "Error"]  # the message and its Ack are kept

        reply = await asyncio.wait_for((await server.send(s, "again")).wait(), 120)
        assert reply.content == "back again"
        assert backend.pid != killed and backend.restarts == 1
        assert kinds(store, s) == ["Message", "Ack", "Error", "Message", "Ack", "Message"]
    finally:
        backend.close()


async def test_stop_closes_the_http_connection(store, model_server, wire_backend):
    """Stop mid-stream: the worker cancels the call, so the provider sees its connection close."""
    model_server.script(StallMidStream(Reply("one two three four five"), after_chunks=3), Reply("next"))
    server = Server(store, [Agent("w", model="openai/fake", api_base=model_server.openai_base)],
                    backend=wire_backend)
    s = server.current_session("w")
    await server.send(s, "tell me")
    await until(lambda: getattr(server.current_stream(s), "text", None) == "one two ",
                lambda cb: server.subscribe_stream(s, cb), what="two streamed words")
    await server.stop_runs(s)
    assert store.entries(s, types=[T.ACK])[-1].payload["partial_text"] == "one two "
    # the stalled handler sees its client go: the fake server's connection count drops to zero
    await asyncio.to_thread(model_server.wait_disconnected, 30)
    assert (await asyncio.wait_for((await server.send(s, "again")).wait(), 60)).content == "next"


async def test_an_unknown_models_error_reads_the_same_through_the_worker(model_worker):
    from chaz_nb.engine.backends import LiteLLMBackend
    from chaz_nb.errors import ProviderError

    texts = []
    for backend in (LiteLLMBackend(), model_worker):
        with pytest.raises(ProviderError) as caught:
            await backend.complete("no-such-provider-model", [{"role": "user", "content": "hi"}])
        texts.append((str(caught.value), caught.value.details()))
    assert texts[0] == texts[1]


# ------------------------------------------------------------------ a real kernel
@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("worker-kernel")
    k = Kernel(str(cwd))
    assert k.run("%load_ext chaz_nb").status == "ok"
    yield k
    k.close()


def test_a_kernel_with_the_extension_never_imports_litellm(kernel):
    r = kernel.run("%chaz @assistant hello", timeout=180)  # (streamed: the default agent streams)
    assert r.status == "ok", r.outputs
    assert rows(r.texts()[-1])[-2] == "assistant: echo: hello"
    r = kernel.run("%chaz agent whole --model chaz/echo --no-stream\n%chaz @whole hi")
    assert r.status == "ok", r.outputs
    r = kernel.run("import sys, chaz_nb\n"
                   "print('litellm' in sys.modules, any(m.startswith('litellm.') for m in sys.modules),"
                   " type(chaz_nb.current().backend).__name__)")
    assert r.stdout == "False False WorkerBackend\n"


def test_a_worker_killed_mid_call_in_a_kernel(kernel, model_server):
    model_server.script(Slow(600), Reply("back again"))
    setup = (
        "import asyncio, json, os, signal, chaz_nb\n"
        "from chaz_nb.server import Agent\n"
        "server = chaz_nb.current()\n"
        f"server.define_agent(Agent('far', model='openai/fake', api_base={model_server.openai_base!r}))\n"
        "s = server.current_session('far')\n"
        "handle = await server.send(s, 'hello')\n"
    )
    assert kernel.run(setup).status == "ok"
    chat_arrived(model_server)
    r = kernel.run(
        "killed = server.backend.pid\n"
        "os.kill(killed, signal.SIGKILL)\n"
        "error = await asyncio.wait_for(handle.wait(), 60)\n"
        "print(json.dumps([error.entry_type.value, error.content]))\n"
        "reply = await asyncio.wait_for((await server.send(s, 'again')).wait(), 120)\n"
        "print(json.dumps([reply.content, server.backend.pid != killed,"
        " [e.entry_type.value for e in server.store.entries(s)]]))", timeout=240)
    assert r.status == "ok", r.outputs
    first, second = (json.loads(line) for line in r.stdout.splitlines())
    assert first[0] == "Error" and "\n" not in first[1]
    assert "the model worker process was killed (SIGKILL) during the call" in first[1]
    assert second == ["back again", True, ["Message", "Ack", "Error", "Message", "Ack", "Message"]]


async def test_a_worker_that_cannot_start_fails_the_call_in_one_line_and_does_not_respawn_in_a_loop():
    from chaz_nb.errors import ProviderError

    backend = WorkerBackend(python="/bin/false")  # exits at once, before it could say it is ready
    try:
        with pytest.raises(ProviderError) as caught:
            await asyncio.wait_for(backend.complete("chaz/echo", [{"role": "user", "content": "hi"}]), 30)
        assert str(caught.value) == ("chaz/echo: the model worker process exited with status 1 during the call; "
                                     "a new worker starts with the next message: send the message again")
        assert backend.pid is None and backend.restarts == 1  # none spawned after it
    finally:
        backend.close()
