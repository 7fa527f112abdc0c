"""Approve with edits: a person changes a parked call's arguments before approving it.

The person edits the arguments as the card shows them (``arguments_display``: sensitive values
masked, the store's redactions, hidden characters named). ``merge_edit`` turns that text back
into what the tool gets: an argument left as shown keeps the value the model sent (so a masked
token or a named ``<U+202E>`` the person did not touch reaches the tool as sent), and an
argument the person changed is used as they wrote it. ``check_edit`` checks the result against
the tool's JSON schema (with ``jsonschema``) and the tool's own argument check, before anything
is written: a bad edit is one line, and the request stays open.

An edit changes arguments only: the call stays the call to the tool that was asked about.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from ..core.codemask import code_argument, restore_literals
from ..engine.tools import Tool, ToolError
from ..errors import ApprovalError
from .approval_rules import MASK, mask_arguments

#: the hint every refused edit ends with
STAYS_OPEN = "the request stays open: fix the arguments and approve again"


def parse_edit(text: str | dict[str, Any]) -> dict[str, Any]:
    """Edited arguments from JSON text (or a dict already); an ApprovalError of one line."""
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ApprovalError(f"edited arguments are not JSON ({exc}); {STAYS_OPEN}") from None
    if not isinstance(value, dict):
        raise ApprovalError(
            f"edited arguments must be a JSON object like {{\"name\": value}}, not {type(value).__name__}; {STAYS_OPEN}"
        )
    return value


def merge_edit(
    t: Tool | None, shown: dict[str, Any], original: dict[str, Any] | None, edited: dict[str, Any]
) -> dict[str, Any]:
    """The arguments the tool gets: each one left as the card showed it keeps the model's
    value (``original``, when this process has it); a changed one is the person's."""
    if original is None:
        return dict(edited)
    sensitive = set(t.sensitive_params) if t is not None else set()
    merged: dict[str, Any] = {}
    for key, value in edited.items():
        if key in original and (value == shown.get(key) or (key in sensitive and value == MASK)):
            merged[key] = original[key]
        else:
            merged[key] = value
    code, model_code = code_argument(merged), code_argument(original)
    if code is not None and model_code is not None and code != model_code:
        # edited code around a masked literal: each «REDACTED» kept is the model's literal
        try:
            merged["code"] = restore_literals(code, model_code)
        except ValueError as exc:
            raise ApprovalError(f"edited code refused: {exc}; {STAYS_OPEN}") from None
    return merged


def check_edit(t: Tool, arguments: dict[str, Any]) -> None:
    """Raise a one-line ApprovalError unless ``arguments`` fit the tool's JSON schema."""
    try:
        jsonschema.validators.validator_for(t.parameters)(t.parameters).validate(arguments)
    except jsonschema.ValidationError as exc:
        error = best_match([exc]) or exc
        where = ".".join(str(p) for p in error.absolute_path)
        message = " ".join(error.message.split())
        if len(message) > 200:
            message = message[:199] + "…"
        raise ApprovalError(
            f"edited arguments of {t.name} refused: {f'{where}: ' if where else ''}{message}; {STAYS_OPEN}"
        ) from None
    except jsonschema.SchemaError:
        pass  # a tool whose schema is not valid JSON Schema: its own check below still runs
    try:
        t.validate(arguments)
    except ToolError as exc:
        raise ApprovalError(f"edited arguments refused: {exc}; {STAYS_OPEN}") from None


def recorded_edit(t: Tool | None, arguments: dict[str, Any]) -> dict[str, Any]:
    """Edited arguments as the log keeps them: sensitive ones masked (the store redacts secrets)."""
    return mask_arguments(t, arguments) if t is not None else dict(arguments)

