"""pgqueue ``handle.result()`` wake-up (issue 26 §3): from the handler's return to ``result()``
returning the value, beside the worker's own wake-up (dispatch's commit to the handler's start).

    uv run --group bench python -m benchmarks --only results      # the section of the full run
    uv run python -m benchmarks.result_wakeup --jobs 200 --runs 3  # alone, printed as JSON

Each run takes a fresh migrated database (dropped afterwards) and one client in this process with
an idle worker LISTENing (concurrency 10, the default). For each job, one at a time with a random
gap (so the worker is idle, as in the wake-up section): ``handle = await client.dispatch(job)`` on
the client's pool (autocommit: the commit has happened when it returns), then ``await
handle.result()``. The handler notes ``time.perf_counter()`` when it starts and just before it
returns a value (so the result is kept: the default ``result_ttl`` of a handler that declares its
return type). Per job:

- **wake-up**: dispatch returned -> handler start (what the worker's NOTIFY path costs);
- **result wake-up**: handler returned -> ``result()`` returned: the completer's flush (every
  ``flush_interval``, 5 ms, after the first pending ack), ``pgqueue.ack_results`` storing the
  result and notifying ``pgqueue_ended`` in the ack's transaction, the client's one LISTEN
  connection waking the waiter, and its ``pgqueue.job_state`` read;
- **end to end**: dispatch returned -> ``result()`` returned.

Worker and waiter share this process's event loop (one clock for both ends of each figure); the
wake-up section of the suite measures the worker in its own process, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.common import Series, fresh_database, percentile
from benchmarks.systems import install
from pgqueue import Client, Job, JobContext

log = logging.getLogger("benchmarks")

STARTED: dict[int, float] = {}
RETURNED: dict[int, float] = {}


class Answers(Job):
    """Returns its sequence number; notes when it started and when it returned."""

    name = "bench:result_wakeup"

    seq: int

    async def handle(self, context: JobContext) -> int:
        STARTED[self.seq] = time.perf_counter()
        RETURNED[self.seq] = time.perf_counter()
        return self.seq


@dataclass
class ResultSizes:
    """How much the section measures."""

    jobs: int = 300  # jobs per run, one at a time
    warmup: int = 5  # jobs per run not counted (connections, prepared statements, the waiter's LISTEN)
    gap: float = 0.05  # mean idle seconds between jobs (uniform 0.5x-1.5x)
    concurrency: int = 10
    runs: int = 3
    ack_flush_interval: float = 0.005  # the worker's default (WorkerOptions.ack_flush_interval)

    @classmethod
    def quick(cls) -> ResultSizes:
        return cls(jobs=60, runs=1)


async def measure(dsn: str, sizes: ResultSizes) -> dict[str, list[float]]:
    """One run on a migrated database: per job, the three figures in milliseconds."""
    STARTED.clear()
    RETURNED.clear()
    figures: dict[str, list[float]] = {"wakeup_ms": [], "result_ms": [], "end_to_end_ms": []}
    rng = random.Random(26)
    async with Client(dsn) as client:
        worker = await client.worker(concurrency=sizes.concurrency, maintenance_interval=None, schedules=False,
                                     ack_flush_interval=sizes.ack_flush_interval)
        task = asyncio.create_task(worker.run())
        try:
            assert worker.notifier is not None
            await asyncio.wait_for(worker.notifier.connected.wait(), 30)
            for seq in range(sizes.warmup + sizes.jobs):
                await asyncio.sleep(sizes.gap * rng.uniform(0.5, 1.5))
                handle = await client.dispatch(Answers(seq=seq))
                committed = time.perf_counter()
                value = await handle.result(timeout=30)
                woken = time.perf_counter()
                if value != seq:
                    raise RuntimeError(f"result wake-up: job {seq} returned {value!r}")
                if seq < sizes.warmup:
                    continue
                figures["wakeup_ms"].append(1000 * (STARTED[seq] - committed))
                figures["result_ms"].append(1000 * (woken - RETURNED[seq]))
                figures["end_to_end_ms"].append(1000 * (woken - committed))
        finally:
            worker.stop()
            await asyncio.wait_for(task, 60)
    return figures


def summary(figures: dict[str, list[float]]) -> dict[str, float]:
    """p50 and p99 of each figure of one run (and the max of the result wake-up)."""
    out: dict[str, float] = {}
    for name, values in figures.items():
        stem = name.removesuffix("_ms")
        out[f"{stem}_p50_ms"] = percentile(values, 50)
        out[f"{stem}_p99_ms"] = percentile(values, 99)
    out["result_max_ms"] = max(figures["result_ms"])
    return out


async def run_result_wakeup(admin_dsn: str, sizes: ResultSizes, results: dict[str, Any]) -> None:
    """The suite's ``results`` section: ``sizes.runs`` runs, each on a fresh database."""
    series: dict[str, Series] = {}
    for round_no in range(1, sizes.runs + 1):
        async with fresh_database(admin_dsn, "results") as dsn:
            await install("pgqueue", dsn)
            one = summary(await measure(dsn, sizes))
        for key, value in one.items():
            series.setdefault(key, Series()).add(value)
        log.info("results round %d/%d: wake-up p50 %.1f ms p99 %.1f ms; result() p50 %.1f ms p99 %.1f ms",
                 round_no, sizes.runs, one["wakeup_p50_ms"], one["wakeup_p99_ms"], one["result_p50_ms"],
                 one["result_p99_ms"])
    results["results"] = {"jobs": sizes.jobs, "concurrency": sizes.concurrency, "gap": sizes.gap,
                          "ack_flush_interval": sizes.ack_flush_interval,
                          "runs": sizes.runs, **{k: v.to_data() for k, v in series.items()}}


def _cell(figure: dict[str, Any]) -> str:
    return f"{figure['median']:.1f} ({figure['min']:.1f}-{figure['max']:.1f})"


def report(results: dict[str, Any]) -> list[str]:
    """The section of RESULTS.md (nothing when the section did not run)."""
    r = results.get("results")
    if not r:
        return []
    return [
        "## pgqueue `handle.result()` wake-up (ms)", "",
        f"`benchmarks/result_wakeup.py`: {r['jobs']} jobs a run, one at a time (mean gap {r['gap']} s), one "
        f"client in one process with an idle worker at concurrency {r['concurrency']}; median of the runs' "
        "percentiles (min-max). *Wake-up*: `client.dispatch` returned (committed) -> handler start. *result()*: "
        "the handler's return -> `await handle.result()` returned its value (the completer's flush of up to "
        "5 ms, the ack storing the result and notifying `pgqueue_ended`, the client's LISTEN connection, its "
        "`job_state` read). *End to end*: dispatch -> value.", "",
        "| figure | p50 | p99 |", "|---|---|---|",
        f"| worker wake-up (dispatch -> handler start) | {_cell(r['wakeup_p50_ms'])} | {_cell(r['wakeup_p99_ms'])} |",
        f"| result() wake-up (handler return -> value) | {_cell(r['result_p50_ms'])} | {_cell(r['result_p99_ms'])} |",
        f"| end to end (dispatch -> value) | {_cell(r['end_to_end_p50_ms'])} | {_cell(r['end_to_end_p99_ms'])} |",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_BENCH_DSN",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"),
                        help="admin DSN of the server to benchmark on (each run creates and drops a database)")
    parser.add_argument("--jobs", type=int, default=ResultSizes.jobs)
    parser.add_argument("--runs", type=int, default=ResultSizes.runs)
    parser.add_argument("--concurrency", type=int, default=ResultSizes.concurrency)
    parser.add_argument("--ack-flush-interval", type=float, default=ResultSizes.ack_flush_interval,
                        help="the worker's ack_flush_interval, seconds (default 0.005, the worker's default)")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    sizes = ResultSizes(jobs=args.jobs, runs=args.runs, concurrency=args.concurrency,
                        ack_flush_interval=args.ack_flush_interval)
    asyncio.run(run_result_wakeup(args.dsn, sizes, results))
    r = results["results"]
    print(json.dumps({"bench": "result_wakeup", "jobs": r["jobs"], "runs": r["runs"],
                      **{k: round(v["median"], 2) for k, v in r.items() if isinstance(v, dict)}}))


if __name__ == "__main__":
    main()
