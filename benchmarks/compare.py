"""The side-by-side measurements: enqueue (single, bulk), drain, wake-up latency, delayed lateness.

Every measurement gets a fresh database with the system's schema installed by its own
tooling. Runs alternate between systems (A B C A B C ...) so drift hits all equally.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.common import Series, WorkerProcess, fresh_database, percentile
from benchmarks.server_cost import ServerProbe
from benchmarks.systems import install, producer, verify

log = logging.getLogger("benchmarks")


@dataclass
class Sizes:
    """How much work each measurement does."""

    single: int = 1000
    bulk: int = 100_000  # 100 calls of bulk_chunk
    bulk_chunk: int = 1000
    drain: int = 20_000
    latency: int = 200
    latency_gap: float = 0.05
    delayed: int = 200
    delayed_span: float = 10.0
    runs: int = 3


@dataclass(frozen=True)
class Case:
    """One system in one configuration: what a row of the report is about."""

    system: str
    variant: str = "default"
    concurrency: int = 0

    @property
    def key(self) -> str:
        parts = [self.system]
        if self.variant != "default":
            parts.append(self.variant)
        if self.concurrency:
            parts.append(f"c{self.concurrency}")
        return "/".join(parts)


Measure = Callable[[Case, str], Awaitable[dict[str, float]]]
ADMIN_DSN = ""  # set by alternate(): the server probes sample on the admin connection


async def alternate(admin_dsn: str, name: str, cases: list[Case], runs: int, measure: Measure,
                    results: dict[str, Any]) -> None:
    """Run ``measure`` for every case, ``runs`` rounds, alternating cases within each round.

    A case that fails (a job lost or run twice, a worker that died, a timeout) is logged and listed
    under ``results["failures"]`` (RESULTS.md shows them first) and the run goes on: one peer's
    failure does not cost the hours of every other measurement.
    """
    global ADMIN_DSN  # noqa: PLW0603
    ADMIN_DSN = admin_dsn
    section: dict[str, dict[str, Series]] = results.setdefault(name, {})
    for round_no in range(1, runs + 1):
        for case in cases:
            started = time.monotonic()
            try:
                async with fresh_database(admin_dsn, case.system) as dsn:
                    await install(case.system, dsn)
                    started = time.monotonic()
                    figures = await measure(case, dsn)
            except Exception as exc:
                log.exception("%s round %d/%d %s FAILED", name, round_no, runs, case.key)
                results.setdefault("failures", []).append(
                    f"{name} {case.key} round {round_no}: {type(exc).__name__}: {exc}")
                continue
            for figure, value in figures.items():
                section.setdefault(case.key, {}).setdefault(figure, Series()).add(value)
            shown = ", ".join(f"{k}={v:,.1f}" for k, v in figures.items())
            log.info("%s round %d/%d %-28s %s (%.1fs)", name, round_no, runs, case.key, shown,
                     time.monotonic() - started)


# ------------------------------------------------------------------- enqueue
def single_enqueue(sizes: Sizes) -> Measure:
    async def measure(case: Case, dsn: str) -> dict[str, float]:
        async with producer(case.system, dsn, case.variant) as p:
            await p.singles([-1 - seq for seq in range(20)])  # warm the connection and prepared statements
            elapsed = await p.singles(list(range(sizes.single)))
        return {"jobs_per_s": sizes.single / elapsed}
    return measure


def bulk_enqueue(sizes: Sizes) -> Measure:
    async def measure(case: Case, dsn: str) -> dict[str, float]:
        async with producer(case.system, dsn, case.variant) as p:
            await p.bulk(list(range(-sizes.bulk_chunk, 0)))  # warm-up chunk
            chunks = [list(range(first, min(first + sizes.bulk_chunk, sizes.bulk)))
                      for first in range(0, sizes.bulk, sizes.bulk_chunk)]
            async with ServerProbe(ADMIN_DSN, dsn) as probe:
                elapsed = await p.bulks(chunks)
        return {"jobs_per_s": sizes.bulk / elapsed, **await probe.figures(sizes.bulk)}
    return measure


# --------------------------------------------------------------------- drain
def drain_size(sizes: Sizes, concurrency: int) -> int:
    """Jobs per drain run: the same at every concurrency, long enough that start-up does not dominate."""
    return sizes.drain


def drain(sizes: Sizes) -> Measure:
    async def measure(case: Case, dsn: str) -> dict[str, float]:
        total = drain_size(sizes, case.concurrency)
        async with producer(case.system, dsn) as p:
            for first in range(0, total, 1000):
                await p.bulk(list(range(first, min(first + 1000, total))))
        worker = WorkerProcess(case.system, dsn, "drain", case.concurrency, case.variant, expect=total)
        async with ServerProbe(ADMIN_DSN, dsn) as probe:
            await worker.start()
            result = await worker.wait(within=max(180.0, total / 10))
        check = await verify(case.system, dsn, total)
        calls, distinct = int(result["calls"]), int(result["distinct"])
        if not check["ok"] or calls != total or distinct != total:
            raise RuntimeError(f"drain {case.key}: expected {total} jobs completed once; handler calls "
                               f"{calls}, distinct {distinct}; database: {check['detail']}")
        window = float(result["last"]) - float(result["first"])
        # jobs_per_s: handler starts per second from the first to the last job (the steady
        # rate); wall_jobs_per_s also counts the system's run() start-up and shutdown.
        return {"jobs_per_s": (total - 1) / window if window > 0 else float("nan"),
                "wall_jobs_per_s": total / float(result["elapsed"]), "jobs": total, "handler_calls": calls,
                **await probe.figures(total)}
    return measure


# ----------------------------------------------------------------- latencies
async def _serving(case: Case, dsn: str, body: Callable[[WorkerProcess, Any], Awaitable[dict[str, float]]]
                   ) -> dict[str, float]:
    """Start an idle worker in its own process, warm it with 3 jobs, then run ``body``."""
    worker = WorkerProcess(case.system, dsn, "serve", case.concurrency or _default_concurrency(case.system),
                           case.variant)
    await worker.start()
    try:
        await asyncio.wait_for(worker.ready.wait(), 60)
        async with producer(case.system, dsn) as p:
            for seq in range(3):
                await p.single(-1 - seq)
            await worker.wait_hits(3, within=60)
            worker.hits.clear()
            await asyncio.sleep(0.5)  # let the worker go idle again
            return await body(worker, p)
    finally:
        await worker.stop()


def _default_concurrency(system: str) -> int:
    # Each system's own default: pgqueue Client.worker() 10, procrastinate 1, PgQueuer no cap,
    # awa's QueueConfig max_workers 50, oban's queue limit 10 (its Producer default), chancy 10
    # (its Queue leaves None = the worker's core count; 10 is its docs' examples' figure).
    return {"pgqueue": 10, "pgqueue_base": 10, "procrastinate": 1, "pgqueuer": 0, "awa": 50, "oban": 10,
            "chancy": 10}[system]


def wakeup_latency(sizes: Sizes) -> Measure:
    async def measure(case: Case, dsn: str) -> dict[str, float]:
        async def body(worker: WorkerProcess, p: Any) -> dict[str, float]:
            committed: dict[int, float] = {}
            rng = random.Random(6)
            for seq in range(sizes.latency):
                await asyncio.sleep(sizes.latency_gap * (0.5 + rng.random()))
                committed[seq] = await p.single(seq)
            await worker.wait_hits(sizes.latency, within=60)
            lat = [(at - committed[seq]) * 1000 for seq, at in worker.hits if seq in committed]
            return {"p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95), "p99_ms": percentile(lat, 99)}
        return await _serving(case, dsn, body)
    return measure


def delayed_lateness(sizes: Sizes) -> Measure:
    async def measure(case: Case, dsn: str) -> dict[str, float]:
        async def body(worker: WorkerProcess, p: Any) -> dict[str, float]:
            # Jobs are enqueued at random moments over the span, each due 0.5-3 s later,
            # as an application would schedule them while the worker idles.
            rng = random.Random(7)
            due: dict[int, float] = {}
            gap = sizes.delayed_span / sizes.delayed
            for seq in range(sizes.delayed):
                await asyncio.sleep(gap * (0.5 + rng.random()))
                due[seq] = time.time() + 0.5 + 2.5 * rng.random()
                await p.delayed(seq, due[seq])
            await worker.wait_hits(sizes.delayed, within=60)
            late = [(at - due[seq]) * 1000 for seq, at in worker.hits if seq in due]
            return {"p50_ms": percentile(late, 50), "p99_ms": percentile(late, 99), "max_ms": max(late)}
        return await _serving(case, dsn, body)
    return measure
