"""pgqueue alone: enqueue and drain at the same time for a long while, sampling throughput,
table size and dead tuples, to show degradation if there is any."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from benchmarks.common import WorkerProcess, fresh_database, sql
from benchmarks.systems import install, pgqueue_job

log = logging.getLogger("benchmarks")


@dataclass
class SustainedSizes:
    minutes: float = 10.0
    sample_seconds: float = 5.0
    concurrency: int = 50
    batch: int = 500
    backlog_cap: int = 20_000


async def run_sustained(admin_dsn: str, sizes: SustainedSizes, results: dict[str, Any]) -> None:
    """One producer (dispatch_many of ``batch`` jobs, pausing while more than ``backlog_cap``
    wait) and one worker process at ``concurrency``, for ``minutes``."""
    from pgqueue import Client

    noop = pgqueue_job()
    samples: list[dict[str, float]] = []
    async with fresh_database(admin_dsn, "sustained") as dsn:
        await install("pgqueue", dsn)
        worker = WorkerProcess("pgqueue", dsn, "run", sizes.concurrency)
        await worker.start()
        enqueued = 0
        stop = asyncio.Event()

        async def produce(client: Client, conn: psycopg.AsyncConnection[Any]) -> None:
            nonlocal enqueued
            seq = 0
            while not stop.is_set():
                cur = await conn.execute(sql("pgqueue_jobs_count"))
                row = await cur.fetchone()
                if row is not None and row[0] > sizes.backlog_cap:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 0.05)
                    continue
                for _ in range(10):
                    await client.dispatch_many([noop(seq=s) for s in range(seq, seq + sizes.batch)])
                    seq += sizes.batch
                    enqueued = seq

        async def sample(conn: psycopg.AsyncConnection[Any], started: float) -> None:
            last_done, last_at = 0, started
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), sizes.sample_seconds)
                cur = await conn.execute(sql("pgqueue_table_stats"))
                row = await cur.fetchone()
                now = time.monotonic()
                assert row is not None
                rows, size, dead, live, autovacuums, vacuums = (int(v) for v in row)
                done = enqueued - rows
                samples.append({"t": now - started, "completed": done, "enqueued": enqueued,
                                "jobs_per_s": (done - last_done) / (now - last_at), "rows": rows,
                                "table_bytes": size, "dead_tuples": dead, "live_tuples": live,
                                "autovacuums": autovacuums, "vacuums": vacuums})
                last_done, last_at = done, now
                if len(samples) % max(1, round(60 / sizes.sample_seconds)) == 0:
                    log.info(f"sustained {now - started:5.0f}s: {done:,} done, {samples[-1]['jobs_per_s']:,.0f} "
                             f"jobs/s, {rows:,} rows, {size / 2**20:.1f} MB, {dead:,} dead tuples")

        try:
            await asyncio.wait_for(worker.ready.wait(), 60)
            async with Client(dsn) as client, \
                    await psycopg.AsyncConnection.connect(dsn, autocommit=True) as pconn, \
                    await psycopg.AsyncConnection.connect(dsn, autocommit=True) as sconn:
                started = time.monotonic()
                tasks = [asyncio.create_task(produce(client, pconn)), asyncio.create_task(sample(sconn, started))]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(asyncio.gather(*tasks)), sizes.minutes * 60)
                stop.set()
                await asyncio.gather(*tasks)
        finally:
            await worker.stop()
    per_minute = max(1, round(60 / sizes.sample_seconds))
    first = [s["jobs_per_s"] for s in samples[:per_minute]]
    last = [s["jobs_per_s"] for s in samples[-per_minute:]]
    results["sustained"] = {
        "minutes": sizes.minutes, "concurrency": sizes.concurrency, "batch": sizes.batch,
        "backlog_cap": sizes.backlog_cap, "samples": samples,
        "completed": samples[-1]["completed"] if samples else 0,
        "first_minute_jobs_per_s": sum(first) / len(first) if first else float("nan"),
        "last_minute_jobs_per_s": sum(last) / len(last) if last else float("nan"),
    }
