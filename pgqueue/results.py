"""A job's result: the handler's return value, checked and encoded for ``pgqueue.job_results``.

The result is kept for ``result_ttl`` seconds, decided per dispatch (``dispatch(...,
result_ttl=...)``, stored in the envelope), else per job type (``result_ttl`` on the class or
``@job``), else by default: :data:`DEFAULT_RESULT_TTL` for a handler that declares a return type
other than ``None``, 0 (nothing kept) for one that declares none or ``-> None``. So every job that
returns nothing — all jobs written before results existed — stays on the plain ack, which keeps
nothing and costs nothing more; a job that declares a value keeps it for a day, as Celery's
``result_expires`` does.

A kept result is JSON (as args are), checked against the return annotation like args against
their fields (strict: ``int`` refuses ``"1"``), at most :data:`MAX_RESULT_BYTES` encoded. One that
is not fails the attempt with reason ``result_invalid`` (no retry: the same code returns the
same value).
"""

from __future__ import annotations

import inspect
import logging
import sys
import typing
from typing import TYPE_CHECKING, Any

import msgspec

from pgqueue.errors import QueuePayloadError, QueueResultError
from pgqueue.jobs import MAX_RESULT_TTL, check_result_ttl
from pgqueue.jsonvalues import check_json_safe, dumps_json

if TYPE_CHECKING:
    from pgqueue.envelope import Envelope
    from pgqueue.jobs import Job

__all__ = ["DEFAULT_RESULT_TTL", "MAX_RESULT_BYTES", "MAX_RESULT_TTL", "check_result_ttl", "declared_result",
           "encode_result", "result_ttl", "type_result_ttl"]

logger = logging.getLogger("pgqueue.results")

#: Seconds a declared result is kept when neither the dispatch nor the job type says (one day).
DEFAULT_RESULT_TTL = 86400.0
#: The most bytes a result's JSON text may have (256 KiB): a result is a row beside the queue's
#: tables, not a blob store; return a key to larger data instead.
MAX_RESULT_BYTES = 256 * 1024

_UNDECLARED = object()
_DECLARED: dict[type[Any], Any] = {}


def declared_result(job_type: type[Job]) -> Any:
    """The resolved return annotation of the job's handler; ``None`` for ``-> None``, and
    :data:`typing.Any` for an annotation that cannot be resolved. Missing: ``_UNDECLARED``."""
    found = _DECLARED.get(job_type, _MISSING)
    if found is not _MISSING:
        return found
    # @job: the function's own annotation (its class's handle() only passes the value on).
    function = getattr(job_type, "_function", None) or getattr(job_type, "_sync_function", None)
    target = function if function is not None else job_type.handle
    raw = inspect.signature(target, eval_str=False).return_annotation
    if raw is inspect.Signature.empty:
        found = _UNDECLARED
    else:
        try:
            module = sys.modules.get(getattr(target, "__module__", ""), None)
            globalns = dict(getattr(target, "__globals__", vars(module) if module is not None else {}))
            found = _resolved_return(raw, globalns, dict(vars(job_type)))
            if found is type(None):
                found = None
            elif found is not Any:
                msgspec.inspect.type_info(found)
        except Exception as exc:
            logger.warning("pgqueue: job %r: the return annotation %r is not checked: %s: %s", job_type.name, raw,
                           type(exc).__name__, exc)
            found = Any
    _DECLARED[job_type] = found
    return found


_MISSING = object()


def _resolved_return(raw: Any, globalns: dict[str, Any], localns: dict[str, Any]) -> Any:
    """The return annotation ``raw`` resolved alone: a parameter's annotation that cannot be (such as
    ``context: JobContext`` imported only under ``TYPE_CHECKING``) does not stop the result's check."""
    def holder() -> None: ...
    holder.__annotations__ = {"return": raw}
    return typing.get_type_hints(holder, globalns=globalns, localns=localns).get("return", Any)


def result_ttl(job_type: type[Job], envelope: Envelope) -> float:
    """Seconds the result of this job is kept (0: none): the dispatch's, the job type's, else the default."""
    if envelope.result_ttl is not None:
        return envelope.result_ttl
    return type_result_ttl(job_type)


def type_result_ttl(job_type: type[Job]) -> float:
    """Seconds the results of the job type's jobs are kept when their dispatch does not say."""
    configured = getattr(job_type, "result_ttl", None)
    if configured is not None:
        return float(configured)
    declared = declared_result(job_type)
    return 0.0 if declared is None or declared is _UNDECLARED else DEFAULT_RESULT_TTL


def encode_result(job_type: type[Job], value: Any) -> str:
    """The JSON text of a handler's return value; raises QueueResultError (``result_invalid``)
    saying what is wrong when it is not JSON, too large or not what the annotation declares."""
    what = f"job {job_type.name!r} result"
    try:
        check_json_safe(value, what)
    except QueuePayloadError as exc:
        raise QueueResultError(f"{exc}; a kept result must be JSON (return ids, strings, numbers, lists "
                               "or dicts)") from None
    declared = declared_result(job_type)
    if declared is not _UNDECLARED and declared is not Any:
        try:
            msgspec.convert(value, declared, strict=True)
        except msgspec.ValidationError as exc:
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise QueueResultError(f"{what} must be {_type_name(declared)} as the handler declares, got "
                                   f"{type(value).__name__} {shown} ({exc})") from None
    text = dumps_json(value)
    size = len(text.encode("utf-8"))
    if size > MAX_RESULT_BYTES:
        raise QueueResultError(f"{what} is {size} bytes of JSON, over the limit of {MAX_RESULT_BYTES} "
                               "(pgqueue.results.MAX_RESULT_BYTES); store large data elsewhere and return its key")
    return text


def _type_name(kind: Any) -> str:
    if kind is None:
        return "None"
    if isinstance(kind, type) and not typing.get_args(kind):
        return kind.__qualname__
    return repr(kind).replace("typing.", "")
