"""pgqueue alone: reservation cost and drain throughput against backlogs of 1k, 100k and 1M
ready jobs, and with 1M delayed jobs sitting in front of 10k ready ones."""

from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from benchmarks.common import Series, WorkerProcess, fetch_value, fresh_database, sql
from benchmarks.systems import install, pgqueue_job

log = logging.getLogger("benchmarks")

QUEUE = "default"


@dataclass
class ScalingSizes:
    ready: tuple[int, ...] = (1_000, 100_000, 1_000_000)
    delayed: int = 1_000_000
    delayed_ready: int = 10_000
    drain_jobs: int = 50_000
    concurrency: int = 50
    probes: int = 20
    runs: int = 3


async def _template(dsn: str) -> tuple[str, int]:
    from pgqueue import Client

    noop = pgqueue_job()
    async with Client(dsn) as client:
        envelope, _ = client.envelope(noop(seq=0))
    data = envelope.to_data()
    return json.dumps(data), int(data["tries"])


async def _fill(dsn: str, template: tuple[str, int], first: int, count: int, delay: float) -> None:
    if count <= 0:
        return
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for start in range(first, first + count, 200_000):
            chunk = min(200_000, first + count - start)
            await conn.execute(sql("pgqueue_fill"), {"queue": QUEUE, "template": template[0], "tries": template[1],
                                                     "first": start, "count": chunk, "delay": delay})
        await conn.execute(sql("pgqueue_analyze"))


async def _reserve_cost(dsn: str, probes: int, limit: int) -> float:
    """Median milliseconds of one reserve(limit) call, each rolled back so the backlog stays."""
    timings: list[float] = []
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for _ in range(probes):
            started = time.perf_counter()
            await conn.execute(sql("pgqueue_reserve_probe"), ([QUEUE], limit, 60.0))
            timings.append((time.perf_counter() - started) * 1000)
            await conn.rollback()
    return statistics.median(timings)


async def _drain(dsn: str, jobs: int, concurrency: int) -> dict[str, Any]:
    worker = WorkerProcess("pgqueue", dsn, "drain", concurrency, expect=jobs, extra=["--max-jobs", str(jobs)])
    await worker.start()
    result = await worker.wait(within=max(300.0, jobs / 50))
    if int(result["calls"]) != jobs or int(result["distinct"]) != jobs:
        raise RuntimeError(f"scaling drain: expected {jobs} distinct handler calls, got {result}")
    window = float(result["last"]) - float(result["first"])
    return {"jobs_per_s": (jobs - 1) / window if window > 0 else float("nan"),
            "wall_jobs_per_s": jobs / float(result["elapsed"])}


async def run_scaling(admin_dsn: str, sizes: ScalingSizes, results: dict[str, Any]) -> None:
    section: dict[str, dict[str, Any]] = {}
    results["scaling"] = section
    cases: list[tuple[str, int, int]] = [(f"{n:,} ready", n, 0) for n in sizes.ready]
    cases.append((f"{sizes.delayed:,} delayed + {sizes.delayed_ready:,} ready", sizes.delayed_ready, sizes.delayed))
    for label, ready, delayed in cases:
        figures: dict[str, Series] = {"reserve_ms": Series(), "jobs_per_s": Series(), "wall_jobs_per_s": Series()}
        async with fresh_database(admin_dsn, "scaling") as dsn:
            await install("pgqueue", dsn)
            template = await _template(dsn)
            started = time.monotonic()
            await _fill(dsn, template, 10_000_000, delayed, 86_400.0)  # due tomorrow
            next_seq = 0
            for round_no in range(1, sizes.runs + 1):
                have = int(await fetch_value(dsn, sql("pgqueue_ready_count")))
                await _fill(dsn, template, next_seq, ready - have, 0.0)
                next_seq += ready - have
                figures["reserve_ms"].add(await _reserve_cost(dsn, sizes.probes, sizes.concurrency))
                drained = await _drain(dsn, min(ready, sizes.drain_jobs), sizes.concurrency)
                figures["jobs_per_s"].add(drained["jobs_per_s"])
                figures["wall_jobs_per_s"].add(drained["wall_jobs_per_s"])
                log.info(f"scaling {label:<32} round {round_no}/{sizes.runs} reserve({sizes.concurrency}) "
                         f"{figures['reserve_ms'].values[-1]:.2f} ms, drain {drained['jobs_per_s']:,.0f} jobs/s "
                         f"({time.monotonic() - started:.0f}s so far)")
        section[label] = {"ready": ready, "delayed": delayed, "drained": min(ready, sizes.drain_jobs),
                          **{k: v.to_data() for k, v in figures.items()}}
