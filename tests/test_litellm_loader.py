"""Loading litellm (chaz_nb/engine/litellm_loader.py): the import's collector, the offline models' prices."""

import pytest


def test_litellm_import_runs_without_the_cyclic_collector_and_freezes_what_it_built():
    # each full collection during the import held the GIL for 100-200 ms (the kernel loop
    # stalled meanwhile: bench/bench_loop_stall.py --why)
    import gc

    from chaz_nb.engine.litellm_loader import _no_collection

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        with _no_collection():
            assert not gc.isenabled()
            built = [[] for _ in range(100)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen + len(built)
        gc.disable()  # a collector the user switched off stays off
        with _no_collection():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_litellm_prices_the_offline_models_at_zero_without_a_failed_lookup():
    """litellm prices each call for its own logging; an offline model missing from its price
    map made it search the map and raise on every call (~2-3 ms on the loop, issue 30)."""
    from chaz_nb.engine.litellm_loader import litellm_module
    from chaz_nb.engine.offline_models import OFFLINE_MODELS

    litellm = litellm_module()
    for model in OFFLINE_MODELS:
        assert litellm.completion_cost(model=model, prompt="hello", completion="world") == 0.0
    with pytest.raises(Exception, match="(?i)not mapped|isn't mapped|not found"):
        litellm.completion_cost(model="openai/no-such-model-here", prompt="hello", completion="world")


def test_the_first_turn_after_load_ext_says_it_waits_for_the_model_library(tmp_path):
    """A real kernel: %load_ext starts litellm's import (seconds) in the background, and a turn
    sent at once waits for it; the view's status line says so until the request leaves, and
    the finished view no longer does."""
    import json

    from kernel_harness import Kernel

    k = Kernel(str(tmp_path), env={"CHAZ_DB": ":memory:"})
    try:
        r = k.run("%load_ext chaz_nb\nfrom chaz_nb.engine.litellm_loader import litellm_loaded\n"
                  "print('loaded before the turn:', litellm_loaded())\n%chaz @assistant hi", timeout=180)
        assert r.status == "ok", r.outputs
        if "loaded before the turn: True" in r.stdout:  # pragma: no cover - an import faster than a cell
            pytest.skip("litellm was imported before the turn began: nothing to wait for")
        opened = [json.dumps(m["content"]) for m in r.of("comm_open")]
        assert any("<div class='chaz-status-line'>loading the model library\\u2026</div>" in s for s in opened)
        texts = r.texts()
        assert "… loading the model library…" in texts[0]
        assert "assistant: echo: hi" in texts[-1] and "loading the model library" not in texts[-1]
    finally:
        k.close()
