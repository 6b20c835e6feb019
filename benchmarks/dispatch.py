"""Dispatch throughput: single dispatch (one transaction per job) and bulk dispatch_many.

Runs against a fresh database created on the server of ``--dsn`` (an admin DSN; default: the
machine's PostgreSQL at 127.0.0.1:5432) and dropped afterwards. Prints jobs/s per scenario.

    uv run python benchmarks/dispatch.py
    uv run python benchmarks/dispatch.py --single 5000 --bulk 100000 --profile

``--profile`` also runs cProfile over the Python side of dispatch_many (building, validating and
encoding envelopes, no database) and prints the top functions.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import time

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue import Client, Job, JobContext, load_settings, migrate
from pgqueue.sql import statement


class SendReceipt(Job):
    """A typical small job: an id and a string."""

    name = "bench.send_receipt"

    order_id: int
    email: str

    async def handle(self, context: JobContext) -> None:
        return None


def make_jobs(count: int, start: int = 0) -> list[SendReceipt]:
    return [SendReceipt(order_id=i, email=f"user{i}@example.com") for i in range(start, start + count)]


def database_dsn(admin: str, name: str) -> str:
    params = conninfo_to_dict(admin)
    params["dbname"] = name
    return make_conninfo("", **params)


def report(label: str, count: int, seconds: float) -> None:
    print(f"{label:<58} {count:>8} jobs {seconds:8.3f} s {count / seconds:>12,.0f} jobs/s", flush=True)


async def truncate(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("truncate pgqueue.jobs")
        await conn.execute("vacuum analyze pgqueue.jobs")


async def count_jobs(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute("select count(*) from pgqueue.jobs")
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def bench_single_on_connection(client: Client, dsn: str, count: int) -> None:
    jobs = make_jobs(count)
    async with await psycopg.AsyncConnection.connect(dsn, prepare_threshold=0) as conn:
        started = time.perf_counter()
        for job in jobs:
            async with conn.transaction():
                await job.dispatch(conn, using=client)
        elapsed = time.perf_counter() - started
    assert await count_jobs(dsn) == count
    report("single: Job.dispatch(AsyncConnection), 1 transaction/job", count, elapsed)


async def bench_single_own_pool(client: Client, dsn: str, count: int) -> None:
    jobs = make_jobs(count)
    await client.dispatch(make_jobs(1)[0])  # open the pool outside the timing
    await truncate(dsn)
    started = time.perf_counter()
    for job in jobs:
        await client.dispatch(job)
    elapsed = time.perf_counter() - started
    assert await count_jobs(dsn) == count
    report("single: Client.dispatch() on the client's own pool (autocommit)", count, elapsed)


async def bench_single_unique(client: Client, dsn: str, count: int, *, duplicate: bool) -> None:
    """Client.dispatch_unique on the own pool: distinct keys (each inserts) or one key (all but the first are
    duplicates)."""
    jobs = make_jobs(count)
    await client.dispatch(make_jobs(1)[0])  # open the pool outside the timing
    await truncate(dsn)
    started = time.perf_counter()
    for n, job in enumerate(jobs):
        await client.dispatch_unique(job, "same" if duplicate else f"order:{n}")
    elapsed = time.perf_counter() - started
    assert await count_jobs(dsn) == (1 if duplicate else count)
    what = "one key, duplicates" if duplicate else "distinct keys"
    report(f"single: Client.dispatch_unique() on the own pool, {what}", count, elapsed)


async def bench_bulk(client: Client, dsn: str, total: int, chunk: int) -> None:
    jobs = make_jobs(total)
    started = time.perf_counter()
    for offset in range(0, total, chunk):
        await client.dispatch_many(jobs[offset:offset + chunk])
    elapsed = time.perf_counter() - started
    assert await count_jobs(dsn) == total
    report(f"bulk: dispatch_many, chunks of {chunk}", total, elapsed)


def bench_python_side(client: Client, total: int, chunk: int, profile: bool) -> None:
    """Envelope building + validation + encoding alone, as dispatch_many does it (no database)."""
    jobs = make_jobs(total)
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    for offset in range(0, total, chunk):
        client.encode_many(jobs[offset:offset + chunk])
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - started
    report(f"python side only: build+validate+encode, chunks of {chunk}", total, elapsed)
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


async def bench_sql_side(dsn: str, client: Client, total: int, chunk: int) -> None:
    """The enqueue_many statement alone, with the JSON text prepared beforehand."""
    jobs = make_jobs(total)
    texts = [client.encode_many(jobs[offset:offset + chunk]).text for offset in range(0, total, chunk)]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        for text in texts:
            await conn.execute(statement("enqueue_many"), (text, None))
        elapsed = time.perf_counter() - started
    report(f"sql side only: enqueue_many, chunks of {chunk}", total, elapsed)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_BENCH_DSN", "postgresql://postgres@127.0.0.1/postgres"),
                        help="admin DSN of the server to benchmark on (a database is created and dropped)")
    parser.add_argument("--single", type=int, default=3000, help="jobs for each single-dispatch scenario")
    parser.add_argument("--bulk", type=int, default=100_000, help="jobs for each bulk scenario")
    parser.add_argument("--profile", action="store_true", help="cProfile the Python side of dispatch_many")
    options = parser.parse_args()

    name = f"pgqueue_bench_dispatch_{os.getpid()}"
    with psycopg.connect(options.dsn, autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
        version = admin.execute("show server_version").fetchone()
        fsync = admin.execute("show fsync").fetchone()
        sync_commit = admin.execute("show synchronous_commit").fetchone()
    dsn = database_dsn(options.dsn, name)
    print(f"PostgreSQL {version[0] if version else '?'} (fsync={fsync[0] if fsync else '?'}, "
          f"synchronous_commit={sync_commit[0] if sync_commit else '?'}), fresh database {name}", flush=True)
    try:
        migrate.upgrade(dsn)
        client = Client(settings=load_settings(None, dsn=dsn, environ={}))
        try:
            await bench_single_on_connection(client, dsn, options.single)
            await truncate(dsn)
            await bench_single_own_pool(client, dsn, options.single)
            if hasattr(client, "dispatch_unique"):  # revision 0003 on: unique keys (issue 13)
                await bench_single_unique(client, dsn, options.single, duplicate=False)
                await bench_single_unique(client, dsn, options.single, duplicate=True)
            for chunk in (5_000, options.bulk):
                await truncate(dsn)
                await bench_bulk(client, dsn, options.bulk, chunk)
            for chunk in (5_000, options.bulk):
                bench_python_side(client, options.bulk, chunk, options.profile and chunk == 5_000)
            for chunk in (5_000, options.bulk):
                await truncate(dsn)
                await bench_sql_side(dsn, client, options.bulk, chunk)
        finally:
            await client.close()
    finally:
        with psycopg.connect(options.dsn, autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')


if __name__ == "__main__":
    asyncio.run(main())

