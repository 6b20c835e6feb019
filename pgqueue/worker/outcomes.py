"""Outcomes: how an attempt ended, said once, as one event, to whoever counts or reports it.

Each attempt a worker starts ends in exactly one :class:`Outcome`, carried by one :class:`Ended`
event that :meth:`Outcomes.emit` hands to its subscribers: :class:`WorkerStats` counts it, the
instruments (metrics) record it, the log says it. The executor emits it when the attempt's end is
known — the handler's own decision, or the worker's carried out and answered by the fence — and the
completer emits the outcome of a batched ack once the database has answered it (``acked``, or
``lost`` when the fence refused). Nothing is counted before it is known, so nothing is corrected
after.

This room imports no other room of the worker but the instruments: the executor, the fetcher, the
completer and the worker all import it.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pgqueue.worker.instruments import Instruments

logger = logging.getLogger("pgqueue.worker")

__all__ = ["Ended", "Outcome", "Outcomes", "WorkerStats"]


class Outcome(enum.StrEnum):
    """How one attempt ended (the values are :attr:`pgqueue.JobContext.decision`'s words)."""

    #: The job is done and removed (the handler returned, or called ``context.ack()``).
    ACKED = "acked"
    #: Put back to run again, the attempt counted (the retry policy, or ``context.release()``).
    RELEASED = "released"
    #: Put back to run again without using up a try (``context.snooze()``).
    SNOOZED = "snoozed"
    #: Moved to ``pgqueue.failed_jobs`` (tries or deadline exhausted, ``context.fail()``, or a
    #: reservation that could not run: bad envelope, unknown job name).
    FAILED = "failed"
    #: Stopped because the job was cancelled (``pgqueue.cancel``, recorded in failed_jobs).
    CANCELLED = "cancelled"
    #: The lease was lost: a decision or an ack the fence refused, or a handler stopped because its
    #: lease could not be renewed. The job runs again elsewhere.
    LOST = "lost"
    #: Interrupted by the worker's forced stop and handed back with its try.
    GIVEN_BACK = "given_back"
    #: Put back to run again after the downstream's backpressure, without using up a try; the
    #: queue's adaptive limit halved (``Backpressure``, ``context.backpressure()``).
    BACKPRESSURED = "backpressured"


@dataclass(slots=True)
class Ended:
    """One attempt's end: what happened (:attr:`outcome`) to which job."""

    outcome: Outcome
    job_id: uuid.UUID
    token: int
    attempts: int
    queue: str
    #: The job's registered name (``"?"`` when its envelope could not be decoded).
    name: str
    #: Why a failure failed (``exception``, ``failed_by_handler``, ``payload_invalid``, ...); why a
    #: lease was lost (``ack_refused``); None otherwise.
    reason: str | None = None
    #: The handler's return value, on an ``acked`` outcome of a handler that returned (None
    #: otherwise). The hook for kept job results: nothing reads it yet.
    result: Any = None


Subscriber = Callable[[Ended], None]


class Outcomes:
    """The one place an attempt's :class:`Ended` event goes: :meth:`emit` calls each subscriber in
    the order they subscribed. A subscriber must not raise (one that does is logged and the others
    still hear the event)."""

    __slots__ = ("_subscribers",)

    def __init__(self, *subscribers: Subscriber) -> None:
        self._subscribers: list[Subscriber] = list(subscribers)

    def subscribe(self, subscriber: Subscriber) -> None:
        """Call ``subscriber(ended)`` for every outcome from now on."""
        self._subscribers.append(subscriber)

    def emit(self, ended: Ended) -> None:
        """Tell every subscriber how an attempt ended (called once per attempt)."""
        for subscriber in self._subscribers:
            try:
                subscriber(ended)
            except Exception:
                logger.exception("pgqueue: an outcome subscriber failed on job %s (%s)", ended.job_id,
                                 ended.outcome)


@dataclass
class WorkerStats:
    """What a worker did so far (the outcomes are counted by :meth:`count`, one per attempt)."""

    reserved: int = 0
    processed: int = 0
    acked: int = 0
    #: Attempts released to run again (the retry policy after a failure, or ``context.release()``).
    retried: int = 0
    #: Attempts the handler snoozed (``context.snooze()``: runs again without using up a try).
    snoozed: int = 0
    failed: int = 0
    #: Reservations whose lease was lost: a decision or an ack the fence refused, or a handler
    #: stopped because its lease could not be renewed. Such a job runs again elsewhere.
    lost: int = 0
    #: VACUUMs of pgqueue.jobs run by this worker's table maintenance.
    vacuums: int = 0
    #: Handlers stopped because their job was cancelled (``pgqueue.cancel``, confirmed by the database).
    cancelled: int = 0
    #: Attempts the worker itself interrupted (a forced stop: drain timeout passed, second signal),
    #: handed back with their try (``pgqueue.release_interrupted``) to run again on the next worker.
    given_back: int = 0
    #: Attempts that met backpressure (``Backpressure``, ``context.backpressure()``): put back
    #: without using up a try, the queue's adaptive limit halved.
    backpressured: int = 0

    def count(self, ended: Ended) -> None:
        """Count one attempt's outcome (an :class:`Outcomes` subscriber)."""
        if ended.outcome is _ACKED:  # the hot path: one attribute, no lookup
            self.acked += 1
            return
        field = _STATS_FIELDS[ended.outcome]
        setattr(self, field, getattr(self, field) + 1)


_ACKED, _LOST = Outcome.ACKED, Outcome.LOST  # read once per attempt: no enum attribute lookups

#: The :class:`WorkerStats` field each outcome is counted in.
_STATS_FIELDS = {Outcome.ACKED: "acked", Outcome.RELEASED: "retried", Outcome.SNOOZED: "snoozed",
                 Outcome.FAILED: "failed", Outcome.CANCELLED: "cancelled", Outcome.LOST: "lost",
                 Outcome.GIVEN_BACK: "given_back", Outcome.BACKPRESSURED: "backpressured"}

#: The instruments' word for each outcome (:data:`pgqueue.worker.instruments.OUTCOMES`); an attempt
#: given back is not an outcome of the job, so the metrics do not count it.
_INSTRUMENT_OUTCOMES = {Outcome.ACKED: "succeeded", Outcome.RELEASED: "retried", Outcome.SNOOZED: "snoozed",
                        Outcome.FAILED: "failed", Outcome.CANCELLED: "cancelled", Outcome.LOST: "lost",
                        Outcome.BACKPRESSURED: "backpressured"}


def reporter(instruments: Instruments) -> Subscriber:
    """The subscriber that records each outcome in ``instruments`` (a failure with its reason; an ack
    the fence refused also as a lost lease)."""

    def report(ended: Ended) -> None:
        word = _INSTRUMENT_OUTCOMES.get(ended.outcome)
        if word is None:
            return
        outcome = ended.outcome
        instruments.outcome(ended.queue, ended.name, word, ended.reason if outcome is Outcome.FAILED else None)
        if outcome is _LOST and ended.reason == "ack_refused":
            instruments.lease_lost()

    return report


def log(ended: Ended) -> None:
    """The subscriber that logs each outcome: an ack the fence refused as a warning (a handler ran
    to its end and its job may run twice), every other outcome at DEBUG. The worker's decisions log
    their own details (the error, the retry delay) where they are carried out."""
    if ended.outcome is _LOST and ended.reason == "ack_refused":
        logger.warning("pgqueue: job %s finished but its ack was refused: the lease was lost (it expired and "
                       "the job was reserved again, or it was cleared); it may run twice (%s, attempt %d)",
                       ended.job_id, ended.name, ended.attempts, extra=_fields(ended))
    elif logger.isEnabledFor(logging.DEBUG):
        logger.debug("pgqueue: job %s (%s) attempt %d: %s", ended.job_id, ended.name, ended.attempts,
                     ended.outcome.value, extra=_fields(ended))


def _fields(ended: Ended) -> dict[str, object]:
    return {"job_id": str(ended.job_id), "job_name": ended.name, "queue": ended.queue,
            "attempt": ended.attempts, "token": ended.token}
