"""A failure as failed_jobs and the logs take it: the class, the message and the traceback of an
exception, made storable (no NUL, no lone surrogate) and bounded (head and tail kept, the cut said)."""

from __future__ import annotations

import traceback

#: The most characters of a failure's message that failed_jobs and the worker's log lines keep
#: (its head and tail, the cut said in the text).
MESSAGE_LIMIT = 16 * 1024
#: The most characters of a failure's traceback that failed_jobs keeps (head and tail).
TRACEBACK_LIMIT = 64 * 1024
#: The most characters of an exception's class name kept.
NAME_LIMIT = 1024


def stored_text(text: str, limit: int, what: str = "text") -> str:
    """``text`` as failed_jobs and the logs take it: NUL escaped as ``\\x00`` and lone surrogates
    as ``\\udXXX`` (PostgreSQL's text refuses the one, UTF-8 the other), and at most
    ``limit`` characters: a longer text keeps its head and its tail around a line saying how much
    of the ``what`` was cut. Every failure path stores and logs through this (see :func:`describe`)."""
    if len(text) <= limit and text.isascii() and "\x00" not in text:
        return text  # the common case: nothing to do
    text = _bounded(text, limit, what)
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    # The escapes may have made it longer again: cut the clean text (a cut never splits a code point).
    return _bounded(text, limit, what)


def _bounded(text: str, limit: int, what: str) -> str:
    if len(text) <= limit:
        return text
    keep = max(limit - 200, 2)
    head = keep // 2
    tail = keep - head
    cut = (f"\n[... pgqueue cut {len(text) - keep:,} characters of this {what}: it had {len(text):,}, at "
           f"most {limit:,} are kept (its head and its tail) ...]\n")
    return text[:head] + cut + text[len(text) - tail:]


def failure_message(error: BaseException) -> str:
    """An exception's message as failed_jobs and the logs take it (:func:`stored_text`); never raises,
    even when the exception's own ``__str__`` does."""
    try:
        message = str(error)
    except Exception as exc:  # a broken __str__ must not lose the failure
        message = f"<the message could not be read: its __str__ raised {type(exc).__name__}>"
    return stored_text(message, MESSAGE_LIMIT, "message")


def describe(error: BaseException, message: str | None = None) -> tuple[str, str, str]:
    """(module-qualified class, message, full traceback) of an exception, as stored in failed_jobs:
    each made storable and bounded by :func:`stored_text` (MESSAGE_LIMIT, TRACEBACK_LIMIT). ``message``
    replaces the exception's own (it is bounded too). Never raises."""
    kind = type(error)
    try:
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    except Exception:
        name = "?"
    try:
        text = "".join(traceback.format_exception(kind, error, error.__traceback__))
    except Exception as exc:
        text = f"(the traceback could not be formatted: {type(exc).__name__})"
    return (stored_text(name, NAME_LIMIT, "exception class name"),
            failure_message(error) if message is None else stored_text(message, MESSAGE_LIMIT, "message"),
            stored_text(text, TRACEBACK_LIMIT, "traceback"))


#: The last lines of a traceback a failure's log line carries, each cut at TRACEBACK_WIDTH characters
#: (the whole traceback is in failed_jobs; the message is on the line already).
TRACEBACK_LINES = 8
TRACEBACK_WIDTH = 240


def trimmed(trace: str | None) -> str:
    """The end of a traceback for a log line: a newline and its last :data:`TRACEBACK_LINES` lines
    (where it was raised and the exception), "" without one."""
    if not trace:
        return ""
    lines = trace.rstrip().splitlines()
    if len(lines) > TRACEBACK_LINES:
        lines = [f"  ({len(lines) - TRACEBACK_LINES} traceback lines above omitted)", *lines[-TRACEBACK_LINES:]]
    return "\n" + "\n".join(line if len(line) <= TRACEBACK_WIDTH else line[:TRACEBACK_WIDTH] + " …"
                             for line in lines)


def ran(duration: float | None) -> str:
    """An attempt's duration as a log line says it."""
    return "?" if duration is None else f"{duration:.3f}s"
