"""Failed jobs from Python: list, find, forget (retry lives on :class:`~pgqueue.Client`)."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgqueue.errors import QueueConfigurationError
from pgqueue.limits import MAX_FLUSH_HOURS, queue_name_problem
from pgqueue.store import Store


def _queue_filter(queue: object, consequence: str) -> None:
    """Refuse a queue filter the queue-name rule refuses (None: every queue); no failure can have such a queue."""
    if queue is not None:
        problem = queue_name_problem(queue)
        if problem is not None:
            raise QueueConfigurationError(f"failed jobs queue filter: {problem}; {consequence}")


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
    """Reads and forgets failure records. Obtain one with ``await client.failed()``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def all(self, queue: str | None = None, limit: int = 50, before: datetime | None = None) -> list[FailedJob]:
        """Failures newest first; page with ``before=<failed_at of the last one seen>``."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        _queue_filter(queue, "nothing was listed")
        return [FailedJob.from_row(row) for row in await self._store.failed_list(queue, before, limit)]

    async def find(self, failure_id: uuid.UUID | str) -> FailedJob | None:
        """The failure with this id, or None."""
        row = await self._store.failed_find(failure_id)
        return None if row is None else FailedJob.from_row(row)

    async def count(self, queue: str | None = None) -> int:
        """How many failures are recorded (of one queue, or all)."""
        _queue_filter(queue, "nothing was counted")
        return await self._store.failed_count(queue)

    async def forget(self, failure_id: uuid.UUID | str) -> bool:
        """Delete one failure record; False if there was none."""
        return await self._store.forget_failed(failure_id)

    async def flush(self, queue: str | None = None, older_than_hours: float | None = None) -> int:
        """Delete failure records (of one queue, or all; optionally only those older than
        ``older_than_hours``, from 0 to :data:`~pgqueue.limits.MAX_FLUSH_HOURS`); returns how many."""
        _queue_filter(queue, "nothing was deleted")
        if older_than_hours is not None and (
                isinstance(older_than_hours, bool) or not isinstance(older_than_hours, int | float)
                or not math.isfinite(older_than_hours) or not 0 <= older_than_hours <= MAX_FLUSH_HOURS):
            raise QueueConfigurationError(
                f"older_than_hours must be a finite number of hours from 0 to {MAX_FLUSH_HOURS:.0f} (10 years), "
                f"got {older_than_hours!r}; nothing was deleted")
        interval = None if older_than_hours is None else f"{float(older_than_hours)} hours"
        return await self._store.flush_failed(queue, interval)
