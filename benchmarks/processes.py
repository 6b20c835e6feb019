"""Drain time with ``pgqueue queue:work --processes N``: no-op jobs and CPU-bound jobs.

    uv run python -m benchmarks.processes --dsn postgresql://postgres@127.0.0.1:5432/postgres

For each workload and each process count, a fresh migrated database gets the whole backlog
(``Client.dispatch_many`` in chunks, before the clock starts), then the real command
``pgqueue queue:work --processes N --stop-when-empty`` runs until the queue is empty. The
time is the command's wall time, start-up of the supervisor and its workers included.

This module is also the job module the workers import (``--app benchmarks.processes``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from pgqueue import Client, Job, JobContext, migrate

ROOT = Path(__file__).resolve().parent.parent


class Noop(Job):
    """Nothing to do: the queue's own cost per job."""

    name = "bench:noop"
    queue = "bench"

    async def handle(self, context: JobContext) -> None:
        return None


class Burn(Job):
    """4,000 SHA-256 rounds: about 1.5 ms of CPU here, holding the worker's event loop as CPU-bound code does."""

    name = "bench:burn"
    queue = "bench"

    rounds: int = 4000

    async def handle(self, context: JobContext) -> None:
        digest = b"pgqueue"
        for _ in range(self.rounds):
            digest = hashlib.sha256(digest).digest()


def _database(admin: str, name: str) -> str:
    return make_conninfo(admin, dbname=name)


async def _fill(dsn: str, jobs: list[Job]) -> None:
    async with Client(dsn=dsn) as client:
        for start in range(0, len(jobs), 5000):
            await client.dispatch_many(jobs[start:start + 5000])


def drain(admin: str, workload: str, count: int, processes: int, concurrency: int) -> dict[str, object]:
    """Seconds for ``queue:work --processes N`` to drain ``count`` jobs of ``workload``."""
    name = f"pgqueue_bench_processes_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    dsn = _database(admin, name)
    try:
        migrate.upgrade(dsn)
        jobs: list[Job] = [Noop() for _ in range(count)] if workload == "noop" else [Burn() for _ in range(count)]
        asyncio.run(_fill(dsn, jobs))
        command = [sys.executable, "-m", "pgqueue_cli", "queue:work", "--queue", "bench", "--stop-when-empty",
                   "--processes", str(processes), "--concurrency", str(concurrency),
                   "--app", "benchmarks.processes", "--dsn", dsn]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        started = time.monotonic()
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        took = time.monotonic() - started
        if result.returncode != 0:
            raise SystemExit(f"queue:work failed ({result.returncode}):\n{result.stderr[-3000:]}")
        with psycopg.connect(dsn) as conn:
            left = conn.execute("select count(*) from pgqueue.jobs").fetchone()
        assert left == (0,), left
        return {"workload": workload, "jobs": count, "processes": processes, "concurrency": concurrency,
                "seconds": round(took, 2), "jobs_per_s": round(count / took)}
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


def main() -> None:
    """Run the four measurements and print one JSON line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True, help="admin DSN of the server to measure on")
    parser.add_argument("--noop", type=int, default=100_000, help="no-op jobs per run")
    parser.add_argument("--burn", type=int, default=10_000, help="CPU-bound jobs per run")
    parser.add_argument("--processes", default="1,2", help="process counts, comma-separated")
    args = parser.parse_args()
    for workload, count, concurrency in (("noop", args.noop, 10), ("burn", args.burn, 1)):
        for processes in (int(p) for p in args.processes.split(",")):
            print(json.dumps(drain(args.dsn, workload, count, processes, concurrency)), flush=True)


if __name__ == "__main__":
    main()
