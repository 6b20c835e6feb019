"""Statistics and history: the outcomes counted in ``pgqueue.job_stats`` per minute, queue and
job name, read as rows, as throughput windows and as buckets. Rows are read by column name
(``class_row``): each query's columns are the fields of its dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled


@dataclass(frozen=True, slots=True)
class JobStatsRow:
    """One minute of one queue and job name in ``pgqueue.job_stats`` (its shards summed).

    ``minute`` is the start of the minute (database clock) the outcomes were recorded in.
    Durations (handler run time) and latencies (from the attempt's due time to its handler's
    start) are in seconds, over the ``duration_count`` / ``latency_count`` outcomes whose worker
    measured them (None: none did).
    """

    minute: datetime
    queue: str
    name: str
    succeeded: int
    failed: int
    retried: int
    cancelled: int
    duration_count: int
    duration_sum: float
    duration_max: float | None
    latency_count: int
    latency_sum: float
    latency_max: float | None
    #: Attempts the worker interrupted (a forced stop) and gave back with their try (revision 0008).
    given_back: int = 0

    @property
    def duration_avg(self) -> float | None:
        """Mean handler run time in seconds (None: none measured)."""
        return self.duration_sum / self.duration_count if self.duration_count else None

    @property
    def latency_avg(self) -> float | None:
        """Mean queue latency in seconds (None: none measured)."""
        return self.latency_sum / self.latency_count if self.latency_count else None

    def to_data(self) -> dict[str, Any]:
        """JSON-ready: the fields, ``minute`` as ISO 8601 text, and the two averages."""
        return {"minute": self.minute.isoformat(), "queue": self.queue, "name": self.name,
                "succeeded": self.succeeded, "failed": self.failed, "retried": self.retried,
                "cancelled": self.cancelled, "duration_count": self.duration_count,
                "duration_sum": self.duration_sum, "duration_max": self.duration_max,
                "duration_avg": self.duration_avg, "latency_count": self.latency_count,
                "latency_sum": self.latency_sum, "latency_max": self.latency_max,
                "latency_avg": self.latency_avg, "given_back": self.given_back}


@dataclass(frozen=True, slots=True)
class ThroughputBucket:
    """Outcomes recorded in ``pgqueue.job_stats`` from ``start`` for ``minutes`` minutes (all its
    queues, or the one asked for)."""

    start: datetime
    minutes: int
    succeeded: int
    failed: int
    retried: int
    cancelled: int = 0

    @property
    def total(self) -> int:
        """Every outcome of the bucket (succeeded + failed + retried + cancelled)."""
        return self.succeeded + self.failed + self.retried + self.cancelled


@dataclass(frozen=True, slots=True)
class Throughput:
    """Outcomes of one queue over the last ``minutes`` minutes (the current one included)."""

    queue: str
    minutes: int
    succeeded: int
    failed: int
    retried: int
    cancelled: int

    @property
    def per_minute(self) -> float:
        """Jobs finished (succeeded + failed) per minute over the window."""
        return (self.succeeded + self.failed) / self.minutes

    def to_data(self) -> dict[str, Any]:
        """JSON-ready fields, with ``per_minute``."""
        return {"queue": self.queue, "minutes": self.minutes, "succeeded": self.succeeded, "failed": self.failed,
                "retried": self.retried, "cancelled": self.cancelled, "per_minute": self.per_minute}


class HistoryStatements(Pooled):
    """Reads of ``pgqueue.job_stats``, for people: errors are translated."""

    __slots__ = ()

    async def job_stats(self, *, queue: str | None, name: str | None, since: datetime | None,
                        until: datetime | None, limit: int) -> list[JobStatsRow]:
        """``pgqueue.job_stats`` per minute, queue and job name, oldest first (None filters: any)."""
        params = {"queue": queue, "name": name, "since": since, "until": until, "limit": limit}
        with storage_errors("reading the job history"):
            return await self._objects("job_stats_history", JobStatsRow, params)

    async def throughput(self, windows: list[int]) -> list[Throughput]:
        """Per queue and window (minutes): the outcomes recorded in the last that many minutes."""
        with storage_errors("reading the throughput"):
            return await self._objects("job_stats_throughput", Throughput, {"windows": windows})

    async def throughput_buckets(self, span: int, bucket: int, queue: str | None) -> list[ThroughputBucket]:
        """The last ``span`` minutes (the current one included) in buckets of ``bucket`` minutes,
        oldest first, empty buckets included; one queue or all (None). ``bucket`` divides ``span``."""
        if bucket < 1 or span < bucket or span % bucket:
            raise ValueError(f"throughput buckets: bucket {bucket!r} must divide span {span!r} minutes")
        with storage_errors("reading the throughput"):
            return await self._objects("job_stats_buckets", ThroughputBucket,
                                       {"span": span, "bucket": bucket, "queue": queue})
