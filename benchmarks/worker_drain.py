"""pgqueue worker benchmark: drain throughput, wake-up latency, delayed-job lateness, memory.

    uv run python -m benchmarks.worker_drain --dsn postgresql://postgres@127.0.0.1/postgres drain --jobs 200000
    uv run python -m benchmarks.worker_drain --dsn ... drain --jobs 20000 --rate 1000/s [--burst 1]
    uv run python -m benchmarks.worker_drain --dsn ... latency --jobs 500
    uv run python -m benchmarks.worker_drain --dsn ... delayed --jobs 200
    uv run python -m benchmarks.worker_drain --dsn ... memory --jobs 1000000
    uv run python -m benchmarks.worker_drain --dsn ... drain --jobs 100000 --metrics   # Prometheus metrics on
    PGQUEUE_BENCH_PREFETCH=0 uv run python -m benchmarks.worker_drain --dsn ... drain   # the worker without prefetch
    uv run python -m benchmarks.worker_drain --dsn ... metrics-cost --jobs 100000 --rounds 3
        # drains alternating metrics off/on, --rounds each; medians of throughput and worker CPU per 10k jobs

Each run creates a fresh database (dropped afterwards). The worker runs in its own process;
the producer in this one. Figures are printed as JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue import Client, Job, JobContext, migrate, parse_rate

WORKER_RESULTS: list[tuple[str, float]] = []


class Noop(Job):
    """Does nothing: measures the queue, not the handler."""

    name = "bench:noop"

    async def handle(self, context: JobContext) -> None:
        return None


class Pause(Job):
    """Waits 10 ms (an await, as a call to another service would): a job whose run time, not the
    queue, bounds a worker's throughput (benchmarks/partitions.py's limit cases)."""

    name = "bench:pause"

    async def handle(self, context: JobContext) -> None:
        await asyncio.sleep(0.01)


class LongPause(Job):
    """Waits 100 ms (an await): a job like the calls to a downstream API that limits exist for."""

    name = "bench:pause100"

    async def handle(self, context: JobContext) -> None:
        await asyncio.sleep(0.1)


class Stamp(Job):
    """Records when it started (epoch seconds), keyed by its job id."""

    name = "bench:stamp"

    async def handle(self, context: JobContext) -> None:
        WORKER_RESULTS.append((str(context.id), time.time()))


def _db(dsn: str, name: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo("", **params)


def fresh_database(admin_dsn: str) -> str:
    name = f"pgqueue_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    dsn = _db(admin_dsn, name)
    migrate.upgrade(dsn)
    return name


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')


def machine_busy_seconds() -> float:
    """CPU time the whole machine spent busy since boot (every core; /proc/stat, all but idle and iowait):
    the worker, the PostgreSQL server and anything else, so a drain's cost per job includes the server's.
    On a virtual machine the time the hypervisor stole counts as busy (about 1% here)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run_worker(dsn: str, concurrency: int, max_jobs: int | None, stop_when_empty: bool,
                     rss_at: list[int], metrics: bool = False) -> dict[str, Any]:
    recorder = server = None
    if metrics:  # as `queue:work --metrics-port`: a Recorder, its HTTP endpoint, the depth sampler
        from pgqueue.metrics import Recorder, serve, snapshot_of

        recorder = Recorder()
        rec = recorder
        server = serve(0, lambda: [snapshot_of(rec)], addr="127.0.0.1")
    async with Client(dsn) as client:
        # PGQUEUE_BENCH_PREFETCH=N overrides the default prefetch (0: reserve only the free slots).
        prefetch = os.environ.get("PGQUEUE_BENCH_PREFETCH")
        worker = await client.worker(concurrency=concurrency, poll_interval=5.0, instruments=recorder,
                                     prefetch=None if prefetch is None else int(prefetch))
        marks: dict[str, float] = {}

        async def sample() -> None:
            pending = sorted(rss_at)
            while pending:
                if worker.stats.processed >= pending[0]:
                    marks[str(pending.pop(0))] = rss_mib()
                else:
                    await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample()) if rss_at else None
        print(json.dumps({"ready": True}), flush=True)
        started = time.perf_counter()
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        busy_before = machine_busy_seconds()
        processed = await worker.run(stop_when_empty=stop_when_empty, max_jobs=max_jobs)
        elapsed = time.perf_counter() - started
        busy = machine_busy_seconds() - busy_before
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
        if server is not None:
            server.shutdown()
        if sampler is not None:
            sampler.cancel()
            for mark in rss_at:  # marks reached in the last moments of the run
                if str(mark) not in marks and processed >= mark:
                    marks[str(mark)] = rss_mib()
        return {"processed": processed, "seconds": elapsed, "jobs_per_s": processed / elapsed,
                "cpu_s_per_10k": 10_000 * cpu_s / max(processed, 1),
                "machine_cpu_s_per_10k": 10_000 * busy / max(processed, 1),
                "machine_busy_pct": 100 * busy / (elapsed * (os.cpu_count() or 1)),
                "rss_mib": marks, "results": WORKER_RESULTS}


def worker_main(argv: list[str]) -> None:
    dsn, concurrency, max_jobs, stop_when_empty, rss_at = argv[0], int(argv[1]), int(argv[2]), argv[3] == "1", argv[4]
    metrics = len(argv) > 5 and argv[5] == "1"
    marks = [int(x) for x in rss_at.split(",") if x]
    result = asyncio.run(run_worker(dsn, concurrency, max_jobs or None, stop_when_empty, marks, metrics))
    print(json.dumps(result), flush=True)


def spawn_worker(dsn: str, concurrency: int, max_jobs: int, stop_when_empty: bool,
                 rss_at: str = "", metrics: bool = False) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.worker_drain", "--worker", dsn, str(concurrency), str(max_jobs),
         "1" if stop_when_empty else "0", rss_at, "1" if metrics else "0"],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert json.loads(line)["ready"], line
    return proc


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=3600)
    return dict(json.loads(out.strip().splitlines()[-1]))


async def enqueue_bulk(dsn: str, jobs: int, chunk: int = 10_000) -> float:
    started = time.perf_counter()
    async with Client(dsn) as client:
        for start in range(0, jobs, chunk):
            await client.dispatch_many([Noop() for _ in range(min(chunk, jobs - start))])
    return time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def set_rate(dsn: str, rate: str, burst: int | None) -> None:
    count, period = parse_rate(rate)
    async with Client(dsn) as client:
        await client.set_limits("default", rate_limit=count, rate_period=period, burst=burst)


def drain(admin: str, jobs: int, concurrency: int, rate: str | None = None,
          burst: int | None = None, metrics: bool = False) -> dict[str, Any]:
    name = fresh_database(admin)
    dsn = _db(admin, name)
    try:
        enqueue_s = asyncio.run(enqueue_bulk(dsn, jobs))
        if rate is not None:
            asyncio.run(set_rate(dsn, rate, burst))
            with psycopg.connect(admin, autocommit=True) as conn:
                # Count the worker's pgqueue.reserve calls: jobs per reservation.
                conn.execute(f'alter database "{name}" set track_functions = \'pl\'')
        proc = spawn_worker(dsn, concurrency, 0, True, metrics=metrics)
        result = finish(proc)
        with psycopg.connect(dsn) as conn:
            left = conn.execute("select count(*) from pgqueue.jobs").fetchone()
            calls = conn.execute("select sum(calls) from pg_stat_user_functions "
                                 "where schemaname = 'pgqueue' and funcname = 'reserve'").fetchone()
        figures = {"bench": "drain", "jobs": jobs, "concurrency": concurrency,
                   "enqueue_jobs_per_s": jobs / enqueue_s, "drain_jobs_per_s": result["jobs_per_s"],
                   "processed": result["processed"], "worker_cpu_s_per_10k": result["cpu_s_per_10k"],
                   "machine_cpu_s_per_10k": result["machine_cpu_s_per_10k"],
                   "machine_busy_pct": result["machine_busy_pct"],
                   "metrics": metrics, "left": left[0] if left else None}
        if rate is not None:
            reserves = int(calls[0]) if calls and calls[0] else 0
            figures.update({"rate": rate, "burst": burst, "reserve_calls": reserves,
                            "jobs_per_reserve": result["processed"] / reserves if reserves else None})
        return figures
    finally:
        drop_database(admin, name)


def metrics_cost(admin: str, jobs: int, concurrency: int, rounds: int) -> dict[str, Any]:
    """Drains alternating metrics off and on, ``rounds`` each; medians of each side."""
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for _ in range(rounds):
        for metrics in (False, True):
            run = drain(admin, jobs, concurrency, metrics=metrics)
            print(json.dumps(run), file=sys.stderr, flush=True)
            runs[metrics].append(run)
    median = {side: {"drain_jobs_per_s": statistics.median(r["drain_jobs_per_s"] for r in found),
                     "worker_cpu_s_per_10k": statistics.median(r["worker_cpu_s_per_10k"] for r in found)}
              for side, found in runs.items()}
    return {"bench": "metrics_cost", "jobs": jobs, "concurrency": concurrency, "rounds": rounds,
            "off": median[False], "on": median[True],
            "throughput_change_pct": 100 * (median[True]["drain_jobs_per_s"] / median[False]["drain_jobs_per_s"] - 1),
            "cpu_change_pct": 100 * (median[True]["worker_cpu_s_per_10k"] / median[False]["worker_cpu_s_per_10k"] - 1),
            "runs": {"off": [r["drain_jobs_per_s"] for r in runs[False]],
                     "on": [r["drain_jobs_per_s"] for r in runs[True]]}}


def memory(admin: str, jobs: int, concurrency: int) -> dict[str, Any]:
    name = fresh_database(admin)
    dsn = _db(admin, name)
    try:
        asyncio.run(enqueue_bulk(dsn, jobs, chunk=20_000))
        proc = spawn_worker(dsn, concurrency, 0, True, rss_at=f"10000,{jobs // 10},{jobs // 2},{jobs}")
        result = finish(proc)
        marks = result["rss_mib"]
        first, last = marks.get("10000"), marks.get(str(jobs))
        return {"bench": "memory", "jobs": jobs, "concurrency": concurrency, "rss_mib": marks,
                "growth_pct": None if not first or not last else 100 * (last - first) / first,
                "drain_jobs_per_s": result["jobs_per_s"]}
    finally:
        drop_database(admin, name)


async def produce_spaced(dsn: str, jobs: int, gap: float, delay: float) -> dict[str, float]:
    """Dispatch one job at a time; returns job id -> the moment it became runnable (epoch s):
    its commit for an immediate job, commit + delay for a delayed one."""
    runnable: dict[str, float] = {}
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        client = Client(dsn)
        for _ in range(jobs):
            async with conn.transaction():
                job_id = await Stamp().dispatch(conn, using=client, delay=delay)
                inserted = time.time()
            committed = time.time()
            runnable[str(job_id)] = committed if delay == 0 else max(committed, inserted + delay)
            await asyncio.sleep(gap)
    return runnable


def latency(admin: str, jobs: int, concurrency: int, delay: float) -> dict[str, Any]:
    name = fresh_database(admin)
    dsn = _db(admin, name)
    try:
        proc = spawn_worker(dsn, concurrency, jobs, False)
        # Give the worker time to LISTEN and go idle before the first job.
        time.sleep(1.0)
        runnable = asyncio.run(produce_spaced(dsn, jobs, 0.02 if delay == 0 else 0.01, delay))
        result = finish(proc)
        ms = [1000 * (started - runnable[job_id]) for job_id, started in result["results"]]
        return {"bench": "latency" if delay == 0 else "delayed_lateness", "jobs": len(ms), "delay_s": delay,
                "p50_ms": statistics.median(ms), "p95_ms": percentile(ms, 0.95), "p99_ms": percentile(ms, 0.99),
                "max_ms": max(ms)}
    finally:
        drop_database(admin, name)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_BENCH_DSN", "postgresql://postgres@127.0.0.1/postgres"),
                        help="admin DSN of the server to benchmark on")
    parser.add_argument("bench", choices=["drain", "latency", "delayed", "memory", "metrics-cost"])
    parser.add_argument("--metrics", action="store_true",
                        help="drain: the worker records and serves Prometheus metrics")
    parser.add_argument("--rounds", type=int, default=3, help="metrics-cost: drains per side")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--delay", type=float, default=0.5, help="delay of each job for the delayed bench")
    parser.add_argument("--rate", help="drain: a rate limit on the queue, e.g. 1000/s (queue:limit --rate)")
    parser.add_argument("--burst", type=int, help="drain: the rate's burst (default: the rate per period)")
    args = parser.parse_args()
    if args.bench == "drain":
        result = drain(args.dsn, args.jobs, args.concurrency, args.rate, args.burst, args.metrics)
    elif args.bench == "metrics-cost":
        result = metrics_cost(args.dsn, args.jobs, args.concurrency, args.rounds)
    elif args.bench == "memory":
        result = memory(args.dsn, args.jobs, args.concurrency)
    elif args.bench == "latency":
        result = latency(args.dsn, args.jobs, args.concurrency, 0.0)
    else:
        result = latency(args.dsn, args.jobs, args.concurrency, args.delay)
    with psycopg.connect(args.dsn) as conn:
        version = conn.execute("show server_version").fetchone()
        fsync = conn.execute("show fsync").fetchone()
    result["postgresql"] = version[0] if version else "?"
    result["fsync"] = fsync[0] if fsync else "?"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
