"""Failed jobs: recording a failure, and what people do with ``pgqueue.failed_jobs``
(list, find, count, forget, flush, retry). Errors are translated: these are for people."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import psycopg

from pgqueue.resources import query
from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled, first


async def record_failure_on(conn: psycopg.AsyncConnection[Any], envelope: str, attempts: int,
                            exception: str | None, message: str, traceback: str | None,
                            reason: str) -> uuid.UUID:
    """:meth:`FailedStatements.record_failure` on a given connection (the sync driver's own event
    loop has no pool)."""
    cur = await conn.execute(query("record_failure"), (envelope, attempts, exception, message, traceback, reason))
    return uuid.UUID(str(first(await cur.fetchone())))


class FailedStatements(Pooled):
    """The failure records of ``pgqueue.failed_jobs``."""

    __slots__ = ()

    async def record_failure(self, envelope: str, attempts: int, exception: str | None, message: str,
                             traceback: str | None, reason: str) -> uuid.UUID:
        """Record a failure of a job that has no row in pgqueue.jobs (the sync driver); returns its id."""
        with storage_errors("recording a failed job"):
            async with self._pool.connection() as conn:
                return await record_failure_on(conn, envelope, attempts, exception, message, traceback, reason)

    async def failed_list(self, queue: str | None, before: datetime | None, limit: int) -> list[dict[str, Any]]:
        """Failure rows (columns of pgqueue.failed_jobs) newest first, older than ``before`` if given."""
        with storage_errors("listing failed jobs"):
            return await self._dicts("failed_list", {"queue": queue, "before": before, "limit": limit})

    async def failed_find(self, failure_id: uuid.UUID | str) -> dict[str, Any] | None:
        """The failure row with this id, or None."""
        with storage_errors(f"finding failed job {failure_id}"):
            rows = await self._dicts("failed_find", (str(failure_id),))
        return rows[0] if rows else None

    async def failed_count(self, queue: str | None) -> int:
        """How many failures are recorded (of one queue, or all)."""
        with storage_errors("counting failed jobs"):
            return int(await self._value("failed_count", (queue, queue)) or 0)

    async def forget_failed(self, failure_id: uuid.UUID | str) -> bool:
        """Delete one failure record; False if there was none."""
        with storage_errors(f"forgetting failed job {failure_id}"):
            return bool(await self._value("forget_failed", (str(failure_id),)))

    async def flush_failed(self, queue: str | None, older_than: str | None) -> int:
        """Delete failure records (of one queue, or all; ``older_than`` an interval text); returns how many."""
        with storage_errors("flushing failed jobs"):
            return int(await self._value("flush_failed", (queue, older_than)) or 0)

    async def retry_failed(self, failure_id: uuid.UUID) -> uuid.UUID:
        """Put a failed job back (same id and envelope, attempts reset); returns the job id.

        Raises :class:`~pgqueue.QueueRetryError` for an unknown failure id or a passed deadline.
        """
        with storage_errors(f"retrying failed job {failure_id}"):
            job_id = await self._value("retry_failed", (str(failure_id),))
        return uuid.UUID(str(job_id))

    async def retry_failed_all(self, queue: str | None) -> int:
        """Retry every failure (of one queue, or all) still within its deadline; returns how many."""
        with storage_errors("retrying failed jobs"):
            return int(await self._value("retry_failed_all", (queue,)) or 0)
