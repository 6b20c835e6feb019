"""Render times of the dashboard's pages at 1M jobs and 100k failures (issue 16).

    uv run python -m benchmarks.dashboard [--admin-dsn DSN] [--jobs 1000000] [--failures 100000] [--runs 20]

Creates its own database, migrates it, writes the backlog straight into the tables
(benchmarks/sql/dashboard_seed_*.sql), VACUUM ANALYZEs (what autovacuum does to a real
backlog), then requests every page through the ASGI app in-process (httpx): the time is the
whole request (the store's queries, the template, the response), the database on the same
machine. Prints a table of medians and maxima, and pgqueue.queue_stats for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import httpx
import psycopg

from benchmarks.common import fresh_database, sql
from pgqueue import Client, Job, JobContext, load_settings, migrate
from pgqueue.dashboard import create_app

DEFAULT_ADMIN = os.environ.get("PGQUEUE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


class NightlyExport(Job):
    """A periodic job, so the schedules page has rows to show (this process only; no worker runs)."""

    name = "bench:nightly_export"
    queue = "reports"
    schedule = "0 3 * * *"
    schedule_timezone = "Europe/Paris"

    async def handle(self, context: JobContext) -> None:
        return None


class Sweep(Job):
    """Every 5 minutes."""

    name = "bench:sweep"
    schedule = "*/5 * * * *"

    async def handle(self, context: JobContext) -> None:
        return None


async def seed(dsn: str, jobs: int, failures: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        await conn.execute(sql("dashboard_seed_jobs").encode(), {"jobs": jobs})
        await conn.execute(sql("dashboard_seed_failures").encode(), {"failures": failures})
        await conn.execute(b"vacuum analyze pgqueue.jobs")
        await conn.execute(b"vacuum analyze pgqueue.failed_jobs")
        print(f"seeded {jobs:,} jobs and {failures:,} failures in {time.perf_counter() - started:.0f} s")


async def measure(dsn: str, runs: int) -> list[tuple[str, list[float]]]:
    settings = load_settings(None, dsn=dsn, environ={})
    async with Client(settings=settings) as client:
        # Controls on two queues, so the queues page and the overview show them.
        await client.pause("emails")
        await client.set_limits("reports", concurrency=3, rate_limit=100, rate_period=1)
        app = create_app(client)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as web:
            first = (await web.get("/failed")).text
            failure_id = first.split('data-failure="', 1)[1].split('"', 1)[0]
            jobs = (await web.get("/jobs?queue=reports")).text
            job_id = jobs.split('data-job="', 1)[1].split('"', 1)[0]
            second = (await web.get("/failed")).text
            after = second.split('rel="next" href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
            pages = [
                ("overview", "/"),
                ("overview counts (live refresh)", "/overview/counts"),
                ("failed, newest", "/failed"),
                ("failed, next page", after),
                ("failed, queue=emails", "/failed?queue=emails"),
                ("failed, reason=failed_by_handler", "/failed?reason=failed_by_handler"),
                ("failed, name=app:rare (0.1%)", "/failed?name=app:rare"),
                ("failed, last day", "/failed?since=" + time.strftime("%Y-%m-%d %H:%M",
                                                                      time.gmtime(time.time() - 86400))),
                ("failure detail", f"/failed/{failure_id}"),
                ("jobs, newest", "/jobs"),
                ("jobs, queue=reports", "/jobs?queue=reports"),
                ("jobs, name=app:job_3", "/jobs?name=app:job_3"),
                ("job detail", f"/jobs/{job_id}"),
                ("workers", "/workers"),
                ("queues (controls, pause / limits forms)", "/queues"),
                ("schedules (2 periodic jobs)", "/schedules"),
            ]
            results = []
            for label, path in pages:
                times = []
                for _ in range(runs + 2):
                    started = time.perf_counter()
                    response = await web.get(path)
                    times.append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200, (path, response.status_code)
                results.append((label, times[2:]))  # the first two warm the pool and the templates
    return results


async def queue_stats_ms(dsn: str, runs: int) -> list[float]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        times = []
        for _ in range(max(3, runs // 4)):
            started = time.perf_counter()
            await conn.execute(b"select * from pgqueue.queue_stats")
            times.append((time.perf_counter() - started) * 1000)
    return times


async def main(args: Any) -> None:
    async with fresh_database(args.admin_dsn, "dashboard") as dsn:
        await asyncio.to_thread(migrate.upgrade, dsn)
        await seed(dsn, args.jobs, args.failures)
        results = await measure(dsn, args.runs)
        stats = await queue_stats_ms(dsn, args.runs)
    print(f"\n| page ({args.jobs:,} jobs, {args.failures:,} failures) | median ms | max ms |")
    print("|---|---:|---:|")
    for label, times in results:
        print(f"| {label} | {statistics.median(times):.1f} | {max(times):.1f} |")
    print(f"| (for comparison) select * from pgqueue.queue_stats | {statistics.median(stats):.1f} | {max(stats):.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--admin-dsn", default=DEFAULT_ADMIN)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--failures", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
