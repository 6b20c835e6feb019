"""The scenarios of issue 31, for every system: many processes, a held depth, a pinned xmin.

- **processes** (``processes_drain``): a drain of N jobs by each system scaled the way its docs
  scale it on one host: pgqueue (and pgqueue@rev) with the real ``pgqueue queue:work --processes P``;
  procrastinate and PgQueuer as P worker processes side by side; awa, chancy and oban in one process
  at a higher concurrency (their documented knob: oban's queue limit, awa's max_workers, chancy's
  queue concurrency). Server CPU, WAL and lock waits are sampled as in the drain, to say where a
  curve bends and why;
- **held** (``held_depth``): 2,000 ready jobs kept queued while one producer enqueues in batches of
  128 and 16 handlers consume, producer and worker in one process (``same``) or in two (``split``);
  the figure is jobs consumed per second over the window after a warm-up;
- **xmin** (``pinned_xmin``): jobs produced at a fixed rate (1,000/s) and consumed by 16 handlers;
  after ``clean`` seconds another session holds a transaction with an xid for ``pinned`` seconds,
  then ``after`` seconds more: per phase the rate consumed, pickup p50/p99 (commit of the job's
  batch -> handler start), dead tuples (peak) and table and index sizes of the system's tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import compare
from benchmarks.common import WorkerProcess, percentile, sql
from benchmarks.compare import Case, Measure
from benchmarks.peers import interpreter_for
from benchmarks.server_cost import ServerProbe
from benchmarks.systems import producer, verify

log = logging.getLogger("benchmarks")


@dataclass
class ScenarioSizes:
    """How much work the scenarios do."""

    processes_jobs: int = 40_000
    process_counts: tuple[int, ...] = (1, 2, 4)
    peer_concurrencies: tuple[int, ...] = (10, 50, 200)
    held_seconds: float = 30.0
    held_warmup: float = 3.0
    held_depth: int = 2000
    held_batch: int = 128
    held_concurrency: int = 16
    xmin_rate: float = 1000.0
    xmin_batch: int = 10
    xmin_clean: float = 30.0
    xmin_pinned: float = 120.0
    xmin_after: float = 30.0
    xmin_concurrency: int = 16
    xmin_runs: int = 1

    @classmethod
    def quick(cls) -> ScenarioSizes:
        return cls(processes_jobs=4000, process_counts=(1, 2), peer_concurrencies=(10, 50), held_seconds=4.0,
                   held_warmup=1.0, xmin_rate=200.0, xmin_clean=4.0, xmin_pinned=6.0, xmin_after=4.0)


# ------------------------------------------------------------------ processes
def processes_cases(systems: list[str], sizes: ScenarioSizes) -> list[Case]:
    """Each system at each scale: ``processes`` cases carry the process count in ``concurrency``'s place
    for the multi-process systems (variant ``pN``) and the concurrency for the one-process ones."""
    cases: list[Case] = []
    for system in systems:
        if system in ("awa", "chancy", "oban"):
            cases += [Case(system, "p1", c) for c in sizes.peer_concurrencies]
        else:
            cases += [Case(system, f"p{n}", 50) for n in sizes.process_counts]
    return cases


def _processes(case: Case) -> int:
    return int(case.variant[1:])


def _read_results(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in folder.glob("*.json")]


async def _cli_drain(case: Case, dsn: str, total: int) -> dict[str, Any]:
    """``pgqueue queue:work --processes P --stop-when-empty`` (the system's own CLI and interpreter)."""
    interpreter = interpreter_for(case.system)
    with tempfile.TemporaryDirectory(prefix="pgqueue-bench-") as folder:
        command = [interpreter.python, "-m", "pgqueue_cli", "queue:work", "--queue", "default", "--stop-when-empty",
                   "--processes", str(_processes(case)), "--concurrency", str(case.concurrency),
                   "--app", "benchmarks.cli_app", "--dsn", dsn]
        env = interpreter.environment()
        env["PGQUEUE_BENCH_RESULTS"] = folder
        if interpreter.python == sys.executable:  # this checkout: benchmarks importable from its root
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(interpreter.cwd), env.get("PYTHONPATH")]))
        proc = await asyncio.create_subprocess_exec(*command, cwd=interpreter.cwd, env=env,
                                                    stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.PIPE)
        started = time.monotonic()
        try:
            _, err = await asyncio.wait_for(proc.communicate(), max(300.0, total / 20))
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            await proc.wait()
            raise
        elapsed = time.monotonic() - started
        if proc.returncode != 0:
            raise RuntimeError(f"queue:work --processes {_processes(case)} exited with {proc.returncode}: "
                               f"{err.decode()[-2000:]}")
        results = await asyncio.to_thread(_read_results, Path(folder))
    seen: set[int] = set()
    for r in results:
        seen.update(r["seen"])
    firsts = [r["first"] for r in results if r["first"] is not None]
    return {"calls": sum(int(r["calls"]) for r in results), "distinct": len(seen),
            "first": min(firsts) if firsts else 0.0, "last": max(r["last"] for r in results), "elapsed": elapsed}


async def _workers_drain(case: Case, dsn: str, total: int) -> dict[str, Any]:
    """P worker processes of the system, each until the queue is empty (or, one process, ``expect`` jobs)."""
    count = _processes(case)
    variant = "unlimited" if case.system == "pgqueuer" else "default"
    workers = [WorkerProcess(case.system, dsn, "drain", case.concurrency, variant, expect=total)
               for _ in range(count)]
    started = time.monotonic()
    for worker in workers:
        await worker.start()
    results = [await worker.wait(within=max(300.0, total / 10)) for worker in workers]
    firsts = [r["first"] for r in results if r["first"] is not None]
    return {"calls": sum(int(r["calls"]) for r in results), "distinct": sum(int(r["distinct"]) for r in results),
            "first": min(firsts) if firsts else 0.0, "last": max(float(r["last"]) for r in results),
            "elapsed": time.monotonic() - started}


def processes_drain(sizes: ScenarioSizes) -> Measure:
    async def measure(case: Case, dsn: str) -> dict[str, float]:
        total = sizes.processes_jobs
        async with producer(case.system, dsn) as p:
            await p.bulks([list(range(first, min(first + 1000, total))) for first in range(0, total, 1000)])
        async with ServerProbe(compare.ADMIN_DSN, dsn) as probe:
            if case.system in ("pgqueue", "pgqueue_base"):
                result = await _cli_drain(case, dsn, total)
            else:
                result = await _workers_drain(case, dsn, total)
        check = await verify(case.system, dsn, total)
        if not check["ok"] or result["calls"] != total or result["distinct"] != total:
            raise RuntimeError(f"processes {case.key}: expected {total} jobs completed once; handler calls "
                               f"{result['calls']}, distinct {result['distinct']}; database: {check['detail']}")
        window = float(result["last"]) - float(result["first"])
        return {"jobs_per_s": (total - 1) / window if window > 0 else float("nan"),
                "wall_jobs_per_s": total / float(result["elapsed"]), "jobs": total,
                **await probe.figures(total)}
    return measure


# ----------------------------------------------------------------------- held
def held_cases(systems: list[str]) -> list[Case]:
    return [Case(system, placement) for placement in ("same", "split") for system in systems]


def held_depth(sizes: ScenarioSizes) -> Measure:
    async def measure(case: Case, dsn: str) -> dict[str, float]:
        options = ["--seconds", str(sizes.held_seconds), "--warmup", str(sizes.held_warmup),
                   "--depth", str(sizes.held_depth), "--batch", str(sizes.held_batch)]
        within = sizes.held_seconds + sizes.held_warmup + 180
        if case.variant == "same":
            held = WorkerProcess(case.system, dsn, "held", sizes.held_concurrency, extra=options)
            await held.start()
            result = await held.wait(within=within)
            calls, distinct = int(result["calls"]), int(result["distinct"])
        else:
            with tempfile.TemporaryDirectory(prefix="pgqueue-bench-") as folder:
                counter = str(Path(folder) / "handled")
                worker = WorkerProcess(case.system, dsn, "run", sizes.held_concurrency, extra=["--counter", counter])
                await worker.start()
                try:
                    await asyncio.wait_for(worker.ready.wait(), 120)
                    produce = WorkerProcess(case.system, dsn, "produce", sizes.held_concurrency,
                                            extra=[*options, "--counter", counter])
                    await produce.start()
                    result = await produce.wait(within=within)
                finally:
                    await worker.stop()
                assert worker.result is not None
                calls, distinct = int(worker.result["calls"]), int(worker.result["distinct"])
        if calls != distinct:
            raise RuntimeError(f"held {case.key}: {calls} handler calls on {distinct} distinct jobs")
        return {"jobs_per_s": float(result["consumed_per_s"]), "produced_per_s": float(result["produced_per_s"]),
                "depth_mean": float(result["depth_mean"]), "depth_min": float(result["depth_min"])}
    return measure


# ----------------------------------------------------------------------- xmin
async def _sample_tables(dsn: str, stop: asyncio.Event, samples: list[dict[str, Any]], started: float) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            cur = await conn.execute(sql("table_stats_all"))
            row = await cur.fetchone()
            if row is not None:
                dead, live, table, index, worst = row
                samples.append({"t": time.monotonic() - started, "dead_tuples": int(dead), "live_tuples": int(live),
                                "table_bytes": int(table), "index_bytes": int(index), "most_dead": worst})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


def pinned_xmin(sizes: ScenarioSizes) -> Measure:
    async def measure(case: Case, dsn: str) -> dict[str, float]:
        total_s = sizes.xmin_clean + sizes.xmin_pinned + sizes.xmin_after
        worker = WorkerProcess(case.system, dsn, "serve", sizes.xmin_concurrency)
        samples: list[dict[str, Any]] = []
        stop = asyncio.Event()
        await worker.start()
        try:
            await asyncio.wait_for(worker.ready.wait(), 120)
            pacer = WorkerProcess(case.system, dsn, "pace", sizes.xmin_concurrency,
                                  extra=["--rate", str(sizes.xmin_rate), "--batch", str(sizes.xmin_batch),
                                         "--seconds", str(total_s)])
            await pacer.start()
            await asyncio.wait_for(pacer.ready.wait(), 120)  # its schedule starts now
            started = time.monotonic()
            epoch0 = time.time()
            sampler = asyncio.create_task(_sample_tables(dsn, stop, samples, started))
            await asyncio.sleep(sizes.xmin_clean)
            async with await psycopg.AsyncConnection.connect(dsn) as pin:
                await pin.execute(sql("xmin_pin"))  # holds its xid until the rollback below
                pinned_at = time.time()
                await asyncio.sleep(sizes.xmin_pinned)
                await pin.rollback()
                released_at = time.time()
            paced = await pacer.wait(within=total_s + 120)
            backlog = int(paced["produced"]) - len(worker.hits)
            # A system that did not keep up is a result (its rate and the backlog say so), not an error.
            with contextlib.suppress(TimeoutError):
                await worker.wait_hits(int(paced["produced"]), within=60)
            stop.set()
            await sampler
        finally:
            stop.set()
            await worker.stop()
        seqs = [seq for seq, _ in worker.hits]
        if len(set(seqs)) != len(seqs):
            raise RuntimeError(f"xmin {case.key}: {len(seqs)} handler calls on {len(set(seqs))} distinct jobs")
        commits = {int(first): float(at) for first, at in paced["commits"]}
        batch = int(paced["batch"])
        phases = {"clean": (epoch0, pinned_at), "pinned": (pinned_at, released_at),
                  "after": (released_at, epoch0 + total_s + 0.001)}
        figures: dict[str, float] = {"most_behind_s": float(paced["most_behind_s"]), "backlog_at_end": float(backlog),
                                     "never_picked_up": float(int(paced["produced"]) - len(set(seqs)))}
        for phase, (start, end) in phases.items():
            pickups = [1000 * (at - commits[seq - seq % batch]) for seq, at in worker.hits
                       if start <= commits[seq - seq % batch] < end]
            handled = sum(1 for _, at in worker.hits if start <= at < end)
            window = [s for s in samples if start - epoch0 <= s["t"] < end - epoch0] or samples[-1:]
            figures.update({
                f"{phase}_jobs_per_s": handled / max(end - start, 1e-9),
                f"{phase}_pickup_p50_ms": percentile(pickups, 50),
                f"{phase}_pickup_p99_ms": percentile(pickups, 99),
                f"{phase}_dead_tuples_peak": float(max((s["dead_tuples"] for s in window), default=0)),
                f"{phase}_table_mib": window[-1]["table_bytes"] / 2**20 if window else float("nan"),
                f"{phase}_index_mib": window[-1]["index_bytes"] / 2**20 if window else float("nan"),
            })
        return figures
    return measure
