"""A worker's options, validated once (:class:`WorkerOptions`), and where its own sessions go (:func:`sessions`).

``Client.worker``, :class:`~pgqueue.worker.Worker` and ``pgqueue queue:work`` all take a
:class:`WorkerOptions` (or its fields as keyword arguments): a bad value is refused when the
options are made, naming the field, before anything connects.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, TypedDict

from pgqueue.config import ConnectionConfig
from pgqueue.errors import QueueConfigurationError
from pgqueue.jobs import Job
from pgqueue.limits import MAX_LEASE_SECONDS, MAX_SQL_INTEGER, MIN_LEASE_SECONDS, queue_name_problem
from pgqueue.worker.executor import Scope
from pgqueue.worker.instruments import Instruments
from pgqueue.worker.maintenance import HISTORY_RETENTION, check_seconds

logger = logging.getLogger("pgqueue.worker")

__all__ = ["Sessions", "WorkerKeywords", "WorkerOptions", "default_prefetch", "sessions"]


def default_prefetch(concurrency: int) -> int:
    """The default ``prefetch`` of a worker: ten times its concurrency, at least 50 and at most
    500 (measured: see the README's "Prefetch")."""
    return min(500, max(50, 10 * concurrency))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """How a worker runs: every option of ``Client.worker``, ``Worker`` and ``queue:work``, checked
    when made (:class:`~pgqueue.QueueConfigurationError` naming the field). Immutable; derive a
    variant with :func:`dataclasses.replace` (checked again).

    Attributes:
        queues: queues served, in priority order (None: the connection's queue). While ``high`` has
            ready jobs, ``default`` waits (a steady stream on ``high`` can starve ``default``).
        concurrency: handlers running at once.
        poll_interval: the longest an idle worker sleeps without a notification (seconds);
            it normally sleeps until the next delayed job is due.
        drain_timeout: on stop, how long running handlers may take to finish (seconds).
        lease: how long a reservation lasts, in seconds (default: the connection's).
        timeout: cap on every job's timeout (default: none beyond the envelope's).
        scope: ``scope(context)`` returns an async context manager entered around each
            execution, for per-job resources (a database session, a tracing span, ...).
        ack_flush_interval / ack_batch_size: the completer's batching (seconds / acks).
        listen: LISTEN for notifications (False: poll every ``poll_interval``). A notification is a
            hint: a wake-up makes the worker reserve (the reservation decides), a cancel stops a
            handler only once ``pgqueue.cancelled`` confirms it (see ``cancellation.py``).
        listen_dsn: where to LISTEN (default: the connection's listen_dsn, else its dsn).
        prefetch: jobs reserved beyond the free slots into a local buffer, so one reservation
            (one round trip, one commit) serves many more jobs than the slots that freed
            (default :func:`default_prefetch`: ``min(500, max(50, 10 * concurrency))``; 0: reserve
            only what the free slots take). A worker holds at most ``concurrency + prefetch``
            reservations; the buffer is refilled once it is down to half. Buffered jobs are
            leased: the heartbeat renews them, one whose lease is about to end or was lost is
            not started, a cancelled one is dropped, and on stop they are handed back unstarted
            (their attempt does not count). A paused queue's buffered jobs still run (at most
            ``prefetch``), and a newly dispatched job of higher priority waits behind them.
        fetch_cooldown: with ``prefetch=0`` and a backlog, how long to wait for more slots to
            free up so the next reservation is a batch rather than a single job (seconds).
        maintenance_interval: how often the worker checks whether ``pgqueue.jobs`` needs a
            VACUUM (seconds, default 2; None or 0: never). It vacuums when the table has
            at least its autovacuum threshold of dead tuples and autovacuum does not run on it
            (off server-wide, or ``autovacuum_enabled = false`` on the table) or is lagging
            (no VACUUM or autovacuum in the last ``vacuum_grace`` seconds). One worker of the
            database at a time (advisory lock ``maintenance.VACUUM_LOCK_KEY``). The role must
            own the table (or the database; PostgreSQL 17+: or hold MAINTAIN on it); otherwise
            the worker warns once and stops maintaining. Behind a transaction pooler it needs a
            direct ``listen_dsn``, else it is off.
        vacuum_grace: with autovacuum on, how long after the last VACUUM or autovacuum the
            worker defers to autovacuum (seconds, default 60).
        heartbeat: renew the leases of running handlers (default: the connection's
            ``heartbeat``, on unless configured off). Every ``(lease - lease_margin) / 3``
            seconds one fenced statement renews all of them to ``lease`` from then, so a
            job may run as long as its ``timeout`` while ``lease`` only decides how soon a
            crashed worker's jobs run again. A handler whose lease cannot be renewed (database
            unreachable) is stopped ``lease_margin`` before its lease ends; one whose renewal
            the fence refuses (the lease was lost) is stopped at once; both count as ``lost``.
            Off: a handler's time limit is also ``lease_margin`` inside its lease, which only
            ``context.extend`` moves.
        threads: the thread pool that runs sync handlers (a plain ``def handle``), at most this
            many at once (default: ``min(concurrency, 32)``). A sync handler waiting for a
            thread holds one of the ``concurrency`` slots and its time limit runs.
        history_retention: how long the per-minute history ``pgqueue.job_stats`` is kept (seconds,
            default 7 days); the table maintenance prunes older rows in batches.
        keep_completed: keep a copy of each job this worker acks in ``pgqueue.completed_jobs``
            (args, attempts, timings), for this many seconds (default None: off). Written by the
            ack's own statement; pruned by the table maintenance.
        instruments: what the worker reports for metrics (:class:`pgqueue.worker.instruments.Instruments`;
            default: nothing). Pass a :class:`~pgqueue.worker.instruments.Recorder` and serve it with
            :func:`pgqueue.metrics.serve` (the ``metrics`` extra), as ``queue:work --metrics-port`` does.
        metrics_interval: with a Recorder, how often queue depths are sampled from the database
            (seconds, default 15; None or 0: never). One worker of the database samples (advisory
            lock ``depth.DEPTH_LOCK_KEY``, on its own direct connection); the others export no depth.
        schedules: enqueue the due ticks of periodic jobs (default True: those registered in this
            process whose connection is this one or unset; ``Client.worker`` passes the list that
            resolves to this connection; False: none). Every worker may: each tick is enqueued once.
    """

    queues: Sequence[str] | None = None
    concurrency: int = 10
    poll_interval: float = 5.0
    drain_timeout: float = 30.0
    lease: float | None = None
    timeout: float | None = None
    scope: Scope | None = None
    ack_flush_interval: float = 0.005
    ack_batch_size: int = 500
    listen: bool = True
    listen_dsn: str | None = None
    prefetch: int | None = None
    fetch_cooldown: float = 0.002
    maintenance_interval: float | None = 2.0
    vacuum_grace: float = 60.0
    heartbeat: bool | None = None
    threads: int | None = None
    history_retention: float = HISTORY_RETENTION
    keep_completed: float | None = None
    instruments: Instruments | None = None
    metrics_interval: float | None = 15.0
    schedules: bool | Sequence[type[Job]] = True

    def __post_init__(self) -> None:
        self._check_counts()
        self._check_seconds()
        if self.queues is not None:
            if isinstance(self.queues, str) or not self.queues:
                raise QueueConfigurationError(f"worker queues must be a non-empty list of queue names, "
                                              f"got {self.queues!r}")
            for name in self.queues:
                problem = queue_name_problem(name)
                if problem is not None:  # no job can be on such a queue: the worker would idle forever
                    raise QueueConfigurationError(f"worker queues: {problem}")
            self._set("queues", tuple(dict.fromkeys(self.queues)))
        if not isinstance(self.schedules, bool):
            self._set("schedules", tuple(self.schedules))
        if self.scope is not None and not callable(self.scope):
            raise QueueConfigurationError(f"scope must be a callable returning an async context manager (or "
                                          f"None), got {self.scope!r}")

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # normalising a frozen instance while it is made

    def _check_counts(self) -> None:
        if not _whole(self.concurrency, 1):
            raise QueueConfigurationError(f"worker concurrency must be an integer >= 1, got {self.concurrency!r}")
        if self.prefetch is not None and not _whole(self.prefetch, 0):
            raise QueueConfigurationError(f"prefetch must be an integer >= 0 (or None: the default), "
                                          f"got {self.prefetch!r}")
        # One reservation asks for up to concurrency + prefetch jobs, an SQL integer.
        if self.concurrency + self.ahead > MAX_SQL_INTEGER:
            raise QueueConfigurationError(f"worker concurrency ({self.concurrency}) plus prefetch ({self.ahead}) "
                                          f"must be at most {MAX_SQL_INTEGER}, the most jobs one reservation can "
                                          "ask for")
        if self.threads is not None and not _whole(self.threads, 1):
            raise QueueConfigurationError(f"threads must be an integer >= 1 (or None: min(concurrency, 32)), "
                                          f"got {self.threads!r}")
        if not _whole(self.ack_batch_size, 1):
            raise QueueConfigurationError(f"ack_batch_size must be an integer >= 1, got {self.ack_batch_size!r}")

    def _check_seconds(self) -> None:
        for name in ("poll_interval", "timeout"):
            value = getattr(self, name)
            if (value is not None or name == "poll_interval") and not (
                    _number(value) and 0 < value < math.inf):
                raise QueueConfigurationError(f"{name} must be > 0 seconds and finite, got {value!r}")
        if self.lease is not None and not (_number(self.lease)
                                           and MIN_LEASE_SECONDS <= self.lease <= MAX_LEASE_SECONDS):  # NaN too
            raise QueueConfigurationError(f"lease must be from {MIN_LEASE_SECONDS:g} to {MAX_LEASE_SECONDS:.0f} "
                                          f"seconds (1 year), got {self.lease!r}")
        for name in ("drain_timeout", "ack_flush_interval", "fetch_cooldown", "vacuum_grace",
                     "history_retention"):
            self._set(name, check_seconds(getattr(self, name), name))
        for name, off in (("maintenance_interval", " (None or 0: no table maintenance)"),
                          ("metrics_interval", " (None or 0: no queue depth sampling)"),
                          ("keep_completed", " (None: off)")):
            if getattr(self, name) is not None:
                self._set(name, check_seconds(getattr(self, name), name, off))

    @property
    def ahead(self) -> int:
        """The jobs reserved beyond the free slots: ``prefetch``, or its default for ``concurrency``."""
        return default_prefetch(self.concurrency) if self.prefetch is None else self.prefetch

    @classmethod
    def of(cls, options: WorkerOptions | None = None, /, **keywords: Any) -> WorkerOptions:
        """``options`` (default: the defaults) with ``keywords`` replacing fields; an unknown keyword
        is refused by name."""
        unknown = sorted(set(keywords) - _FIELDS)
        if unknown:
            raise QueueConfigurationError(f"unknown worker option(s) {', '.join(map(repr, unknown))}; the options "
                                          f"are the fields of WorkerOptions: {', '.join(sorted(_FIELDS))}")
        if options is None:
            return cls(**keywords)
        return cls(**{**{name: getattr(options, name) for name in _FIELDS}, **keywords})


_FIELDS = frozenset(f.name for f in fields(WorkerOptions))


class WorkerKeywords(TypedDict, total=False):
    """:class:`WorkerOptions`' fields as keyword arguments (``Client.worker(concurrency=4)``); the
    fields' meaning is documented there."""

    queues: Sequence[str] | None
    concurrency: int
    poll_interval: float
    drain_timeout: float
    lease: float | None
    timeout: float | None
    scope: Scope | None
    ack_flush_interval: float
    ack_batch_size: int
    listen: bool
    listen_dsn: str | None
    prefetch: int | None
    fetch_cooldown: float
    maintenance_interval: float | None
    vacuum_grace: float
    heartbeat: bool | None
    threads: int | None
    history_retention: float
    keep_completed: float | None
    instruments: Instruments | None
    metrics_interval: float | None
    schedules: bool | Sequence[type[Job]]


def _whole(value: object, least: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= least


def _number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


@dataclass(frozen=True, slots=True)
class Sessions:
    """Where a worker's own sessions go (those a transaction pooler cannot carry)."""

    #: Whether the worker LISTENs (off behind a transaction pooler without a direct DSN).
    listen: bool
    #: The database the worker LISTENs on and samples queue depths on.
    direct_dsn: str
    #: Where the table maintenance VACUUMs (None: not at all, behind a pooler without a direct DSN).
    vacuum_dsn: str | None


def sessions(config: ConnectionConfig, options: WorkerOptions, dsn: str) -> Sessions:
    """Resolve where the worker's sessions go, once: a LISTEN and the VACUUM's session advisory lock
    need a session of their own, which a transaction pooler does not keep (the LISTEN would land on
    whichever server connection the pooler picks, and notifications be silently lost). Behind one
    without a direct DSN (``listen_dsn``) both are off, and the worker says so once."""
    direct = options.listen_dsn or config.listen_dsn
    # LISTEN (and sample) on the database this connection's jobs are enqueued in: its own DSN when
    # it has one, else the default one.
    direct_dsn = direct or config.dsn or dsn
    vacuum_dsn: str | None = direct if config.transaction_pooler and direct else config.dsn or dsn
    if not config.transaction_pooler or direct:
        return Sessions(options.listen, direct_dsn, vacuum_dsn)
    off = [what for what, on in ((f"LISTEN (the worker polls every {options.poll_interval:.1f}s)", options.listen),
                                 ("table maintenance (VACUUM of pgqueue.jobs when autovacuum does not keep up)",
                                  bool(options.maintenance_interval))) if on]
    if off:
        logger.warning("pgqueue: connection %r goes through a transaction pooler and has no listen_dsn: %s off; "
                       "set listen_dsn to a direct connection to PostgreSQL for instant wake-ups and table "
                       "maintenance", config.name, " and ".join(off) + (" are" if len(off) > 1 else " is"))
    return Sessions(False, direct_dsn, None)
