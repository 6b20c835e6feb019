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

- **adaptive**: ``set_limits("adaptive", adaptive=(1, concurrency), adaptive_decrease=F)``, starting
  at 1, once per factor F of ``--decrease`` (default ``0.5,0.9``: revision 0009's halving, and
  revision 0010's default);
- **fixed at capacity**: ``set_limits("adaptive", concurrency=capacity)`` (the limit an operator
  who knew the downstream would set: the best case).

``--rounds N`` repeats the set N times, each round in turn starting with another run (interleaved, so
a machine shared with other work weighs on every run alike). ``--partitioned``: every job is of one
partition and the bounds are the partitions' (``per_partition_adaptive``), the limit sampled from
``pgqueue.partitions``: the same figures for an adaptive partition.

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


PARTITION = "tenant:1"
QUEUE_LIMIT = b"select concurrency from pgqueue.queues where name = 'adaptive'"
PARTITION_LIMIT = (b"select coalesce(p.concurrency, q.partition_concurrency) from pgqueue.queues q "
                   b"left join pgqueue.partitions p on p.queue = q.name and p.partition = 'tenant:1' "
                   b"where q.name = 'adaptive'")


async def one_run(dsn: str, *, jobs: int, concurrency: int, capacity: int, service: float,
                  retry_after: float, decrease: float | None, partitioned: bool) -> dict[str, Any]:
    """Drain ``jobs`` calls through the downstream (``decrease`` None: the limit fixed at the capacity);
    the run's figures."""
    global DOWNSTREAM  # noqa: PLW0603  # the handler's downstream, one per run
    downstream = DOWNSTREAM = Downstream(capacity, service, retry_after)
    samples: list[tuple[float, int]] = []
    async with Client(dsn) as client:
        if decrease is None and partitioned:
            await client.set_limits(QUEUE, per_partition_concurrency=capacity)
        elif decrease is None:
            await client.set_limits(QUEUE, concurrency=capacity)
        elif partitioned:
            await client.set_limits(QUEUE, per_partition_adaptive=(1, concurrency), adaptive_decrease=decrease)
        else:
            await client.set_limits(QUEUE, adaptive=(1, concurrency), adaptive_decrease=decrease)
        for start in range(0, jobs, 1000):
            await client.dispatch_many([CallsDownstream(seq=i) for i in range(start, min(jobs, start + 1000))],
                                       queue=QUEUE, partition=PARTITION if partitioned else None)
        worker = await client.worker(queues=(QUEUE,), concurrency=concurrency, maintenance_interval=None,
                                     schedules=False)
        began = time.perf_counter()
        # Not stop_when_empty: while every job left waits out its retry_after, the queue looks empty.
        task = asyncio.create_task(worker.run())
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while not task.done():
                if downstream.accepted >= jobs:
                    worker.stop()
                cur = await conn.execute(PARTITION_LIMIT if partitioned else QUEUE_LIMIT)
                row = await cur.fetchone()
                samples.append((time.perf_counter() - began, int(row[0]) if row and row[0] is not None else 0))
                await asyncio.sleep(0.1)
            await task
            cur = await conn.execute(b"select count(*) from pgqueue.failed_jobs")
            counted = await cur.fetchone()
            failed = int(counted[0]) if counted else 0
    ended = (downstream.done_at[-1] if downstream.done_at else time.perf_counter()) - began
    half = ended / 2
    late = [limit for at, limit in samples if at >= half]
    done_late = sum(1 for at in downstream.done_at if at - began >= half)
    settle = next((at for at, limit in samples if limit >= 0.9 * capacity), None)
    capacity_rate = capacity / service
    return {
        "run": (f"fixed at {capacity}" if decrease is None else f"adaptive 1..{concurrency} x{decrease}")
               + (" per partition" if partitioned else ""),
        "jobs": jobs, "seconds": round(ended, 2), "failed": failed,
        "settled_to_90pct_s": None if settle is None else round(settle, 2),
        "limit_second_half_mean": round(sum(late) / len(late), 1) if late else None,
        "limit_second_half_range": [min(late), max(late)] if late else None,
        "throughput_second_half_per_s": round(done_late / (ended - half), 1),
        "downstream_capacity_per_s": round(capacity_rate, 1),
        "throughput_vs_capacity": round(done_late / (ended - half) / capacity_rate, 3),
        "overall_per_s": round(downstream.accepted / ended, 1),
        "backpressured_calls": downstream.refused,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


async def run(admin_dsn: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every run of every round, each on its own fresh database; a round starts one run later than
    the one before (interleaved)."""
    kinds: list[float | None] = [*(float(f) for f in args.decrease.split(",") if f.strip()), None]
    out = []
    for turn in range(args.rounds):
        for kind in kinds[turn % len(kinds):] + kinds[:turn % len(kinds)]:
            async with fresh_database(admin_dsn, "adaptive") as dsn:
                await install("pgqueue", dsn)
                figures = await one_run(dsn, jobs=args.jobs, concurrency=args.concurrency, capacity=args.capacity,
                                        service=args.service, retry_after=args.retry_after, decrease=kind,
                                        partitioned=args.partitioned)
                out.append({"round": turn + 1, **figures})
                print(json.dumps({"bench": "adaptive", **out[-1]}), flush=True)
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
    parser.add_argument("--decrease", default="0.5,0.9",
                        help="the cut factors of the adaptive runs, comma-separated (0.5: halve)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every run this many times, interleaved")
    parser.add_argument("--partitioned", action="store_true",
                        help="one partition's adaptive limit (per_partition_adaptive) instead of the queue's")
    args = parser.parse_args()
    asyncio.run(run(args.dsn, args))


if __name__ == "__main__":
    main()
