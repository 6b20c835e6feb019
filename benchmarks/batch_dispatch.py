"""Issue 26 §3 (first figure): dispatching a batch with a callback next to ``dispatch_many`` of the
same jobs, interleaved, in a throwaway database of the server at ``--dsn``.

    uv run --frozen python -m benchmarks.batch_dispatch [--dsn ADMIN_DSN] [--members 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import psycopg

from pgqueue import Client, Job, JobContext, migrate


class Member(Job):
    """A job that is never run here: only its dispatch is timed."""

    name = "bench:batch_member"
    n: int

    async def handle(self, context: JobContext) -> None:
        return None


async def _time(client: Client, members: int, batch: bool) -> float:
    jobs = [Member(n=i) for i in range(members)]
    started = time.perf_counter()
    if batch:
        await client.batch(jobs, then=Member(n=-1))
    else:
        await client.dispatch_many(jobs)
    return time.perf_counter() - started


async def run(admin_dsn: str, members: int, rounds: int) -> dict[str, float]:
    """Median seconds of each way of dispatching ``members`` jobs."""
    name = f"pgqueue_bench_batch_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=name)
    try:
        migrate.upgrade(dsn)
        times: dict[str, list[float]] = {"dispatch_many": [], "batch": []}
        async with Client(dsn) as client:
            await _time(client, 100, False)  # warm-up: pool, prepared statements
            for n in range(rounds):
                for batch in (False, True) if n % 2 else (True, False):
                    times["batch" if batch else "dispatch_many"].append(await _time(client, members, batch))
        return {way: statistics.median(ts) for way, ts in times.items()}
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'drop database "{name}" with (force)')


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.batch_dispatch")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--members", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result = asyncio.run(run(args.dsn, args.members, args.rounds))
    for way, seconds in result.items():
        print(f"{way} of {args.members} jobs: median {seconds:.3f} s ({args.members / seconds:,.0f} jobs/s)")
    print(f"batch / dispatch_many: {result['batch'] / result['dispatch_many']:.2f}x")


if __name__ == "__main__":
    main()
