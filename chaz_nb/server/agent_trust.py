"""A kept agent another kernel changed runs here within what this kernel confirmed (issue 41 §6).

On a shared store (PostgreSQL) every kernel reads every kept agent's row, and another kernel
may write it (agent_book.py). Taken whole, a change there was this kernel's: kernel B sets
``auto_approve = ["kernel__run"]`` and an ``api_base`` of its own, and A's next run of the agent
runs code in A's namespace with no decision in A and sends A's keys to B's server. So each
kernel keeps the definition it *confirmed* (defined here, loaded at start, or taken with
``%chaz agent NAME --accept``), and a definition heard from another kernel runs here as:

- the stored definition (its model, prompt, limits ...), but
- with this kernel's endpoints: ``api_base`` and every URL-valued model option (``base_url``
  ...), and this kernel's credential options, so this kernel's keys go only where this kernel
  sent them (an agent first defined by another kernel: to no ``api_base`` at all, the
  provider's own endpoint);
- its tools and auto-approve list capped by the confirmed ones (a ``Ceiling`` level each, the
  narrowing every spawn, room and schedule uses, ceiling.py: a glob like ``kernel__*`` or ``*``
  in the stored list widens nothing); an agent this kernel never confirmed runs with no tool;
- the narrower data policy of the two (``schema`` < ``sample`` < ``full``, fewer rows), and the
  lower bound on a tool output sent to the model;
- this kernel's model when the stored one is another provider's (``ollama_chat/llama3`` changed
  to ``openai/gpt-4o`` would send this kernel's data and key to OpenAI); a model of the same
  provider is taken as stored.

The first run of such an agent in each session writes one line that says so, and names
``--accept``; ``%chaz agents`` says it too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..core.credentials import credential_in, is_credential_key, without_userinfo
from ..engine.runtime import DEFAULT_MAX_TOOL_OUTPUT
from .agents import DATA_POLICIES, EGRESS_RULES, LOCAL_HOSTS, Agent
from .ceiling import Ceiling

#: model options that name where requests go (besides ``api_base``)
ENDPOINT_KEYS = frozenset({"api_base", "base_url", "azure_endpoint", "endpoint", "api_url", "url", "host"})


def is_endpoint(key: str, value: object) -> bool:
    """Whether a model option says where requests (and so keys) go."""
    return key.lower() in ENDPOINT_KEYS or (isinstance(value, str) and value.strip().lower().startswith(
        ("http://", "https://")))


def _credential(key: str, value: object) -> bool:
    return key.endswith("headers") or is_credential_key(key) or credential_in(value) is not None


@dataclass
class Held:
    """A definition heard from another kernel, held to this kernel's confirmed one."""

    #: the definition as the store has it (what ``--accept`` takes)
    stored: Agent
    #: the cap on its runs here: the confirmed tools and auto-approve list as one level each
    ceiling: Ceiling
    #: what the change would widen here, in words (``tools``, ``api_base`` ...)
    widened: tuple[str, ...]
    #: this kernel never confirmed a definition of it (another kernel defined it)
    new: bool = False
    #: sessions whose log says so already (one line each)
    noted: set[int] = field(default_factory=set)

    def line(self, name: str) -> str:
        """The one line a person reads in the session and in ``%chaz agents``."""
        if self.new:
            return (f"agent {name} was defined by another kernel; here it runs with no tools, nothing "
                    f"auto-approved, no api_base of its own and the schema data policy "
                    f"(%chaz agent {name} --accept takes its definition)")
        what = ", ".join(self.widened)
        return (f"agent {name} was changed by another kernel; its runs here keep this kernel's {what} "
                f"(%chaz agent {name} --accept takes the change)")


def hold(stored: Agent, confirmed: Agent | None) -> tuple[Agent, Held | None]:
    """What runs here of ``stored`` (heard from another kernel) and the cap on it; ``None``
    when it widens nothing of ``confirmed`` (then ``stored`` runs as it is)."""
    base = confirmed if confirmed is not None else dataclasses.replace(
        stored, tools=[], auto_approve=[], api_base=None, model_options={}, data=DATA_POLICIES[0], data_rows=0,
        egress="ask", egress_hosts=list(LOCAL_HOSTS))
    widened: list[str] = []
    if not _within(stored.tools, base.tools):
        widened.append("tools")
    if not set(stored.auto_approve) <= set(base.auto_approve):
        widened.append("auto-approve list")
    if _endpoints(stored) != _endpoints(base):
        widened.append("api_base")
    if DATA_POLICIES.index(stored.data) > DATA_POLICIES.index(base.data) or stored.data_rows > base.data_rows:
        widened.append("data policy")
    # where the data may go without a person asked (egress_gate.py): the narrower rule, the
    # hosts both name
    if (EGRESS_RULES.index(stored.egress) > EGRESS_RULES.index(base.egress)
            or not set(stored.egress_hosts) <= set(base.egress_hosts)):
        widened.append("egress rule")
    egress = min(stored.egress, base.egress, key=EGRESS_RULES.index)
    egress_hosts = [h for h in stored.egress_hosts if h in base.egress_hosts]
    # where the request goes: another provider is another company's server (a local model's
    # data and this kernel's key sent to a cloud one); a model of the same provider is not
    same_provider = provider(stored.model) == provider(base.model)
    if not same_provider:
        widened.append("model provider")
    if _bound(stored.max_tool_output) > _bound(base.max_tool_output):
        widened.append("tool output bound")
    # this kernel's endpoints and keys, always (the store has no keys; they are this kernel's,
    # for the endpoints it set)
    options = {k: v for k, v in stored.model_options.items() if not is_endpoint(str(k), v)}
    options.update({k: v for k, v in base.model_options.items()
                    if is_endpoint(str(k), v) or _credential(str(k), v)})
    narrower = min(stored.data, base.data, key=DATA_POLICIES.index)
    output = (stored.max_tool_output if _bound(stored.max_tool_output) <= _bound(base.max_tool_output)
              else base.max_tool_output)
    runs = dataclasses.replace(stored, api_base=base.api_base, model_options=options, data=narrower,
                               data_rows=min(stored.data_rows, base.data_rows), max_tool_output=output,
                               egress=egress, egress_hosts=egress_hosts,
                               model=stored.model if same_provider else base.model)
    if not widened:
        return runs, None
    cap = Ceiling(tools=None if base.tools is None else (frozenset(base.tools),),
                  auto_approve=(frozenset(base.auto_approve),))
    return runs, Held(stored, cap, tuple(widened), new=confirmed is None)


def provider(model: str) -> str:
    """The provider a model name sends to (``openai`` of ``openai/gpt-4o``; ``""``: the name has
    none, the provider's SDK guesses it)."""
    return model.split("/", 1)[0].strip().lower() if "/" in model else ""


def _bound(max_tool_output: int | None) -> int:
    return max_tool_output if max_tool_output is not None else DEFAULT_MAX_TOOL_OUTPUT


def _within(tools: list[str] | None, confirmed: list[str] | None) -> bool:
    # exact lists only: a glob's reach changes as tools register, so a new pattern is a change
    if confirmed is None:
        return True
    return tools is not None and set(tools) <= set(confirmed)


def _endpoints(agent: Agent) -> dict[str, object]:
    """Where the agent's requests go, as a kept definition says it (no userinfo, no option
    that holds a credential: the store has neither)."""
    return {"api_base": without_userinfo(agent.api_base)[0] if agent.api_base else None,
            **{str(k): v for k, v in agent.model_options.items()
               if is_endpoint(str(k), v) and not _credential(str(k), v)}}
