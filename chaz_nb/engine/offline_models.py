"""The offline ``chaz/*`` models: deterministic scripted replies with no network.

They are registered with litellm as a custom provider (``CustomLLM``) named ``chaz``
(``litellm_loader.py`` does it at import), so demos and tests go through the very
``litellm.acompletion`` call that a real model name takes. ``chaz/echo`` echoes the newest
user message, ``chaz/script`` plays an agent's script (``script_step``); both summarize when
asked to compact, and both stream word by word through litellm's ``CustomLLM`` streaming hooks.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any
from collections.abc import Iterator, Sequence

from .streaming import words

OFFLINE_PROVIDER = "chaz"
OFFLINE_MODELS = ("chaz/echo", "chaz/script")
#: metadata key that carries an agent's script to the scripted model
SCRIPT_KEY = "chaz_script"
#: metadata key that asks the offline models for a summary (compaction)
TASK_KEY = "chaz_task"
#: metadata key: seconds the offline models wait before answering (simulates network latency)
DELAY_KEY = "chaz_delay"
#: metadata key: seconds the offline models wait before each streamed word (none by default)
WORD_DELAY_KEY = "chaz_word_delay"


def is_offline(model: str) -> bool:
    return model.startswith(OFFLINE_PROVIDER + "/")


def approx_tokens(text: str) -> int:
    return math.ceil(len(text) / 4) if text else 0


def last_user_index(messages: Sequence[dict[str, Any]]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


def echo_reply(messages: Sequence[dict[str, Any]]) -> str:
    i = last_user_index(messages)
    text = _text_of(messages[i]) if i >= 0 else ""
    return f"echo: {text}"


def summary_reply(messages: Sequence[dict[str, Any]]) -> str:
    """A deterministic summary: one line per user/assistant message, shortened."""
    lines = []
    for m in messages:
        if m.get("role") in ("user", "assistant"):
            text = " ".join(_text_of(m).split())
            lines.append(f"- {m['role']}: {text[:80]}")
    return "Summary of earlier conversation:\n" + "\n".join(lines[-20:])


def script_step(
    script: Sequence[Any], messages: Sequence[dict[str, Any]], tools_offered: bool
) -> str | list[dict[str, Any]]:
    """What the scripted model says next: a text reply or a list of tool calls.

    The position in the script is the number of assistant turns since the latest user
    message, so each run (which starts at a user-role Message or Directive) plays the script
    from its first step, and the same messages always give the same answer.
    """
    start = last_user_index(messages)
    step = sum(1 for m in messages[start + 1 :] if m.get("role") == "assistant")
    last_result = ""
    for m in reversed(messages):
        if m.get("role") == "tool":
            last_result = _text_of(m)
            break
    items = list(script)
    item = items[step] if step < len(items) else None
    if item is None:
        return last_result
    if isinstance(item, str):
        return item.replace("{result}", last_result)
    calls = item if isinstance(item, list) else [item]
    if not tools_offered:
        # A forced final answer (no tools offered): the next text of the script.
        for later in items[step:]:
            if isinstance(later, str):
                return later.replace("{result}", last_result)
        return last_result
    out = []
    for call in calls:
        if not isinstance(call, dict) or "tool" not in call:
            raise ValueError(
                f"script step {step + 1}: expected a string, {{\"tool\": NAME, \"args\": {{...}}}} "
                f"or a list of those, got {call!r}"
            )
        out.append({"name": call["tool"], "arguments": call.get("args", {})})
    return out


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)



def offline_handler_class() -> type:
    from litellm import CustomLLM, ModelResponse

    class OfflineModels(CustomLLM):
        """``chaz/echo`` and ``chaz/script``: deterministic models with no network."""

        def _answer(self, model: str, messages: list, optional_params: dict,
                    litellm_params: dict) -> tuple[dict[str, Any], str, dict[str, int]]:
            """The reply message, its finish reason and its usage."""
            metadata = (litellm_params or {}).get("metadata") or {}
            tools_offered = bool(optional_params.get("tools"))
            name = model.split("/", 1)[-1]
            if metadata.get(TASK_KEY) == "summarize":
                result: Any = summary_reply(messages)
            elif name == "echo":
                result = echo_reply(messages)
            elif name == "script":
                result = script_step(metadata.get(SCRIPT_KEY) or [], messages, tools_offered)
            else:
                raise ValueError(
                    f"unknown offline model chaz/{name}; offline models: {', '.join(OFFLINE_MODELS)}"
                )
            prompt = sum(approx_tokens(_text_of(m)) for m in messages)
            if isinstance(result, str):
                message: dict[str, Any] = {"role": "assistant", "content": result}
                finish = "stop"
                completion = approx_tokens(result)
            else:
                base = sum(1 for m in messages if m.get("role") == "assistant")
                tool_calls: list[dict[str, Any]] = [
                    {
                        "id": f"call_{base + 1}_{i + 1}",
                        "type": "function",
                        "function": {
                            "name": c["name"],
                            "arguments": c["arguments"]
                            if isinstance(c["arguments"], str)
                            else json.dumps(c["arguments"]),
                        },
                    }
                    for i, c in enumerate(result)
                ]
                message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
                finish = "tool_calls"
                completion = sum(approx_tokens(t["function"]["arguments"]) + 4 for t in tool_calls)
            usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
            return message, finish, usage

        def _respond(self, model: str, messages: list, optional_params: dict, litellm_params: dict) -> Any:
            message, finish, usage = self._answer(model, messages, optional_params, litellm_params)
            return ModelResponse(model=model, choices=[{"index": 0, "message": message, "finish_reason": finish}],
                                 usage=usage)

        def _chunks(self, model: str, messages: list, optional_params: dict,
                    litellm_params: dict) -> Iterator[dict[str, Any]]:
            """The same reply as litellm's generic stream chunks: the text word by word, each
            tool call whole, the usage on the last chunk."""
            message, finish, usage = self._answer(model, messages, optional_params, litellm_params)

            def chunk(text: str = "", tool_use: Any = None, last: bool = False) -> dict[str, Any]:
                return {"text": text, "tool_use": tool_use, "is_finished": last, "index": 0,
                        "finish_reason": finish if last else "", "usage": usage if last else None}

            for word in words(message.get("content") or ""):
                yield chunk(word)
            for i, call in enumerate(message.get("tool_calls") or []):
                yield chunk(tool_use={**call, "index": i})
            yield chunk(last=True)

        def completion(self, model, messages, api_base, custom_prompt_dict, model_response,
                       print_verbose, encoding, api_key, logging_obj, optional_params,
                       acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                       timeout=None, client=None):
            return self._respond(model, messages, optional_params, litellm_params)

        async def acompletion(self, model, messages, api_base, custom_prompt_dict, model_response,
                              print_verbose, encoding, api_key, logging_obj, optional_params,
                              acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                              timeout=None, client=None):
            delay = ((litellm_params or {}).get("metadata") or {}).get(DELAY_KEY)
            if delay:
                await asyncio.sleep(float(delay))
            return self._respond(model, messages, optional_params, litellm_params)

        def streaming(self, model, messages, api_base, custom_prompt_dict, model_response,
                      print_verbose, encoding, api_key, logging_obj, optional_params,
                      acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                      timeout=None, client=None):
            delay = float(((litellm_params or {}).get("metadata") or {}).get(WORD_DELAY_KEY) or 0)
            for piece in self._chunks(model, messages, optional_params, litellm_params):
                if delay and piece["text"]:
                    time.sleep(delay)
                yield piece

        async def astreaming(self, model, messages, api_base, custom_prompt_dict, model_response,
                             print_verbose, encoding, api_key, logging_obj, optional_params,
                             acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                             timeout=None, client=None):
            metadata = (litellm_params or {}).get("metadata") or {}
            if metadata.get(DELAY_KEY):
                await asyncio.sleep(float(metadata[DELAY_KEY]))
            word_delay = float(metadata.get(WORD_DELAY_KEY) or 0)
            for piece in self._chunks(model, messages, optional_params, litellm_params):
                if word_delay and piece["text"]:
                    await asyncio.sleep(word_delay)  # only when the agent asks (a demo of streaming)
                yield piece

    return OfflineModels
