"""Agents kept with the sessions: their definitions and their current sessions (issue 26 §3).

A notebook's agents used to live in the kernel only: after a restart ``%chaz @gpt`` was an
unknown agent, though its sessions were still in the database. The ``AgentBook`` keeps, in the
store (tables ``agent_definitions`` and ``agent_sessions``, migration 016):

- each kept agent's definition as JSON: every ``Agent`` field but its name (model, system
  prompt, tool names and globs, limits, options). Never a key: credential options are left
  out whole, told by their name (``api_key``, a ``*_token``, header values) or by what they
  hold (core/credentials.py: a private key, a JSON credential, a URL's user:password, a
  token), ``api_base`` is kept without its userinfo, and every string is redacted as the log
  is. Never Python: a tool is kept by its name, and the notebook that loads the agent defines
  the tool again (``@chaz_nb.tool``), as it defines its functions again;
- each agent's current session, so ``%chaz @gpt`` goes on where it was.

On a shared store (PostgreSQL, several kernels) the definitions are the store's, as the
schedules are (``schedules/table.py``): a change is a notice (``NOTIFY chaz_agents``) on which
every other kernel reads the row again and defines (or drops) the agent; a kernel that
loads reads them all. ``refresh`` reads the table when a notice may not have arrived (a turn
from a cell reads its agent's row, ``%chaz agents`` every row). A ``keep=False`` definition
is the process's own: no notice replaces it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from ..core.credentials import credential_in, is_credential_key, mask_text, without_userinfo
from ..core.redaction import redact_data
from ..core.store import SharedSessions, Store, TeamAccess, int_value, str_value, utcnow
from ..errors import AgentError, StoreError
from .agent_trust import Held, hold
from .agents import Agent

log = logging.getLogger(__name__)

NOTICE_CHANNEL = "chaz_agents"  # core/store/postgres.py NOTICE_CHANNELS
#: where an agent of this kernel comes from (``%chaz agents`` shows it)
HERE, STORED, BUILT_IN = "this kernel", "stored", "built-in"
#: defined here with ``keep=False`` (a fork's variant): this process's own, which no notice
#: from another kernel replaces
LOCAL = "this kernel, not kept"

#: a change heard from another kernel: (name, the agent as stored now, or None: forgotten)
Heard = Callable[[str, "Agent | None"], None]


@dataclass(frozen=True)
class Kept:
    """What ``keep`` stored: the definition, and what it left out (keys are never kept)."""

    agent: Agent
    #: the options left out (``api_key``), and ``api_base`` when its userinfo was dropped
    left_out: tuple[str, ...] = ()
    #: why each was left out (``vertex_credentials``: "a private key")
    why: tuple[tuple[str, str], ...] = ()

    @property
    def note(self) -> str:
        """The one line a person is told (``''``: nothing left out)."""
        return left_out_note(self.why)


#: where a credential left out of a kept agent comes from instead (litellm reads these)
ENV_FOR = {
    "vertex_credentials": "VERTEXAI_CREDENTIALS (or GOOGLE_APPLICATION_CREDENTIALS, a file's path)",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY", "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_session_token": "AWS_SESSION_TOKEN", "azure_ad_token": "AZURE_AD_TOKEN",
}
#: the provider's key variable, for everything else
DEFAULT_ENV = "the provider's key variable (e.g. OPENAI_API_KEY)"
#: why an option was left out: its name says it is a credential / it is not JSON data
BY_NAME, NOT_DATA = "by its name", "not data"


def left_out_note(why: tuple[tuple[str, str], ...]) -> str:
    """``not stored: api_key, vertex_credentials (a private key); keys come from the
    environment: ...``: what keep left out, and where a kernel that loads the agent gets it.
    ``''`` when nothing was left out."""
    if not why:
        return ""
    what = ", ".join(name if kind == BY_NAME else f"{name} ({kind})" for name, kind in why)
    envs = list(dict.fromkeys(ENV_FOR.get(name, DEFAULT_ENV) for name, kind in why if kind != NOT_DATA))
    where = f": set {', '.join(envs)}" if envs else ""
    return f"not stored: {what}; keys come from the environment{where}"


def definition_of(agent: Agent, redact: Callable[[str], str]) -> tuple[dict[str, Any], list[str]]:
    """The agent as JSON-ready data (its name aside), and the option names left out of it."""
    data, why = stored_form(agent, redact)
    return data, [name for name, _ in why]


def stored_form(agent: Agent, redact: Callable[[str], str]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The agent as JSON-ready data (its name aside), and what was left out, with why.

    A credential is told by its name (``api_key``, a ``*_token``, headers) and by what it holds
    (core/credentials.py: a private key, a URL's user:password, a JSON credential, a bearer
    token, this kernel's key values): such an option is left out whole, never masked (a
    kernel that loads the agent would send ``[REDACTED]`` as a key), and ``api_base`` is kept
    without its userinfo (and its query, when that holds a key).
    """
    data: dict[str, Any] = {f.name: getattr(agent, f.name) for f in fields(agent) if f.name != "name"}
    options: dict[str, Any] = {}
    why: list[tuple[str, str]] = []
    for key, value in (agent.model_options or {}).items():
        name = str(key)
        # a key given literally (api_key=..., a credential header): it comes from the
        # environment again, never from the store
        if name.endswith("headers") or is_credential_key(name):
            why.append((name, BY_NAME))
            continue
        kind = credential_in(value, redact) or credential_in(name, redact)
        if kind is not None:
            why.append((name, kind))
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):  # an object (a client, a callback): not data to keep
            why.append((name, NOT_DATA))
            continue
        options[name] = value
    data["model_options"] = options
    if agent.api_base:
        data["api_base"], kind = stored_url(agent.api_base, redact)
        if kind is not None:
            why.append(("api_base", kind))  # "api_base (a user:password in a URL)"
    # every other string (a system prompt, a script) as the log keeps it, and never a private
    # key block or a URL's user:password either
    return redact_data(data, lambda text: mask_text(text, redact)), why


def stored_url(url: str, redact: Callable[[str], str]) -> tuple[str, str | None]:
    """``api_base`` as kept: without ``user:password@`` (and without a query or fragment that
    holds a key); what was dropped, or None."""
    bare, had = without_userinfo(url)
    kind = "a user:password in a URL" if had else None
    if credential_in(bare, redact) is not None:
        parts = urllib.parse.urlsplit(bare)
        bare = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        kind = kind or "a key in the URL"
    return bare, kind


def agent_from(name: str, definition: dict[str, Any]) -> Agent:
    """An Agent from a stored definition; fields a newer chaz_nb wrote are ignored."""
    known = {f.name for f in fields(Agent)} - {"name"}
    return Agent(name, **{k: v for k, v in definition.items() if k in known})


class AgentBook:
    """The kept agents of one store, and each agent's current session."""

    def __init__(self, store: Store, heard: Heard | None = None) -> None:
        self.store = store
        #: stored rows that no longer make an Agent (name -> why), shown by ``%chaz agents``
        self.unreadable: dict[str, str] = {}
        self._heard_cb = heard
        self._token = uuid.uuid4().hex[:12]
        self._unsubscribe: Callable[[], None] | None = None
        self.available = store.has_column("agent_definitions", "definition")  # a read-only older file
        if isinstance(store, SharedSessions) and self.available:
            self._unsubscribe = store.on_notice(NOTICE_CHANNEL, self._heard)
        # a PostgreSQL store with roles (migration 021, core/store/pgteam.py): each role keeps its
        # own agents under its own names, and a kernel loads only its role's, so another person's
        # definition (its api_base) never runs with this person's keys
        own = isinstance(store, TeamAccess) and store.team_tables and self.available
        self._own = " AND owner = session_user" if own else ""
        self._own_session = " WHERE a.owner = session_user" if own else ""
        self._definition_key = "owner, name" if own else "name"
        self._session_key = "owner, agent" if own else "agent"

    # ------------------------------------------------------------- reading
    def load(self) -> dict[str, Agent]:
        """Every stored agent that makes a valid Agent, by name (the others in ``unreadable``)."""
        if not self.available:
            return {}
        out: dict[str, Agent] = {}
        query = f"SELECT name, definition FROM agent_definitions WHERE true{self._own} ORDER BY name"
        for name_value, text in self.store.execute(query):
            name = str_value(name_value, "agent_definitions.name")
            agent = self._parse(name, text)
            if agent is not None:
                out[name] = agent
        return out

    def get(self, name: str) -> Agent | None:
        """The stored definition of ``name`` now (None: none, or unreadable)."""
        if not self.available:
            return None
        rows = self.store.execute(f"SELECT definition FROM agent_definitions WHERE name = ?{self._own}", [name])
        return self._parse(name, rows[0][0]) if rows else None

    def _parse(self, name: str, text: object) -> Agent | None:
        try:
            definition = json.loads(text) if isinstance(text, str) else text
            if not isinstance(definition, dict):
                raise AgentError("the stored definition is not a JSON object")
            agent = agent_from(name, definition)
        except (AgentError, TypeError, ValueError) as exc:
            self.unreadable[name] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning("stored agent %s is not loaded: %s", name, self.unreadable[name])
            return None
        self.unreadable.pop(name, None)
        return agent

    def current_sessions(self) -> dict[str, int]:
        """Each agent's stored current session, where that session still exists and is its."""
        if not self.available:
            return {}
        rows = self.store.execute(
            "SELECT a.agent, a.session_id FROM agent_sessions a JOIN sessions s "
            f"ON s.id = a.session_id AND s.agent = a.agent{self._own_session}"
        )
        return {str_value(agent, "agent_sessions.agent"): int_value(sid, "agent_sessions.session_id")
                for agent, sid in rows}

    # ------------------------------------------------------------- writing
    def keep(self, agent: Agent) -> Kept:
        """Store (or replace) the agent's definition; tell the other kernels."""
        self._check()
        definition, why = stored_form(agent, self.store.redact)
        now = utcnow()
        self.store.execute(
            "INSERT INTO agent_definitions (name, definition, created_at, updated_at) VALUES (?, ?, ?, ?) "
            f"ON CONFLICT ({self._definition_key}) DO UPDATE SET definition = excluded.definition,"
            " updated_at = excluded.updated_at",
            [agent.name, json.dumps(definition), now, now],
        )
        self.unreadable.pop(agent.name, None)
        self._tell(agent.name)
        return Kept(agent, tuple(name for name, _ in why), tuple(why))

    def forget(self, name: str) -> bool:
        """Remove the agent's definition and current session; whether a definition was stored."""
        self._check()
        found = bool(self.store.execute(f"SELECT 1 FROM agent_definitions WHERE name = ?{self._own}", [name]))
        self.store.execute(f"DELETE FROM agent_definitions WHERE name = ?{self._own}", [name])
        self.store.execute(f"DELETE FROM agent_sessions WHERE agent = ?{self._own}", [name])
        self.unreadable.pop(name, None)
        self._tell(name)
        return found

    def remember_session(self, agent: str, session_id: int) -> None:
        """Record the agent's current session (one upsert: what a new session costs more)."""
        if not self.available or self.store.read_only or self.store.closed:
            return
        self.store.execute(
            "INSERT INTO agent_sessions (agent, session_id, updated_at) VALUES (?, ?, ?) "
            f"ON CONFLICT ({self._session_key}) DO UPDATE SET session_id = excluded.session_id,"
            " updated_at = excluded.updated_at",
            [agent, int(session_id), utcnow()],
        )

    def _check(self) -> None:
        if not self.available:
            raise StoreError(
                f"{self.store.path} is older than agent keeping (opened read-only); open it writable once to upgrade it"
            )

    # ------------------------------------------------------------- notices
    def _tell(self, name: str) -> None:
        store = self.store
        if isinstance(store, SharedSessions) and not store.closed:
            store.notify(NOTICE_CHANNEL, json.dumps({"by": self._token, "agent": name}))

    def _heard(self, payload: str) -> None:
        """Another kernel kept or forgot an agent: read its row again and pass it on."""
        try:
            notice = json.loads(payload)
            name = str(notice["agent"])
            by = notice.get("by")
        except (ValueError, KeyError, TypeError):
            return
        if by == self._token or self._heard_cb is None or self.store.closed:
            return
        try:
            self._heard_cb(name, self.get(name))
        except Exception:  # a listener must never break the notice loop
            log.exception("agent notice for %s failed", name)

    def close(self) -> None:
        if self._unsubscribe is not None:
            with contextlib.suppress(Exception):
                self._unsubscribe()
            self._unsubscribe = None


class Roster:
    """A server's agents by name, where each comes from, and their current sessions; with a
    book, the kept ones are written through to the store and read back at start."""

    def __init__(self, agents: dict[str, Agent], current: dict[str, int], book: AgentBook | None,
                 held: dict[str, Held] | None = None) -> None:
        self.agents = agents
        self.current = current
        self.book = book
        #: each agent as this kernel confirmed it (defined here, loaded at start, accepted):
        #: what a definition heard from another kernel is held to (agent_trust.py)
        self.confirmed: dict[str, Agent] = {}
        #: the agents another kernel changed, held to ``confirmed`` (the run engine's dict)
        self.held: dict[str, Held] = {} if held is None else held
        #: name -> HERE, LOCAL, STORED or BUILT_IN (``%chaz agents``'s "from")
        self.origin: dict[str, str] = {}
        #: definitions made in code and never kept (the notebook's ``assistant``, a Server's
        #: constructor agents): what a forgotten agent of that name falls back to
        self.built_in: dict[str, Agent] = {}
        #: options ``keep`` left out, by agent (``api_key``: keys come from the environment)
        self.left_out: dict[str, tuple[str, ...]] = {}
        #: the one line that says what ``keep`` left out and how to give it (``Kept.note``)
        self.notes: dict[str, str] = {}
        #: called with no argument after the agents by name changed (the sidebar's "New chat with")
        self._listeners: list[Callable[[], None]] = []
        if book is not None:
            book._heard_cb = self.heard

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` after an agent is defined, redefined or forgotten (here or heard
        from another kernel); returns the function that unsubscribes."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return unsubscribe

    def _changed(self) -> None:
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:  # noqa: BLE001 - a listener must not undo a definition already made
                log.debug("an agents listener failed", exc_info=True)

    @property
    def keeps(self) -> bool:
        return self.book is not None and self.book.available and not self.book.store.read_only

    def define(self, agent: Agent, keep: bool | None = None) -> Agent:
        if not isinstance(agent, Agent):
            raise AgentError("define_agent takes a chaz_nb.Agent")
        if (self.keeps if keep is None else keep) and self.book is not None:
            kept = self.book.keep(agent)  # the store first: a failed write defines nothing
            self.left_out[agent.name] = kept.left_out
            self.notes[agent.name] = kept.note
            self.origin[agent.name] = HERE
        else:
            self.left_out.pop(agent.name, None)
            self.notes.pop(agent.name, None)
            self.origin[agent.name] = LOCAL
        self.agents[agent.name] = agent
        self._confirm(agent.name, agent)
        self._changed()
        return agent

    def _confirm(self, name: str, agent: Agent) -> None:
        self.confirmed[name] = agent
        self.held.pop(name, None)

    def accept(self, name: str) -> Agent:
        """Take the stored definition another kernel made of ``name`` as this kernel's own
        (``%chaz agent NAME --accept``); AgentError when there is none to take."""
        held = self.held.get(name)
        if held is None:
            raise AgentError(f"{name!r} runs here as defined; no other kernel's change of it is held here "
                             "(%chaz agents lists the ones that are)")
        stored = held.stored
        self.agents[name] = stored
        self.origin[name] = STORED
        self._confirm(name, stored)
        self._changed()
        return stored

    def define_built_in(self, agent: Agent) -> Agent:
        """A definition made in code: never kept, and a stored one of that name wins."""
        if not isinstance(agent, Agent):
            raise AgentError("define_agent takes a chaz_nb.Agent")
        self.built_in[agent.name] = agent
        if self.origin.get(agent.name) != STORED:
            self.agents[agent.name] = agent
            self.origin[agent.name] = BUILT_IN
            self._confirm(agent.name, agent)
            self._changed()
        return agent

    def load(self) -> list[str]:
        """The stored agents and current sessions into this server; the names loaded."""
        if self.book is None:
            return []
        loaded = self.book.load()
        for name, agent in loaded.items():  # what the store holds when this kernel starts
            self.agents[name] = agent
            self.origin[name] = STORED
            self._confirm(name, agent)
        for name, sid in self.book.current_sessions().items():
            self.current.setdefault(name, sid)
        return sorted(loaded)

    def make_current(self, name: str, session_id: int) -> None:
        self.current[name] = session_id
        if self.book is not None:
            self.book.remember_session(name, session_id)

    def forget(self, name: str) -> str:
        """Remove ``name`` from the store and this server; what happened, in a few words."""
        stored = self.book.forget(name) if self.keeps and self.book is not None else False
        if not stored and name not in self.agents:
            raise AgentError(f"no agent {name!r} here or in the store")
        self._drop(name)
        back = " (the built-in definition is back)" if name in self.built_in else ""
        done = "removed from this kernel and the store" if stored else "removed from this kernel (it was not stored)"
        return done + back

    def _drop(self, name: str) -> None:
        self.current.pop(name, None)
        self.left_out.pop(name, None)
        self.notes.pop(name, None)
        if name in self.built_in:
            self.agents[name] = self.built_in[name]
            self.origin[name] = BUILT_IN
            self._confirm(name, self.built_in[name])
        else:
            self.agents.pop(name, None)
            self.origin.pop(name, None)
            self.confirmed.pop(name, None)
            self.held.pop(name, None)
        self._changed()

    def heard(self, name: str, agent: Agent | None) -> None:
        """Another kernel kept (``agent``) or forgot (None) ``name``: the store's word holds,
        except over this process's own ``keep=False`` definition, which stays as it is."""
        if self.origin.get(name) == LOCAL:
            return
        if agent is None:
            if self.origin.get(name) in (HERE, STORED):
                self._drop(name)
            return
        if self._stores_as(name, agent):
            return  # the row is this kernel's own definition as stored (secrets redacted): keep ours whole
        held = self.held.get(name)
        if held is not None and held.stored == agent:
            return  # heard before (a refresh): held as it is, its line said once a session
        # (the current session is taken from the store at load only: from then on each
        # kernel keeps its own, so a definition heard never moves this kernel's conversation)
        # Another kernel's definition runs here within this kernel's confirmed one: its
        # endpoints and keys, its tools and auto-approve as a cap (agent_trust.py)
        runs, held = hold(agent, self.confirmed.get(name))
        self.agents[name] = runs
        self.origin[name] = STORED
        if held is None:
            self.held.pop(name, None)
        else:
            self.held[name] = held
        self.left_out.pop(name, None)
        self.notes.pop(name, None)
        self._changed()

    def _stores_as(self, name: str, stored: Agent) -> bool:
        """Whether this kernel's ``name`` would be stored as ``stored`` is: the same definition,
        whose stored copy lacks only what ``keep`` redacts or leaves out."""
        ours = self.agents.get(name)
        if ours is None or self.book is None or self.origin.get(name) not in (HERE, STORED):
            return False
        redact = self.book.store.redact

        def form(agent: Agent) -> str:
            return json.dumps(definition_of(agent, redact)[0], sort_keys=True, default=str)

        return form(ours) == form(stored)

    def refresh(self, name: str | None = None) -> None:
        """On a shared store: the definitions (or ``name``'s) as the store has them now (a
        notice may be lost, or not have arrived yet)."""
        if self.book is None or not isinstance(self.book.store, SharedSessions) or not self.book.available:
            return
        if name is not None:
            agent = self.book.get(name)
            if agent != self.agents.get(name):
                self.heard(name, agent)  # (which leaves this process's own definitions be)
            return
        stored = self.book.load()
        for name in [n for n, o in self.origin.items() if o in (HERE, STORED) and n not in stored]:
            self._drop(name)
        for name, agent in stored.items():
            if self.agents.get(name) != agent and self.origin.get(name) != LOCAL:
                self.heard(name, agent)

    def missing_tools(self, name: str, registered: Callable[[str], bool]) -> list[str]:
        """The tools ``name`` lists by name (not globs) that this server does not have."""
        tools = self.agents[name].tools or []
        return [t for t in tools if not any(c in t for c in "*?[") and not registered(t)]
