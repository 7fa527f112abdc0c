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
the one commit there): it is queued in the store's next group commit with the run's Ack
(``StoredBudget.write_with_next_commit``, core/writer.py ``join_commit``), so it lands in the
Ack's transaction, while the first call is on the wire. Nothing can draw on the tree sooner:
its id is in no entry but the Ack, and the run's tools, its second model call and every trigger
it writes come after its Ack (a charge queued behind the row is written after it; a charge made
at once commits the queued row first). A process that dies before the Ack lands leaves no run
and no tree to count. The call is refused as before when the limit allows none; a run stopped
before its first call leaves that call counted.

Model-call charges are batched (issue 30): the charges of every run that calls its model in the
same loop turn are one conditional ``UPDATE ... WHERE id IN (...)`` under the limit, run in the
store's next group commit (the next loop turn), in the transaction of the entries written
meanwhile, after one ``INSERT`` of the rows of the roots whose Acks it commits: one durable
commit for all of them (50 sessions on one loop spent a third of the served time in budget
commits, ~13 ms each under load; then still a commit of their own each loop turn and each Ack;
DuckDB's ``INSERT ... ON CONFLICT DO UPDATE`` cost ~3x a plain ``INSERT`` or ``UPDATE``). It
is as atomic as the single ``UPDATE`` (per row, on DuckDB and PostgreSQL), and each call waits
for its own row's answer: the count is in the store before the call is made. A budget charged
twice in one turn gets one charge a commit (an ``UPDATE`` touches a row once); the rest go in
the next. A root's row that is there already (a trigger run again) fails that commit: its
entries are then committed on their own and the row is charged when the Ack lands (``write``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from ..core.store import int_value, str_or_none, str_value, utcnow
from ..core.writer import Statement
from ..engine.tree_budget import TreeBudget, TreeBudgetExceeded

if TYPE_CHECKING:  # pragma: no cover
    from ..core.store import Store
    from .agents import Agent

log = logging.getLogger(__name__)

_COUNTS = {"spawns": "max_spawns", "model_calls": "max_model_calls"}


class StoredBudget(TreeBudget):
    """A ``TreeBudget`` whose counts are a row of ``run_budgets`` (shared by every kernel)."""

    def __init__(self, store: Store, budget_id: str, root_agent: str, max_spawns: int,
                 max_model_calls: int) -> None:
        super().__init__(root_agent, max_spawns, max_model_calls)
        self.store = store
        self.id = budget_id
        #: where its model calls are charged (``Budgets.open`` sets it); None: one by one
        self.batch: ChargeBatch | None = None
        #: model calls counted in the row already (the first call, by ``open``), not yet taken
        self.prepaid_calls = 0
        #: a root's row not written yet: the model calls it will count (``write``); None once written
        self._unwritten: int | None = None
        #: the row is queued in the store's next commit (``write_with_next_commit``)
        self._row_queued = False

    def write_with_next_commit(self) -> None:
        """Queue the row of a root's budget opened with ``first_call`` in the store's next group
        commit: the one of its run's Ack, queued just before, so the row lands with the Ack, in
        its transaction (no statement, no commit of its own)."""
        if self._unwritten is None or self._row_queued:
            return
        if self.batch is None:
            self.write()
            return
        self._row_queued = True
        self.batch.open_row(self, self._unwritten)

    def write(self) -> None:
        """Write the row of a root's budget opened with ``first_call`` now; nothing when it is
        written already. Queued with the Ack (``write_with_next_commit``): that commit is made
        now. A row of the same id found there keeps its counts, and the calls counted here are
        charged to it."""
        if self._unwritten is None:
            return
        if self._row_queued:
            self.store.commit_queued()  # (its Ack's commit: the row lands with it)
            if self._unwritten is None:
                return
            self._row_queued = False
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
        if self.prepaid_calls > 0:  # counted in the row ``write`` puts there: no statement
            self.prepaid_calls -= 1
            return
        self._charge("model_calls")

    async def charge_model_call(self) -> None:
        """``take_model_call`` in the store's batch of this loop turn (see the module doc)."""
        if self.prepaid_calls > 0:
            self.prepaid_calls -= 1
            return
        if self.batch is None:
            self._charge("model_calls")
            return
        if not self._row_queued:
            self.write()  # (a root's row goes first: the batch's charge updates it)
        await self.batch.charge(self)  # (a queued row is written before it, in the same order)

    def _charged(self, row: tuple[object, ...]) -> None:
        """The row as the batched charge returned it (RETURNING)."""
        _, root, max_spawns, max_calls, spawns, calls = row
        self.root_agent = str_value(root, "run_budgets.root_agent")
        self.max_spawns, self.max_model_calls = int_value(max_spawns), int_value(max_calls)
        self.spawns, self.model_calls = int_value(spawns), int_value(calls)

    def _charge(self, count: str) -> None:
        self.write()  # (a root's row goes first: the charge is an UPDATE of it)
        limit = _COUNTS[count]
        rows = self.store.execute(
            f"UPDATE run_budgets SET {count} = {count} + 1 WHERE id = ? AND exhausted IS NULL "
            f"AND {count} < {limit} RETURNING spawns, model_calls",
            [self.id],
        )
        if rows:
            self.spawns, self.model_calls = int_value(rows[0][0]), int_value(rows[0][1])
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
            self.spawns, self.model_calls = int_value(rows[0][0]), int_value(rows[0][1])
            self.exhausted = str_or_none(rows[0][2], "run_budgets.exhausted")

    def to_json(self) -> dict[str, object]:
        return {"budget": self.id, **super().to_json()}


def take_schedule(store: Store, budget_id: str, limit: int) -> bool:
    """Count one schedule made by the tree of ``budget_id``; False when it has made ``limit``."""
    return bool(store.execute(
        "UPDATE run_budgets SET schedules = schedules + 1 WHERE id = ? AND schedules < ? RETURNING schedules",
        [budget_id, limit],
    ))


class ChargeBatch:
    """The model-call charges of one loop turn, and the rows of roots whose Acks are queued, as
    two statements (an ``INSERT``, an ``UPDATE``) of the store's next group commit (see the
    module doc)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: (budget, the waiting charge's future or None for a root's row, model calls to count)
        self._pending: list[tuple[StoredBudget, asyncio.Future[None] | None, int]] = []
        self._joined = False  # ``_statements`` is in the store's next commit

    async def charge(self, budget: StoredBudget) -> None:
        """Count one model call of ``budget``; returns once it is in the store (else raises)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue((budget, future, 1), hurry=True)
        await future

    def open_row(self, budget: StoredBudget, calls: int) -> None:
        """Write a root's row, ``calls`` model calls counted, in the next commit: the one of its
        run's Ack, queued just before (no hurry: the Ack is written behind)."""
        self._queue((budget, None, calls), hurry=False)

    def _queue(self, item: tuple[StoredBudget, asyncio.Future[None] | None, int], hurry: bool) -> None:
        self._pending.append(item)
        if not self._joined:
            self._joined = True
            self.store.join_commit(self._statements, hurry=hurry)
        elif hurry:
            self.store.hurry()

    def _statements(self) -> list[Statement]:
        """The statements of this commit: the roots' rows (one ``INSERT``), then the charges (one
        ``UPDATE`` under the limit; a row once a statement: the rest join the next commit)."""
        self._joined = False
        rows: dict[str, tuple[StoredBudget, asyncio.Future[None] | None, int]] = {}
        charges: dict[str, tuple[StoredBudget, asyncio.Future[None] | None, int]] = {}
        later: list[tuple[StoredBudget, asyncio.Future[None] | None, int]] = []
        for item in self._pending:
            now = rows if item[1] is None else charges
            if item[0].id in now or (item[1] is None and item[0].id in charges):
                later.append(item)  # (a row queued behind a charge of its id: after it, in order)
            else:
                now[item[0].id] = item
        self._pending = later
        if later:
            self._joined = True
            self.store.join_commit(self._statements)
        statements = []
        if rows:
            inserted = list(rows.values())
            statements.append(Statement(*self.insert([(b, calls) for b, _, calls in inserted]),
                                        landed=lambda _rows: self._written(inserted),
                                        failed=lambda exc: self._failed(inserted, exc)))
        if charges:
            charged = list(charges.values())
            statements.append(Statement(*self.update([b for b, _, _ in charged]),
                                        landed=lambda got: self._landed(charged, got),
                                        failed=lambda exc: self._failed(charged, exc)))
        return statements

    @staticmethod
    def _written(items: list[tuple[StoredBudget, asyncio.Future[None] | None, int]]) -> None:
        for budget, _, _ in items:
            budget._unwritten = None  # the root's row is written, its calls counted

    @staticmethod
    def _landed(items: list[tuple[StoredBudget, asyncio.Future[None] | None, int]],
                rows: list[tuple[object, ...]]) -> None:
        charged = {str_value(row[0], "run_budgets.id"): row for row in rows}
        for budget, future, _ in items:
            if future is None or future.done():
                continue
            row = charged.get(budget.id)
            if row is not None:
                budget._charged(tuple(row))
                future.set_result(None)
                continue
            try:  # at the limit or exhausted: the one-by-one path says why (and marks it)
                budget._charge("model_calls")
            except Exception as exc:  # noqa: BLE001 - TreeBudgetExceeded above all
                future.set_exception(exc)
            else:
                future.set_result(None)

    @staticmethod
    def _failed(items: list[tuple[StoredBudget, asyncio.Future[None] | None, int]], exc: Exception) -> None:
        for budget, future, _ in items:
            if future is None:
                # not written (a row of its id is there: an older store's, or a trigger run
                # again): ``write`` writes it or charges that row when the Ack lands
                budget._row_queued = False
            elif not future.done():
                future.set_exception(exc)

    @staticmethod
    def insert(rows: list[tuple[StoredBudget, int]]) -> tuple[str, list[object]]:
        """One ``INSERT`` of the rows of new roots' budgets (distinct ids), ``calls`` counted."""
        now = utcnow()
        params: list[object] = []
        for b, calls in rows:
            params += [b.id, b.root_agent, b.max_spawns, b.max_model_calls, calls, now]
        values = ", ".join(["(?, ?, ?, ?, 0, ?, ?)"] * len(rows))
        return ("INSERT INTO run_budgets (id, root_agent, max_spawns, max_model_calls, spawns, model_calls, "
                f"created_at) VALUES {values}"), params

    @staticmethod
    def update(budgets: list[StoredBudget]) -> tuple[str, list[object]]:
        """One ``UPDATE`` charging a model call to each of ``budgets`` (distinct ids) that is under
        its limit and not exhausted, RETURNING the rows charged."""
        marks = ", ".join(["?"] * len(budgets))
        return ("UPDATE run_budgets SET model_calls = model_calls + 1 WHERE id IN "
                f"({marks}) AND exhausted IS NULL AND model_calls < max_model_calls "
                "RETURNING id, root_agent, max_spawns, max_model_calls, spawns, model_calls"), [b.id for b in budgets]


class Budgets:
    """The run-tree budgets of one store: open a root's, find a descendant's."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.batch = ChargeBatch(store)

    def open(self, budget_id: str | None, agent: Agent, first_call: bool = False) -> StoredBudget:
        """The budget ``budget_id`` (``None``: a fresh one), created with ``agent``'s limits
        when the store has no such row yet (a root's trigger, or an entry of an older store).

        ``first_call`` (a root's run): the row counts the run's first model call already, and it
        is written by ``StoredBudget.write`` (when the run's Ack lands), not here: no statement
        in front of the call (see the module doc)."""
        budget_id = budget_id or f"run:{uuid.uuid4().hex}"
        if first_call:
            prepaid = 1 if agent.max_model_calls >= 1 else 0
            budget = StoredBudget(self.store, budget_id, agent.name, agent.max_spawns, agent.max_model_calls)
            budget.model_calls = budget.prepaid_calls = budget._unwritten = prepaid
            budget.batch = self.batch
            return budget
        # a descendant's row is there already: read it (no commit); else write it
        found = self._read(budget_id)
        if found is None:
            self.store.execute(
                "INSERT INTO run_budgets (id, root_agent, max_spawns, max_model_calls, spawns, model_calls, "
                "created_at) VALUES (?, ?, ?, ?, 0, 0, ?) ON CONFLICT (id) DO NOTHING",
                [budget_id, agent.name, agent.max_spawns, agent.max_model_calls, utcnow()],
            )
            found = self._read(budget_id)  # another kernel's row, if it came first
            assert found is not None
        found.batch = self.batch
        return found

    def _read(self, budget_id: str) -> StoredBudget | None:
        rows = self.store.execute(
            "SELECT root_agent, max_spawns, max_model_calls, spawns, model_calls, exhausted "
            "FROM run_budgets WHERE id = ?", [budget_id],
        )
        if not rows:
            return None
        root, max_spawns, max_calls, spawns, calls, exhausted = rows[0]
        budget = StoredBudget(self.store, budget_id, str_value(root, "run_budgets.root_agent"),
                              int_value(max_spawns), int_value(max_calls))
        budget.spawns, budget.model_calls = int_value(spawns), int_value(calls)
        budget.exhausted = str_or_none(exhausted, "run_budgets.exhausted")
        return budget
