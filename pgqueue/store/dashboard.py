"""The dashboard's reads (pgqueue.dashboard): each bounded (capped counts, samples, keyset pages
over a bounded scan), so a page costs the same with a million jobs as with ten."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgqueue.resources import query
from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """One queue's row of ``sql/queries/dashboard_queues.sql``: counts read from bounded index ranges.

    Each count reads at most ``cap + 1`` rows; a ``*_capped`` flag says the count stopped there,
    so the number is a lower bound ("more than cap"). ``due_capped`` covers ``ready`` and
    ``expired``, ``later_capped`` covers ``delayed`` and ``reserved``.
    """

    queue: str
    ready: int
    delayed: int
    reserved: int
    expired: int
    failed: int
    due_capped: bool
    later_capped: bool
    failed_capped: bool
    oldest_ready_age: float | None


@dataclass(frozen=True, slots=True)
class ScannedPage:
    """A page read by a bounded keyset scan (``dashboard_failed_page``, ``dashboard_jobs_page``).

    ``rows`` are the matching rows (dicts, newest first); ``scanned`` how many rows after the
    cursor were read to find them; ``last`` the keyset position of the last row read (None if
    none was), from which the next page continues when the scan stopped before the page filled.
    """

    rows: list[dict[str, Any]]
    scanned: int
    last: tuple[Any, ...] | None


@dataclass(frozen=True, slots=True)
class Listener:
    """A session listening on pgqueue's channel (a running worker), from ``pg_stat_activity``."""

    pid: int
    user: str | None
    application_name: str
    client_addr: str | None
    client_hostname: str | None
    backend_start: datetime
    connected_seconds: float
    state: str | None
    state_change: datetime | None


def _scanned_page(rows: list[dict[str, Any]], last_columns: tuple[str, ...]) -> ScannedPage:
    """Split the rows of a bounded page query: the matches, and the scan's extent on every row."""
    if not rows:
        return ScannedPage([], 0, None)
    first = rows[0]
    last = None if first[last_columns[0]] is None else tuple(first[c] for c in last_columns)
    extra = {"scanned", *last_columns}
    matches = [{k: v for k, v in row.items() if k not in extra} for row in rows if row["id"] is not None]
    return ScannedPage(matches, int(first["scanned"]), last)


class DashboardStatements(Pooled):
    """What the dashboard's pages read."""

    __slots__ = ()

    async def queue_counts(self, cap: int, failed_cap: int) -> list[QueueCounts]:
        """Per-queue counts: jobs read from at most ``cap + 1`` index entries per state and priority,
        failures from at most ``failed_cap + 1`` per queue (see :class:`QueueCounts`)."""
        with storage_errors("reading queue counts"):
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(query("dashboard_jit_off"))
                cur = await conn.execute(query("dashboard_queues"), {"cap": cap, "failed_cap": failed_cap})
                rows = await cur.fetchall()
        return [QueueCounts(*row) for row in rows]

    async def queue_sample(self, pages: int) -> tuple[float, dict[str, tuple[int, int, int, int]]]:
        """The job states found on a random sample of about ``pages`` pages of ``pgqueue.jobs``.

        Returns the sampled percentage and, per queue seen, (ready, delayed, reserved, expired)
        in the sample: divide by ``percent / 100`` to estimate the table's counts.
        """
        with storage_errors("sampling queue counts"):
            rows = await self._rows("dashboard_queue_sample", {"pages": pages})
        return float(rows[0][0]), {str(r[1]): (int(r[2]), int(r[3]), int(r[4]), int(r[5]))
                                   for r in rows if r[1] is not None}

    async def failed_sample(self, pages: int) -> tuple[float, dict[str, int]]:
        """The failures per queue on a random sample of about ``pages`` pages of ``pgqueue.failed_jobs``:
        the sampled percentage and the counts in the sample (see :meth:`queue_sample`)."""
        with storage_errors("sampling failure counts"):
            rows = await self._rows("dashboard_failed_sample", {"pages": pages})
        return float(rows[0][0]), {str(r[1]): int(r[2]) for r in rows if r[1] is not None}

    async def table_estimates(self) -> dict[str, int | None]:
        """The planner's row estimates of ``jobs`` and ``failed_jobs`` (None: never analyzed)."""
        with storage_errors("reading table estimates"):
            rows = await self._rows("dashboard_estimates")
        estimates: dict[str, int | None] = {"jobs": None, "failed_jobs": None}
        estimates.update({str(name): None if n is None else int(n) for name, n in rows})
        return estimates

    async def failed_page(self, *, queue: str | None, name: str | None, reason: str | None,
                          since: datetime | None, until: datetime | None,
                          after: tuple[datetime, uuid.UUID] | None, scan: int, limit: int) -> ScannedPage:
        """Failures newest first matching the filters, reading at most ``scan`` after ``after``."""
        params = {"queue": queue, "name": name, "reason": reason, "since": since, "until": until,
                  "after_at": after[0] if after else None, "after_id": str(after[1]) if after else None,
                  "scan": scan, "limit": limit}
        with storage_errors("listing failed jobs"):
            rows = await self._dicts("dashboard_failed_page", params)
        return _scanned_page(rows, ("last_at", "last_id"))

    async def job_failures(self, job_id: uuid.UUID, limit: int) -> list[dict[str, Any]]:
        """The failure records of one job id, newest first (a retried job keeps its id)."""
        with storage_errors(f"listing the failures of job {job_id}"):
            return await self._dicts("dashboard_job_failures", {"job_id": str(job_id), "limit": limit})

    async def jobs_page(self, *, queue: str | None, name: str | None, after: uuid.UUID | None,
                        scan: int, limit: int) -> ScannedPage:
        """Live jobs newest dispatch first matching the filters, reading at most ``scan`` after ``after``."""
        params = {"queue": queue, "name": name, "after_id": None if after is None else str(after),
                  "scan": scan, "limit": limit}
        with storage_errors("listing jobs"):
            rows = await self._dicts("dashboard_jobs_page", params)
        return _scanned_page(rows, ("last_id",))

    async def job_find(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        """One live job in full (envelope, attempts, state, lease), or None if it is not in ``jobs``."""
        with storage_errors(f"finding job {job_id}"):
            rows = await self._dicts("dashboard_job", {"job_id": str(job_id)})
        return rows[0] if rows else None

    async def listeners(self) -> list[Listener]:
        """The sessions listening on pgqueue's channel (running workers), longest connected first."""
        with storage_errors("listing listening workers"):
            return [Listener(*row) for row in await self._rows("dashboard_workers")]
