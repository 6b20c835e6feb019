"""Page cost of the dashboard at 1k and at 1M jobs (issue 29): the overview, queues, jobs (and the
search), a job, workers, failed, a failure and schedules pages, on the same backlog shape at both sizes.

    uv run python -m benchmarks.dashboard_scale [--admin-dsn DSN] [--sizes 1000,1000000] [--runs 20]

Per size: a database of its own, migrated; the backlog written straight into the tables in one
INSERT ... SELECT each (benchmarks/sql/dashboard_seed_*.sql: jobs in 5 queues, one failure per 10
jobs, 5 registered workers each holding 10 reserved jobs, one of them gone); VACUUM ANALYZE. Then
each page is requested through the ASGI app in-process (httpx), the whole request timed, in rounds
that take every page at every size in turn, so a change of the machine's load falls on all sizes
alike. A job's page is the newest reserved job's, a failure's page the newest failure's; the
schedules page lists the two periodic jobs benchmarks.dashboard declares. Prints one table: median
(max) ms per page and size. "Flat" means the 1M column is about the 1k one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
    ("failed, reason=failed_by_handler (1 in 3)", "/failed?reason=failed_by_handler"),
    ("a failure", "/failed/{failure}"),
    ("schedules (2 periodic jobs)", "/schedules"),
    # issue 27: no workflow among the jobs, the worst case: each list reads its whole window.
    ("workflows, live (none among the jobs)", "/workflows"),
    ("workflows, state=waiting_signal", "/workflows?state=waiting_signal"),
    ("workflows, ended", "/workflows?state=ended"),
)


async def first_id(web: httpx.AsyncClient, path: str, attribute: str) -> str:
    """The id in the first row of a list page (``data-job="..."``, ``data-failure="..."``)."""
    text = (await web.get(path)).text
    return text.split(f'{attribute}="', 1)[1].split('"', 1)[0]


async def prepared(stack: contextlib.AsyncExitStack, admin_dsn: str, jobs: int) -> httpx.AsyncClient:
    """A database of its own with the backlog of ``jobs`` jobs, and an HTTP client of a dashboard on it."""
    dsn = await stack.enter_async_context(fresh_database(admin_dsn, "dashboard_scale"))
    await asyncio.to_thread(migrate.upgrade, dsn)
    await seed(dsn, jobs, max(jobs // 10, 1))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(sql("dashboard_seed_workers").encode(), {"workers": 5})
    client = await stack.enter_async_context(Client(settings=load_settings(None, dsn=dsn, environ={})))
    await client.pause("emails")
    transport = httpx.ASGITransport(app=create_app(client))
    return await stack.enter_async_context(httpx.AsyncClient(transport=transport, base_url="http://localhost"))


async def timed(web: httpx.AsyncClient, path: str) -> float:
    started = time.perf_counter()
    response = await web.get(path)
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, (path, response.status_code)
    return elapsed


async def measure(webs: dict[int, httpx.AsyncClient], runs: int) -> dict[int, dict[str, list[float]]]:
    """Every page at every size, in rounds (page by page, size by size within a round): a change in the
    machine's load while it runs falls on every column alike. Two rounds first warm the pools."""
    paths = {}
    for size, web in webs.items():
        ids = {"job": await first_id(web, "/jobs?queue=default&state=reserved", "data-job"),
               "failure": await first_id(web, "/failed", "data-failure")}
        paths[size] = [pattern.format(**ids) for _, pattern in PAGES]
    found: dict[int, dict[str, list[float]]] = {size: {label: [] for label, _ in PAGES} for size in webs}
    for round_ in range(runs + 2):
        for index, (label, _) in enumerate(PAGES):
            for size, web in webs.items():
                elapsed = await timed(web, paths[size][index])
                if round_ >= 2:
                    found[size][label].append(elapsed)
    return found


async def main(args: Any) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    async with contextlib.AsyncExitStack() as stack:
        webs = {size: await prepared(stack, args.admin_dsn, size) for size in sizes}
        results = await measure(webs, args.runs)
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
