"""Run-tree budgets kept in the store (``run_budgets``), so they hold across runs and kernels.

A run that a person's Message (or a person-made schedule's fire) starts opens a budget: a row
whose id is ``entry:<trigger id>`` (``fire:<fire id>`` for a fire) and whose limits are the
root agent's ``max_spawns`` / ``max_model_calls``. Every trigger a run of the tree writes
names the budget in its authority (ceiling.py), so the run it starts draws on the same row,
whichever kernel serves it: room turns, Directives, ``send_message``, spawns and the fires of
schedules the tree made.

Each spawn and each model call is one conditional ``UPDATE ... RETURNING``: it counts only
while the row is under its limit and not exhausted, which is atomic on DuckDB and on
PostgreSQL, so two kernels drawing on one budget never pass it together. The first charge
past a limit marks the row exhausted; from then on every charge of the tree, in any kernel,
raises ``TreeBudgetExceeded`` with the same one-line reason (tree_budget.py). The row also
counts the schedules the tree made (``take_schedule``; schedules/__init__.py caps them).

A root's row is written with its first model call counted (``open(..., first_call=True)``):
every run calls the model before anything else, so the one ``INSERT`` that opens the budget
also charges that call. That ``INSERT`` is not in front of the call (issue 32: the trigger's is
the one commit there): the run writes it when its Ack lands (``StoredBudget.write``), which is
while the first call is on the wire. Nothing can draw on the tree sooner: its id is in no entry
but the Ack, and the run's tools, its second model call and every trigger it writes come after
its Ack (each charge writes the row first if it is not written yet). A process that dies before
the Ack lands leaves no run and no tree to count. The call is refused as before when the limit
allows none; a run stopped before its first call leaves that call counted.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from ..core.store import utcnow
from ..engine.tree_budget import TreeBudget, TreeBudgetExceeded

if TYPE_CHECKING:  # pragma: no cover
    from ..core.store import Store
    from .agents import Agent

_COUNTS = {"spawns": "max_spawns", "model_calls": "max_model_calls"}


class StoredBudget(TreeBudget):
    """A ``TreeBudget`` whose counts are a row of ``run_budgets`` (shared by every kernel)."""

    def __init__(self, store: Store, budget_id: str, root_agent: str, max_spawns: int,
                 max_model_calls: int) -> None:
        super().__init__(root_agent, max_spawns, max_model_calls)
        self.store = store
        self.id = budget_id
        #: model calls counted in the row already (the first call, by ``open``), not yet taken
        self.prepaid_calls = 0
        #: a root's row not written yet: the model calls it will count (``write``); None once written
        self._unwritten: int | None = None

    def write(self) -> None:
        """Write the row of a root's budget opened with ``first_call`` (the run does it when its
        Ack lands); nothing when it is written already. A row of the same id found there keeps
        its counts, and the calls counted here are charged to it."""
        if self._unwritten is None:
            return
        calls = self._unwritten
        created = self.store.execute(
            "INSERT INTO run_budgets (id, root_agent, max_spawns, max_model_calls, spawns, model_calls, "
            "created_at) VALUES (?, ?, ?, ?, 0, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING id",
            [self.id, self.root_agent, self.max_spawns, self.max_model_calls, calls, utcnow()],
        )
        self._unwritten = None
        if not created:
            self._read()
            for _ in range(calls):
                self._charge("model_calls")

    def take_spawn(self) -> None:
        self._charge("spawns")

    def take_model_call(self) -> None:
        if self.prepaid_calls > 0:  # counted when the row was written: no statement
            self.prepaid_calls -= 1
            return
        self._charge("model_calls")

    def _charge(self, count: str) -> None:
        self.write()  # (a root's row goes first: the charge is an UPDATE of it)
        limit = _COUNTS[count]
        rows = self.store.execute(
            f"UPDATE run_budgets SET {count} = {count} + 1 WHERE id = ? AND exhausted IS NULL "
            f"AND {count} < {limit} RETURNING spawns, model_calls",
            [self.id],
        )
        if rows:
            self.spawns, self.model_calls = int(rows[0][0]), int(rows[0][1])
            return
        # past the limit, or exhausted meanwhile (by any kernel): the first reason stays
        what = "spawn" if count == "spawns" else "model call"
        reason = self._exhaust(what, getattr(self, limit), count)
        self.store.execute("UPDATE run_budgets SET exhausted = ? WHERE id = ? AND exhausted IS NULL",
                           [reason, self.id])
        self._read()
        raise TreeBudgetExceeded(self.exhausted or reason)

    def _read(self) -> None:
        rows = self.store.execute(
            "SELECT spawns, model_calls, exhausted FROM run_budgets WHERE id = ?", [self.id]
        )
        if rows:
            self.spawns, self.model_calls = int(rows[0][0]), int(rows[0][1])
            self.exhausted = rows[0][2]

    def to_json(self) -> dict[str, object]:
        return {"budget": self.id, **super().to_json()}


def take_schedule(store: Store, budget_id: str, limit: int) -> bool:
    """Count one schedule made by the tree of ``budget_id``; False when it has made ``limit``."""
    return bool(store.execute(
        "UPDATE run_budgets SET schedules = schedules + 1 WHERE id = ? AND schedules < ? RETURNING schedules",
        [budget_id, limit],
    ))


class Budgets:
    """The run-tree budgets of one store: open a root's, find a descendant's."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def open(self, budget_id: str | None, agent: Agent, first_call: bool = False) -> StoredBudget:
        """The budget ``budget_id`` (``None``: a fresh one), created with ``agent``'s limits
        when the store has no such row yet (a root's trigger, or an entry of an older store).

        ``first_call`` (a root's run): the row counts the run's first model call already, and it
        is written by ``StoredBudget.write`` (when the run's Ack lands), not here: no statement
        in front of the call (see the module doc)."""
        budget_id = budget_id or f"run:{uuid.uuid4().hex}"
        prepaid = 1 if first_call and agent.max_model_calls >= 1 else 0
        if first_call:
            budget = StoredBudget(self.store, budget_id, agent.name, agent.max_spawns, agent.max_model_calls)
            budget.model_calls = budget.prepaid_calls = budget._unwritten = prepaid
            return budget
        # a root's budget is new (one round trip); a descendant's row is there already
        created = self.store.execute(
            "INSERT INTO run_budgets (id, root_agent, max_spawns, max_model_calls, spawns, model_calls, "
            "created_at) VALUES (?, ?, ?, ?, 0, ?, ?) ON CONFLICT (id) DO NOTHING RETURNING id",
            [budget_id, agent.name, agent.max_spawns, agent.max_model_calls, prepaid, utcnow()],
        )
        if created:
            budget = StoredBudget(self.store, budget_id, agent.name, agent.max_spawns, agent.max_model_calls)
            budget.model_calls = budget.prepaid_calls = prepaid
            return budget
        rows = self.store.execute(
            "SELECT root_agent, max_spawns, max_model_calls, spawns, model_calls, exhausted "
            "FROM run_budgets WHERE id = ?", [budget_id],
        )
        root, max_spawns, max_calls, spawns, calls, exhausted = rows[0]
        budget = StoredBudget(self.store, budget_id, root, int(max_spawns), int(max_calls))
        budget.spawns, budget.model_calls, budget.exhausted = int(spawns), int(calls), exhausted
        return budget
