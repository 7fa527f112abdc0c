"""Agent definitions: a model, a system prompt, the tools it may use and its limits."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from ..engine.backends import DEFAULT_MODEL_TIMEOUT, DEFAULT_RETRIES
from ..engine.tree_budget import DEFAULT_MAX_MODEL_CALLS, DEFAULT_MAX_SPAWNS
from ..core.credentials import credential_in, is_credential_key, mask_text, masked_url
from ..core.redaction import REDACTED, redact_data
from ..errors import AgentError

#: what the kernel's tools may send of the notebook's values (server/kernel/policy.py)
DATA_POLICIES = ("schema", "sample", "full")
DEFAULT_DATA_ROWS = 10
#: seconds an agent's ``kernel__run`` code may run before it is interrupted
DEFAULT_CODE_TIMEOUT = 60.0
#: where the notebook's data may go (egress_gate.py): ``ask`` a person (a card) for a host not
#: in the agent's ``egress_hosts``, ``allow`` every host, ``deny`` every host not in them
EGRESS_RULES = ("deny", "ask", "allow")
#: the hosts an agent may always send the notebook's data to unless it names others: this
#: machine's (a llama.cpp or Ollama server)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")

#: what a notebook agent defined without tools gets (issue 26, "safe defaults"): the built-in
#: tools that act only within chaz_nb's sessions, and the kernel's tools (the read-only ones,
#: and kernel__run behind its approval); not the user's own tools. ``--tools '*'``: every tool.
SESSION_TOOLS = ("spawn_agent", "spawn_worker", "send_message", "compact")
KERNEL_DEFAULT_TOOLS = ("kernel__variables", "kernel__describe", "kernel__query", "kernel__cells", "kernel__run")
SAFE_DEFAULT_TOOLS = (*SESSION_TOOLS, *KERNEL_DEFAULT_TOOLS)

RESERVED_NAMES = frozenset({"user", "system", "all", "everyone"})
#: a name, and the variant a fork makes of it with another model or prompt (``analyst@gpt-4o``)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}(?:@[A-Za-z0-9_.-]{1,64})?")


@dataclass
class Agent:
    """What an agent is: a model, a system prompt, the tools it may use and its limits."""

    name: str
    model: str = "chaz/echo"
    system: str = ""
    #: tool names or globs (``web_*``); ``None`` means every registered tool
    tools: list[str] | None = None
    max_iterations: int = 10
    #: the offline ``chaz/script`` model's moves (see ``offline_models.script_step``)
    script: list[Any] | None = None
    #: spawn depth limit; ``None`` takes ``max_iterations``, as in docs/design.md ("Spawn")
    max_depth: int | None = None
    #: extra keyword arguments for ``litellm.acompletion`` (temperature, ...)
    model_options: dict[str, Any] = field(default_factory=dict)
    #: the provider's URL, for a local or OpenAI-compatible server (keys come from the environment)
    api_base: str | None = None
    #: seconds one model call may take before the run ends with an Error
    model_timeout: float = DEFAULT_MODEL_TIMEOUT
    #: more attempts after a rate limit, a 5xx or a dropped connection (0 = none)
    max_retries: int = DEFAULT_RETRIES
    #: stream the reply (views show it as it is written); ``False`` asks for whole replies
    stream: bool = True
    #: tools this agent may call without asking (never waives ``approval="always"``)
    auto_approve: list[str] = field(default_factory=list)
    #: seconds an approval request waits before it is denied; ``None`` = the server default
    approval_timeout: float | None = None
    #: spawns (``spawn_agent`` + ``spawn_worker``) in the whole run tree this agent starts
    max_spawns: int = DEFAULT_MAX_SPAWNS
    #: model calls in the whole run tree this agent starts (every run in it, see tree_budget)
    max_model_calls: int = DEFAULT_MAX_MODEL_CALLS
    #: token budget of a run's context (about 4 characters a token), filled newest first from
    #: the latest Summary; ``None`` takes the server's (``DEFAULT_CONTEXT_TOKENS``, 32k)
    context_tokens: int | None = None
    #: the most characters of one tool result the model is sent (the ToolResult entry keeps the
    #: whole output); ``None`` takes ``DEFAULT_MAX_TOOL_OUTPUT`` (50,000)
    max_tool_output: int | None = None
    #: what the kernel's tools send of the notebook's values: ``schema`` (names, types and
    #: counts, no values), ``sample`` (plus up to ``data_rows`` rows) or ``full``
    data: str = "sample"
    #: rows of a DataFrame or a query result the ``sample`` policy sends
    data_rows: int = DEFAULT_DATA_ROWS
    #: seconds ``kernel__run`` code may run before it is interrupted (KeyboardInterrupt)
    code_timeout: float = DEFAULT_CODE_TIMEOUT
    #: whether the notebook's data may leave for the model's host (``EGRESS_RULES``)
    egress: str = "ask"
    #: hosts (or providers, for a model on its provider's own endpoint) always sent to
    egress_hosts: list[str] = field(default_factory=lambda: list(LOCAL_HOSTS))
    #: its approved ``kernel__run`` code becomes notebook cells (``%chaz agent NAME --no-cells``)
    cells: bool = True

    def __repr__(self) -> str:
        # model_options can hold a key given literally (api_key=..., a credential header): a
        # cell that ends with an Agent, or server.agents, would put it in the notebook.
        # Every other field as the log would keep it (a key pasted in a system prompt or a script).
        shown = {f.name: redact_data(getattr(self, f.name), mask_text) for f in dataclasses.fields(self)}
        shown["model_options"] = masked_options(self.model_options)
        if isinstance(self.api_base, str):  # never its user:password@ (or a key in it)
            shown["api_base"] = mask_text(masked_url(self.api_base))  # a sig=/token= too
        return "Agent(" + ", ".join(f"{name}={value!r}" for name, value in shown.items()) + ")"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise AgentError(
                f"agent name {self.name!r} must start with a letter and use only letters, "
                "digits, _ or - (at most 64), and a fork's variant after @ (analyst@gpt-4o)"
            )
        if self.name.lower() in RESERVED_NAMES:
            raise AgentError(f"agent name {self.name!r} is reserved; choose another name")
        if not isinstance(self.model, str) or not self.model.strip():
            raise AgentError(f"agent {self.name}: model must be a litellm model string, e.g. chaz/echo")
        if not isinstance(self.max_iterations, int) or self.max_iterations < 1:
            raise AgentError(f"agent {self.name}: max_iterations must be a positive integer")
        if self.max_depth is not None and (not isinstance(self.max_depth, int) or self.max_depth < 0):
            raise AgentError(f"agent {self.name}: max_depth must be an integer >= 0")
        for limit, least in (("max_spawns", 0), ("max_model_calls", 1)):
            value = getattr(self, limit)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise AgentError(f"agent {self.name}: {limit} must be an integer >= {least}")
        if self.context_tokens is not None and (
            isinstance(self.context_tokens, bool) or not isinstance(self.context_tokens, int)
            or self.context_tokens < 1
        ):
            raise AgentError(f"agent {self.name}: context_tokens must be a positive integer (tokens)")
        if self.max_tool_output is not None and (
            isinstance(self.max_tool_output, bool) or not isinstance(self.max_tool_output, int)
            or self.max_tool_output < 1
        ):
            raise AgentError(f"agent {self.name}: max_tool_output must be a positive integer (characters)")
        if self.data not in DATA_POLICIES:
            raise AgentError(f"agent {self.name}: data must be one of {', '.join(DATA_POLICIES)}, not {self.data!r}")
        if isinstance(self.data_rows, bool) or not isinstance(self.data_rows, int) or self.data_rows < 0:
            raise AgentError(f"agent {self.name}: data_rows must be an integer >= 0 (rows)")
        if isinstance(self.code_timeout, bool) or not isinstance(self.code_timeout, (int, float)) \
                or not self.code_timeout > 0:
            raise AgentError(f"agent {self.name}: code_timeout must be a number of seconds > 0")
        if self.egress not in EGRESS_RULES:
            raise AgentError(f"agent {self.name}: egress must be one of {', '.join(EGRESS_RULES)}, not {self.egress!r}")
        if isinstance(self.egress_hosts, str):
            self.egress_hosts = [h.strip() for h in self.egress_hosts.split(",") if h.strip()]
        if not isinstance(self.egress_hosts, (list, tuple)) or not all(isinstance(h, str) for h in self.egress_hosts):
            raise AgentError(f"agent {self.name}: egress_hosts must be a list of host names, e.g. [\"127.0.0.1\"]")
        self.egress_hosts = [h.strip().lower() for h in self.egress_hosts if h.strip()]
        if self.tools is not None:
            if isinstance(self.tools, str):
                self.tools = [t.strip() for t in self.tools.split(",") if t.strip()]
            self.tools = [str(t) for t in self.tools]
        if isinstance(self.auto_approve, str):
            self.auto_approve = [t.strip() for t in self.auto_approve.split(",") if t.strip()]
        if not isinstance(self.auto_approve, (list, tuple)) or not all(isinstance(t, str) for t in self.auto_approve):
            raise AgentError(f"agent {self.name}: auto_approve must be a list of tool names, e.g. [\"search\"]")
        self.auto_approve = list(self.auto_approve)
        if self.approval_timeout is not None and (
            isinstance(self.approval_timeout, bool)
            or not isinstance(self.approval_timeout, (int, float))
            or not self.approval_timeout > 0
        ):
            raise AgentError(f"agent {self.name}: approval_timeout must be a number of seconds > 0")
        if self.api_base is not None and (
            not isinstance(self.api_base, str) or not self.api_base.startswith(("http://", "https://"))
        ):
            raise AgentError(
                f"agent {self.name}: api_base must be an http:// or https:// URL, "
                "e.g. http://localhost:11434 or https://api.example.com/v1"
            )
        if isinstance(self.model_timeout, bool) or not isinstance(self.model_timeout, (int, float)) \
                or not self.model_timeout > 0:
            raise AgentError(f"agent {self.name}: model_timeout must be a number of seconds > 0")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) \
                or not 0 <= self.max_retries <= 20:
            raise AgentError(f"agent {self.name}: max_retries must be an integer from 0 to 20")
        if not isinstance(self.stream, bool):
            raise AgentError(f"agent {self.name}: stream must be true or false")
        if not isinstance(self.model_options, dict):
            raise AgentError(f"agent {self.name}: model_options must be a table of litellm arguments")
        if self.script is not None and not isinstance(self.script, list):
            raise AgentError(f"agent {self.name}: script must be a list of steps")
        if self.model == "chaz/script" and self.script is None:
            raise AgentError(f"agent {self.name}: the chaz/script model needs a script (a list of steps)")

    def call_options(self) -> dict[str, Any]:
        """Keyword arguments of this agent's model calls (see ``LiteLLMBackend.complete``)."""
        options: dict[str, Any] = {"timeout": self.model_timeout, "num_retries": self.max_retries,
                                   **self.model_options}
        if self.api_base:
            options["api_base"] = self.api_base
        return options

    @property
    def call_depth_limit(self) -> int:
        return self.max_iterations if self.max_depth is None else self.max_depth


def masked_options(options: Any) -> Any:
    """``model_options`` as shown: credentials (by name or by what they hold, core/credentials.py)
    and every header value masked."""
    if not isinstance(options, dict):
        return options
    out: dict[Any, Any] = {}
    for key, value in options.items():
        name = str(key)
        if name.endswith("headers") and isinstance(value, dict):
            out[key] = {header: REDACTED for header in value}
        elif is_credential_key(name) or credential_in(value) is not None:
            # by its name or by what it holds (a private key, a JSON credential, a URL's
            # user:password, a token): masked whole, never a piece of it
            out[key] = REDACTED
        else:
            out[key] = redact_data(value)
    return out
