"""What a :class:`~pgqueue.Client` does besides dispatching and running workers: periodic jobs,
failed jobs, statistics, the workers registry and queue control (pause, limits, cancel, clear).

:class:`ClientOperations` is a base of ``Client`` (``pgqueue/client.py``), which provides its
settings and its stores; import ``Client`` from ``pgqueue`` (or ``pgqueue.client``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgqueue.config import ConnectionConfig, Settings
from pgqueue.control import (
    Rate,
    check_adaptive,
    check_aging,
    check_decrease,
    check_limits,
    check_partition_limits,
    rate_of,
)
from pgqueue.errors import QueueConfigurationError, QueueRetryError
from pgqueue.failed import FailedJobRepository
from pgqueue.jobs import Job, registered_jobs
from pgqueue.limits import partition_problem, queue_name_problem
from pgqueue.store import (
    CancelOutcome,
    JobStatsRow,
    PartitionStatus,
    QueueControl,
    QueueStats,
    RegisteredWorker,
    Store,
    Throughput,
)
from pgqueue.worker.scheduler import declared_schedules, registration, sync_arguments

__all__ = ["ClientOperations", "ScheduleInfo"]


class ClientOperations:
    """The operations of a client on its connections' databases (a base of :class:`~pgqueue.Client`)."""

    settings: Settings

    if TYPE_CHECKING:
        async def _store(self, connection: ConnectionConfig | None = None) -> Store: ...  # Client's

    # --------------------------------------------------------------- schedules
    async def schedules(self, connection: str | None = None) -> list[ScheduleInfo]:
        """The periodic jobs registered in this process for a connection, with their last enqueued
        tick (``pgqueue.schedule_ticks``) and next tick, both by the database clock."""
        config = self.settings.connection(connection)
        declared = declared_schedules(self._scheduled_jobs(config), config.name)
        if not declared:
            return []
        store = await self._store(config)
        found = {row.name: row for row in await store.schedule_ticks([s.job_name for _, s in declared])}
        listed = []
        for _, s in declared:
            row = found[s.job_name]
            next_tick, problem = None, None
            try:
                next_tick = s.next_tick(row.now)
            except Exception as exc:  # one schedule that cannot be computed does not hide the others
                problem = f"its next tick cannot be computed ({type(exc).__name__}: {exc})"
            listed.append(ScheduleInfo(name=s.job_name, expression=s.expression, timezone=s.timezone,
                                       catch_up=s.catch_up, args=dict(s.args), last_tick=row.last_tick,
                                       next_tick=next_tick, problem=problem))
        return listed

    async def sync_schedules(self, connection: str | None = None) -> list[ScheduleInfo]:
        """Register the periodic jobs registered in this process for a connection, with the template
        of their jobs, in ``pgqueue.schedules`` (``pgqueue.schedule_sync``); returns them as
        :meth:`schedules` does (without reading ``pgqueue.schedule_ticks``, which a producer may not).

        What a worker whose role may register schedules does when it starts; a worker whose role
        may not (``pgqueue_worker``) ticks what this registered. The role must be one that may
        enqueue (``pgqueue_producer``, or the owner): a registered template enqueues its job at
        every tick. Every schedule is checked (its args as a dispatch checks them) before any is
        registered: a :class:`~pgqueue.QueuePayloadError` or
        :class:`~pgqueue.QueueConfigurationError` naming the job registers nothing.
        """
        config = self.settings.connection(connection)
        declared = declared_schedules(self._scheduled_jobs(config), config.name)
        if not declared:
            return []
        registrations = [registration(job_type, schedule, config) for job_type, schedule in declared]
        store = await self._store(config)
        states = await store.register_schedules(*sync_arguments(registrations))
        return [ScheduleInfo(name=r.schedule.job_name, expression=state.expression, timezone=state.timezone,
                             catch_up=state.catch_up, args=dict(r.schedule.args), last_tick=state.last_tick,
                             next_tick=r.schedule.next_tick(state.now))
                for r, state in zip(registrations, states, strict=True)]

    # ------------------------------------------------------------- failed jobs
    async def failed(self, connection: str | None = None) -> FailedJobRepository:
        """The failed-jobs repository of a connection's database."""
        return FailedJobRepository(await self._store(self.settings.connection(connection)))

    async def retry_failed(self, failure_id: uuid.UUID | str, connection: str | None = None) -> uuid.UUID:
        """Put a failed job back (same id and envelope, attempts reset); returns the job id.

        Raises :class:`~pgqueue.QueueRetryError` for an unknown failure id or a passed deadline;
        the failure record then stays.
        """
        try:
            failure_id = uuid.UUID(str(failure_id))
        except ValueError:
            raise QueueRetryError(f"{failure_id!r} is not a failure id (a UUID, the id column of "
                                  "pgqueue.failed_jobs); nothing was retried") from None
        store = await self._store(self.settings.connection(connection))
        return await store.retry_failed(failure_id)

    async def retry_failed_all(self, queue: str | None = None, connection: str | None = None) -> int:
        """Retry every failure (of one queue, or all: None) still within its deadline; returns how many.

        A ``queue`` the queue-name rule refuses (``""`` among them) raises QueueConfigurationError.
        """
        if queue is not None:
            _checked_queue(queue, "nothing was retried")
        store = await self._store(self.settings.connection(connection))
        return await store.retry_failed_all(queue)

    # ------------------------------------------------------------ operations
    async def stats(self, connection: str | None = None) -> list[QueueStats]:
        """Per-queue counts from ``pgqueue.queue_stats``."""
        store = await self._store(self.settings.connection(connection))
        return await store.queue_stats()

    async def throughput(self, windows: Sequence[int] = (1, 5, 15), connection: str | None = None,
                         ) -> list[Throughput]:
        """Outcomes per queue over the last N minutes for each N in ``windows`` (the current minute
        and the N - 1 before it), from the history ``pgqueue.job_stats``; queues with none are absent.

        Raises :class:`~pgqueue.QueueConfigurationError` for a window that is not a whole number of
        minutes from 1 to 10080 (7 days).
        """
        wanted = list(windows)
        if not wanted or any(isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 10080 for w in wanted):
            raise QueueConfigurationError(f"throughput windows must be whole numbers of minutes from 1 to 10080, "
                                          f"got {windows!r}")
        store = await self._store(self.settings.connection(connection))
        return await store.throughput(sorted(set(wanted)))

    async def history(self, *, queue: str | None = None, name: str | None = None, since: datetime | None = None,
                      until: datetime | None = None, limit: int = 10000,
                      connection: str | None = None) -> list[JobStatsRow]:
        """The per-minute history ``pgqueue.job_stats`` (shards summed), oldest minute first: outcome
        counts, handler durations and queue latencies per queue and job name, filtered by queue, job
        name and ``since <= minute < until`` (aware datetimes; None: no bound), at most ``limit`` rows.
        """
        for bound, label in ((since, "since"), (until, "until")):
            if bound is not None and (not isinstance(bound, datetime) or bound.tzinfo is None):
                raise QueueConfigurationError(f"history {label} must be a timezone-aware datetime, got {bound!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise QueueConfigurationError(f"history limit must be an integer >= 1, got {limit!r}")
        if queue is not None:
            _checked_queue(queue, "the history was not read", what="history queue filter: ")
        store = await self._store(self.settings.connection(connection))
        return await store.job_stats(queue=queue, name=name, since=since, until=until, limit=limit)

    async def listening_workers(self, connection: str | None = None) -> int:
        """How many workers LISTEN on the connection's database (sessions listening on pgqueue's channels)."""
        store = await self._store(self.settings.connection(connection))
        return await store.listening_workers()

    async def clear(self, queue: str | None = None, connection: str | None = None) -> int:
        """Remove ready, delayed and reserved jobs of a queue (None: the connection's queue).

        A name the queue-name rule refuses (``""`` among them) raises QueueConfigurationError
        and removes nothing.
        """
        config = self.settings.connection(connection)
        name = _checked_queue(config.queue if queue is None else queue, "nothing was removed")
        return await (await self._store(config)).clear(name)

    # ---------------------------------------------------------------- control
    async def cancel(self, job_id: uuid.UUID | str, connection: str | None = None) -> CancelOutcome:
        """Cancel a job: it is removed and recorded in failed_jobs with reason ``cancelled``.

        Returns ``"cancelled"`` (it was waiting), ``"cancelled_running"`` (it was reserved: its
        worker cancels the handler within milliseconds, and any later ack, release or failure of
        that attempt is refused), or, changing nothing, ``"already_cancelled"``,
        ``"already_failed"`` or ``"not_found"`` (unknown, or finished: acked jobs leave no row).
        """
        try:
            job_id = job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id))
        except ValueError:
            raise QueueConfigurationError(f"{job_id!r} is not a job id (a UUID, as dispatch returned it); "
                                          "nothing was cancelled") from None
        store = await self._store(self.settings.connection(connection))
        return await store.cancel(job_id)

    async def pause(self, queue: str | None = None, connection: str | None = None) -> bool:
        """Stop every worker (every host) reserving from a queue; running jobs finish, dispatch goes on.

        Stored in the database: workers started later honour it too. Returns False if the queue
        was already paused. ``queue`` None: the connection's queue; a name the queue-name rule
        refuses (``""`` among them) raises QueueConfigurationError.
        """
        config = self.settings.connection(connection)
        name = _checked_queue(config.queue if queue is None else queue, "nothing was changed")
        return await (await self._store(config)).pause(name)

    async def resume(self, queue: str | None = None, connection: str | None = None) -> bool:
        """Let workers reserve from a paused queue again (idle ones wake at once); False if it was not paused.

        ``queue`` None: the connection's queue; a name the queue-name rule refuses raises QueueConfigurationError.
        """
        config = self.settings.connection(connection)
        name = _checked_queue(config.queue if queue is None else queue, "nothing was changed")
        return await (await self._store(config)).resume(name)

    async def set_limits(self, queue: str | None = None, *, concurrency: int | None = None,  # noqa: PLR0913  # one keyword per limit
                         rate_limit: int | None = None, rate_period: float | None = None,
                         burst: int | None = None, per_partition_concurrency: int | None = None,
                         per_partition_rate: Rate | None = None, per_partition_burst: int | None = None,
                         fair: bool | None = None, adaptive: tuple[int, int] | None = None,
                         adaptive_decrease: float | None = None,
                         per_partition_adaptive: tuple[int, int] | None = None,
                         connection: str | None = None) -> None:
        """Set a queue's global limits, enforced by the database for all workers on all hosts.

        ``concurrency``: at most this many jobs of the queue reserved at once; ``rate_limit`` per
        ``rate_period`` seconds: a token bucket refilled at that rate, holding at most ``burst``
        tokens (None: ``rate_limit``, the rate per period). One reservation takes up to
        min(free slots, tokens) jobs; any window of T seconds sees at most
        ``rate_limit * T / rate_period + burst`` reservations. None clears a limit. Takes
        effect live. ``queue`` None: the connection's queue; a name the queue-name rule refuses
        raises QueueConfigurationError.

        Issue 28, partitions: ``per_partition_concurrency`` and ``per_partition_rate`` (``"10/s"`` or
        ``(10, 1.0)``, with ``per_partition_burst``) apply to each partition of the queue on its own;
        ``fair=True`` serves its partitions in turn (by weight), with or without limits; without it,
        limits alone serve the queue in due order, each partition within its own. These four are left as they
        are unless one of them is given; then all four are set (None clears). See
        :meth:`set_partition_limit` for one partition's override.

        ``adaptive=(min, max)`` makes the concurrency limit adaptive (AIMD): a handler's backpressure
        (:class:`~pgqueue.Backpressure`, ``context.backpressure()``) halves it, never below ``min``; each
        window of as many acks as the current limit grows it by one, never above ``max``. It starts at
        ``concurrency`` (clamped into the bounds), or at ``min``. None (the default): not adaptive.
        ``adaptive_decrease``: what one backpressure report multiplies the limit by (above 0, below 1;
        None: :data:`~pgqueue.DEFAULT_ADAPTIVE_DECREASE`, 0.9); a cut leaves ``floor(limit * factor)``,
        at least one less, and applies to the queue's adaptive partitions too.

        ``per_partition_adaptive=(min, max)`` makes each partition's concurrency limit adaptive instead
        (one of the partition values above): backpressure from a job of a partition cuts that
        partition's limit, not the queue's, and acks of its jobs grow it; a partition starts at
        ``per_partition_concurrency`` (clamped; None: where partitions stand, or ``min``). A partition
        with a fixed override (:meth:`set_partition_limit` with a ``concurrency``) keeps it.
        """
        check_limits(concurrency, rate_limit, rate_period, burst)
        check_adaptive(adaptive)
        check_adaptive(per_partition_adaptive)
        check_decrease(adaptive_decrease)
        partitioned = any(v is not None for v in (per_partition_concurrency, per_partition_rate,
                                                  per_partition_burst, fair, per_partition_adaptive))
        count, period = rate_of(per_partition_rate)
        if partitioned:
            check_partition_limits(per_partition_concurrency, count, period, per_partition_burst, None)
        config = self.settings.connection(connection)
        name = _checked_queue(config.queue if queue is None else queue, "the limits were not changed")
        store = await self._store(config)
        await store.set_limits(name, concurrency, rate_limit, None if rate_period is None else float(rate_period),
                               burst, None if adaptive is None else (adaptive[0], adaptive[1]),
                               None if adaptive_decrease is None else float(adaptive_decrease))
        if partitioned:
            await store.set_partition_limits(name, per_partition_concurrency, count, period, per_partition_burst,
                                             bool(fair), None if per_partition_adaptive is None
                                             else (per_partition_adaptive[0], per_partition_adaptive[1]))

    async def set_aging(self, queue: str | None, seconds: float | None, *, connection: str | None = None) -> None:
        """Set a queue's priority aging (issue 28), enforced by ``pgqueue.reserve`` for every worker,
        changed live: a ready job's priority counts one level higher per ``seconds`` it has waited
        since it became due, never above the queue's highest priority with ready jobs, and jobs
        are served by that effective priority, then the one due first. So a low-priority job runs
        at the latest once ``(top - its priority) x seconds`` have passed and the top-priority jobs
        due before it are served, however many higher ones keep arriving. ``seconds`` from 0.001 to
        31536000; None: strict priorities again. ``queue`` None: the connection's queue."""
        check_aging(seconds)
        config = self.settings.connection(connection)
        name = _checked_queue(config.queue if queue is None else queue, "the queue's aging was not changed")
        await (await self._store(config)).set_aging(name, None if seconds is None else float(seconds))

    async def set_partition_limit(self, queue: str, partition: str, *, concurrency: int | None = None,
                                  rate: Rate | None = None, burst: int | None = None, weight: int | None = None,
                                  adaptive: tuple[int, int] | None = None, connection: str | None = None) -> None:
        """Override the limits of one named partition of ``queue`` (issue 28): its own ``concurrency``
        and ``rate`` (``"100/s"`` or ``(100, 1.0)``, with ``burst``) instead of the queue's
        per-partition ones, and its fair share ``weight`` (1 to 1000; None: 1). All None removes the
        override. Enforced by ``pgqueue.reserve`` for every worker; takes effect live.

        ``adaptive=(min, max)``: the partition's own adaptive bounds (instead of the queue's
        ``per_partition_adaptive``, or without them): its limit starts at ``concurrency`` (or where it
        stands) clamped into them and moves with its jobs' backpressure and acks. None: not its own (a
        ``concurrency`` given is then a fixed override; without one, the queue's bounds apply, if any)."""
        count, period = rate_of(rate)
        check_partition_limits(concurrency, count, period, burst, weight)
        check_adaptive(adaptive)
        config = self.settings.connection(connection)
        name = _checked_queue(queue, "the limits were not changed")
        problem = partition_problem(partition)
        if problem is not None:
            raise QueueConfigurationError(f"{problem}; the limits were not changed")
        await (await self._store(config)).set_partition_limit(
            name, partition, concurrency, count, period, burst, weight,
            None if adaptive is None else (adaptive[0], adaptive[1]))

    async def partitions(self, queue: str, *, limit: int = 100, connection: str | None = None) -> list[PartitionStatus]:
        """The partitions of ``queue`` with jobs or an override, busiest first (at most ``limit``): jobs
        running, waiting and delayed, the limits that apply and the weight (``pgqueue.partition_status``)."""
        config = self.settings.connection(connection)
        name = _checked_queue(queue, "nothing was read")
        return await (await self._store(config)).partition_status(name, limit)

    async def controls(self, connection: str | None = None) -> list[QueueControl]:
        """The controls set on queues (paused, limits), by queue name; queues never controlled are absent."""
        store = await self._store(self.settings.connection(connection))
        return await store.queue_controls()

    async def workers(self, connection: str | None = None) -> list[RegisteredWorker]:
        """The workers registered in ``pgqueue.workers``, longest running first: who each is,
        its last heartbeat, whether it is gone (stale), and the jobs it holds."""
        store = await self._store(self.settings.connection(connection))
        return await store.registered_workers()


    def _scheduled_jobs(self, config: ConnectionConfig) -> list[type[Job]]:
        """The registered periodic jobs whose connection (the job's, else the default) is ``config``."""
        default = self.settings.connection(None).name
        return [job_type for job_type in registered_jobs().values()
                if getattr(job_type, "schedule", None) is not None
                and (job_type.connection or default) == config.name]



def _checked_queue(name: object, consequence: str, *, what: str = "") -> str:
    """``name`` if the queue-name rule accepts it, else QueueConfigurationError with the rule's message."""
    problem = queue_name_problem(name)
    if problem is not None:
        raise QueueConfigurationError(f"{what}{problem}; {consequence}")
    return str(name)


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A periodic job as ``Client.schedules()`` and ``pgqueue schedule:list`` show it."""

    name: str
    expression: str
    timezone: str
    catch_up: int
    args: dict[str, Any]
    last_tick: datetime | None
    #: None when it cannot be computed (then ``problem`` says why).
    next_tick: datetime | None
    #: What is wrong with this schedule (its next tick cannot be computed), or None.
    problem: str | None = None

    def to_data(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 strings."""
        return {"name": self.name, "expression": self.expression, "timezone": self.timezone,
                "catch_up": self.catch_up, "args": self.args,
                "last_tick": None if self.last_tick is None else self.last_tick.isoformat(),
                "next_tick": None if self.next_tick is None else self.next_tick.isoformat(),
                "problem": self.problem}
