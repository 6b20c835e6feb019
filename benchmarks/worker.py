"""A benchmark worker process: ``python -m benchmarks.worker SYSTEM DSN MODE CONCURRENCY``.

``drain``: run until the queue is empty, then print ``result {json}`` (elapsed seconds
from the start of the system's run call to its return, handler calls, distinct jobs).
``serve``: run until SIGTERM, printing ``hit <seq> <time.time()>`` as each handler starts.
``run`` (pgqueue only): run until SIGTERM without per-job output (the sustained run).
Only concurrency (and the named variant) departs from each system's defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time
from typing import Any

from benchmarks.recorder import RECORDER


async def run_pgqueue(dsn: str, mode: str, concurrency: int, variant: str, max_jobs: int | None = None) -> float:
    from benchmarks.systems import pgqueue_job
    from pgqueue import Client

    pgqueue_job()
    async with Client(dsn) as client:
        worker = await client.worker(concurrency=concurrency)
        if mode == "serve":
            worker.install_signal_handlers()
            print("ready", flush=True)
            await worker.run()
            return 0.0
        if mode == "run":
            worker.install_signal_handlers()
            print("ready", flush=True)
            await worker.run()
            return 0.0
        started = time.perf_counter()
        await worker.run(stop_when_empty=True, max_jobs=max_jobs)
        return time.perf_counter() - started


async def run_procrastinate(dsn: str, mode: str, concurrency: int, variant: str) -> float:
    from benchmarks.systems import procrastinate_app

    app = procrastinate_app(dsn)
    options: dict[str, Any] = {"concurrency": concurrency}
    if variant.startswith("poll"):
        # Documented knob: fetch_job_polling_interval (default 5 s) bounds how late a
        # scheduled job is noticed; NOTIFY wakes the worker for jobs ready now.
        options["fetch_job_polling_interval"] = float(variant[len("poll"):])
    async with app.open_async():
        if mode == "serve":
            print("ready", flush=True)
            await app.run_worker_async(**options)
            return 0.0
        started = time.perf_counter()
        await app.run_worker_async(wait=False, install_signal_handlers=False, **options)
        return time.perf_counter() - started


async def run_pgqueuer(dsn: str, mode: str, concurrency: int, variant: str) -> float:
    from pgqueuer import AsyncpgDriver, PgQueuer, PsycopgDriver
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    from benchmarks.common import asyncpg_dsn

    # Driver: PgQueuer's performance guide (docs/guides/performance-tuning.md, "Use a dedicated
    # connection for LISTEN": a direct asyncpg connection for the QueueManager) runs the worker
    # on one asyncpg connection, the default here. Variant "psycopg" (or suffix "+psycopg") runs it on
    # PsycopgDriver, as this harness did before: that driver's notification watcher holds the
    # connection between notifications, so every dequeue waits for it (the ~80 ms wake-up).
    base = variant.removesuffix("psycopg").rstrip("+") or "default"
    if variant.endswith("psycopg"):
        import psycopg

        conn: Any = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        pgq = PgQueuer(PsycopgDriver(conn))
    else:
        import asyncpg

        conn = await asyncpg.connect(asyncpg_dsn(dsn))
        pgq = PgQueuer(AsyncpgDriver(conn))
    # Concurrency: the worker-wide cap max_concurrent_tasks (``pgq run --max-concurrent-tasks``),
    # which PgQueuer requires to be >= 2 x batch_size: batch_size is lowered to fit (c=1 runs
    # with batch_size 1 and a cap of 2, the smallest the API accepts). Variant "unlimited"
    # keeps PgQueuer's defaults (batch_size 10, no cap); variant "limit" uses the entrypoint's
    # concurrency_limit instead.
    run_options: dict[str, Any] = {}
    limit = 0
    if base == "limit":
        limit = concurrency
    elif base != "unlimited":
        batch = max(1, min(10, concurrency // 2))
        run_options = {"batch_size": batch, "max_concurrent_tasks": max(concurrency, 2 * batch)}

    @pgq.entrypoint("bench_noop", concurrency_limit=limit)
    async def noop(job: Job) -> None:
        RECORDER.hit(int(job.payload or b"0"))

    try:
        if mode == "serve":
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
            print("ready", flush=True)
            await pgq.run(**run_options)
            return 0.0
        started = time.perf_counter()
        await pgq.run(mode=QueueExecutionMode.drain, **run_options)
        return time.perf_counter() - started
    finally:
        await conn.close()


RUNNERS = {"pgqueue": run_pgqueue, "procrastinate": run_procrastinate, "pgqueuer": run_pgqueuer}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker")
    parser.add_argument("system", choices=sorted(RUNNERS))
    parser.add_argument("dsn")
    parser.add_argument("mode", choices=("drain", "serve", "run"))
    parser.add_argument("concurrency", type=int)
    parser.add_argument("--variant", default="default")
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--max-jobs", type=int, default=None, help="pgqueue drain: stop after this many jobs")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    RECORDER.report_each = args.mode == "serve"
    if args.mode == "run" and args.system != "pgqueue":
        parser.error("mode 'run' (continuous, no per-job output) is for pgqueue's sustained run")
    if args.system == "pgqueue":
        coro = run_pgqueue(args.dsn, args.mode, args.concurrency, args.variant, args.max_jobs)
    else:
        coro = RUNNERS[args.system](args.dsn, args.mode, args.concurrency, args.variant)
    elapsed = asyncio.run(coro)
    result = {"elapsed": elapsed, "calls": RECORDER.calls, "distinct": len(RECORDER.seen),
              "first": RECORDER.first, "last": RECORDER.last}
    print("result " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
