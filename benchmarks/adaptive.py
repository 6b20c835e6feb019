"""pgqueue adaptive limits (issue 28): a fake downstream that accepts ``capacity`` concurrent calls
and answers backpressure above that; does the queue's adaptive limit settle near the capacity, and
the throughput near the downstream's?

    uv run python -m benchmarks.adaptive --jobs 12000 --capacity 50 --service 0.05

One fresh migrated database (dropped afterwards) and, in this process, one worker of concurrency
``--concurrency`` (default 100: twice the downstream's capacity, so only the limit keeps it in
bounds) on queue ``adaptive``. Each job calls the fake downstream: if fewer than ``capacity`` calls
are in flight, the call takes ``service`` seconds and succeeds; else it answers at once with
backpressure and the handler raises ``Backpressure(retry_after=…)``. The downstream's capacity is
therefore ``capacity / service`` calls per second. Two runs on the same backlog size:

- **adaptive**: ``set_limits("adaptive", adaptive=(1, concurrency))``, starting at 1;
- **fixed at capacity**: ``set_limits("adaptive", concurrency=capacity)`` (the limit an operator
  who knew the downstream would set: the best case).

Printed as JSON per run: seconds until the limit first reached 90 % of the capacity, the limit's
mean and range over the second half of the run (sampled from ``pgqueue.queues`` every 100 ms), the
throughput over that half (acked jobs per second) against the downstream's capacity, and how many
calls met backpressure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from benchmarks.common import fresh_database
from benchmarks.systems import install
from pgqueue import Backpressure, Client, Job, JobContext

QUEUE = "adaptive"


@dataclass
class Downstream:
    """Accepts ``capacity`` calls at once, each taking ``service`` seconds; refuses more."""

    capacity: int
    service: float
    retry_after: float
    in_flight: int = 0
    accepted: int = 0
    refused: int = 0
    done_at: list[float] = field(default_factory=list)

    async def call(self) -> None:
        if self.in_flight >= self.capacity:
            self.refused += 1
            raise Backpressure("429 Too Many Requests", retry_after=self.retry_after)
        self.in_flight += 1
        try:
            await asyncio.sleep(self.service)
        finally:
            self.in_flight -= 1
        self.accepted += 1
        self.done_at.append(time.perf_counter())


DOWNSTREAM: Downstream | None = None


class CallsDownstream(Job):
    """One call of the fake downstream."""

    name = "bench:adaptive_call"
    tries = 1  # backpressure never spends a try: a job that ran out of tries would show as failed

    seq: int

    async def handle(self, context: JobContext) -> None:
        assert DOWNSTREAM is not None
        await DOWNSTREAM.call()


async def one_run(dsn: str, *, jobs: int, concurrency: int, capacity: int, service: float,
                  retry_after: float, adaptive: bool) -> dict[str, Any]:
    """Drain ``jobs`` calls through the downstream; the run's figures."""
    global DOWNSTREAM  # noqa: PLW0603  # the handler's downstream, one per run
    downstream = DOWNSTREAM = Downstream(capacity, service, retry_after)
    samples: list[tuple[float, int]] = []
    async with Client(dsn) as client:
        if adaptive:
            await client.set_limits(QUEUE, adaptive=(1, concurrency))
        else:
            await client.set_limits(QUEUE, concurrency=capacity)
        for start in range(0, jobs, 1000):
            await client.dispatch_many([CallsDownstream(seq=i) for i in range(start, min(jobs, start + 1000))],
                                       queue=QUEUE)
        worker = await client.worker(queues=(QUEUE,), concurrency=concurrency, maintenance_interval=None,
                                     schedules=False)
        began = time.perf_counter()
        task = asyncio.create_task(worker.run(stop_when_empty=True))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while not task.done():
                cur = await conn.execute(b"select concurrency from pgqueue.queues where name = %s", (QUEUE,))
                row = await cur.fetchone()
                samples.append((time.perf_counter() - began, int(row[0]) if row and row[0] is not None else 0))
                await asyncio.sleep(0.1)
            await task
            cur = await conn.execute(b"select count(*) from pgqueue.failed_jobs")
            counted = await cur.fetchone()
            failed = int(counted[0]) if counted else 0
    ended = time.perf_counter() - began
    half = ended / 2
    late = [limit for at, limit in samples if at >= half]
    done_late = sum(1 for at in downstream.done_at if at - began >= half)
    settle = next((at for at, limit in samples if limit >= 0.9 * capacity), None)
    capacity_rate = capacity / service
    return {
        "run": "adaptive 1.." + str(concurrency) if adaptive else f"fixed at {capacity}",
        "jobs": jobs, "seconds": round(ended, 2), "failed": failed,
        "settled_to_90pct_s": None if settle is None else round(settle, 2),
        "limit_second_half_mean": round(sum(late) / len(late), 1) if late else None,
        "limit_second_half_range": [min(late), max(late)] if late else None,
        "throughput_second_half_per_s": round(done_late / (ended - half), 1),
        "downstream_capacity_per_s": round(capacity_rate, 1),
        "throughput_vs_capacity": round(done_late / (ended - half) / capacity_rate, 3),
        "overall_per_s": round(downstream.accepted / ended, 1),
        "backpressured_calls": downstream.refused,
    }


async def run(admin_dsn: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Both runs, each on its own fresh database."""
    out = []
    for adaptive in (True, False):
        async with fresh_database(admin_dsn, "adaptive") as dsn:
            await install("pgqueue", dsn)
            out.append(await one_run(dsn, jobs=args.jobs, concurrency=args.concurrency, capacity=args.capacity,
                                     service=args.service, retry_after=args.retry_after, adaptive=adaptive))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_BENCH_DSN",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"),
                        help="admin DSN of the server to benchmark on (each run creates and drops a database)")
    parser.add_argument("--jobs", type=int, default=12000)
    parser.add_argument("--concurrency", type=int, default=100, help="the worker's concurrency (and the max)")
    parser.add_argument("--capacity", type=int, default=50, help="calls the downstream accepts at once")
    parser.add_argument("--service", type=float, default=0.05, help="seconds one accepted call takes")
    parser.add_argument("--retry-after", type=float, default=0.1, help="seconds a refused call waits")
    args = parser.parse_args()
    for figures in asyncio.run(run(args.dsn, args)):
        print(json.dumps({"bench": "adaptive", **figures}))


if __name__ == "__main__":
    main()
