"""OpenTelemetry traces (the ``otel`` extra: ``pip install 'pgqueue-py[otel]'``).

With ``opentelemetry-api`` installed and a tracer provider configured (the SDK, set up by the
application), a dispatch opens a PRODUCER span ``create <queue>`` and stores its W3C trace context
(``traceparent``/``tracestate``) in the envelope's optional ``trace`` field; the worker runs each
attempt in a CONSUMER span ``process <queue>``, a child of that span, so an attempt and its
retries are spans of the dispatcher's trace. Attributes follow the OpenTelemetry messaging
semantic conventions (``messaging.system`` = ``pgqueue``, ``messaging.destination.name`` = the
queue, ``messaging.message.id`` = the job id, ``messaging.operation.type``) plus
``messaging.pgqueue.attempt`` and ``messaging.pgqueue.job_name``. A failed attempt records its
exception and an ERROR status.

No attribute grows with what a handler or a producer sends: the queue is a valid queue name (at
most 200 characters), the job name one registered in the worker (a consumer span starts only once
the name was found), and a recorded exception keeps at most :data:`MAX_MESSAGE` characters of its
message and :data:`MAX_STACKTRACE` of its stack trace (head and tail, saying how much was cut).

Without the package, or with no tracer provider configured, every function here returns at
once: no span, no envelope field, nothing per job beyond one check.
"""

from __future__ import annotations

import contextlib
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, SpanKind, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed
    AVAILABLE = False
else:
    AVAILABLE = True
    _PROPAGATOR = TraceContextTextMapPropagator()
    # The providers that record nothing (a tuple: an X | Y union is built anew on every call of active()).
    _SILENT = (ProxyTracerProvider, NoOpTracerProvider)

__all__ = ["AVAILABLE", "active", "consumer_span", "producer_carrier", "record_failure"]

SYSTEM = "pgqueue"

#: The most characters of a failed attempt's exception message kept in its span event.
MAX_MESSAGE = 4096
#: The most characters of its stack trace kept in its span event.
MAX_STACKTRACE = 16384


def bounded(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and tail around a note of how
    many characters were cut (the result has at most ``limit`` characters plus that note)."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n... [{len(text) - limit} characters cut] ...\n{text[-tail:]}"


def active() -> bool:
    """Whether spans are recorded: the API is installed and a real tracer provider is set."""
    if not AVAILABLE:
        return False
    return not isinstance(trace.get_tracer_provider(), _SILENT)


def producer_carrier(queue: str, *, job_id: uuid.UUID | None = None, count: int = 1) -> dict[str, str] | None:
    """Open and end the PRODUCER span of a dispatch (``create <queue>``, a child of the current span)
    and return its W3C trace context for the envelope; None when tracing is not active."""
    if not active():
        return None
    attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.destination.name": queue,
                                  "messaging.operation.type": "create", "messaging.operation.name": "create"}
    if job_id is not None:
        attributes["messaging.message.id"] = str(job_id)
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    tracer = trace.get_tracer("pgqueue")
    with tracer.start_as_current_span(f"create {queue}", kind=SpanKind.PRODUCER, attributes=attributes):
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
    return carrier or None


@contextlib.contextmanager
def consumer_span(queue: str, job_id: uuid.UUID, name: str, attempt: int,
                  carrier: dict[str, str] | None) -> Iterator[None]:
    """The CONSUMER span ``process <queue>`` of one attempt, a child of the dispatch's span when the
    envelope carries its context (a new trace otherwise). Exceptions propagating out of the block
    are recorded; failures the worker handles are recorded with :func:`record_failure`."""
    if not active():
        yield
        return
    parent = _PROPAGATOR.extract(carrier) if carrier else None
    attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.destination.name": queue,
                                  "messaging.message.id": str(job_id), "messaging.operation.type": "process",
                                  "messaging.operation.name": "process", "messaging.pgqueue.attempt": attempt,
                                  "messaging.pgqueue.job_name": name}
    tracer = trace.get_tracer("pgqueue")
    with tracer.start_as_current_span(f"process {queue}", context=parent, kind=SpanKind.CONSUMER,
                                      attributes=attributes):
        yield


def record_failure(error: BaseException, outcome: str) -> None:
    """On the current attempt's span: the handler's exception and an ERROR status; ``outcome``
    (``retried`` or ``failed``) as ``messaging.pgqueue.outcome``."""
    if not active():
        return
    span = trace.get_current_span()
    # Our bounded message and trace replace the full ones the SDK would put in the event.
    message = bounded(str(error), MAX_MESSAGE)
    stacktrace = bounded("".join(traceback.format_exception(error)), MAX_STACKTRACE)
    span.record_exception(error, attributes={"exception.message": message, "exception.stacktrace": stacktrace})
    span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {message}"[:500])
    span.set_attribute("messaging.pgqueue.outcome", outcome)
