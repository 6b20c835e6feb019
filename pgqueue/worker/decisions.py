"""WorkerDecisions: how a worker carries out what a handler's context decides about its job."""

from __future__ import annotations

import uuid

from pgqueue.store import Store
from pgqueue.worker.completer import Completer


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
