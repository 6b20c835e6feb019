"""The dashboard's reads (pgqueue.dashboard): each bounded (capped counts, samples, keyset pages
over a bounded scan), so a page costs the same with a million jobs as with ten."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb

from pgqueue.resources import query
from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """One queue's row of ``sql/queries/dashboard_queues.sql``: counts read from bounded index ranges.

    Each count reads at most ``cap + 1`` rows; a ``*_capped`` flag says the count stopped there,
    so the number is a lower bound ("more than cap"). ``due_capped`` covers ``ready`` and
    ``expired``, ``later_capped`` covers ``delayed`` and ``reserved``, ``blocked_capped`` covers
    ``blocked`` (waiting for parents or a batch, issue 26; not counted as delayed).
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
    blocked: int = 0
    blocked_capped: bool = False


@dataclass(frozen=True, slots=True)
class ScannedPage:
    """A page read by a bounded keyset scan (``dashboard_failed_page``, ``dashboard_jobs_page``,
    ``dashboard_jobs_search``).

    ``rows`` are the matching rows (dicts, newest first); ``scanned`` how many rows after the
    cursor were read to find them; ``last`` the keyset position of the last row read, from which
    the next page continues when the scan stopped before the page filled (None if none was read,
    or if the page is full: the next one continues from its last row).
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



@dataclass(frozen=True, slots=True)
class JobSearch:
    """The dashboard's search of live jobs (``pgqueue.jobs_matching``); None: any."""

    queue: str | None = None
    #: A part of the job name, case-insensitive.
    name: str | None = None
    #: What the args must contain (jsonb containment).
    args: dict[str, Any] | None = None
    #: ready, delayed, reserved or expired.
    state: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def params(self) -> dict[str, Any]:
        """The statement parameters."""
        return {"queue": self.queue, "name": self.name, "args": None if self.args is None else Jsonb(self.args),
                "state": self.state, "since": self.since, "until": self.until}


@dataclass(frozen=True, slots=True)
class FailureSearch:
    """The dashboard's filters of failed jobs (queue, exact job name, reason, failed_at range); None: any."""

    queue: str | None = None
    name: str | None = None
    reason: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def params(self) -> dict[str, Any]:
        """The statement parameters."""
        return {"queue": self.queue, "name": self.name, "reason": self.reason, "since": self.since,
                "until": self.until}


@dataclass(frozen=True, slots=True)
class AttemptHistory:
    """The newest failed attempts of one job (``dashboard_job_attempts``) and how many it has.

    ``rows`` are dicts of attempt, failed_at, reason, exception, message (its first 1,000
    characters, ``message_cut`` when longer), traceback (its last 4,000, ``traceback_cut`` when
    longer), worker and duration, newest first. ``total`` counts every attempt kept, up to the
    count cap asked for (so ``total - len(rows)`` were not read).
    """

    rows: list[dict[str, Any]]
    total: int


def _scanned_page(rows: list[dict[str, Any]], last_columns: tuple[str, ...]) -> ScannedPage:
    """Split the rows of a bounded page query: the matches, and the scan's extent on every row."""
    if not rows:
        return ScannedPage([], 0, None)
    first = rows[0]
    last = None if first[last_columns[0]] is None else tuple(first[c] for c in last_columns)
    extra = {"scanned", *last_columns}
    matches = [{k: v for k, v in row.items() if k not in extra} for row in rows if row["id"] is not None]
    return ScannedPage(matches, int(first["scanned"]), last)


def _windowed_page(rows: list[dict[str, Any]], last_columns: tuple[str, ...]) -> ScannedPage:
    """Split the rows of a page query that reads its window no further than its last match
    (``dashboard_jobs_search``, ``dashboard_failed_page``): the matches, each with ``n``, its place
    in the window, and, when the page is not full, one more row (null id) with how many rows the
    window held and its last position."""
    extra = {"n", "scanned", *last_columns}
    matches = [{k: v for k, v in row.items() if k not in extra} for row in rows if row["id"] is not None]
    extent = [row for row in rows if row["id"] is None]
    if not extent:  # a full page: the window was read up to its last match
        return ScannedPage(matches, int(rows[-1]["n"]), None)
    last = tuple(extent[0][c] for c in last_columns)
    return ScannedPage(matches, int(extent[0]["scanned"]), None if last[0] is None else last)


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

    async def queue_sample(self, pages: int) -> tuple[float, dict[str, tuple[int, int, int, int, int]]]:
        """The job states found on a random sample of about ``pages`` pages of ``pgqueue.jobs``.

        Returns the sampled percentage and, per queue seen, (ready, delayed, blocked, reserved, expired)
        in the sample: divide by ``percent / 100`` to estimate the table's counts.
        """
        with storage_errors("sampling queue counts"):
            rows = await self._rows("dashboard_queue_sample", {"pages": pages})
        return float(rows[0][0]), {str(r[1]): (int(r[2]), int(r[3]), int(r[4]), int(r[5]), int(r[6]))
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
        """Failures newest first matching the filters, reading at most ``scan`` after ``after`` (and
        no further than the page's last match)."""
        params = {"queue": queue, "name": name, "reason": reason, "since": since, "until": until,
                  "after_at": after[0] if after else None, "after_id": str(after[1]) if after else None,
                  "scan": scan, "limit": limit}
        with storage_errors("listing failed jobs"):
            rows = await self._dicts("dashboard_failed_page", params)
        return _windowed_page(rows, ("last_at", "last_id"))

    async def job_failures(self, job_id: uuid.UUID, limit: int) -> list[dict[str, Any]]:
        """The failure records of one job id, newest first (a retried job keeps its id)."""
        with storage_errors(f"listing the failures of job {job_id}"):
            return await self._dicts("dashboard_job_failures", {"job_id": str(job_id), "limit": limit})

    async def job_attempt_history(self, job_id: uuid.UUID, limit: int, count_cap: int) -> AttemptHistory:
        """The ``limit`` newest failed attempts of a job (``pgqueue.attempt_failures``, kept across
        retries and ``retry_failed``), trimmed for a page, and how many it has (up to ``count_cap``)."""
        with storage_errors(f"listing the failed attempts of job {job_id}"):
            rows = await self._dicts("dashboard_job_attempts",
                                     {"job_id": str(job_id), "limit": limit, "count_cap": count_cap})
        total = int(rows[0].pop("total")) if rows else 0
        for row in rows[1:]:
            row.pop("total")
        return AttemptHistory(rows, max(total, len(rows)))

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

    # Search and bulk actions (bounded batches), table sizes, queues with history.
    async def table_pages(self) -> dict[str, int]:
        """The size in pages of ``jobs`` and ``failed_jobs`` (what an exact count of either reads)."""
        with storage_errors("reading table sizes"):
            rows = await self._rows("dashboard_table_pages")
        pages = {"jobs": 0, "failed_jobs": 0}
        pages.update({str(name): int(n) for name, n in rows})
        return pages

    async def jobs_search(self, search: JobSearch, *, after: uuid.UUID | None, scan: int, limit: int) -> ScannedPage:
        """Live jobs newest dispatch first matching ``search``, reading at most ``scan`` after ``after``.

        The window is read in order and left at the ``limit``-th match (a page of a common match
        reads a page's worth of rows); only a window holding fewer is read to its end, to say how far."""
        params = {**search.params(), "after_id": None if after is None else str(after), "scan": scan, "limit": limit}
        with storage_errors("searching jobs"):
            rows = await self._dicts("dashboard_jobs_search", params)
        return _windowed_page(rows, ("last_id",))

    async def jobs_matching_count(self, search: JobSearch, cap: int) -> tuple[int, int]:
        """How many live jobs match ``search`` (up to ``cap + 1``) and how many of those are reserved."""
        with storage_errors("counting the jobs that match"):
            row = await self._row("jobs_matching_count", {**search.params(), "cap": cap})
        assert row is not None
        return int(row[0]), int(row[1])

    async def failed_matching_count(self, search: FailureSearch, cap: int) -> tuple[int, int]:
        """How many failures match ``search`` (up to ``cap + 1``) and how many of those may be retried."""
        with storage_errors("counting the failures that match"):
            row = await self._row("failed_matching_count", {**search.params(), "cap": cap})
        assert row is not None
        return int(row[0]), int(row[1])

    async def jobs_bulk(self, action: Literal["cancel", "delete"], search: JobSearch, ids: list[uuid.UUID] | None,
                        batch: int) -> int:
        """One bounded batch: cancel (``cancel_matching``) or delete (``delete_matching``, waiting jobs
        only) at most ``batch`` jobs matching ``search`` (and among ``ids`` if given); how many."""
        statement = "cancel_matching" if action == "cancel" else "delete_matching"
        with storage_errors(f"{'cancelling' if action == 'cancel' else 'deleting'} the jobs that match"):
            return int(await self._value(statement, {**search.params(), "ids": ids, "batch": batch}) or 0)

    async def failed_bulk(self, action: Literal["retry", "forget"], search: FailureSearch, batch: int) -> int:
        """One bounded batch: retry (``retry_failed_matching``) or forget (``forget_failed_matching``)
        at most ``batch`` failures matching ``search``; how many."""
        statement = "retry_failed_matching" if action == "retry" else "forget_failed_matching"
        with storage_errors(f"{'retrying' if action == 'retry' else 'forgetting'} the failures that match"):
            return int(await self._value(statement, {**search.params(), "batch": batch}) or 0)

    async def history_queues(self, minutes: int) -> list[str]:
        """The queues with outcomes in ``job_stats`` in the last ``minutes`` minutes, by name."""
        with storage_errors("listing the queues with history"):
            return [str(row[0]) for row in await self._rows("dashboard_history_queues", {"minutes": minutes})]

    # issue 27: workflows (bounded like the jobs list: keyset pages over a bounded window).
    async def workflows_page(self, *, state: str | None, name: str | None, after: uuid.UUID | None,
                             scan: int, limit: int) -> ScannedPage:
        """Live workflows newest dispatch first, of ``state`` (a state of ``pgqueue.workflows``) and with
        ``name`` in their name, reading at most ``scan`` jobs after ``after`` and no further than the
        page's last match."""
        params = {"state": state, "name": name, "after_id": None if after is None else str(after),
                  "scan": scan, "limit": limit}
        with storage_errors("listing workflows"):
            rows = await self._dicts("dashboard_workflows_page", params)
        return _windowed_page(rows, ("last_id",))

    async def workflows_ended_page(self, *, name: str | None, after: uuid.UUID | None, scan: int,
                                   limit: int) -> ScannedPage:
        """Ended workflows whose checkpoints are kept, newest dispatch first, with their outcome; at most
        ``scan`` workflows after ``after`` are read."""
        params = {"name": name, "after_id": None if after is None else str(after), "scan": scan, "limit": limit}
        with storage_errors("listing ended workflows"):
            rows = await self._dicts("dashboard_workflows_ended", params)
        return _windowed_page(rows, ("last_id",))

    async def workflow_find(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        """One workflow, live (its job and state) or ended and kept (its outcome); None: no such workflow."""
        with storage_errors(f"finding workflow {job_id}"):
            rows = await self._dicts("dashboard_workflow", {"job_id": str(job_id)})
        return rows[0] if rows else None

    async def workflow_timeline(self, job_id: uuid.UUID, after_seq: int, limit: int) -> list[dict[str, Any]]:
        """At most ``limit`` checkpoints of a workflow after ``after_seq``, in seq order, for its timeline."""
        with storage_errors(f"reading the steps of workflow {job_id}"):
            return await self._dicts("dashboard_workflow_steps",
                                     {"job_id": str(job_id), "after_seq": after_seq, "limit": limit})

    async def workflow_of_child(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        """The workflow that dispatched ``job_id`` as a child (its id, name, and the step's seq and name)."""
        with storage_errors(f"finding the workflow of job {job_id}"):
            rows = await self._dicts("dashboard_job_parent_workflow", {"job_id": str(job_id)})
        return rows[0] if rows else None
