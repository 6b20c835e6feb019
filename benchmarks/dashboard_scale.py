"""Page cost of the dashboard at 1k and at 1M jobs (issue 29): the overview, queues, jobs (and the
search), a job, workers, failed, a failure and schedules pages, on the same backlog shape at both sizes.

    uv run python -m benchmarks.dashboard_scale [--admin-dsn DSN] [--sizes 1000,1000000] [--runs 20]

Per size: a database of its own, migrated; the backlog written straight into the tables
(benchmarks/sql/dashboard_seed_*.sql: jobs in 5 queues, one failure per 10 jobs, 5 registered
workers each holding 10 reserved jobs, one of them gone); VACUUM ANALYZE; then each page requested
through the ASGI app in-process (httpx), the whole request timed (a job's page: the newest reserved
job; a failure's page: the newest failure; the schedules page: the two periodic jobs
benchmarks.dashboard declares). Prints one table: median (max) ms per page and size. "Flat" means
the 1M column is about the 1k one.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx
import psycopg

from benchmarks.common import fresh_database, sql
from benchmarks.dashboard import DEFAULT_ADMIN, seed
from pgqueue import Client, load_settings, migrate
from pgqueue.dashboard import create_app

PAGES = (
    ("overview", "/"),
    ("overview counts (live refresh)", "/overview/counts"),
    ("queues", "/queues"),
    ("jobs, newest", "/jobs"),
    ("jobs, queue=reports", "/jobs?queue=reports"),
    ("jobs, search: name part + args", "/jobs?name=job_3&args=to%3Duser10"),
    ("jobs, search: state=delayed", "/jobs?state=delayed"),
    ("a job (reserved, under its lease)", "/jobs/{job}"),
    ("workers (5 registered)", "/workers"),
    ("failed, newest", "/failed"),
    ("a failure", "/failed/{failure}"),
    ("schedules (2 periodic jobs)", "/schedules"),
)


async def first_id(web: httpx.AsyncClient, path: str, attribute: str) -> str:
    """The id in the first row of a list page (``data-job="..."``, ``data-failure="..."``)."""
    text = (await web.get(path)).text
    return text.split(f'{attribute}="', 1)[1].split('"', 1)[0]


async def measure(dsn: str, runs: int) -> dict[str, list[float]]:
    settings = load_settings(None, dsn=dsn, environ={})
    async with Client(settings=settings) as client:
        await client.pause("emails")
        app = create_app(client)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as web:
            ids = {"job": await first_id(web, "/jobs?queue=default&state=reserved", "data-job"),
                   "failure": await first_id(web, "/failed", "data-failure")}
            found: dict[str, list[float]] = {}
            for label, pattern in PAGES:
                path = pattern.format(**ids)
                times = []
                for _ in range(runs + 2):
                    started = time.perf_counter()
                    response = await web.get(path)
                    times.append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200, (path, response.status_code)
                found[label] = times[2:]  # the first two warm the pool and the templates
    return found


async def one_size(admin_dsn: str, jobs: int, runs: int) -> dict[str, list[float]]:
    async with fresh_database(admin_dsn, "dashboard_scale") as dsn:
        await asyncio.to_thread(migrate.upgrade, dsn)
        await seed(dsn, jobs, max(jobs // 10, 1))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(sql("dashboard_seed_workers").encode(), {"workers": 5})
        return await measure(dsn, runs)


async def main(args: Any) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {size: await one_size(args.admin_dsn, size, args.runs) for size in sizes}
    print("\n| page | " + " | ".join(f"{s:,} jobs: median (max) ms" for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for label, _ in PAGES:
        cells = [f"{statistics.median(results[s][label]):.1f} ({max(results[s][label]):.1f})" for s in sizes]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--admin-dsn", default=DEFAULT_ADMIN)
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--runs", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
