"""Tools: Python functions an agent may call, their JSON schemas, registries and scopes.

``@tool`` turns a typed function (sync or async) into a ``Tool`` whose JSON schema comes from
the signature and the docstring. ``ToolRegistry`` holds every tool a server knows;
``ScopedTools`` is the subset one agent may use, narrowed transitively for child agents.

Where a tool runs, and what the tool timeout can stop (the kernel loop must never be held
unnoticed: widgets, comms, schedules and every other run share it):

- A sync function always runs on a worker thread. The timeout stops the wait for it at once;
  the thread itself cannot be killed and finishes in the background. ``in_thread=False`` on a
  sync function is refused: on the loop, nothing could interrupt it, so a 4 s call would
  freeze the kernel for 4 s whatever the timeout. Work that must run on the loop (DuckDB
  writes, the run's context) is written as ``async def``.
- An async function runs on the loop and the timeout applies at its awaits. Each step it
  takes between two awaits is timed: a step over ``LOOP_HOLD_WARNING`` seconds (or over the
  timeout) is logged as a warning, and a step longer than the timeout makes the call an
  error result (the value is not used), so a tool that blocks instead of awaiting is seen.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import fnmatch
import inspect
import json
import logging
import re
import threading
import time
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal
from collections.abc import Callable, Iterable, Mapping, Sequence
from ..errors import ToolError

ApprovalMode = Literal["never", "unless_auto_approved", "always"]
RiskLevel = Literal["low", "medium", "high"]
APPROVAL_MODES = ("never", "unless_auto_approved", "always")
RISK_LEVELS = ("low", "medium", "high")
#: seconds one step of an async tool may hold the kernel loop before it is logged
LOOP_HOLD_WARNING = 0.5

log = logging.getLogger(__name__)

#: set, in the thread a sync tool runs on, once the run that called it is cancelled (Stop): the
#: thread itself cannot be stopped, so a tool that waits on something it can end (a process, a
#: query) checks it (``server/kernel/forked.py`` kills its child)
tool_cancelled: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "chaz_tool_cancelled", default=None)


@dataclass
class Tool:
    """A callable the model can invoke, with its OpenAI-format parameter schema."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    approval: ApprovalMode = "never"
    risk: RiskLevel = "low"
    sensitive_params: tuple[str, ...] = ()
    #: maps schema property names to Python parameter names (``async`` -> ``async_``)
    arg_names: dict[str, str] = field(default_factory=dict)
    #: sync functions run on a worker thread; False is only allowed for async functions
    in_thread: bool = True
    #: seconds a call may take; None: the server's tool timeout (MCP servers set their own)
    timeout: float | None = None
    #: the MCP server this tool comes from (recorded in its ToolCall entries); None for Python tools
    mcp_server: str | None = None
    #: an ``approval="always"`` tool that an agent's ``auto_approve`` may waive by naming it
    #: exactly (every level of the chain); a glob such as ``*`` never waives it
    waived_by_name: bool = False
    #: False for an async tool that holds the loop on purpose (``kernel__run`` runs a cell's
    #: worth of code on the kernel's main thread, as a cell would): its steps are not timed
    timed_steps: bool = True

    def __post_init__(self) -> None:
        if self.approval not in APPROVAL_MODES:
            raise ValueError(
                f"tool {self.name}: approval must be one of {', '.join(APPROVAL_MODES)}, "
                f"not {self.approval!r}"
            )
        if self.risk not in RISK_LEVELS:
            raise ValueError(
                f"tool {self.name}: risk must be one of {', '.join(RISK_LEVELS)}, not {self.risk!r}"
            )
        if not self.in_thread and not inspect.iscoroutinefunction(self.fn):
            raise ValueError(
                f"tool {self.name}: in_thread=False would run a sync function on the kernel loop, "
                "where the tool timeout cannot stop it; write it as async def, or drop in_thread=False"
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The decorated function stays usable as a plain function in the notebook.
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<chaz_nb tool {self.name}>"

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools=[...]`` item."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the schema; return them as Python keyword arguments."""
        if not isinstance(arguments, dict):
            raise ToolError(f"{self.name}: arguments must be a JSON object, got {_kind(arguments)}")
        props: dict[str, Any] = self.parameters.get("properties", {})
        missing = [p for p in self.parameters.get("required", []) if p not in arguments]
        if missing:
            raise ToolError(f"{self.name}: missing required argument(s): {', '.join(missing)}")
        unknown = [k for k in arguments if k not in props]
        if unknown and not self.parameters.get("additionalProperties", False):
            raise ToolError(
                f"{self.name}: unknown argument(s): {', '.join(unknown)}; "
                f"expected: {', '.join(props) or 'none'}"
            )
        for key, value in arguments.items():
            if key in props:
                problem = _type_problem(value, props[key])
                if problem:
                    raise ToolError(f"{self.name}: argument {key!r} {problem}")
        return {self.arg_names.get(k) or k: v for k, v in arguments.items()}

    async def run(self, arguments: Mapping[str, Any], *, hold_limit: float | None = None) -> Any:
        """Call the function with validated keyword arguments (sync ones on a thread).

        ``hold_limit``: seconds one step of the tool may hold the event loop; a longer step
        makes the call a ToolError once the step ends (the loop cannot be preempted).
        """
        kwargs = self.validate(dict(arguments))
        if inspect.iscoroutinefunction(self.fn):
            if not self.timed_steps:
                return await self.fn(**kwargs)
            return await self._on_loop(self.fn(**kwargs), hold_limit)
        cancelled = threading.Event()
        token = tool_cancelled.set(cancelled)  # (to_thread runs the function in a copy of this context)
        try:
            result = await asyncio.to_thread(self.fn, **kwargs)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        finally:
            tool_cancelled.reset(token)
        if inspect.iscoroutine(result):  # a sync function that returned a coroutine
            return await self._on_loop(result, hold_limit)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _on_loop(self, coro: Any, hold_limit: float | None) -> Any:
        def step(seconds: float) -> None:
            if seconds > LOOP_HOLD_WARNING or (hold_limit is not None and seconds > hold_limit):
                log.warning("tool %s held the kernel loop for %.1f s without awaiting", self.name, seconds)
            if hold_limit is not None and seconds > hold_limit:
                raise ToolError(
                    f"{self.name} held the kernel loop for {seconds:.1f} s without awaiting, over "
                    f"the {hold_limit:g} s tool timeout; its result is not used (await inside it, "
                    "or make it a sync function: those run on a thread)"
                )

        return await _timed_steps(coro, step)


#: the ToolResult payload keys a ``ToolReply`` may fill (never the approval's or the run's own)
REPLY_PAYLOAD_KEYS = frozenset({"egress", "namespace_changes", "rich_outputs"})


@dataclass
class ToolReply:
    """What a tool may return instead of a plain value: its text, whether it is an error, and
    facts recorded in the ToolResult entry's payload (only ``REPLY_PAYLOAD_KEYS``)."""

    text: str
    is_error: bool = False
    payload: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.payload) - REPLY_PAYLOAD_KEYS)
        if unknown:
            raise ValueError(f"ToolReply payload keys {unknown} are not among {sorted(REPLY_PAYLOAD_KEYS)}")


@types.coroutine
def _timed_steps(coro: Any, on_step: Callable[[float], None]) -> Any:
    """Drive ``coro`` as ``await`` would, timing each step it runs between two awaits.

    ``on_step`` gets each step's seconds; when it raises, the coroutine is closed and the
    error is raised in its place.
    """
    value: Any = None
    error: BaseException | None = None
    while True:
        started = time.perf_counter()
        try:
            yielded = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            on_step(time.perf_counter() - started)
            return stop.value
        try:
            on_step(time.perf_counter() - started)
        except BaseException:
            coro.close()
            raise
        try:
            value, error = (yield yielded), None
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - cancellation included: passed on to the tool
            value, error = None, exc


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    approval: ApprovalMode = "never",
    risk: RiskLevel = "low",
    sensitive_params: Sequence[str] = (),
    in_thread: bool = True,
) -> Any:
    """Decorator: make a typed function a tool. Usable as ``@tool`` or ``@tool(...)``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return function_tool(
            f,
            name=name,
            description=description,
            approval=approval,
            risk=risk,
            sensitive_params=sensitive_params,
            in_thread=in_thread,
        )

    return wrap(fn) if fn is not None else wrap


def function_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    approval: ApprovalMode = "never",
    risk: RiskLevel = "low",
    sensitive_params: Sequence[str] = (),
    in_thread: bool = True,
) -> Tool:
    """Build a Tool from a function's signature, type hints and docstring."""
    if isinstance(fn, Tool):
        return fn
    tool_name = name or fn.__name__
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
        raise ValueError(f"tool name {tool_name!r} must be 1-64 letters, digits, _ or -")
    summary, param_docs = _parse_docstring(inspect.getdoc(fn) or "")
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - evaluating string annotations runs the user's code
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    arg_names: dict[str, str] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema_name = pname[:-1] if pname.endswith("_") and pname[:-1].isidentifier() else pname
        if schema_name != pname:
            arg_names[schema_name] = pname
        prop = _json_schema(hints.get(pname, Any))
        if pname in param_docs:
            prop["description"] = param_docs[pname]
        if param.default is param.empty:
            required.append(schema_name)
        elif param.default is not None and _jsonable(param.default):
            prop["default"] = param.default
        properties[schema_name] = prop
    unknown_sensitive = [p for p in sensitive_params if p not in properties]
    if unknown_sensitive:
        raise ValueError(
            f"tool {tool_name}: sensitive_params {unknown_sensitive} are not parameters of it"
        )
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return Tool(
        name=tool_name,
        description=description or summary or tool_name,
        parameters=parameters,
        fn=fn,
        approval=approval,
        risk=risk,
        sensitive_params=tuple(sensitive_params),
        arg_names=arg_names,
        in_thread=in_thread,
    )


class ToolRegistry:
    """Every tool a server knows, by name."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, t: Tool | Callable[..., Any], *, replace: bool = True) -> Tool:
        t = t if isinstance(t, Tool) else function_tool(t)
        if not replace and t.name in self._tools:
            raise ValueError(f"a tool named {t.name!r} is already registered")
        self._tools[t.name] = t
        return t

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def match(self, patterns: Iterable[str] | None) -> frozenset[str]:
        """Names matching exact names or globs (``web_*``); ``None`` means every tool."""
        if patterns is None:
            return frozenset(self._tools)
        names: set[str] = set()
        for pattern in patterns:
            names.update(fnmatch.filter(self._tools, pattern))
        return frozenset(names)

    def scope(self, patterns: Iterable[str] | None, parent: ScopedTools | None = None) -> ScopedTools:
        """The tools an agent defined with ``patterns`` may use, within ``parent``'s scope."""
        rules = parent.rules if parent is not None else ()
        return ScopedTools(self, _add_level(rules, patterns))


ToolsLike = ToolRegistry | Iterable[Tool | Callable[..., Any]] | None


def as_registry(tools: ToolsLike, where: str = "Server(tools=...)") -> ToolRegistry:
    """A ToolRegistry as is; any other iterable of tools or plain functions as a new registry.

    Plain functions become tools as ``@tool`` would make them. Anything else is one TypeError
    here, at the call, rather than an AttributeError deep inside: a lone tool, a string (an
    iterable of characters) and a mapping (an iterable of keys) are refused by name.
    """
    if tools is None:
        return ToolRegistry()
    if isinstance(tools, ToolRegistry):
        return tools
    expected = f"{where} takes a ToolRegistry or a list of tools or functions"
    if isinstance(tools, Tool) or (callable(tools) and not isinstance(tools, type)):
        name = getattr(tools, "name", None) or getattr(tools, "__name__", "tool")
        raise TypeError(f"{expected}; wrap one tool in a list: tools=[{name}]")
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        raise TypeError(f"{expected}, not {type(tools).__name__}")
    items = list(tools)
    for i, item in enumerate(items):
        if not (isinstance(item, Tool) or callable(item)) or isinstance(item, type):
            raise TypeError(
                f"{expected}; item {i} is {item!r} ({type(item).__name__}): "
                "pass the function or the @chaz_nb.tool object itself"
            )
    return ToolRegistry(items)


#: levels of name patterns; a tool is in a scope when it matches a pattern of every level
Rules = tuple[frozenset[str], ...]


def _add_level(rules: Rules, patterns: Iterable[str] | None) -> Rules:
    """``rules`` with one more level (``None`` adds none: it narrows nothing)."""
    if patterns is None:
        return rules
    level = frozenset(patterns)
    return rules if level in rules else (*rules, level)


def matches_rules(name: str, rules: Rules) -> bool:
    """Whether ``name`` matches a pattern of every level of ``rules``."""
    return all(any(fnmatch.fnmatchcase(name, p) for p in level) for level in rules)


class ScopedTools:
    """The tools one agent may use: rules evaluated over the live registry.

    A scope is a chain of pattern levels (the agent's ``tools``, its parent's, every
    ceiling above it); a tool is in it when it is registered now and matches every level. So
    a tool that joins the registry during a run (an MCP server that became ready) is offered
    from the run's next step, and one that leaves is gone at once. A child's scope is its
    parent's levels plus its own, so it never holds a tool its parent lacks, whenever asked.
    """

    def __init__(self, registry: ToolRegistry, rules: Iterable[frozenset[str]] = ()) -> None:
        self.registry = registry
        self.rules: Rules = tuple(frozenset(level) for level in rules)

    @property
    def names(self) -> frozenset[str]:
        """The tool names in scope now."""
        return frozenset(n for n in self.registry.names() if matches_rules(n, self.rules))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.registry and matches_rules(name, self.rules)

    def __repr__(self) -> str:
        return f"ScopedTools({sorted(self.names)})"

    def narrow(self, patterns: Iterable[str] | None) -> ScopedTools:
        """This scope intersected with ``patterns`` (``None`` keeps it whole)."""
        if patterns is None:
            return self
        return ScopedTools(self.registry, _add_level(self.rules, patterns))

    def get(self, name: str) -> Tool:
        t = self.registry.get(name) if matches_rules(name, self.rules) else None
        if t is None:  # out of scope, never registered, or gone (an MCP server that stopped)
            available = ", ".join(sorted(self.names)) or "none"
            raise ToolError(f"unknown tool {name!r}; tools available: {available}")
        return t

    def tools(self) -> list[Tool]:
        return [t for n in sorted(self.names) if (t := self.registry.get(n)) is not None]

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.tools()]


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments from the model (a JSON string or a dict); ToolError when invalid."""
    if raw is None or raw == "":
        return {}
    value = raw if isinstance(raw, dict) else _json_value(raw)
    if value is _TOO_DEEP or _depth_over(value, MAX_ARGUMENT_DEPTH):
        # Past this the store's redaction and JSON encoding would hit the stack limit instead.
        raise ToolError(f"arguments nest over {MAX_ARGUMENT_DEPTH} levels deep; send a flatter JSON object")
    if not isinstance(value, dict):
        raise ToolError(f"arguments must be a JSON object, got {_kind(value)}")
    return value


def _json_value(raw: Any) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"arguments are not valid JSON ({exc}); send a JSON object") from None
    except RecursionError:  # the model's text, not our bug: a tool error, and the run goes on
        return _TOO_DEEP


#: How deep tool arguments may nest; no tool schema needs more.
MAX_ARGUMENT_DEPTH = 200
_TOO_DEEP = object()


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/dicts more than ``limit`` deep (without recursing)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return False


# ---------------------------------------------------------------- schema helpers
_PARAM_LINE = re.compile(r"^\s*(?:[:@]param\s+)?(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and per-parameter text from an Args:/Parameters section."""
    if not doc:
        return "", {}
    paragraphs = doc.strip().split("\n\n")
    summary = " ".join(paragraphs[0].split())
    params: dict[str, str] = {}
    in_args = False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.lower().rstrip(":") in ("args", "arguments", "parameters", "params"):
            in_args = True
            continue
        if in_args and stripped and not line.startswith((" ", "\t")):
            in_args = False
        if in_args or stripped.startswith((":param", "@param")):
            m = _PARAM_LINE.match(line)
            if m:
                params[m.group(1)] = m.group(2).strip()
    return summary, params


def _json_schema(hint: Any) -> dict[str, Any]:
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            return _json_schema(non_null[0])
        return {"anyOf": [_json_schema(a) for a in non_null]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset, Sequence, list):
        item = _json_schema(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin in (dict, Mapping, dict):
        return {"type": "object"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
    if hint in simple:
        return {"type": simple[hint]}
    return {}


def _type_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    if "anyOf" in schema:
        if any(_type_problem(value, s) is None for s in schema["anyOf"]):
            return None
        return f"has the wrong type ({_kind(value)})"
    if "enum" in schema and value not in schema["enum"]:
        return f"must be one of {schema['enum']}"
    expected = schema.get("type")
    checks: dict[str, Callable[[Any], bool]] = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    if expected in checks and value is not None and not checks[expected](value):
        return f"must be {expected}, got {_kind(value)}"
    return None


def _kind(value: Any) -> str:
    return {
        dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"
    }.get(type(value), type(value).__name__)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False

