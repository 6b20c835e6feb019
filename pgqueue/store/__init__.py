"""The store: one typed Python door per SQL statement pgqueue runs, a module per domain.

Every statement lives in ``sql/queries`` (most call a stored function of ``sql/functions``);
the store is the only package that reads them with :func:`pgqueue.resources.query`. It also
decides what a database error means (:mod:`pgqueue.store.errors`): methods used by people
(dispatch, failed jobs, statistics) raise :class:`~pgqueue.QueueError` subclasses naming what
was being done; methods on the worker's hot path (reserve, ack, release, fail, extend, next due)
let psycopg errors through, because the worker decides per SQLSTATE whether to retry
(:func:`pgqueue.store.errors.classify`).

A :class:`Store` works on one connection pool (one database); it is made of one class per
domain, each in its module:

- :mod:`~pgqueue.store.dispatch`: storing envelopes (plain, many, unique, debounced), on the pool or on a
  caller's session inside its transaction (:mod:`~pgqueue.store.sessions` unwraps it);
- :mod:`~pgqueue.store.schedules`: registering schedules and enqueuing their ticks;
- :mod:`~pgqueue.store.reservation`: reserve, ack, release, fail, snooze, extend, heartbeat
  (the worker's hot path) and a handler's transaction carrying its ack;
- :mod:`~pgqueue.store.failed`: the failure records;
- :mod:`~pgqueue.store.results`: results kept, every failed attempt kept, a job's state, progress;
- :mod:`~pgqueue.store.dependencies`: jobs enqueued with what they wait for (parents, a batch),
  their parents' results, a batch's progress and members, a job's family;
- :mod:`~pgqueue.store.workflows`: workflows' checkpoints, durable waits, children and signals (issue 27);
- :mod:`~pgqueue.store.control`: queue controls and status;
- :mod:`~pgqueue.store.maintenance`: table statistics, VACUUM, pruning;
- :mod:`~pgqueue.store.history`: ``pgqueue.job_stats`` read as rows, windows and buckets;
- :mod:`~pgqueue.store.dashboard`: the dashboard's bounded reads, its search and bulk actions;
- :mod:`~pgqueue.store.workers`: the workers registry, ``pgqueue.workers``;
- :mod:`~pgqueue.store.testing`: the stored jobs as ``pgqueue.testing`` asserts on them;
- :mod:`~pgqueue.store.migrations`: ``pgqueue.migrate``'s alembic bookkeeping (functions).

Statements that need a dedicated session (LISTEN, a session advisory lock, VACUUM) or the
caller's transaction are functions taking the connection, importable from here.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgqueue.store.control import (
    CancelOutcome,
    ControlStatements,
    PartitionDepth,
    PartitionStatus,
    QueueControl,
    QueueStats,
    partition_depths_on,
    queue_paused_on,
    queue_stats_on,
)
from pgqueue.store.dashboard import DashboardStatements, FailureSearch, JobSearch, Listener, QueueCounts, ScannedPage
from pgqueue.store.dependencies import BatchLink, BatchState, DependencyStatements, Link, Wait
from pgqueue.store.dispatch import UNIQUE_ATTEMPTS, DebouncedDispatch, DispatchStatements, UniqueDispatch
from pgqueue.store.failed import FailedStatements, record_failure_on
from pgqueue.store.history import HistoryStatements, JobStatsRow, Throughput, ThroughputBucket
from pgqueue.store.maintenance import (
    MaintenanceStatements,
    TableStatistics,
    try_vacuum_lock,
    vacuum_jobs,
    vacuum_unlock,
)
from pgqueue.store.migrations import (
    alembic_own_versions,
    alembic_own_versions_drop,
    alembic_user_versions,
    alembic_user_versions_delete,
    alembic_user_versions_insert,
    pgqueue_schema_exists,
)
from pgqueue.store.reservation import (
    AckBatch,
    Reservation,
    ReservationStatements,
    ack_in_transaction,
    ack_in_transaction_sync,
    begin_transaction,
    begin_transaction_sync,
    listen,
    listen_cancel,
)
from pgqueue.store.results import ResultStatements
from pgqueue.store.schedules import ScheduleRow, ScheduleState, ScheduleStatements
from pgqueue.store.testing import DispatchedJob, TestingStatements, dispatched_jobs_on_sync
from pgqueue.store.workers import RegisteredWorker, WorkerIdentity, WorkerStatements
from pgqueue.store.workflows import (
    WORKFLOW_COUNT_CAP,
    WORKFLOW_STATES,
    WorkflowCounts,
    WorkflowStatements,
    WorkflowStep,
)


class Store(DispatchStatements, ScheduleStatements, ReservationStatements, FailedStatements, ControlStatements,
            MaintenanceStatements, HistoryStatements, DashboardStatements, TestingStatements,
            WorkerStatements, ResultStatements, DependencyStatements, WorkflowStatements):
    """Typed access to pgqueue's tables through one connection pool (autocommit connections)."""

    __slots__ = ("_pool",)

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool


__all__ = [
    "UNIQUE_ATTEMPTS",
    "WORKFLOW_COUNT_CAP",
    "WORKFLOW_STATES",
    "AckBatch",
    "BatchLink",
    "BatchState",
    "CancelOutcome",
    "DebouncedDispatch",
    "DispatchedJob",
    "FailureSearch",
    "JobSearch",
    "JobStatsRow",
    "Link",
    "Listener",
    "PartitionDepth",
    "PartitionStatus",
    "QueueControl",
    "QueueCounts",
    "QueueStats",
    "RegisteredWorker",
    "Reservation",
    "ScannedPage",
    "ScheduleRow",
    "ScheduleState",
    "Store",
    "TableStatistics",
    "Throughput",
    "ThroughputBucket",
    "UniqueDispatch",
    "Wait",
    "WorkerIdentity",
    "WorkflowCounts",
    "WorkflowStep",
    "ack_in_transaction",
    "ack_in_transaction_sync",
    "alembic_own_versions",
    "alembic_own_versions_drop",
    "alembic_user_versions",
    "alembic_user_versions_delete",
    "alembic_user_versions_insert",
    "begin_transaction",
    "begin_transaction_sync",
    "dispatched_jobs_on_sync",
    "listen",
    "listen_cancel",
    "partition_depths_on",
    "pgqueue_schema_exists",
    "queue_paused_on",
    "queue_stats_on",
    "record_failure_on",
    "try_vacuum_lock",
    "vacuum_jobs",
    "vacuum_unlock",
]
