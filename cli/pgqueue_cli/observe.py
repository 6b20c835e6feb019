"""``queue:work --metrics-port``: the Prometheus endpoint of a worker, or of a supervisor for all its workers.

The ``metrics`` extra (prometheus_client) is imported only when metrics are asked for. The endpoint
binds ``--metrics-host`` (default 127.0.0.1: loopback only); label values are capped at
``--metrics-max-queues`` queues and ``--metrics-max-job-names`` job names (the rest: ``other``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from pgqueue_cli.runtime import EXIT_CONFIG, fail

#: The environment variable the supervisor sets in its workers (pgqueue.metrics.METRICS_DIR_ENV).
METRICS_DIR_ENV = "PGQUEUE_METRICS_DIR"

T = TypeVar("T")


@dataclass(frozen=True)
class MetricsOptions:
    """``queue:work``'s metrics options: where to serve (``port`` None: nowhere) and the label caps."""

    port: int | None = None
    host: str = "127.0.0.1"
    max_queues: int = 200
    max_job_names: int = 500
    max_partitions: int = 20


def metrics_module() -> ModuleType:
    """``pgqueue.metrics``, or a clear error when the ``metrics`` extra is not installed."""
    try:
        import pgqueue.metrics  # noqa: PLC0415  # an optional extra: only --metrics-port imports it
    except ImportError as exc:
        fail(f"--metrics-port needs the metrics extra (prometheus_client, {exc.name} is missing): "
             "pip install 'pgqueue-py[metrics]'", EXIT_CONFIG)
    return pgqueue.metrics


def serve(metrics: ModuleType, options: MetricsOptions, sources: Callable[[], Any]) -> Any:
    """Start the endpoint; a port in use or a host this machine does not have is a configuration
    error that says so."""
    try:
        return metrics.serve(options.port or 0, sources, addr=options.host, max_queues=options.max_queues,
                             max_job_names=options.max_job_names)
    except OSError as exc:
        fail(f"--metrics-host {options.host} --metrics-port {options.port}: cannot serve metrics there "
             f"({exc.strerror or exc}); no worker was started", EXIT_CONFIG)


@contextlib.asynccontextmanager
async def worker_metrics(options: MetricsOptions) -> AsyncIterator[Any]:
    """The Recorder of a worker with metrics (None without): in a process the supervisor started it
    writes snapshots to the supervisor's directory; otherwise it serves ``/metrics`` on the host and port."""
    directory = os.environ.get(METRICS_DIR_ENV)
    if options.port is None and directory is None:
        yield None
        return
    metrics = metrics_module()
    recorder = metrics.Recorder(max_queues=options.max_queues, max_job_names=options.max_job_names,
                                max_partitions=options.max_partitions)
    if directory is not None:
        writer = metrics.SnapshotWriter(directory, recorder)
        task = asyncio.create_task(writer.run(), name="pgqueue-metrics-writer")
        try:
            yield recorder
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return
    server = serve(metrics, options, lambda: [metrics.snapshot_of(recorder)])
    try:
        yield recorder
    finally:
        server.shutdown()


async def supervise(run: Callable[[dict[str, str]], Awaitable[T]], options: MetricsOptions) -> T:
    """Run the supervisor (``run(extra_env)``); with a port, serve one endpoint for all its
    workers from a temporary directory of their snapshots, removed afterwards."""
    if options.port is None:
        return await run({})
    metrics = metrics_module()
    directory = tempfile.mkdtemp(prefix="pgqueue-metrics-")
    try:
        server = serve(metrics, options, lambda: metrics.directory_snapshots(directory))
        try:
            return await run({METRICS_DIR_ENV: directory})
        finally:
            server.shutdown()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
