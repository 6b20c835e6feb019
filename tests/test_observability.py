"""Observability of workers (issue 15): Prometheus metrics of real worker processes (one, and a
supervisor's two behind one endpoint), OpenTelemetry spans of a real worker, JSON log lines.

The workload is fixed (tests/observability_jobs.py): 20 jobs succeed, 5 fail once then succeed,
3 fail both their tries. So a worker reserves 20 + 5*2 + 3*2 = 36 times, acks 25, retries 8
and records 3 failures.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg.types.json import Jsonb

from pgqueue import Client, Envelope, Job
from pgqueue.errors import QueuePayloadError
from pgqueue.redaction import MASK
from tests.cli_support import REPO, cli_env, command, pgqueue
from tests.helpers import envelope
from tests.observability_jobs import SECRET, Broken, FlakyOnce, Ok, Secretive
from tests.worker_support import settings_for

WITHIN = 240.0  # worker processes start slowly on a loaded 2-core machine (100 s seen)
WORKLOAD: list[Job] = [*(Ok() for _ in range(20)), *(FlakyOnce() for _ in range(5)), *(Broken() for _ in range(3))]


def _push(dsn: str, jobs: list[Job]) -> None:
    async def dispatch() -> None:
        async with Client(dsn=dsn) as client:
            await client.dispatch_many(jobs)

    asyncio.run(dispatch())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    """Every sample of the endpoint: (name, sorted labels) -> value; {} while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())


def _poll(check: Callable[[], Any], what: str, log: Callable[[], str] = lambda: "") -> Any:
    # A scrape is a pull: there is no event for "the counters reached N", so look every 100 ms.
    deadline = time.monotonic() + WITHIN
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}\n{log()}")
        time.sleep(0.1)
    return value


class Worker:
    """``pgqueue queue:work ARGS`` running in the background; stderr goes to a file."""

    def __init__(self, args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> None:
        self.stderr_path = tmp_path / f"worker-{uuid.uuid4().hex[:6]}.log"
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen([*command(), "queue:work", *args], cwd=tmp_path, env=cli_env(env),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr)

    def log(self) -> str:
        return self.stderr_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=WITHIN)
        self._stderr.close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Worker:
        w = Worker(list(args), tmp_path, env)
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()


def _logged(worker: Worker, text: str) -> bool:
    return text in worker.log()


def _check_workload_counts(samples: Samples) -> None:
    assert total(samples, "pgqueue_jobs_reserved_total", queue="obs") == 36
    assert total(samples, "pgqueue_jobs_reserved_total", job_name="obs:flaky") == 10
    assert total(samples, "pgqueue_jobs_succeeded_total", job_name="obs:ok") == 20
    assert total(samples, "pgqueue_jobs_succeeded_total", job_name="obs:flaky") == 5
    assert total(samples, "pgqueue_jobs_retried_total", job_name="obs:flaky") == 5
    assert total(samples, "pgqueue_jobs_retried_total", job_name="obs:broken") == 3
    assert total(samples, "pgqueue_jobs_failed_total", job_name="obs:broken", reason="exception") == 3
    assert total(samples, "pgqueue_jobs_failed_total") == 3
    assert total(samples, "pgqueue_jobs_cancelled_total") == 0
    assert total(samples, "pgqueue_leases_lost_total") == 0
    # Every attempt ran a handler, each with a queue latency (from its due time: retries too).
    assert total(samples, "pgqueue_handler_duration_seconds_count", queue="obs") == 36
    assert total(samples, "pgqueue_handler_duration_seconds_bucket", job_name="obs:ok", le="+Inf") == 20
    assert total(samples, "pgqueue_queue_latency_seconds_count", queue="obs") == 36
    assert total(samples, "pgqueue_reservation_batch_size_sum") == 36
    assert total(samples, "pgqueue_reservation_batch_size_count") >= 1


@pytest.mark.timeout(900)
def test_metrics_of_a_running_worker_count_a_known_workload(dsn: str, workers: Callable[..., Worker]) -> None:
    _push(dsn, WORKLOAD)
    port = _free_port()
    w = workers("--queue", "obs", "--app", "tests.observability_jobs", "--metrics-port", str(port),
                "--metrics-interval", "0.2", "--dsn", dsn)
    samples = _poll(lambda: (s := scrape(port)) and total(s, "pgqueue_jobs_succeeded_total") == 25
                    and total(s, "pgqueue_jobs_failed_total") == 3 and s, "the workload to be counted", w.log)
    _check_workload_counts(samples)
    assert total(samples, "pgqueue_acks_pending") >= 0
    # The depth is sampled from the database by this (the only) worker: 3 failures, nothing left.
    depth = _poll(lambda: (s := scrape(port)) and total(s, "pgqueue_queue_jobs", queue="obs", state="failed") == 3
                  and s, "a depth sample after the workload", w.log)
    for state in ("ready", "delayed", "reserved", "expired"):
        assert total(depth, "pgqueue_queue_jobs", queue="obs", state=state) == 0
    assert total(depth, "pgqueue_queue_oldest_ready_age_seconds", queue="obs") == 0
    assert total(depth, "pgqueue_queue_depth_sampled_timestamp_seconds") > 0
    # The per-queue gauges (issue 29): nothing held now, the queue is not paused.
    assert ("pgqueue_jobs_in_flight", (("queue", "obs"), ("state", "running"))) in depth
    assert total(depth, "pgqueue_jobs_in_flight", queue="obs") == 0
    assert ("pgqueue_queue_paused", (("queue", "obs"),)) in depth
    assert total(depth, "pgqueue_queue_paused", queue="obs") == 0
    assert w.stop() == 0, w.log()


@pytest.mark.timeout(900)
def test_one_worker_of_several_samples_the_queue_depth(dsn: str, workers: Callable[..., Worker]) -> None:
    ports = [_free_port(), _free_port()]
    started = [workers("--queue", "obs", "--app", "tests.observability_jobs", "--metrics-port", str(p),
                       "--metrics-interval", "0.1", "--dsn", dsn) for p in ports]
    # One of them takes the advisory lock and samples; the other exports no depth at all.
    _poll(lambda: sum(total(scrape(p), "pgqueue_queue_depth_sampled_timestamp_seconds") > 0 for p in ports) >= 1,
          "a worker to sample")
    # Several intervals later, still one (the lock is held by a live session).
    first = [total(scrape(p), "pgqueue_queue_depth_sampled_timestamp_seconds") for p in ports]
    _poll(lambda: max(total(scrape(p), "pgqueue_queue_depth_sampled_timestamp_seconds") for p in ports)
          > max(first) + 0.5, "more samples")
    both = _poll(lambda: all(found := [scrape(p) for p in ports]) and found, "both endpoints to answer")
    sampling = [p for p, found in zip(ports, both, strict=True)
                if total(found, "pgqueue_queue_depth_sampled_timestamp_seconds") > 0]
    assert len(sampling) == 1, both
    for w in started:  # a worker still starting up has no SIGTERM handler yet: wait for it first
        _poll(functools.partial(_logged, w, "worker started"), "the worker to finish starting", w.log)
        assert w.stop() == 0, w.log()


@pytest.mark.timeout(900)
def test_a_supervisor_serves_one_endpoint_whose_counts_add_up_across_its_processes(
        dsn: str, workers: Callable[..., Worker], tmp_path: Path) -> None:
    _push(dsn, WORKLOAD + [Ok() for _ in range(200)])
    port = _free_port()
    temp = tmp_path / "tmp"
    temp.mkdir()
    s = workers("--processes", "2", "--concurrency", "2", "--queue", "obs", "--app", "tests.observability_jobs",
                "--metrics-port", str(port), "--metrics-interval", "0.2", "--dsn", dsn, env={"TMPDIR": str(temp)})
    samples = _poll(lambda: (x := scrape(port)) and total(x, "pgqueue_jobs_succeeded_total") == 225
                    and total(x, "pgqueue_jobs_failed_total") == 3 and x, "the workload to be counted", s.log)
    assert total(samples, "pgqueue_jobs_reserved_total") == 236
    assert total(samples, "pgqueue_jobs_succeeded_total", job_name="obs:ok") == 220
    assert total(samples, "pgqueue_jobs_retried_total") == 8
    assert total(samples, "pgqueue_handler_duration_seconds_count") == 236
    assert total(samples, "pgqueue_reservation_batch_size_sum") == 236
    # Both processes worked, and wrote their counts to the supervisor's folder.
    log = _poll(lambda: (text := s.log()).count("worker started") == 2 and text, "both workers to start", s.log)
    assert "pgqueue-metrics-" in "".join(os.listdir(temp)), log
    assert s.stop() == 0, s.log()
    assert os.listdir(temp) == []  # the supervisor removed its folder


def test_metrics_port_without_the_extra_is_a_clear_error(dsn: str, tmp_path: Path) -> None:
    # A prometheus_client that cannot be imported, first on the path: as if the extra were missing.
    blocked = tmp_path / "blocked"
    (blocked / "prometheus_client").mkdir(parents=True)
    (blocked / "prometheus_client" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'prometheus_client'\", name='prometheus_client')\n")
    result = pgqueue("queue:work", "--queue", "obs", "--app", "tests.observability_jobs", "--metrics-port", "9",
                     "--dsn", dsn, cwd=tmp_path, env={"PYTHONPATH": f"{blocked}{os.pathsep}{REPO}"})
    assert result.returncode == 2, result.stderr
    assert "--metrics-port needs the metrics extra" in result.stderr
    assert "pip install 'pgqueue-py[metrics]'" in result.stderr


def test_json_logs_of_a_real_worker_carry_the_job_fields(dsn: str, tmp_path: Path) -> None:
    _push(dsn, [Ok(), FlakyOnce(), Broken()])
    result = pgqueue("queue:work", "--queue", "obs", "--app", "tests.observability_jobs", "--stop-when-empty",
                     "--log-format", "json", "--log-level", "debug", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    about_jobs = [line for line in lines if "job_id" in line]
    for line in about_jobs:
        assert {"job_id", "job_name", "queue", "attempt", "token"} <= set(line), line
        assert line["queue"] == "obs" and isinstance(line["attempt"], int) and isinstance(line["token"], int)
        assert line["job_id"] in line["message"]
    retried = [line for line in about_jobs if "retrying" in line["message"]]
    assert sorted((line["job_name"], line["attempt"], line["level"]) for line in retried) == [
        ("obs:broken", 1, "warning"), ("obs:flaky", 1, "warning")]
    failed = [line for line in about_jobs if line["level"] == "error"]
    assert [(line["job_name"], line["attempt"]) for line in failed] == [("obs:broken", 2)]
    running = [(line["job_name"], line["attempt"]) for line in about_jobs if "running" in line["message"]]
    assert sorted(running) == [("obs:broken", 1), ("obs:broken", 2), ("obs:flaky", 1), ("obs:flaky", 2),
                               ("obs:ok", 1)]
    # One execution's lines share its token; a retry has a new one.
    tokens = {(line["job_name"], line["attempt"]): line["token"] for line in about_jobs}
    assert tokens["obs:flaky", 1] != tokens["obs:flaky", 2]


def test_text_logs_carry_the_job_fields_too(dsn: str, tmp_path: Path) -> None:
    _push(dsn, [Broken()])
    result = pgqueue("queue:work", "--queue", "obs", "--app", "tests.observability_jobs", "--stop-when-empty",
                     "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    failed = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(failed) == 1 and "job_name=obs:broken queue=obs attempt=2 token=" in failed[0], result.stderr


def _secret_workload(dsn: str) -> None:
    """Two Secretive jobs: one raises (quoting its password) on both tries, one has args that do not
    fit (pin is not a number), so the worker's payload_invalid message quotes the args."""
    _push(dsn, [Secretive(password=SECRET)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope(
            "obs_secret", name=Secretive.name, args={"password": SECRET, "pin": "not a number"})),))


def test_log_lines_mask_what_a_job_declares_secret(dsn: str, tmp_path: Path) -> None:
    # Issue 24 item 11: the JSON (and text) log lines of the worker printed the password that a
    # handler's exception, or the worker's own payload_invalid message, quoted.
    def work(*options: str) -> subprocess.CompletedProcess[str]:
        _secret_workload(dsn)
        return pgqueue("queue:work", "--queue", "obs_secret", "--app", "tests.observability_jobs",
                       "--stop-when-empty", *options, "--dsn", dsn, cwd=tmp_path)

    as_json, as_text = work("--log-format", "json"), work()
    assert as_json.returncode == 0, as_json.stderr
    assert SECRET not in as_json.stderr, as_json.stderr
    lines = [json.loads(line) for line in as_json.stderr.splitlines() if line.strip()]
    about = sorted((line["level"], line["message"]) for line in lines if line.get("job_name") == Secretive.name)
    assert [level for level, _ in about] == ["error", "error", "warning"], about
    assert all(MASK in message for _, message in about), about
    assert "masked values" not in as_json.stderr  # the carrier of the secrets is never printed itself
    assert as_text.returncode == 0, as_text.stderr
    assert SECRET not in as_text.stderr and as_text.stderr.count(MASK) >= 3, as_text.stderr


def test_metrics_labels_carry_no_args_messages_or_keys(dsn: str, workers: Callable[..., Worker]) -> None:
    # A guard, not a fix: labels are the queue, the job name, the reason and the state only, so
    # there is nothing to mask; a label that took a message or an arg would show the password here.
    _secret_workload(dsn)
    port = _free_port()
    w = workers("--queue", "obs_secret", "--app", "tests.observability_jobs", "--metrics-port", str(port),
                "--metrics-interval", "0.2", "--dsn", dsn)
    _poll(lambda: total(scrape(port), "pgqueue_jobs_failed_total", job_name=Secretive.name) == 2,
          "the secretive jobs to be counted", w.log)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
        text = response.read().decode()
    assert 'job_name="obs:secretive"' in text and SECRET not in text and "login refused" not in text
    assert w.stop() == 0, w.log()


def test_the_library_masks_log_lines_for_any_handler(dsn: str) -> None:
    # An application's own logging set-up (no pgqueue CLI) receives the masked lines too.
    _secret_workload(dsn)
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    handler = Collect()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    worker_logger = logging.getLogger("pgqueue.worker")
    worker_logger.addHandler(handler)

    async def work() -> None:
        async with Client(settings=settings_for(dsn)) as client:
            worker = await client.worker(queues=["obs_secret"], listen=False, maintenance_interval=None,
                                         schedules=False)
            await worker.run(stop_when_empty=True)

    try:
        asyncio.run(work())
    finally:
        worker_logger.removeHandler(handler)
    about = [line for line in seen if Secretive.name in line]
    assert len(about) == 3 and all(MASK in line for line in about), seen
    assert not [line for line in seen if SECRET in line], seen


def test_a_logged_traceback_is_masked_and_the_secrets_are_never_printed() -> None:
    from pgqueue.redaction import LogRedaction, log_fields
    from pgqueue_cli.runtime import JsonFormatter

    try:
        raise PermissionError(f"refused {SECRET!r}")
    except PermissionError:
        record = logging.LogRecord("pgqueue.worker", logging.ERROR, __file__, 1, "job failed: %s", (SECRET,),
                                   sys.exc_info())
    record.__dict__.update(log_fields({"job_id": "j"}, Secretive.name, {"password": SECRET}))
    # A formatter that prints every attribute of a record still sees no secret.
    assert SECRET not in repr(record.__dict__["pgqueue_secrets"])
    assert LogRedaction().filter(record)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == f"job failed: {MASK}" and MASK in line["exception"], line
    assert SECRET not in json.dumps(line) and "PermissionError" in line["exception"]
    assert log_fields({"job_id": "j"}, "unknown:job", {"password": SECRET}) == {"job_id": "j"}


def test_bad_log_options_are_refused_by_name(tmp_path: Path) -> None:
    result = pgqueue("queue:work", "--log-format", "xml", cwd=tmp_path)
    assert result.returncode == 2 and "--log-format must be one of text, json, got 'xml'" in result.stderr
    result = pgqueue("queue:work", "--log-level", "loud", cwd=tmp_path)
    assert result.returncode == 2 and "--log-level must be one of debug, info, warning, error" in result.stderr


# ------------------------------------------------------------------------------------------- traces
@pytest.fixture
def spans() -> Iterator[Any]:
    """A real SDK tracer provider with an in-memory exporter, set globally for the test only."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util._once import Once

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        # Later tests run untraced, as without the extra (the global can only be set once: reset it).
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None
        provider.shutdown()


async def test_consumer_spans_are_children_of_the_dispatch_span_and_retries_share_the_trace(
        dsn: str, spans: Any, aconn: psycopg.AsyncConnection[Any]) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, StatusCode

    async with Client(dsn=dsn) as client:
        with trace.get_tracer("test").start_as_current_span("web request") as request:
            flaky_id = await client.dispatch(FlakyOnce())
        ok_ids = await client.dispatch_many([Ok(), Ok()])
        stored = await (await aconn.execute("select envelope from pgqueue.jobs where id = %s", (flaky_id,))).fetchone()
        assert stored is not None and stored[0]["trace"]["traceparent"].startswith("00-")
        worker = await client.worker(queues=["obs"], concurrency=2)
        assert await worker.run(stop_when_empty=True) == 4

    finished = spans.get_finished_spans()
    trace_id = request.get_span_context().trace_id
    producer = [s for s in finished if s.kind == SpanKind.PRODUCER and s.context.trace_id == trace_id]
    assert len(producer) == 1 and producer[0].name == "create obs"
    assert producer[0].parent is not None and producer[0].parent.span_id == request.get_span_context().span_id
    assert producer[0].attributes["messaging.message.id"] == str(flaky_id)
    attempts = sorted((s for s in finished if s.kind == SpanKind.CONSUMER and s.context.trace_id == trace_id),
                      key=lambda s: s.attributes["messaging.pgqueue.attempt"])
    assert [s.attributes["messaging.pgqueue.attempt"] for s in attempts] == [1, 2]
    for span in attempts:
        assert span.name == "process obs"
        assert span.parent is not None and span.parent.span_id == producer[0].context.span_id
        assert span.attributes["messaging.system"] == "pgqueue"
        assert span.attributes["messaging.destination.name"] == "obs"
        assert span.attributes["messaging.message.id"] == str(flaky_id)
        assert span.attributes["messaging.operation.type"] == "process"
    assert attempts[0].status.status_code == StatusCode.ERROR
    assert [e.name for e in attempts[0].events] == ["exception"]
    assert attempts[0].events[0].attributes["exception.message"] == "first attempt fails"
    assert attempts[1].status.status_code != StatusCode.ERROR
    # dispatch_many: one PRODUCER span for the batch, parent of both jobs' consumer spans.
    batch = [s for s in finished if s.kind == SpanKind.PRODUCER and s.attributes.get("messaging.batch.message_count")]
    assert len(batch) == 1 and batch[0].attributes["messaging.batch.message_count"] == 2
    children = [s for s in finished if s.kind == SpanKind.CONSUMER and s.parent is not None
                and s.parent.span_id == batch[0].context.span_id]
    assert sorted(s.attributes["messaging.message.id"] for s in children) == sorted(str(i) for i in ok_ids)


async def test_an_envelope_without_trace_context_runs_in_a_new_trace(dsn: str, spans: Any) -> None:
    from opentelemetry.trace import SpanKind

    from pgqueue import tracing

    async with Client(dsn=dsn) as client:
        # Dispatched before tracing was set up (an old envelope has no "trace" field).
        saved, tracing.AVAILABLE = tracing.AVAILABLE, False
        try:
            job_id = await client.dispatch(Ok())
        finally:
            tracing.AVAILABLE = saved
        worker = await client.worker(queues=["obs"])
        assert await worker.run(stop_when_empty=True) == 1
    consumer = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER]
    assert len(consumer) == 1 and consumer[0].parent is None
    assert consumer[0].attributes["messaging.message.id"] == str(job_id)


def test_the_envelope_accepts_a_trace_context_and_envelopes_without_one() -> None:
    base = {"id": str(uuid.uuid4()), "name": "obs:ok", "args": {}, "connection": "database", "queue": "obs",
            "tries": 1, "timeout": 10, "backoff": {"kind": "fixed", "delays": [0.0]}}
    assert Envelope.decode(base, text=False).trace is None
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    decoded = Envelope.decode(json.dumps({**base, "trace": carrier}))
    assert decoded.trace == carrier and decoded.to_data()["trace"] == carrier
    assert "trace" not in Envelope.decode(base, text=False).to_data()
    with pytest.raises(QueuePayloadError, match="envelope 'trace' must be null or an object"):
        Envelope.decode({**base, "trace": ["00-abc"]}, text=False)
    with pytest.raises(QueuePayloadError, match="envelope 'trace'"):
        Envelope.decode({**base, "trace": {"traceparent": 5}}, text=False)
