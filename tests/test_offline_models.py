"""The scripted offline model's moves (chaz_nb/engine/offline_models.py), without litellm."""

from chaz_nb.engine.offline_models import script_step


def test_script_restarts_at_each_user_message():
    script = ["first", "second"]
    assert script_step(script, [{"role": "user", "content": "a"}], True) == "first"
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "b"},
    ]
    assert script_step(script, msgs, True) == "first"


def test_script_without_tools_offered_gives_its_next_text():
    script = [{"tool": "add", "args": {}}, "final"]
    assert script_step(script, [{"role": "user", "content": "a"}], tools_offered=False) == "final"
