"""The group-commit writer and on_write dispatch both stores share (DuckDB and PostgreSQL).

A store mixes ``GroupCommitWriter`` in and supplies its own commit step, ``append_many``
(write a batch of ``NewEntry`` in one transaction, hand the committed entries to the
subscribers through ``_dispatch``/``_drain``, return them). Everything else is here:

- ``write`` / ``write_one``: entries written in the same loop tick share one transaction
  (one ``append_many``); each request's future gets its own entries, in order. One bad
  request does not sink the others: when the batch fails, each request is written alone.
- ``write_behind``: for an entry nobody waits on yet (a run's Ack): it is committed within
  ``COMMIT_WINDOW``, or sooner, with the next ``write`` or when ``hurry`` is called. Its commit
  then falls while the run's model request is on the wire instead of before it is sent (a
  durable commit holds the loop ~1.5-3 ms). Commit order is request order either way.
  ``flush_when_idle``: commit what is queued once the loop has nothing else to run (a run
  calls it as its model request leaves). ``when_idle``: the same wait for any callback (a
  turn's view opens then, notebook/magics/turns.py); one watch per loop runs them all.
- ``undelivered``: whether an entry's on_write callbacks are still to come (queued behind the
  callback that wrote it).
- ``join_commit``: SQL of the store's own tables (the run-tree budgets, server/budgets.py) that
  rides in the next group commit's transaction, with its entries: one durable commit for both
  instead of one each (on DuckDB each statement holds the loop, and under load waits for the
  GIL back from litellm's threads; issue 30).
- ``subscribe`` and the dispatch queue: callbacks run after each commit, in commit order; a
  callback that writes in turn queues its entries behind the current ones, so every
  subscriber sees entries in commit order.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import math
import os
import re
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass

from .codemask import mask_code
from .entries import Entry, EntryType
from .redaction import redact_data, redact_then_cut
from ..errors import EntryTooLarge, StoreError

log = logging.getLogger(__name__)

OnWrite = Callable[[Entry], None]

#: seconds an entry written with ``write_behind`` waits for company before its commit; the
#: event writer gathers tool events for as long (server/events.py)
COMMIT_WINDOW = 0.005


#: a statement's rows, as the database returns them
StatementRows = list[tuple[object, ...]]


@dataclass(frozen=True)
class Statement:
    """SQL (``?`` parameters) a group commit runs in its entries' transaction (``join_commit``).

    ``landed`` gets its rows (RETURNING) once the transaction has committed, before the
    entries' callbacks; ``failed`` the error when it was not committed. Neither may raise.
    """

    sql: str
    params: list[object]
    landed: Callable[[StatementRows], None]
    failed: Callable[[Exception], None]


#: what ``join_commit`` takes: called as the commit is put together, it gives the statements to
#: run in it, in order (none: nothing, after all)
StatementSource = Callable[[], "list[Statement]"]


@dataclass(frozen=True)
class NewEntry:
    """An entry to be written by ``append_many`` / ``write`` (either store)."""

    session_id: int
    entry_type: EntryType
    sender: str
    content: str = ""
    tool_call_id: str | None = None
    tool_name: str | None = None
    payload: Mapping[str, object] | None = None


#: What UTF-8 cannot encode: a lone surrogate (a tool's or model's JSON can carry ``"\\ud800"``).
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: PostgreSQL's text and jsonb refuse NUL as well.
LONE_SURROGATE_OR_NUL = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str, unstorable: re.Pattern[str] = LONE_SURROGATE) -> str:
    """``text`` with each character the database cannot store as U+FFFD.

    A tool output or a reply the database refused was never written, and its run hung with no
    closing entry; a stand-in keeps the rest of the text.
    """
    if text.isascii() and "\x00" not in text:
        return text
    return unstorable.sub("\ufffd", text)


@dataclass(frozen=True)
class StorableFields:
    """An entry's text fields as the store writes them: redacted, every character storable."""

    sender: str
    content: str
    tool_call_id: str | None
    tool_name: str | None
    payload: Mapping[str, object]


#: the most characters one entry holds (its content and the strings of its payload), unless
#: ``CHAZ_MAX_ENTRY_CHARS`` says otherwise: a 50 MB Message held the kernel loop for seconds
MAX_ENTRY_CHARS = 2_000_000
ENTRY_LIMIT_VAR = "CHAZ_MAX_ENTRY_CHARS"
#: entries refused whole when over the limit, unless a run writes them as its own record (its
#: payload names the run: its reply, its Summary); every other entry, a tool's output above
#: all, is clipped instead, saying by how much
REFUSED_WHEN_OVER = frozenset({EntryType.MESSAGE, EntryType.DIRECTIVE, EntryType.SUMMARY})
_MIN_PART = 1_000  # a clipped string keeps at least this many characters


def max_entry_chars(environ: Mapping[str, str] | None = None) -> int:
    """The entry limit: ``CHAZ_MAX_ENTRY_CHARS`` if set (a positive integer), else ``MAX_ENTRY_CHARS``."""
    raw = (os.environ if environ is None else environ).get(ENTRY_LIMIT_VAR, "").strip()
    if not raw:
        return MAX_ENTRY_CHARS
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = 0
    if value < 10 * _MIN_PART:
        raise StoreError(f"{ENTRY_LIMIT_VAR}={raw!r}: give the most characters an entry may hold, "
                         f"a whole number of at least {10 * _MIN_PART:,} (the default is {MAX_ENTRY_CHARS:,})")
    return value


def _text_size(value: object) -> int:
    """Characters of the strings in ``value`` (JSON-like data), keys too."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_text_size(k) + _text_size(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_text_size(v) for v in value)
    return 0


def entry_size(item: NewEntry) -> int:
    """An entry's size as the limit counts it: the characters of its content and payload strings."""
    return len(as_text(item.content)) + _text_size(item.payload or {})


def storable_fields(
    item: NewEntry,
    redact: Callable[[str], str],
    unstorable: re.Pattern[str] = LONE_SURROGATE,
    limit: int | None = None,
) -> StorableFields:
    """``item``'s fields with secrets redacted (all but the sender, whom no model names) and
    unstorable characters replaced (both stores).

    Over ``limit`` characters (``entry_size``) a Message, Directive or Summary is refused with a
    one-line ``EntryTooLarge`` (nothing is written: a person's message, an agent's
    ``send_message``, which its model is told); any other entry, and a run's own reply or
    Summary (its payload has ``run_id``: the run must close, and its reply is not lost), has
    its long strings clipped, each redacted before it is cut, with a note saying how many
    characters were left out.
    """
    cap: int | None = None
    if limit is not None:
        size = entry_size(item)
        if size > limit:
            entry_type = EntryType(item.entry_type)
            if entry_type in REFUSED_WHEN_OVER and "run_id" not in (item.payload or {}):
                raise EntryTooLarge(
                    f"{entry_type.value} of {size:,} characters is over the entry limit of {limit:,} "
                    f"({ENTRY_LIMIT_VAR}); nothing was written: send it in parts, or raise the limit"
                )
            cap = _clip_cap(item, limit)

    def clean(value: object) -> str:
        if cap is not None:
            text = as_text(value)
            if len(text) > cap:
                return storable_text(redact_then_cut(text, cap, redact_text=redact, note=_clip_note(limit)),
                                     unstorable)
        return storable_text(as_text(value), unstorable)

    def clean_code(code: str) -> str:
        # code is masked by token (literals alone: core/codemask.py), never by the text rules,
        # which would hide code after a name like api_key=; code over the cut is refused
        # before it runs (server/approval_proxy.py), so its clipped form is redacted as text
        if cap is not None and len(code) > cap:
            return clean(code)
        return storable_text(mask_code(code, redact).text, unstorable)

    def clean_optional(value: str | None) -> str | None:
        # The model names the tool (and may echo a key it read as the name): redacted too.
        return None if value is None else redact(clean(value))

    return StorableFields(
        sender=clean(item.sender),
        content=redact(clean(item.content)),  # (a clipped text was redacted before its cut)
        tool_call_id=clean_optional(item.tool_call_id),
        tool_name=clean_optional(item.tool_name),
        payload=redact_data(item.payload or {}, lambda text: redact(clean(text)), clean_code),
    )


def _clip_cap(item: NewEntry, limit: int) -> int:
    """The length each string of ``item`` is cut to so that the entry fits in ``limit``."""
    strings = [len(as_text(item.content)), *_string_lengths(item.payload or {})]
    cap = limit
    while cap > _MIN_PART and sum(min(n, cap) for n in strings) > limit:
        cap //= 2
    return max(cap, _MIN_PART)


def _string_lengths(value: object) -> list[int]:
    if isinstance(value, str):
        return [len(value)]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in (*_string_lengths(k), *_string_lengths(v))]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _string_lengths(v)]
    return []


def _clip_note(limit: int | None) -> Callable[[int], str]:
    def note(cut: int) -> str:
        return f"\n[… {cut:,} more characters clipped: an entry holds at most {limit:,} ({ENTRY_LIMIT_VAR})]"

    return note


def payload_text(payload: Mapping[str, object]) -> str:
    """``payload`` as the JSON text both stores write.

    Python's json reads ``NaN`` and ``Infinity`` (a model's tool arguments can hold them) but
    they are not JSON: PostgreSQL's jsonb refused the entry. Such a number is written as its
    text; the walk runs only for a payload that has one.
    """
    try:
        return json.dumps(payload, default=str, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(payload), default=str, ensure_ascii=False, allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)  # "NaN", "Infinity", "-Infinity"
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else str(value)


def _new_entry(
    session_id: int, entry_type: EntryType | str, sender: str, content: str,
    tool_call_id: str | None, tool_name: str | None, payload: Mapping[str, object] | None,
) -> NewEntry:
    return NewEntry(session_id, EntryType(entry_type), sender, content, tool_call_id, tool_name, payload)


class _IdleWatch:
    """Callbacks to run once a loop has nothing else ready to run: every task waits on I/O or
    a timer (a run's model request is on the wire then). One watch per loop: two would each
    see the other in the run queue as work, and neither would ever find the loop idle."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.callbacks: list[tuple[Callable[[], None], contextvars.Context]] = []
        self.watching = False

    def add(self, callback: Callable[[], None]) -> None:
        # run in the context it was registered in, as call_soon does (a cell's output: its parent)
        self.callbacks.append((callback, contextvars.copy_context()))
        if not self.watching:
            self.watching = True
            self.loop.call_soon(self._check)

    def _check(self) -> None:
        ready = getattr(self.loop, "_ready", None)  # (asyncio's run queue, a deque of ready callbacks)
        if ready and self.callbacks:
            self.loop.call_soon(self._check)  # busy: look again at the next turn
            return
        self.watching = False
        callbacks, self.callbacks = self.callbacks, []
        if ready is None:  # no run queue to look at: never idle here (each caller has a deadline)
            return
        for callback, context in callbacks:
            try:
                context.run(callback)
            except Exception:
                log.exception("idle callback %r failed", callback)


_IDLE_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _IdleWatch] = weakref.WeakKeyDictionary()


def when_idle(callback: Callable[[], None], loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Call ``callback()`` (in the caller's context) once ``loop`` (the running one) has nothing
    else ready to run. On a loop with no run queue to look at (not asyncio's), never: a caller
    has its own deadline (``write_behind``'s window, a view's cap)."""
    loop = loop or asyncio.get_running_loop()
    watch = _IDLE_WATCHES.get(loop)
    if watch is None:
        watch = _IDLE_WATCHES[loop] = _IdleWatch(loop)
    watch.add(callback)


class GroupCommitWriter:
    """Group commit and on_write dispatch; the store supplies ``append_many`` (the commit)."""

    path: str
    read_only: bool
    _closed: bool

    def _init_writer(self) -> None:
        #: the most characters one entry holds (see ``storable_fields``); settable per store
        self.max_entry_chars: int = max_entry_chars()
        self._subscribers: list[OnWrite] = []
        self._queue: deque[Entry] = deque()
        self._dispatching = False
        self._pending_writes: list[tuple[list[NewEntry], asyncio.Future]] = []
        self._joining: list[StatementSource] = []  # ``join_commit``: statements of the next commit
        self._committing = False  # inside ``_flush_pending`` (its statements' ``landed`` run there)
        self._flush_scheduled = False
        self._flush_timer: asyncio.TimerHandle | None = None
        self._idle_watch = False  # a ``_flush_when_idle`` is scheduled

    # ------------------------------------------------- the store's own steps
    def _check_writable(self) -> None:  # pragma: no cover - each store defines it
        raise NotImplementedError

    def append_many(self, items: Iterable[NewEntry]) -> list[Entry]:  # pragma: no cover
        """Commit ``items`` in one transaction, dispatch them, return the entries."""
        raise NotImplementedError

    def _commit_with(
        self, items: list[NewEntry], statements: list[Statement]
    ) -> tuple[list[Entry], list[StatementRows]]:
        """Commit ``statements`` and ``items`` in one transaction; the entries (not yet
        dispatched) and each statement's rows (each store overrides it)."""
        raise NotImplementedError  # pragma: no cover

    def _append_with(self, items: list[NewEntry], statements: list[Statement]) -> list[Entry]:
        """``append_many`` with ``statements`` in its transaction: their ``landed`` runs once it has
        committed, then the entries' callbacks."""
        if not statements:
            return self.append_many(items)
        self._check_writable()
        entries, results = self._commit_with(items, statements)
        for statement, rows in zip(statements, results, strict=True):
            try:
                statement.landed(rows)
            except Exception:  # noqa: BLE001 - the entries are committed: their callbacks still run
                log.exception("a statement's landed callback failed")
        self._hand_out(entries)
        return entries

    def _hand_out(self, entries: list[Entry]) -> None:
        """The callbacks of entries ``_commit_with`` committed (PostgreSQL queues them itself)."""
        self._dispatch(entries)

    def _writing_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called by each ``write`` with its loop (PostgreSQL starts its listener there)."""

    def _subscribed(self) -> None:
        """Called after each ``subscribe`` (PostgreSQL starts its listener on a running loop)."""

    def _after_dispatch(self, entry: Entry) -> None:
        """Called once every subscriber has had ``entry`` (PostgreSQL counts what it handed out)."""

    def append(
        self,
        session_id: int,
        entry_type: EntryType | str,
        sender: str,
        content: str = "",
        *,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
        payload: Mapping[str, object] | None = None,
    ) -> Entry:
        """Write one entry in one transaction, then run the on_write callbacks with it."""
        item = _new_entry(session_id, entry_type, sender, content, tool_call_id, tool_name, payload)
        return self.append_many([item])[0]

    # ------------------------------------------------------------ group commit
    async def write(self, items: Iterable[NewEntry]) -> list[Entry]:
        """Group commit: entries written in the same loop tick share one transaction.

        A commit costs ~1-4 ms on these machines, so with many sessions at work the server's
        writes of one tick (Acks, tool events, replies of different runs) are committed
        together. Callbacks run after that commit, in order, as with ``append``.
        """
        self._check_writable()
        items = list(items)
        if not items:
            return []
        loop = asyncio.get_running_loop()
        self._writing_on(loop)
        future: asyncio.Future[list[Entry]] = loop.create_future()
        self._pending_writes.append((items, future))
        self.hurry()  # committed at the next loop turn, with whatever else is queued by then
        return await future

    async def write_one(
        self,
        session_id: int,
        entry_type: EntryType | str,
        sender: str,
        content: str = "",
        *,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
        payload: Mapping[str, object] | None = None,
    ) -> Entry:
        """``append`` through the group commit."""
        item = _new_entry(session_id, entry_type, sender, content, tool_call_id, tool_name, payload)
        return (await self.write([item]))[0]

    def write_behind(self, items: Iterable[NewEntry], window: float = COMMIT_WINDOW) -> asyncio.Future[list[Entry]]:
        """Queue ``items`` for a commit within ``window`` seconds (the future has the entries).

        Sooner when a ``write`` comes meanwhile (they share its transaction, in request order)
        or ``hurry`` is called: whoever comes to wait on these entries calls it. For entries
        the writer does not wait on at once (a run's Ack, see server/run.py), or
        ``flush_when_idle``.
        """
        self._check_writable()
        items = list(items)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Entry]] = loop.create_future()
        if not items:
            future.set_result([])
            return future
        self._writing_on(loop)
        self._pending_writes.append((items, future))
        if not self._flush_scheduled and self._flush_timer is None:
            self._flush_timer = loop.call_later(window, self._flush_pending)
        return future

    def join_commit(self, source: StatementSource, hurry: bool = True) -> None:
        """Run the statements ``source`` gives in the next group commit, with its entries.

        ``hurry``: that commit is at the next loop turn (someone waits on the statement); else
        it rides with whatever is queued (an Ack written behind) or written next.
        """
        self._check_writable()
        self._joining.append(source)
        if hurry:
            self.hurry()

    def flush_when_idle(self) -> None:
        """Commit what ``write_behind`` queued as soon as nothing else is ready to run on the
        loop, i.e. every task waits on I/O or a timer (on a loop with no run queue to look at:
        at its window, as before). A run calls it as its model request leaves: the request is
        on the wire by then, and the commit falls while it is (server/run.py)."""
        if (self._pending_writes or self._joining) and not self._flush_scheduled and not self._idle_watch:
            self._idle_watch = True  # once per store until it fires
            when_idle(self._flush_when_idle)

    def when_idle(self, callback: Callable[[], None]) -> None:
        """``when_idle`` on the running loop (the loop this store's writes run on)."""
        when_idle(callback)

    def _flush_when_idle(self) -> None:
        self._idle_watch = False
        if (self._pending_writes or self._joining) and not self._flush_scheduled:
            self._flush_pending()

    def hurry(self) -> None:
        """Commit what is queued at the next loop turn (someone waits on a ``write_behind``)."""
        if (self._pending_writes or self._joining) and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_pending)

    def _flush_queued(self) -> None:
        """Commit what is queued now (the store is closing: nothing queued may be lost)."""
        if (self._pending_writes or self._joining) and not self._closed:
            try:
                self._flush_pending()
            except RuntimeError:  # the futures' loop is closed: the entries are committed, no one waits
                log.debug("closing the store after its event loop", exc_info=True)

    def commit_queued(self) -> None:
        """Commit what is queued now, not at the next loop turn (on the loop: a caller that
        cannot wait needs a statement of ``join_commit`` in the store). Not from inside a commit
        (a statement's ``landed``): its entries would reach the callbacks before that commit's."""
        if not self._committing:
            self._flush_pending()

    def _flush_pending(self) -> None:
        batch, self._pending_writes = self._pending_writes, []
        sources, self._joining = self._joining, []
        self._flush_scheduled = False
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        # (a source may join the next commit in turn: what did not fit in this one)
        statements = [statement for source in sources for statement in source()]
        if not batch and not statements:
            return
        if self._closed:
            closed = StoreError(f"the session store {self.path} is closed")
            for _, future in batch:
                if not future.done():
                    future.set_exception(closed)
            for statement in statements:
                statement.failed(closed)
            return
        self._committing = True
        try:
            self._commit_batch(batch, statements)
        finally:
            self._committing = False

    def _commit_batch(self, batch: list[tuple[list[NewEntry], asyncio.Future]], statements: list[Statement]) -> None:
        try:
            written = self._append_with([item for items, _ in batch for item in items], statements)
        except Exception:  # noqa: BLE001 - any failure: retry each request on its own, below
            # One bad request must not sink the others: write each on its own.
            for items, future in batch:
                try:
                    result = self.append_many(items)
                except Exception as exc:  # noqa: BLE001 - handed to that request's future
                    if not future.done():
                        future.set_exception(exc)
                else:
                    if not future.done():
                        future.set_result(result)
            for statement in statements:
                try:
                    self._append_with([], [statement])
                except Exception as exc:  # noqa: BLE001 - handed to the statement's owner
                    statement.failed(exc)
            return
        start = 0
        for items, future in batch:
            if not future.done():
                future.set_result(written[start : start + len(items)])
            start += len(items)

    # -------------------------------------------------------------- callbacks
    def subscribe(self, callback: OnWrite) -> Callable[[], None]:
        """Call ``callback(entry)`` after each commit; returns the function that unsubscribes."""
        self._subscribers.append(callback)
        self._subscribed()

        def unsubscribe() -> None:
            with suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def undelivered(self, entry: Entry) -> bool:
        """Whether ``entry``'s on_write callbacks have yet to run: it was written by a callback
        (of an earlier entry) and waits in the queue until that one returns (``_drain``)."""
        return any(queued.id == entry.id for queued in self._queue)

    def _dispatch(self, entries: list[Entry]) -> None:
        """Queue just-committed entries for the subscribers and run the callbacks."""
        self._queue.extend(entries)
        self._drain()

    def _drain(self) -> None:
        # A callback may append in turn; those entries queue behind the current ones so that
        # every subscriber sees entries in commit order.
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._queue:
                entry = self._queue.popleft()
                for callback in list(self._subscribers):
                    try:
                        callback(entry)
                    except Exception:
                        log.exception("on_write callback %r failed for entry %s", callback, entry.id)
                self._after_dispatch(entry)
        finally:
            self._dispatching = False
