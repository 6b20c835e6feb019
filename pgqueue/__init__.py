"""pgqueue: a PostgreSQL-native job queue.

Define jobs (:class:`Job` or :func:`job`), dispatch them inside your own transaction,
run them with a :class:`~pgqueue.worker.Worker`, and inspect failures from SQL or Python.

The public API:

- :class:`Job`, :func:`job` (:class:`JobFactory`, :class:`FunctionJob`) — defining jobs;
  :class:`JobContext` — what a handler receives (:class:`SyncJobContext`: what a plain
  ``def handle`` receives, the same methods, blocking).
- :class:`Backoff` — retry delays.
- :class:`Client` — dispatch (``dispatch``, ``dispatch_many``), failed jobs, stats, workers; control
  (``cancel`` -> :data:`pgqueue.control.CancelOutcome`, ``pause``, ``resume``, ``set_limits``,
  ``controls`` -> :class:`QueueControl`; :func:`parse_rate` reads ``"100/s"``, :func:`format_rate`
  writes it);
  :func:`default_client` / :func:`set_default_client` — the one ``Job.dispatch`` uses.
- :class:`Worker`, :class:`WorkerOptions`, :class:`WorkerStats` — the worker (``await client.worker(...)``),
  its options (validated once) and its counts.
- :class:`FailedJob`, :class:`FailedJobRepository` — failure records.
- :class:`Settings`, :class:`ConnectionConfig`, :func:`load_settings`, :func:`normalize_dsn` — configuration;
  :func:`prepare_database` — the configured database, or the embedded one started and migrated.
- :class:`Envelope` — what dispatch stores.
- :class:`JobHandle` — what ``dispatch`` returns: the job's id, and its ``status()`` (a
  :class:`JobStatus` with every failed :class:`Attempt`) and ``result()`` (issue 26).
- :class:`Batch`, :class:`BatchState`, :class:`Group` — jobs that wait for jobs (issue 26):
  ``dispatch(job, after=[...])``, ``client.batch(jobs, then=callback)``, ``client.chain(...)``,
  ``client.group(...)``; a handler reads ``context.parent_results()`` and ``context.batch()``.
- :func:`workflow`, :class:`WorkflowContext` — durable workflows (issue 27): steps that run once,
  effects exactly once in ``context.transaction``, durable sleep and signals (``client.signal``),
  child jobs; :class:`WorkflowTimeout` and the other :class:`WorkflowError` subclasses.
- The errors: :class:`QueueError` and its subclasses.
"""

from pgqueue.backoff import Backoff
from pgqueue.client import Client, QueueStats, ScheduleInfo, default_client, set_default_client
from pgqueue.composition import Batch, BatchState, Group
from pgqueue.config import ConnectionConfig, Settings, load_settings, normalize_dsn
from pgqueue.context import JobContext, SyncJobContext
from pgqueue.control import (
    DEFAULT_ADAPTIVE_DECREASE,
    QueueControl,
    format_rate,
    parse_adaptive,
    parse_aging,
    parse_decrease,
    parse_rate,
)
from pgqueue.envelope import Envelope
from pgqueue.errors import (
    Backpressure,
    JobFailedError,
    JobResultTimeout,
    QueueConfigurationError,
    QueueDispatchError,
    QueueDuplicateError,
    QueueError,
    QueueLeaseError,
    QueuePayloadError,
    QueueResultError,
    QueueRetryError,
    QueueStorageError,
    WorkflowChildError,
    WorkflowDeterminismError,
    WorkflowError,
    WorkflowStepError,
    WorkflowTimeout,
)
from pgqueue.failed import FailedJob, FailedJobRepository
from pgqueue.handles import Attempt, JobHandle, JobStatus
from pgqueue.jobs import FunctionJob, Job, JobFactory, job, registered_jobs
from pgqueue.schedules import Schedule, schedule_of
from pgqueue.startup import prepare_database
from pgqueue.store import DebouncedDispatch, JobStatsRow, PartitionStatus, RegisteredWorker, Throughput, UniqueDispatch
from pgqueue.worker import Worker, WorkerOptions, WorkerStats
from pgqueue.workflow_job import WorkflowFactory, WorkflowJob, workflow
from pgqueue.workflows import WorkflowContext

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ADAPTIVE_DECREASE",
    "Attempt",
    "Backoff",
    "Backpressure",
    "Batch",
    "BatchState",
    "Client",
    "ConnectionConfig",
    "DebouncedDispatch",
    "Envelope",
    "FailedJob",
    "FailedJobRepository",
    "FunctionJob",
    "Group",
    "Job",
    "JobContext",
    "JobFactory",
    "JobFailedError",
    "JobHandle",
    "JobResultTimeout",
    "JobStatsRow",
    "JobStatus",
    "PartitionStatus",
    "QueueConfigurationError",
    "QueueControl",
    "QueueDispatchError",
    "QueueDuplicateError",
    "QueueError",
    "QueueLeaseError",
    "QueuePayloadError",
    "QueueResultError",
    "QueueRetryError",
    "QueueStats",
    "QueueStorageError",
    "RegisteredWorker",
    "Schedule",
    "ScheduleInfo",
    "Settings",
    "SyncJobContext",
    "Throughput",
    "UniqueDispatch",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "WorkflowChildError",
    "WorkflowContext",
    "WorkflowDeterminismError",
    "WorkflowError",
    "WorkflowFactory",
    "WorkflowJob",
    "WorkflowStepError",
    "WorkflowTimeout",
    "default_client",
    "format_rate",
    "job",
    "load_settings",
    "normalize_dsn",
    "parse_adaptive",
    "parse_aging",
    "parse_decrease",
    "parse_rate",
    "prepare_database",
    "registered_jobs",
    "schedule_of",
    "set_default_client",
    "workflow",
]
