"""The worker's instruments: what the fetcher, executor and completer report, for metrics.

A worker calls its :class:`Instruments` at a few points of a job's path (a batch reserved, a job
started, a job's outcome, a lease lost, a transient database error). The default does nothing;
:class:`Recorder` keeps plain counters and histogram buckets in memory — a dict lookup and an
integer add per call, no lock (one event loop) and no third-party code on the hot path — which
``pgqueue.metrics`` turns into Prometheus metrics when scraped.

Label values are bounded, because producers choose queue and job names: a job name this process
has not registered is recorded as :data:`UNREGISTERED` (it ran nothing; its name is in
``pgqueue.failed_jobs``), and past ``max_queues`` queues or ``max_job_names`` job names (:class:`LabelCap`)
further values are recorded as :data:`OTHER`. So neither the memory of a worker nor the series
of a scrape grow with what producers send.
"""

from __future__ import annotations

import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any

from pgqueue.errors import QueueConfigurationError
from pgqueue.jobs import lookup

#: Outcomes of an execution, as counted by :meth:`Instruments.outcome`.
OUTCOMES = ("succeeded", "retried", "snoozed", "failed", "cancelled", "lost", "backpressured")

#: Handler duration buckets (seconds): 1 ms to 5 minutes.
DURATION_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                                       10.0, 30.0, 60.0, 300.0)
#: Queue latency buckets (seconds): 1 ms to 1 hour.
LATENCY_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                                      60.0, 300.0, 900.0, 3600.0)
#: Reservation batch size buckets (jobs).
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)

#: The states of a queue's depth, as the ``pgqueue.queue_stats`` view counts them (blocked: waiting
#: for parents or a batch, issue 26, which the view counts as delayed).
DEPTH_STATES = ("ready", "delayed", "blocked", "reserved", "expired", "failed")

#: The label value that stands for every value past a label's cap (see :class:`LabelCap`).
OTHER = "other"
#: The ``job_name`` of a job whose name no job class of this process is registered under.
UNREGISTERED = "unregistered"
#: The ``job_name`` of a job whose envelope could not be decoded.
UNDECODABLE = "?"
#: Default caps: distinct ``queue`` and ``job_name`` label values per metric (the rest: :data:`OTHER`).
MAX_QUEUES = 200
MAX_JOB_NAMES = 500
#: Issue 28: per queue, the busiest partitions sampled with their own ``partition`` label value (the
#: rest summed under :data:`OTHER`), so any number of tenants makes at most this many + 1 series.
MAX_PARTITIONS = 20


def check_cap(value: object, what: str) -> int:
    """A label cap as given (an integer >= 1); :class:`~pgqueue.QueueConfigurationError` naming
    ``what`` and the value otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise QueueConfigurationError(f"{what} must be an integer >= 1 (how many distinct label values get "
                                      f"their own series; the rest are recorded as {OTHER!r}), got {value!r}")
    return value


class LabelCap:
    """At most ``limit`` distinct values of one label, the first ones seen; any later value maps
    to :data:`OTHER` (which never counts against the cap). A value kept stays kept, so its series
    never moves."""

    __slots__ = ("folded", "kept", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept: set[str] = set()
        #: Observations recorded as :data:`OTHER` because the cap was reached.
        self.folded = 0

    def __call__(self, value: str) -> str:
        """The label value to record ``value`` under."""
        kept = self.kept
        if value in kept or value == OTHER:
            return value
        if len(kept) < self.limit:
            kept.add(value)
            return value
        self.folded += 1
        return OTHER


class Instruments:
    """The hooks a worker calls; this base does nothing (the default, at no cost)."""

    __slots__ = ()

    def batch(self, size: int) -> None:
        """One reservation returned ``size`` jobs (0 included)."""

    def started(self, queue: str, name: str, job_id: uuid.UUID, attempts: int) -> None:
        """A reserved job was decoded (``name`` ``"?"`` when its envelope could not be): it is about to run."""

    def waited(self, queue: str, name: str, seconds: float) -> None:
        """A handler is starting ``seconds`` after its job became due: the queue latency, counted as
        ``pgqueue.job_stats`` counts it (from the due time: the dispatch, the end of a delay, a
        retry's backoff or a snooze; to the handler's start)."""

    def outcome(self, queue: str, name: str, outcome: str, reason: str | None) -> None:
        """A job's execution ended: one of :data:`OUTCOMES`; ``reason`` of a failure."""

    def ran(self, queue: str, name: str, seconds: float) -> None:
        """A handler ran for ``seconds`` (whatever its outcome)."""

    def lease_lost(self) -> None:
        """A decision or an ack was refused by the fence after the execution ended."""

    def transient_error(self) -> None:
        """A database call failed with a transient error and will be tried again."""


class Histogram:
    """Cumulative-later bucket counts, a sum and a count (Prometheus histogram semantics)."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Count one value."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def to_data(self) -> dict[str, Any]:
        """JSON-able state: ``{"bounds", "counts", "sum", "count"}`` (counts per bucket, not cumulative)."""
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.sum, "count": self.count}


class Recorder(Instruments):
    """Counts what a worker did, per queue and job name, in memory; :meth:`snapshot` reads it.

    At most ``max_queues`` queues and ``max_job_names`` job names get their own label values (the
    first seen; later ones are recorded as :data:`OTHER`), and a job name no job class of this
    process is registered under is recorded as :data:`UNREGISTERED`, so producers cannot make
    the worker's memory or the metrics grow. The queue depth sample is capped at ``max_queues``
    queues too (see :class:`pgqueue.worker.depth.DepthSampler`), and the per-partition sample at
    ``max_partitions`` partitions per queue (the busiest; the rest summed under :data:`OTHER`).

    Queue latency is observed for every attempt whose handler starts: from the time the job
    became due (``pgqueue.reserve`` returns it: its dispatch, the end of its delay, a retry's
    backoff or a snooze) to the reservation on the database clock, plus the worker's wait until
    the handler starts — the figure ``pgqueue.job_stats`` counts, for delayed and retried jobs too.
    """

    __slots__ = ("_clock", "_kept_names", "_kept_queues", "acks_pending", "batch_sizes", "counters", "depth",
                 "depth_sampled_at", "durations", "in_flight", "job_names", "latencies", "leases_lost",
                 "max_job_names", "max_partitions", "max_queues", "partitions", "queues", "transient_errors",
                 "worker")

    def __init__(self, clock: Callable[[], float] = time.time, *, max_queues: int = MAX_QUEUES,
                 max_job_names: int = MAX_JOB_NAMES, max_partitions: int = MAX_PARTITIONS) -> None:
        self._clock = clock
        #: Per queue, the partitions sampled with their own label value (the busiest; the rest: OTHER).
        self.max_partitions = check_cap(max_partitions, "max_partitions")
        #: The last per-partition sample: queue -> partition -> {"running", "waiting"[, "concurrency_limit"]}.
        self.partitions: dict[str, dict[str, dict[str, float]]] = {}
        #: The caps on distinct ``queue`` and ``job_name`` label values (the rest: :data:`OTHER`);
        #: the queue cap bounds the sampled queue depths too.
        self.max_queues = check_cap(max_queues, "max_queues")
        self.max_job_names = check_cap(max_job_names, "max_job_names")
        self.queues = LabelCap(self.max_queues)
        self.job_names = LabelCap(self.max_job_names)
        # The hot path's test: values already kept are recorded as they are, without a call.
        self._kept_queues = self.queues.kept
        self._kept_names = self.job_names.kept
        #: (metric, queue, name, reason) -> count; metric is "reserved" or an outcome.
        self.counters: dict[tuple[str, str, str, str], int] = {}
        self.durations: dict[tuple[str, str], Histogram] = {}
        self.latencies: dict[tuple[str, str], Histogram] = {}
        self.batch_sizes = Histogram(BATCH_BUCKETS)
        self.leases_lost = 0
        self.transient_errors = 0
        #: Read when a snapshot is taken: the completer's acks not yet confirmed.
        self.acks_pending: Callable[[], int] = lambda: 0
        #: Read when a snapshot is taken: per queue, the worker's ``(running, buffered)`` jobs (its
        #: handlers running now, and the reserved jobs waiting in its prefetch buffer for a slot).
        self.in_flight: Callable[[], dict[str, tuple[int, int]]] = dict
        #: The last queue depth sample (queue -> {state: value}) and its Unix time (None: none taken).
        self.depth: dict[str, dict[str, float]] = {}
        self.depth_sampled_at: float | None = None
        #: Who the worker recording here is (its pgqueue.workers identity, as label values), once it is set.
        self.worker: dict[str, str] | None = None

    def batch(self, size: int) -> None:
        self.batch_sizes.observe(size)

    def labels(self, queue: str, name: str) -> tuple[str, str]:
        """The ``queue`` and ``job_name`` label values to record a job of ``queue`` and ``name`` under."""
        if name not in self.job_names.kept and name != UNDECODABLE and lookup(name) is None:
            name = UNREGISTERED
        return self.queues(queue), self.job_names(name)

    def started(self, queue: str, name: str, job_id: uuid.UUID, attempts: int) -> None:
        if queue not in self._kept_queues or name not in self._kept_names:
            queue, name = self.labels(queue, name)
        key = ("reserved", queue, name, "")
        counters = self.counters
        counters[key] = counters.get(key, 0) + 1

    def waited(self, queue: str, name: str, seconds: float) -> None:
        if queue not in self._kept_queues or name not in self._kept_names:
            queue, name = self.labels(queue, name)
        found = self.latencies.get((queue, name))
        if found is None:
            found = self.latencies[queue, name] = Histogram(LATENCY_BUCKETS)
        found.observe(seconds)

    def outcome(self, queue: str, name: str, outcome: str, reason: str | None) -> None:
        if queue not in self._kept_queues or name not in self._kept_names:
            queue, name = self.labels(queue, name)
        key = (outcome, queue, name, reason or "")
        counters = self.counters
        counters[key] = counters.get(key, 0) + 1

    def ran(self, queue: str, name: str, seconds: float) -> None:
        if queue not in self._kept_queues or name not in self._kept_names:
            queue, name = self.labels(queue, name)
        found = self.durations.get((queue, name))
        if found is None:
            found = self.durations[queue, name] = Histogram(DURATION_BUCKETS)
        found.observe(seconds)

    def lease_lost(self) -> None:
        self.leases_lost += 1

    def transient_error(self) -> None:
        self.transient_errors += 1

    def sampled(self, depth: dict[str, dict[str, float]],
                partitions: dict[str, dict[str, dict[str, float]]] | None = None) -> None:
        """Keep a queue depth sample and its per-partition one (see :class:`pgqueue.worker.depth.DepthSampler`)."""
        self.depth = depth
        self.partitions = partitions or {}
        self.depth_sampled_at = self._clock()

    def _in_flight(self) -> dict[str, list[int]]:
        """:attr:`in_flight` under the queue label cap: ``{queue: [running, buffered]}``."""
        counts: dict[str, list[int]] = {}
        for queue, (running, buffered) in self.in_flight().items():
            found = counts.setdefault(self.queues(queue), [0, 0])
            found[0] += running
            found[1] += buffered
        return counts

    def snapshot(self) -> dict[str, Any]:
        """Everything recorded so far, as JSON-able data (what ``pgqueue.metrics`` exports and what
        a worker process under a supervisor writes for it to merge)."""
        return {
            "counters": [[*key, value] for key, value in self.counters.items()],
            "durations": [[queue, name, h.to_data()] for (queue, name), h in self.durations.items()],
            "latencies": [[queue, name, h.to_data()] for (queue, name), h in self.latencies.items()],
            "batch_sizes": self.batch_sizes.to_data(),
            "leases_lost": self.leases_lost,
            "transient_errors": self.transient_errors,
            "acks_pending": self.acks_pending(),
            "in_flight": self._in_flight(),
            "depth": self.depth,
            "partitions": self.partitions,
            "depth_sampled_at": self.depth_sampled_at,
            "folded": {"queue": self.queues.folded, "job_name": self.job_names.folded},
            "workers": [] if self.worker is None else [self.worker],
        }
