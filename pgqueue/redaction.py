"""Masking what a job declares secret (``Job.redact``) wherever pgqueue shows or logs a job.

One implementation for every surface: the dashboard's pages, the CLI's ``queue:failed`` (table,
detail and JSON) and the worker's log lines (:class:`LogRedaction`). What is masked, for a job
whose class is imported in the process that shows it:

- an arg the class lists in ``redact``, or that the caller names for every job (the dashboard's
  and ``queue:failed``'s ``--redact``), at any depth of the args: replaced by :data:`MASK`;
- the envelope's ``unique_key`` when ``unique_by`` derived it from such an arg (the arg shows
  masked in the key), and any other key that quotes a masked value;
- a message, a traceback or a log line that quotes a masked value, as typed or escaped the way
  JSON or a Python repr writes it: the value is replaced by :data:`MASK`. Values shorter than
  :data:`MIN_SECRET_IN_TEXT` characters are not searched for in text: masking every "1" of a
  traceback would hide more than it protects (in args and unique keys they are masked anyway).

Redaction is about what is shown: ``pgqueue.failed_jobs`` still stores the args as dispatched.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pgqueue.failed import FailedJob
from pgqueue.jobs import registered_jobs

__all__ = ["MASK", "MIN_SECRET_IN_TEXT", "LogRedaction", "Redactor", "Secrets", "log_fields", "redact_record"]

MASK = "••••••"
#: Masked values shorter than this are not searched for in messages, tracebacks and log lines.
MIN_SECRET_IN_TEXT = 4
# How a key derived by Job.unique_by writes its values (see Job.derived_unique_key).
_KEY_JSON: dict[str, Any] = {"sort_keys": True, "separators": (",", ":"), "default": str}


class Redactor:
    """Masks arg fields by name: the job class's ``redact`` plus ``always`` (names masked for every job)."""

    def __init__(self, always: Iterable[str] = ()) -> None:
        self._always = frozenset(always)

    def fields(self, job_name: str | None) -> frozenset[str]:
        """The field names masked for a job (its class's ``redact``, looked up in the registry)."""
        job_class = registered_jobs().get(job_name or "")
        declared = getattr(job_class, "redact", ()) if job_class is not None else ()
        return self._always | frozenset(declared)

    def args(self, job_name: str | None, args: Any) -> tuple[Any, list[str]]:
        """``args`` with masked fields (at any depth) and the values that were masked, as text."""
        secrets: list[str] = []
        names = self.fields(job_name)
        return (_masked(args, names, secrets) if names else args), secrets

    def envelope(self, envelope: Any) -> tuple[Any, list[str]]:
        """A stored envelope with its args and unique key masked, and the masked values."""
        if not isinstance(envelope, dict):
            return envelope, []
        name = envelope.get("name")
        args, secrets = self.args(name if isinstance(name, str) else None, envelope.get("args"))
        shown = {**envelope, "args": args}
        key = envelope.get("unique_key")
        if isinstance(key, str):
            shown["unique_key"] = self.unique_key(name if isinstance(name, str) else None, key, secrets)
        return shown, secrets

    def unique_key(self, job_name: str | None, key: str, secrets: Iterable[str] = ()) -> str:
        """A unique key as shown: the masked args of a key ``unique_by`` derived (``"<job name>:<JSON>"``)
        show masked, and any masked value the key quotes otherwise is replaced too."""
        names = self.fields(job_name)
        prefix = f"{job_name}:"
        if names and job_name and key.startswith(prefix):
            try:
                values = json.loads(key[len(prefix):])
            except ValueError:
                values = None
            if isinstance(values, dict):
                found: list[str] = []
                masked = _masked(values, names, found)
                if masked != values:
                    # Written as the key was (ASCII JSON), the mask itself left readable.
                    key = prefix + json.dumps(masked, **_KEY_JSON).replace(json.dumps(MASK), f'"{MASK}"')
                    secrets = [*secrets, *found]
        return self.text(key, secrets) or ""

    def failure(self, failure: FailedJob) -> FailedJob:
        """A failure record as shown: envelope (so args), message and traceback masked."""
        envelope, secrets = self.envelope(failure.envelope)
        return dataclasses.replace(failure, envelope=envelope, message=self.text(failure.message, secrets) or "",
                                   traceback=self.text(failure.traceback, secrets))

    @staticmethod
    def text(text: str | None, secrets: Iterable[str], *, cut: bool = False, cut_start: bool = False) -> str | None:
        """``text`` (a message, a traceback, a log line) with every quoted masked value replaced.

        ``cut``: the text was cut short (a list shows the start of a message), so a masked value
        may end it half-written: such an end is masked too. ``cut_start``: the text is the end of a
        longer one (a page shows a traceback's last lines), so a masked value may begin it
        half-written: such a start is masked too.
        """
        if text is None:
            return None
        spellings = _spellings(secrets)
        for secret in spellings:
            text = text.replace(secret, MASK)
        if cut_start:
            for secret in spellings:
                partial = next((k for k in range(len(secret) - 1, 0, -1) if text.startswith(secret[-k:])), 0)
                if partial:
                    text = MASK + text[partial:]
                    break
        if cut:
            for secret in spellings:
                partial = next((k for k in range(len(secret) - 1, 0, -1) if text.endswith(secret[:k])), 0)
                if partial:
                    return text[:-partial] + MASK
        return text


#: What the worker's log lines and the CLI use: each job class's own ``redact``.
DEFAULT = Redactor()


def _masked(value: Any, names: frozenset[str], secrets: list[str]) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, inner in value.items():
            if key in names:
                secrets.extend(_strings(inner))
                out[key] = MASK
            else:
                out[key] = _masked(inner, names, secrets)
        return out
    if isinstance(value, list):
        return [_masked(v, names, secrets) for v in value]
    return value


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, bool) or value is None:
        return []
    return [str(value)]


def _spellings(secrets: Iterable[str]) -> list[str]:
    """Each secret long enough to search for, as typed and as JSON and repr() escape it; longest first
    (a secret that contains another is replaced whole)."""
    found: set[str] = set()
    for secret in secrets:
        if len(secret) < MIN_SECRET_IN_TEXT:
            continue
        found.update((secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
                      repr(secret)[1:-1]))
    return sorted(found, key=len, reverse=True)


# ----------------------------------------------------------------------- logs
class Secrets:
    """The masked values of one job, carried by a log record (``extra``) to :func:`redact_record`.

    Its text never shows them: a formatter that prints every attribute of a record prints
    ``<2 masked values>``.
    """

    __slots__ = ("values",)

    def __init__(self, values: Iterable[str]) -> None:
        self.values = tuple(values)

    def __repr__(self) -> str:
        return f"<{len(self.values)} masked values>"

    __str__ = __repr__


#: The record attribute that carries a job's :class:`Secrets`.
RECORD_FIELD = "pgqueue_secrets"


def log_fields(fields: Mapping[str, Any], job_name: str, args: Any) -> dict[str, Any]:
    """``fields`` (the ``extra`` of a log line about a job) plus the job's masked values, so that
    :class:`LogRedaction` masks them in the line's message and traceback."""
    _, secrets = DEFAULT.args(job_name, args)
    return {**fields, RECORD_FIELD: Secrets(secrets)} if secrets else dict(fields)


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """Mask the values a record carries (:func:`log_fields`) in its message, traceback and stack; once."""
    secrets = record.__dict__.get(RECORD_FIELD)
    if not isinstance(secrets, Secrets) or not secrets.values:
        return record
    record.msg = Redactor.text(record.getMessage(), secrets.values)
    record.args = ()
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    record.exc_text = Redactor.text(record.exc_text, secrets.values)
    record.stack_info = Redactor.text(record.stack_info, secrets.values)
    setattr(record, RECORD_FIELD, Secrets(()))
    return record


class LogRedaction(logging.Filter):
    """A logging filter that applies :func:`redact_record`: on the ``pgqueue.worker`` logger, so every
    handler an application configures receives masked lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask the record in place; never drops it."""
        redact_record(record)
        return True
