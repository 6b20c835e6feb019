"""Prometheus metrics of workers (the ``metrics`` extra: ``pip install 'pgqueue-py[metrics]'``).

A worker records into a :class:`~pgqueue.worker.instruments.Recorder` (plain counters, no
``prometheus_client`` on its hot path); :class:`PgqueueCollector` turns one or more recorders'
snapshots into Prometheus metric families when scraped:

    recorder = Recorder()                              # max_queues=200, max_job_names=500
    worker = await client.worker(instruments=recorder, metrics_interval=15)
    server = serve(9464, lambda: [snapshot_of(recorder)])   # http://127.0.0.1:9464/metrics

The endpoint binds 127.0.0.1 unless told otherwise (``addr``; ``queue:work --metrics-host``).
Label values are capped (see :mod:`pgqueue.worker.instruments`): per metric at most ``max_queues``
queues and ``max_job_names`` job names, the rest under ``other``, whatever producers dispatch.

Under a supervisor (``queue:work --processes N``) each worker process writes its snapshot to
a file in a directory the supervisor owns (:class:`SnapshotWriter`, :data:`METRICS_DIR_ENV`),
and the supervisor serves their sum (:func:`directory_snapshots`): one endpoint for all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from pgqueue.worker.instruments import DEPTH_STATES, MAX_JOB_NAMES, MAX_QUEUES, LabelCap, Recorder, check_cap

__all__ = ["DEFAULT_HOST", "METRICS_DIR_ENV", "PgqueueCollector", "Recorder", "SnapshotWriter",
           "directory_snapshots", "merge", "serve", "snapshot_of"]

#: Where :func:`serve` listens unless told otherwise: loopback only. Expose metrics on a network
#: deliberately (``addr="0.0.0.0"``, ``--metrics-host 0.0.0.0``), behind a firewall or a proxy.
DEFAULT_HOST = "127.0.0.1"

#: Set by the supervisor in its worker processes' environment: where each writes its snapshot.
METRICS_DIR_ENV = "PGQUEUE_METRICS_DIR"

Snapshot = dict[str, Any]

#: The labels of ``pgqueue_worker_info`` (issue 29): a worker's row of pgqueue.workers.
WORKER_LABELS = ("worker_id", "host", "pid", "version", "queues", "concurrency", "prefetch")

_OUTCOME_METRICS = {
    "reserved": ("pgqueue_jobs_reserved", "Jobs reserved and decoded by workers, per queue and job name."),
    "succeeded": ("pgqueue_jobs_succeeded", "Jobs whose handler returned (acked)."),
    "retried": ("pgqueue_jobs_retried", "Attempts that failed and were released for a retry."),
    "snoozed": ("pgqueue_jobs_snoozed", "Attempts the handler snoozed (no try used)."),
    "backpressured": ("pgqueue_jobs_backpressured", "Attempts that met the downstream's backpressure (put back, "
                      "no try used; the queue's adaptive limit halved)."),
    "failed": ("pgqueue_jobs_failed", "Jobs moved to pgqueue.failed_jobs, by reason."),
    "cancelled": ("pgqueue_jobs_cancelled", "Running handlers stopped because their job was cancelled."),
}


def _merge_histogram(into: dict[str, Any] | None, data: dict[str, Any]) -> dict[str, Any]:
    if into is None:
        return {"bounds": list(data["bounds"]), "counts": list(data["counts"]), "sum": data["sum"],
                "count": data["count"]}
    into["counts"] = [a + b for a, b in zip(into["counts"], data["counts"], strict=True)]
    into["sum"] += data["sum"]
    into["count"] += data["count"]
    return into


def merge(snapshots: Iterable[Snapshot]) -> Snapshot:
    """The sum of several workers' snapshots; the queue depth is the most recent sample's."""
    counters: dict[tuple[str, ...], int] = {}
    durations: dict[tuple[str, str], dict[str, Any]] = {}
    latencies: dict[tuple[str, str], dict[str, Any]] = {}
    batch: dict[str, Any] | None = None
    total: Snapshot = {"leases_lost": 0, "transient_errors": 0, "acks_pending": 0, "depth": {}, "partitions": {},
                       "depth_sampled_at": None, "folded": {"queue": 0, "job_name": 0}, "workers": [],
                       "in_flight": {}}
    for snap in snapshots:
        for *key, value in snap["counters"]:
            counters[tuple(key)] = counters.get(tuple(key), 0) + value
        for target, rows in ((durations, snap["durations"]), (latencies, snap["latencies"])):
            for queue, name, data in rows:
                target[queue, name] = _merge_histogram(target.get((queue, name)), data)
        batch = _merge_histogram(batch, snap["batch_sizes"])
        for field in ("leases_lost", "transient_errors", "acks_pending"):
            total[field] += snap[field]
        for label, count in snap.get("folded", {}).items():
            total["folded"][label] = total["folded"].get(label, 0) + count
        total["workers"].extend(snap.get("workers", []))
        _add_in_flight(total["in_flight"], snap.get("in_flight", {}))
        sampled = snap.get("depth_sampled_at")
        if sampled is not None and (total["depth_sampled_at"] is None or sampled > total["depth_sampled_at"]):
            total["depth"], total["depth_sampled_at"] = snap["depth"], sampled
            total["partitions"] = snap.get("partitions", {})
    total["counters"] = [[*key, value] for key, value in counters.items()]
    total["durations"] = [[q, n, h] for (q, n), h in durations.items()]
    total["latencies"] = [[q, n, h] for (q, n), h in latencies.items()]
    total["batch_sizes"] = batch or {"bounds": [], "counts": [0], "sum": 0.0, "count": 0}
    return total


def _add_in_flight(into: dict[str, list[int]], counts: dict[str, list[int]], cap: LabelCap | None = None) -> None:
    """Add one snapshot's ``{queue: [running, buffered]}`` to ``into`` (its queues through ``cap``)."""
    for queue, (running, buffered) in counts.items():
        found = into.setdefault(queue if cap is None else cap(queue), [0, 0])
        found[0] += running
        found[1] += buffered


def _buckets(data: dict[str, Any]) -> list[tuple[str, float]]:
    cumulative, out = 0, []
    for bound, count in zip([*data["bounds"], float("inf")], data["counts"], strict=True):
        cumulative += count
        out.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(cumulative)))
    return out


class PgqueueCollector(Collector):
    """Prometheus metric families from the sum of ``sources()`` (each returns one snapshot).

    Each worker caps its own label values (:class:`~pgqueue.worker.instruments.Recorder`); the sum
    of several (a supervisor's processes) is capped again here, at ``max_queues`` queues and
    ``max_job_names`` job names, the first ones exported keeping their series for good.
    """

    def __init__(self, sources: Callable[[], Sequence[Snapshot]], *, max_queues: int = MAX_QUEUES,
                 max_job_names: int = MAX_JOB_NAMES) -> None:
        self._sources = sources
        self._queues = LabelCap(check_cap(max_queues, "max_queues"))
        self._job_names = LabelCap(check_cap(max_job_names, "max_job_names"))
        self._lock = threading.Lock()  # scrapes may run in several server threads at once

    def _capped(self, snap: Snapshot) -> Snapshot:
        """``snap`` with its queue and job name label values passed through the caps."""
        queues, names = self._queues, self._job_names
        counters: dict[tuple[str, ...], int] = {}
        for outcome, queue, name, reason, value in snap["counters"]:
            key = (outcome, queues(queue), names(name), reason)
            counters[key] = counters.get(key, 0) + value
        snap["counters"] = [[*key, value] for key, value in counters.items()]
        for field in ("durations", "latencies"):
            histograms: dict[tuple[str, str], dict[str, Any]] = {}
            for queue, name, data in snap[field]:
                labels = (queues(queue), names(name))
                histograms[labels] = _merge_histogram(histograms.get(labels), data)
            snap[field] = [[q, n, h] for (q, n), h in histograms.items()]
        in_flight: dict[str, list[int]] = {}
        _add_in_flight(in_flight, snap["in_flight"], queues)
        snap["in_flight"] = in_flight
        return snap

    def collect(self) -> Iterator[Metric]:
        """The metrics, computed at scrape time."""
        with self._lock:
            snap = self._capped(merge(self._sources()))
        families = {outcome: CounterMetricFamily(name, doc, labels=["queue", "job_name", "reason"]
                                                 if outcome == "failed" else ["queue", "job_name"])
                    for outcome, (name, doc) in _OUTCOME_METRICS.items()}
        lost = snap["leases_lost"]
        for outcome, queue, name, reason, value in snap["counters"]:
            if outcome == "lost":
                lost += value
                continue
            counter = families.get(outcome)
            if counter is not None:
                counter.add_metric([queue, name, reason] if outcome == "failed" else [queue, name], value)
        yield from families.values()
        yield CounterMetricFamily("pgqueue_leases_lost", "Reservations whose lease was lost (a decision, ack or "
                                  "renewal the fence refused): such a job runs again elsewhere.", value=lost)
        yield CounterMetricFamily("pgqueue_transient_database_errors", "Database calls that failed with a "
                                  "transient error and were tried again.", value=snap["transient_errors"])
        yield GaugeMetricFamily("pgqueue_acks_pending", "Acks of finished jobs not yet confirmed by the database.",
                                value=snap["acks_pending"])
        folded = CounterMetricFamily("pgqueue_metric_labels_folded", "Observations recorded under the label "
                                     "value 'other' because that label already had its cap of distinct values "
                                     "(queue: max_queues, job_name: max_job_names).", labels=["label"])
        for label in ("queue", "job_name"):
            folded.add_metric([label], snap["folded"].get(label, 0))
        yield folded
        for key, name, doc in (("durations", "pgqueue_handler_duration_seconds", "How long handlers ran."),
                               ("latencies", "pgqueue_queue_latency_seconds",
                                "From the time a job became due (its dispatch, the end of its delay or "
                                "backoff) to its handler's start, as pgqueue.job_stats counts it.")):
            histogram = HistogramMetricFamily(name, doc, labels=["queue", "job_name"])
            for queue, job_name, data in snap[key]:
                histogram.add_metric([queue, job_name], _buckets(data), sum_value=data["sum"])
            yield histogram
        batch = HistogramMetricFamily("pgqueue_reservation_batch_size", "Jobs granted per reservation.")
        batch.add_metric([], _buckets(snap["batch_sizes"]), sum_value=snap["batch_sizes"]["sum"])
        yield batch
        depth = GaugeMetricFamily("pgqueue_queue_jobs", "Jobs per queue and state, sampled from the database "
                                  "by one worker (take max by (queue, state)).", labels=["queue", "state"])
        age = GaugeMetricFamily("pgqueue_queue_oldest_ready_age_seconds", "Age of the oldest ready job.",
                                labels=["queue"])
        for queue, values in sorted(snap["depth"].items()):
            for state in DEPTH_STATES:
                depth.add_metric([queue, state], values[state])
            age.add_metric([queue], values["oldest_ready_age"])
        yield depth
        yield age
        yield from _queue_gauges(snap)
        info = GaugeMetricFamily("pgqueue_worker_info", "The workers exported here (one series each, value 1), as "
                                 "they registered in pgqueue.workers.", labels=list(WORKER_LABELS))
        for worker in snap.get("workers", []):
            info.add_metric([str(worker.get(label, "")) for label in WORKER_LABELS], 1)
        yield info
        if snap["depth_sampled_at"] is not None:
            yield GaugeMetricFamily("pgqueue_queue_depth_sampled_timestamp_seconds",
                                    "When the queue depth above was sampled (Unix time).",
                                    value=snap["depth_sampled_at"])


def _queue_gauges(snap: Snapshot) -> Iterator[Metric]:
    """The paused gauge (from the depth sample) and the workers' jobs in flight, per queue."""
    paused = GaugeMetricFamily("pgqueue_queue_paused", "1 while the queue is paused (pgqueue.queues), 0 otherwise, "
                               "sampled with the depth (other: how many of the queues past the cap are paused).",
                               labels=["queue"])
    for queue, values in sorted(snap["depth"].items()):
        paused.add_metric([queue], values.get("paused", 0.0))
    yield paused
    limit = GaugeMetricFamily("pgqueue_queue_concurrency_limit", "The queue's current concurrency limit "
                              "(pgqueue.queues; an adaptive limit moves with backpressure and acks), sampled with "
                              "the depth; absent: no limit (other: the sum over the queues past the cap).",
                              labels=["queue"])
    for queue, values in sorted(snap["depth"].items()):
        if "concurrency_limit" in values:
            limit.add_metric([queue], values["concurrency_limit"])
    yield limit
    in_flight = GaugeMetricFamily("pgqueue_jobs_in_flight", "Jobs the workers exported here hold now, per queue: "
                                  "running (a handler runs it) or buffered (reserved, waiting in the prefetch "
                                  "buffer for a slot).", labels=["queue", "state"])
    for queue, (running, buffered) in sorted(snap["in_flight"].items()):
        in_flight.add_metric([queue, "running"], running)
        in_flight.add_metric([queue, "buffered"], buffered)
    yield in_flight
    yield from _partition_gauges(snap)


def _partition_gauges(snap: Snapshot) -> Iterator[Metric]:
    """Issue 28: per queue, its busiest partitions' jobs and limits (the rest under ``other``)."""
    jobs = GaugeMetricFamily("pgqueue_partition_jobs", "Jobs per partition of a queue, running (reserved, lease "
                             "live) or waiting (ready now), sampled with the depth: the busiest partitions of each "
                             "queue (max_partitions), the rest summed under partition 'other'.",
                             labels=["queue", "partition", "state"])
    limit = GaugeMetricFamily("pgqueue_partition_concurrency_limit", "A partition's current concurrency limit (its "
                              "override or adaptive limit, else the queue's per-partition one), sampled with the "
                              "depth; absent: none (other: the sum over the partitions past the cap).",
                              labels=["queue", "partition"])
    for queue, partitions in sorted(snap.get("partitions", {}).items()):
        for partition, values in sorted(partitions.items()):
            jobs.add_metric([queue, partition, "running"], values["running"])
            jobs.add_metric([queue, partition, "waiting"], values["waiting"])
            if "concurrency_limit" in values:
                limit.add_metric([queue, partition], values["concurrency_limit"])
    yield jobs
    yield limit


def snapshot_of(recorder: Recorder) -> Snapshot:
    """``recorder.snapshot()``, safe to call from the HTTP server's thread while the worker records."""
    for _ in range(10):
        with contextlib.suppress(RuntimeError):  # a dict grew during the copy: try again
            return recorder.snapshot()
    return recorder.snapshot()


def serve(port: int, sources: Callable[[], Sequence[Snapshot]], *, addr: str = DEFAULT_HOST,
          max_queues: int = MAX_QUEUES, max_job_names: int = MAX_JOB_NAMES) -> Any:
    """Serve ``/metrics`` (Prometheus text) on ``addr:port`` from a daemon thread; returns the server
    (``server.shutdown()`` stops it). ``addr`` defaults to loopback (:data:`DEFAULT_HOST`); an IPv6
    address works too. ``max_queues`` / ``max_job_names``: the label caps of the sum (see
    :class:`PgqueueCollector`). A port in use, or an address this host does not have, raises OSError."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PgqueueCollector(sources, max_queues=max_queues, max_job_names=max_job_names))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server


def directory_snapshots(directory: str) -> list[Snapshot]:
    """The snapshots worker processes wrote in ``directory`` (one ``<pid>.json`` each; a process that
    ended leaves its last one, so counters never go backwards)."""
    found = []
    for entry in sorted(os.listdir(directory)):
        if entry.endswith(".json"):
            with contextlib.suppress(OSError, ValueError), open(os.path.join(directory, entry)) as file:
                found.append(json.load(file))
    return found


class SnapshotWriter:
    """Writes a recorder's snapshot to ``directory/<pid>.json`` every ``interval`` seconds and when stopped."""

    def __init__(self, directory: str, recorder: Recorder, *, interval: float = 1.0) -> None:
        self.path = os.path.join(directory, f"{os.getpid()}.json")
        self._recorder = recorder
        self.interval = interval
        self._lock = threading.Lock()

    def write(self) -> None:
        """Write the snapshot now (atomically: a reader never sees half a file)."""
        text = json.dumps(self._recorder.snapshot())
        with self._lock:
            temporary = self.path + ".tmp"
            with open(temporary, "w") as file:
                file.write(text)
            os.replace(temporary, self.path)

    async def run(self) -> None:
        """Write every interval until cancelled, then once more."""
        try:
            while True:
                self.write()
                await asyncio.sleep(self.interval)
        finally:
            with contextlib.suppress(OSError):
                self.write()
