"""Log records of chaz_nb (and litellm) pass through the same redaction as the session log.

A traceback that ``log.exception`` prints goes to stderr, which in a kernel is the cell's
output and so the saved notebook; an exception message may quote a key. Every record of the
``chaz_nb`` and ``LiteLLM`` logger hierarchies is therefore redacted in place: its message
(``msg % args``, then ``args`` dropped), its formatted traceback (``exc_text``; ``exc_info`` is
dropped so no handler formats the raw one again) and its ``stack_info``.

Why the record factory and not a Filter on the ``chaz_nb`` logger: logging runs a logger's
filters only for records logged on that very logger, not for its children's
(``chaz_nb.server``), and a handler on a child logger sees a record before any ancestor's
handler. Redacting records where they are made covers every handler: a child's, the root's,
pytest's, and ``logging.lastResort`` (what prints to a kernel's stderr when nobody configured
logging). ``RedactingFilter`` does the same for any handler one adds for other loggers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .controls import shown_controls
from .redaction import redact

#: logger hierarchies whose records are redacted
LOGGERS = ("chaz_nb", "LiteLLM")
_MARK = "_chaz_redacted"


def redact_record(record: logging.LogRecord, redact_text: Callable[[str], str] = redact) -> logging.LogRecord:
    """Redact ``record`` in place (message, traceback, stack), controls shown, and return it."""
    if getattr(record, _MARK, False):
        return record
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format string or a raising __str__ in args: keep what there is, redacted
        message = f"{record.msg!s} {record.args!r}"
    # (a record may quote a server's stderr: its ANSI and bidi controls are shown as text, since
    # a kernel's stderr is the cell's output)
    record.msg, record.args = shown_controls(redact_text(message)), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = shown_controls(redact_text(record.exc_text))
    record.exc_info = None
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)
    setattr(record, _MARK, True)
    return record


class RedactingFilter(logging.Filter):
    """A handler filter that redacts each record it passes (it drops none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


def _covered(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in LOGGERS)


def install() -> None:
    """Wrap the log-record factory so records of ``LOGGERS`` are redacted when made (idempotent)."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, _MARK, False):
        return

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if _covered(record.name):
            redact_record(record)
        return record

    setattr(factory, _MARK, True)
    logging.setLogRecordFactory(factory)
