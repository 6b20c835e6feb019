"""pgqueue cancel latency: from a cancel's commit to the running handler's cancellation.

    uv run --frozen python -m benchmarks.cancel_latency --jobs 200

A fresh database (dropped afterwards); one worker in this process, LISTENing, with a handler
that waits forever. For each job: dispatch it, wait until its handler runs, then
``select pgqueue.cancel(id)`` on its own autocommit connection. The time is taken from just
before the cancel is sent (so it includes the statement and its commit: an upper bound of the
commit-to-cancellation time) to the moment the handler sees ``asyncio.CancelledError``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

import psycopg

from benchmarks.worker_drain import _db, drop_database, fresh_database, percentile
from pgqueue import Client, Job, JobContext

STARTED: asyncio.Queue[float] = asyncio.Queue()
STOPPED: asyncio.Queue[float] = asyncio.Queue()


class Waits(Job):
    """Waits until cancelled; notes when it started and when the cancellation reached it."""

    name = "bench:waits"

    async def handle(self, context: JobContext) -> None:
        STARTED.put_nowait(time.perf_counter())
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            STOPPED.put_nowait(time.perf_counter())
            raise


async def measure(dsn: str, jobs: int) -> list[float]:
    ms: list[float] = []
    async with Client(dsn) as client:
        worker = await client.worker(concurrency=1, poll_interval=600, maintenance_interval=None)
        task = asyncio.create_task(worker.run())
        assert worker.notifier is not None
        await worker.notifier.connected.wait()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for _ in range(jobs):
                job_id = await client.dispatch(Waits())
                await STARTED.get()
                sent = time.perf_counter()
                await conn.execute("select pgqueue.cancel(%s)", (job_id,))
                stopped = await asyncio.wait_for(STOPPED.get(), 30)
                ms.append(1000 * (stopped - sent))
        worker.stop()
        await task
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_BENCH_DSN", "postgresql://postgres@127.0.0.1/postgres"),
                        help="admin DSN of the server to benchmark on")
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    name = fresh_database(args.dsn)
    try:
        ms = asyncio.run(measure(_db(args.dsn, name), args.jobs))
    finally:
        drop_database(args.dsn, name)
    print(json.dumps({"bench": "cancel_latency", "jobs": len(ms), "p50_ms": round(statistics.median(ms), 2),
                      "p99_ms": round(percentile(ms, 0.99), 2), "max_ms": round(max(ms), 2)}))


if __name__ == "__main__":
    main()
