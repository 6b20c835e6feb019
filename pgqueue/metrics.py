"""Prometheus metrics of workers (the ``metrics`` extra: ``pip install 'pgqueue-py[metrics]'``).

A worker records into a :class:`~pgqueue.worker.instruments.Recorder` (plain counters, no
``prometheus_client`` on its hot path); :class:`PgqueueCollector` turns one or more recorders'
snapshots into Prometheus metric families when scraped:

    recorder = Recorder()
    worker = await client.worker(instruments=recorder, metrics_interval=15)
    server = serve(9464, [recorder.snapshot])          # http://host:9464/metrics

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

from pgqueue.worker.instruments import Recorder

__all__ = ["METRICS_DIR_ENV", "PgqueueCollector", "Recorder", "SnapshotWriter", "directory_snapshots", "merge",
           "serve", "snapshot_of"]

#: Set by the supervisor in its worker processes' environment: where each writes its snapshot.
METRICS_DIR_ENV = "PGQUEUE_METRICS_DIR"

Snapshot = dict[str, Any]

_OUTCOME_METRICS = {
    "reserved": ("pgqueue_jobs_reserved", "Jobs reserved and decoded by workers, per queue and job name."),
    "succeeded": ("pgqueue_jobs_succeeded", "Jobs whose handler returned (acked)."),
    "retried": ("pgqueue_jobs_retried", "Attempts that failed and were released for a retry."),
    "snoozed": ("pgqueue_jobs_snoozed", "Attempts the handler snoozed (no try used)."),
    "failed": ("pgqueue_jobs_failed", "Jobs moved to pgqueue.failed_jobs, by reason."),
    "cancelled": ("pgqueue_jobs_cancelled", "Running handlers stopped because their job was cancelled."),
}
_STATES = ("ready", "delayed", "reserved", "expired", "failed")


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
    total: Snapshot = {"leases_lost": 0, "transient_errors": 0, "acks_pending": 0, "depth": {},
                       "depth_sampled_at": None}
    for snap in snapshots:
        for *key, value in snap["counters"]:
            counters[tuple(key)] = counters.get(tuple(key), 0) + value
        for target, rows in ((durations, snap["durations"]), (latencies, snap["latencies"])):
            for queue, name, data in rows:
                target[queue, name] = _merge_histogram(target.get((queue, name)), data)
        batch = _merge_histogram(batch, snap["batch_sizes"])
        for field in ("leases_lost", "transient_errors", "acks_pending"):
            total[field] += snap[field]
        sampled = snap.get("depth_sampled_at")
        if sampled is not None and (total["depth_sampled_at"] is None or sampled > total["depth_sampled_at"]):
            total["depth"], total["depth_sampled_at"] = snap["depth"], sampled
    total["counters"] = [[*key, value] for key, value in counters.items()]
    total["durations"] = [[q, n, h] for (q, n), h in durations.items()]
    total["latencies"] = [[q, n, h] for (q, n), h in latencies.items()]
    total["batch_sizes"] = batch or {"bounds": [], "counts": [0], "sum": 0.0, "count": 0}
    return total


def _buckets(data: dict[str, Any]) -> list[tuple[str, float]]:
    cumulative, out = 0, []
    for bound, count in zip([*data["bounds"], float("inf")], data["counts"], strict=True):
        cumulative += count
        out.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(cumulative)))
    return out


class PgqueueCollector(Collector):
    """Prometheus metric families from the sum of ``sources()`` (each returns one snapshot)."""

    def __init__(self, sources: Callable[[], Sequence[Snapshot]]) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        """The metrics, computed at scrape time."""
        snap = merge(self._sources())
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
        for key, name, doc in (("durations", "pgqueue_handler_duration_seconds", "How long handlers ran."),
                               ("latencies", "pgqueue_queue_latency_seconds",
                                "First attempts: from dispatch (the job id's time) to the handler's start.")):
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
            for state in _STATES:
                depth.add_metric([queue, state], values[state])
            age.add_metric([queue], values["oldest_ready_age"])
        yield depth
        yield age
        if snap["depth_sampled_at"] is not None:
            yield GaugeMetricFamily("pgqueue_queue_depth_sampled_timestamp_seconds",
                                    "When the queue depth above was sampled (Unix time).",
                                    value=snap["depth_sampled_at"])


def snapshot_of(recorder: Recorder) -> Snapshot:
    """``recorder.snapshot()``, safe to call from the HTTP server's thread while the worker records."""
    for _ in range(10):
        with contextlib.suppress(RuntimeError):  # a dict grew during the copy: try again
            return recorder.snapshot()
    return recorder.snapshot()


def serve(port: int, sources: Callable[[], Sequence[Snapshot]], *, addr: str = "0.0.0.0") -> Any:
    """Serve ``/metrics`` (Prometheus text) on ``addr:port`` from a daemon thread; returns the server
    (``server.shutdown()`` stops it). A port in use raises OSError."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PgqueueCollector(sources))
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
