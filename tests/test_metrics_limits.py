"""Metrics that cannot be flooded (issue 24, item 12): the endpoint listens on loopback unless told
otherwise, queue and job name label values are capped (the rest under ``other``; names no job
class is registered under as ``unregistered``), the queue depth of any number of queues is capped,
and a failed attempt's span keeps a bounded exception message and stack trace.

The least-privilege worker role's depth sampling is in tests/faults/test_security.py.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.core import Metric

from pgqueue import Client, Job, JobContext, QueueConfigurationError
from pgqueue.ids import new_id
from pgqueue.metrics import PgqueueCollector, serve, snapshot_of
from pgqueue.worker.depth import DepthSampler
from pgqueue.worker.instruments import Recorder
from tests.cli_support import pgqueue
from tests.helpers import envelope
from tests.sql_calls import enqueue_many
from tests.test_observability import spans
from tests.worker_jobs import Flaky, Once, Probe
from tests.worker_support import client, finish, hooks

__all__ = ["client", "hooks", "spans"]  # fixtures

Samples = list[tuple[str, dict[str, str], float]]


def samples_of(collector: PgqueueCollector) -> Samples:
    """Every sample one scrape of ``collector`` exports: (name, labels, value)."""
    families: Iterator[Metric] = collector.collect()
    return [(s.name, dict(s.labels), s.value) for family in families for s in family.samples]


def values_of(samples: Samples, label: str) -> set[str]:
    """The distinct values of ``label`` across ``samples``."""
    return {labels[label] for _, labels, _ in samples if label in labels}


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(v for n, ls, v in samples if n == name and labels.items() <= ls.items())


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


def test_the_endpoint_listens_on_loopback_unless_told_otherwise() -> None:
    recorder = Recorder()
    server = serve(0, lambda: [snapshot_of(recorder)])
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1", f"the metrics endpoint listens on {host}, not only on loopback"
        assert "pgqueue_acks_pending" in _get(f"http://127.0.0.1:{port}/metrics")
    finally:
        server.shutdown()
    # Another address only when asked for, IPv6 included.
    server = serve(0, lambda: [snapshot_of(recorder)], addr="::1")
    try:
        host, port = server.server_address[:2]
        assert host == "::1"
        assert "pgqueue_acks_pending" in _get(f"http://[::1]:{port}/metrics")
    finally:
        server.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_queue_work_serves_metrics_on_the_host_it_is_given(dsn: str, tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the bind is refused before a worker starts.
    port = _free_port()
    result = pgqueue("queue:work", "--queue", "obs", "--app", "tests.observability_jobs", "--metrics-host",
                     "192.0.2.1", "--metrics-port", str(port), "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"--metrics-host 192.0.2.1 --metrics-port {port}: cannot serve metrics there" in result.stderr
    assert "worker started" not in result.stderr
    for option in ("--metrics-max-queues", "--metrics-max-job-names"):
        result = pgqueue("queue:work", "--app", "tests.observability_jobs", "--metrics-port", str(port), option,
                         "0", "--dsn", dsn, cwd=tmp_path)
        assert result.returncode == 2 and option in result.stderr, result.stderr


def test_label_values_past_the_caps_are_counted_under_other() -> None:
    recorder = Recorder(max_queues=2, max_job_names=2)
    names = [Probe.name, Once.name, Flaky.name]  # registered (tests.worker_jobs is imported)
    for queue in ("q1", "q2", "q3", "q4"):
        for name in names:
            recorder.started(queue, name, new_id(), 1)
            recorder.waited(queue, name, 0.002)
            recorder.outcome(queue, name, "succeeded", None)
            recorder.ran(queue, name, 0.01)
    samples = samples_of(PgqueueCollector(lambda: [snapshot_of(recorder)]))
    assert values_of(samples, "queue") == {"q1", "q2", "other"}
    assert values_of(samples, "job_name") == {Probe.name, Once.name, "other"}
    # Nothing is lost: the folded observations are counted under other.
    assert total(samples, "pgqueue_jobs_reserved_total") == 12
    assert total(samples, "pgqueue_jobs_succeeded_total", queue="other") == 6
    assert total(samples, "pgqueue_jobs_succeeded_total", job_name="other") == 4
    assert total(samples, "pgqueue_handler_duration_seconds_count", queue="other", job_name="other") == 2
    assert total(samples, "pgqueue_queue_latency_seconds_count") == 12
    # Each observation of a folded value counts once per label (started, waited, outcome, ran).
    assert total(samples, "pgqueue_metric_labels_folded_total", label="queue") == 2 * 3 * 4
    assert total(samples, "pgqueue_metric_labels_folded_total", label="job_name") == 4 * 4
    for bad in (0, -1, 2.5, True, "200"):
        with pytest.raises(QueueConfigurationError, match="max_queues must be an integer >= 1"):
            Recorder(max_queues=bad)  # type: ignore[arg-type]


def test_the_sum_of_several_workers_is_capped_too_and_keeps_its_series() -> None:
    # A supervisor's processes each keep their own first values: their sum is capped again.
    first, second = Recorder(max_queues=3), Recorder(max_queues=3)
    for recorder, queues in ((first, ("a", "b", "c")), (second, ("d", "e", "f"))):
        for queue in queues:
            recorder.outcome(queue, Probe.name, "succeeded", None)
    collector = PgqueueCollector(lambda: [snapshot_of(first), snapshot_of(second)], max_queues=3)
    samples = samples_of(collector)
    assert values_of(samples, "queue") == {"a", "b", "c", "other"}
    assert total(samples, "pgqueue_jobs_succeeded_total", queue="other") == 3
    # A value once exported keeps its series, whatever order the sources come in later.
    collector._sources = lambda: [snapshot_of(second), snapshot_of(first)]
    assert values_of(samples_of(collector), "queue") == {"a", "b", "c", "other"}


async def test_producer_chosen_job_names_cannot_flood_the_metrics(client: Client, hooks: Any, dsn: str) -> None:
    async def noop(job: Probe, context: JobContext) -> None:
        return None

    hooks("noop", noop)
    await client.dispatch_many([Probe(hook="noop", n=n) for n in range(3)])
    # 300 names nobody registered, straight into the table as any producer could.
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope(name=f"made.up:{n}", job_id=new_id()) for n in range(300)])
    recorder = Recorder()
    worker = await client.worker(concurrency=8, listen=False, maintenance_interval=None, instruments=recorder,
                                 metrics_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the worker to drain") == 303
    samples = samples_of(PgqueueCollector(lambda: [snapshot_of(recorder)]))
    assert values_of(samples, "job_name") == {Probe.name, "unregistered"}
    assert total(samples, "pgqueue_jobs_reserved_total", job_name="unregistered") == 300
    assert total(samples, "pgqueue_jobs_failed_total", job_name="unregistered", reason="unknown_job") == 300
    assert total(samples, "pgqueue_jobs_succeeded_total", job_name=Probe.name) == 3
    assert len(samples) < 150, f"{len(samples)} samples for 2 job names"


async def test_the_queue_depth_of_any_number_of_queues_is_capped(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope(f"q{n:03}") for n in range(250)] + [envelope("q249")])
    recorder = Recorder()  # the default cap: 200 queues
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await DepthSampler(dsn, recorder, interval=1.0).sample(conn)
    assert len(recorder.depth) == 201, "a queue depth sample exports every queue of the database"
    assert sorted(recorder.depth)[:2] == ["other", "q000"] and "q199" in recorder.depth
    assert recorder.depth["other"]["ready"] == 51  # q200..q249, one of them with two jobs
    assert recorder.depth["q000"]["ready"] == 1
    samples = samples_of(PgqueueCollector(lambda: [snapshot_of(recorder)]))
    assert len([s for s in samples if s[0] == "pgqueue_queue_jobs"]) == 201 * 6  # six states, blocked among them
    assert total(samples, "pgqueue_queue_jobs", state="ready") == 251


class Loud(Job):
    """Fails with an exception message of a million characters."""

    name = "tests.metrics:loud"
    queue = "loud"
    tries = 1

    async def handle(self, context: JobContext) -> None:
        raise ValueError("x" * 1_000_000)


async def test_a_failed_attempts_span_keeps_a_bounded_message_and_stack_trace(dsn: str, spans: Any) -> None:
    from opentelemetry.trace import SpanKind

    async with Client(dsn=dsn) as client:
        await client.dispatch(Loud())
        worker = await client.worker(queues=["loud"], listen=False, maintenance_interval=None)
        assert await worker.run(stop_when_empty=True) == 1
    [consumer] = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER]
    [event] = consumer.events
    message, stacktrace = event.attributes["exception.message"], event.attributes["exception.stacktrace"]
    # At most 4,096 characters of the message and 16,384 of the trace (pgqueue.tracing), plus the note.
    assert len(message) < 4096 + 100, f"the span keeps a {len(message)}-character exception message"
    assert "characters cut" in message and message.startswith("xxx") and message.endswith("xxx")
    assert len(stacktrace) < 16384 + 100 and "Traceback" in stacktrace
    assert event.attributes["exception.type"] == "ValueError"
    assert len(consumer.status.description or "") <= 500
