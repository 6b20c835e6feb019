"""Failed jobs from Python: list, find, forget (retry lives on :class:`~pgqueue.Queue`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from pgqueue.resources import query
from pgqueue.storage import storage_errors


@dataclass(frozen=True)
class FailedJob:
    """One terminal failure as stored in ``pgqueue.failed_jobs``."""

    id: uuid.UUID
    job_id: uuid.UUID
    connection: str
    queue: str
    envelope: dict[str, Any]
    attempts: int
    exception: str | None
    message: str
    traceback: str | None
    reason: str
    failed_at: datetime

    @property
    def name(self) -> str:
        """The job's registry name."""
        return str(self.envelope.get("name", "?"))

    @property
    def args(self) -> Any:
        """The job's args as dispatched."""
        return self.envelope.get("args")

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> FailedJob:
        """Build from a ``failed_jobs`` row fetched as a dict."""
        return cls(**row)

    def to_data(self) -> dict[str, Any]:
        """A JSON-friendly dict (ids and times as strings)."""
        return {
            "id": str(self.id), "job_id": str(self.job_id), "name": self.name, "connection": self.connection,
            "queue": self.queue, "attempts": self.attempts, "reason": self.reason, "exception": self.exception,
            "message": self.message, "traceback": self.traceback, "args": self.args,
            "failed_at": self.failed_at.isoformat(), "envelope": self.envelope,
        }


class FailedJobRepository:
    """Reads and forgets failure records. Obtain one with ``await queue.failed()``."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    async def all(self, queue: str | None = None, limit: int = 50, before: datetime | None = None) -> list[FailedJob]:
        """Failures newest first; page with ``before=<failed_at of the last one seen>``."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        with storage_errors("listing failed jobs"):
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("failed_list"), {"queue": queue, "before": before, "limit": limit})
                return [FailedJob.from_row(row) for row in await cur.fetchall()]

    async def find(self, failure_id: uuid.UUID | str) -> FailedJob | None:
        """The failure with this id, or None."""
        with storage_errors(f"finding failed job {failure_id}"):
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("failed_find"), (str(failure_id),))
                row = await cur.fetchone()
        return None if row is None else FailedJob.from_row(row)

    async def count(self, queue: str | None = None) -> int:
        """How many failures are recorded (of one queue, or all)."""
        with storage_errors("counting failed jobs"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("failed_count"), (queue, queue))
                row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def forget(self, failure_id: uuid.UUID | str) -> bool:
        """Delete one failure record; False if there was none."""
        with storage_errors(f"forgetting failed job {failure_id}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("forget_failed"), (str(failure_id),))
                row = await cur.fetchone()
        return bool(row and row[0])

    async def flush(self, queue: str | None = None, older_than_hours: float | None = None) -> int:
        """Delete failure records (of one queue, or all; optionally only older ones); returns how many."""
        interval = None if older_than_hours is None else f"{float(older_than_hours)} hours"
        with storage_errors("flushing failed jobs"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("flush_failed"), (queue, interval))
                row = await cur.fetchone()
        return int(row[0]) if row else 0
