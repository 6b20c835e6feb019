"""WorkerDecisions: how a worker carries out what a handler's context decides about its job."""

from __future__ import annotations

import logging
import uuid

from pgqueue.errors import Backpressure, QueueLeaseError, QueueRetryError
from pgqueue.job_context import JobContext
from pgqueue.store import Store
from pgqueue.store.errors import DATABASE_ERRORS
from pgqueue.worker.completer import Completer
from pgqueue.worker.outcomes import Outcome

logger = logging.getLogger("pgqueue.worker")

#: Why a backpressured job could not be put back: past its deadline, or a database error.
_NOT_PUT_BACK: tuple[type[Exception], ...] = (QueueRetryError, *DATABASE_ERRORS)


async def backpressured(context: JobContext, raised: Backpressure) -> Outcome | None:
    """The handler raised :class:`~pgqueue.Backpressure`: the job back after its ``retry_after``
    without using up a try, the queue's adaptive limit halved. None when that could not be done
    (already decided, past the deadline, a database error): the error's retry policy applies."""
    if context.finished:
        return None
    try:
        await context.backpressure(raised.retry_after)
    except QueueLeaseError:
        return Outcome.LOST
    except _NOT_PUT_BACK as exc:
        logger.warning("pgqueue: job %s: backpressure could not put it back (%s); retried as an error",
                       context.id, exc, extra=context.log_fields())
        context.forget_decision("backpressured")
        return None
    return Outcome.BACKPRESSURED


class WorkerDecisions:
    """A worker's :class:`pgqueue.context.Decisions` (the protocol): what a handler's context calls to
    carry out its decisions. ``context.ack()`` is an ack through the completer, the others go to the store."""

    __slots__ = ("_completer", "_store")

    def __init__(self, store: Store, completer: Completer) -> None:
        self._store = store
        self._completer = completer

    async def ack(self, job_id: uuid.UUID, token: int) -> bool:
        """Ack now (the handler waits for the fence's answer)."""
        return await self._completer.ack_now(job_id, token)

    async def release(self, job_id: uuid.UUID, token: int, delay: float) -> bool:
        """Put the job back, available after ``delay`` seconds."""
        return await self._store.release(job_id, token, delay)

    async def fail(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,
                   traceback_text: str | None, reason: str) -> bool:
        """Move the job to failed_jobs."""
        return await self._store.fail(job_id, token, exception, message, traceback_text, reason)

    async def extend(self, job_id: uuid.UUID, token: int, seconds: float) -> float | None:
        """Renew the lease; the seconds left, or None if the fence refused."""
        return await self._store.extend(job_id, token, seconds)

    async def snooze(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        """Put the job back without using up a try: 'snoozed', 'not_yours' or 'past_deadline'."""
        return await self._store.snooze(job_id, token, delay)

    async def backpressure(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        """Put the job back without using up a try and halve its queue's adaptive limit:
        'backpressured', 'not_yours' or 'past_deadline'."""
        return await self._store.backpressure(job_id, token, delay)
