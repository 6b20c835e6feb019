"""The workers registry (issue 29): each worker registers in pgqueue.workers when it starts, its
heartbeat refreshes the row with the jobs it holds, a clean stop removes it, a stale row is a
worker that is gone; seen in SQL, ``queue:workers``, the dashboard and ``pgqueue_worker_info``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from pgqueue import Client, JobContext
from pgqueue.dashboard import create_app
from pgqueue.metrics import PgqueueCollector, snapshot_of
from pgqueue.worker.instruments import Recorder
from tests.cli_support import pgqueue
from tests.helpers import envelope
from tests.sql_calls import enqueue, reserve
from tests.worker_jobs import Once, Probe
from tests.worker_support import finish, rows, scalar, settings_for, wait_event

#: A 4 s lease renewed (and the worker's row refreshed) every (4 - 1) / 3 = 1 s.
SHORT_LEASE = {"lease": 4.0, "lease_margin": 1.0, "timeout": 20.0}


def register(conn: psycopg.Connection[Any], *, host: str = "web-1", pid: int = 4242, queues: list[str] | None = None,
             held: list[uuid.UUID] | None = None, stale_after: float = 30.0) -> uuid.UUID:
    worker_id = uuid.uuid4()
    conn.execute("select pgqueue.register_worker(%s, %s, %s, %s, 8, 2, '0.1.0', %s)",
                 (worker_id, host, pid, queues or ["emails"], stale_after))
    if held is not None:
        conn.execute("select pgqueue.refresh_worker(%s, %s)", (worker_id, held))
    return worker_id


def test_register_refresh_and_deregister_in_sql(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        worker_id = register(conn)
        [row] = conn.execute("select host, pid, queues, concurrency, prefetch, version, held from pgqueue.workers"
                             ).fetchall()
        assert row == ("web-1", 4242, ["emails"], 8, 2, "0.1.0", [])
        job = uuid.uuid4()
        assert conn.execute("select pgqueue.refresh_worker(%s, %s)", (worker_id, [job])).fetchone() == (True,)
        assert conn.execute("select held from pgqueue.workers").fetchone() == ([job],)
        assert conn.execute("select pgqueue.deregister_worker(%s)", (worker_id,)).fetchone() == (True,)
        # A row that is gone: refresh says so (the worker registers again), deregister too.
        assert conn.execute("select pgqueue.refresh_worker(%s, '{}')", (worker_id,)).fetchone() == (False,)
        assert conn.execute("select pgqueue.deregister_worker(%s)", (worker_id,)).fetchone() == (False,)


@pytest.mark.parametrize(("args", "named"), [
    ((None, "h", 1, ["q"], 1, 0, "v", 1.0), "id, host, pid and version are required"),
    ((uuid.uuid4(), "h", 1, [], 1, 0, "v", 1.0), "at least one queue"),
    ((uuid.uuid4(), "h", 1, ["q"], 0, 0, "v", 1.0), "concurrency must be >= 1"),
    ((uuid.uuid4(), "h", 1, ["q"], 1, -1, "v", 1.0), "prefetch >= 0"),
    ((uuid.uuid4(), "h", 1, ["q"], 1, 0, "v", 0.0), "stale_after must be a positive number"),
])
def test_register_names_what_is_wrong(dsn: str, args: tuple[Any, ...], named: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.errors.InvalidParameterValue,
                                                                      match=named):
        conn.execute("select pgqueue.register_worker(%s, %s, %s, %s::text[], %s, %s, %s, %s)", args)


def test_a_row_without_a_heartbeat_is_gone_and_pruned_a_day_later(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        stale = register(conn, stale_after=5)
        old = register(conn, stale_after=5)
        conn.execute("update pgqueue.workers set heartbeat_at = now() - interval '1 minute' where id = %s", (stale,))
        conn.execute("update pgqueue.workers set heartbeat_at = now() - interval '2 days' where id = %s", (old,))
        fresh = register(conn)  # a worker that starts prunes the rows gone for a day
        found = {r[0]: r[1] for r in conn.execute(
            "select id, heartbeat_at < now() - make_interval(secs => stale_after) from pgqueue.workers")}
    assert found == {stale: True, fresh: False}


async def test_a_worker_registers_its_heartbeat_refreshes_and_a_clean_stop_removes_it(dsn: str) -> None:
    from tests.worker_jobs import HOOKS

    started, release = asyncio.Event(), asyncio.Event()

    async def hold(job: Probe, context: JobContext) -> None:
        started.set()
        await release.wait()

    HOOKS["registry-hold"] = hold
    try:
        async with Client(settings=settings_for(dsn, **SHORT_LEASE)) as client:
            job_id = await client.dispatch(Once(hook="registry-hold"))
            worker = await client.worker(concurrency=3, prefetch=0, listen=False, maintenance_interval=None,
                                         schedules=False)
            assert worker.heartbeat is not None and worker.heartbeat.registry is worker.registry
            refreshed = asyncio.Event()
            refresh = worker.registry.refresh

            async def observed(held: list[uuid.UUID]) -> None:
                await refresh(held)
                if held:
                    refreshed.set()

            worker.registry.refresh = observed  # type: ignore[method-assign]
            running = asyncio.create_task(worker.run(stop_when_empty=True))
            await wait_event(started, "the handler to start")
            [row] = await rows(dsn, "select * from pgqueue.workers")
            assert (row["id"], row["host"], row["pid"], row["queues"], row["concurrency"], row["prefetch"]) == (
                worker.registry.id, socket.gethostname(), os.getpid(), ["default"], 3, 0)
            # The heartbeat's next tick refreshes the row with the job the worker holds.
            await wait_event(refreshed, "a heartbeat that refreshes the worker's row")
            [listed] = await client.workers()
            assert not listed.gone and [j["id"] for j in listed.jobs] == [str(job_id)]
            assert listed.jobs[0]["name"] == Once.name and listed.jobs[0]["seconds"] >= 0
            release.set()
            assert await finish(running, "the worker to stop") == 1
        assert await scalar(dsn, "select count(*) from pgqueue.workers") == 0
    finally:
        HOOKS.pop("registry-hold", None)


async def test_the_registry_refreshes_when_the_heartbeat_is_off(dsn: str) -> None:
    async with Client(settings=settings_for(dsn, **SHORT_LEASE)) as client:
        worker = await client.worker(listen=False, maintenance_interval=None, schedules=False, heartbeat=False)
        assert worker.heartbeat is None
        await worker.registry.register()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("update pgqueue.workers set heartbeat_at = now() - interval '1 hour'")
        refreshed = asyncio.Event()
        refresh = worker.registry.refresh

        async def observed(held: list[uuid.UUID]) -> None:
            await refresh(held)
            refreshed.set()

        worker.registry.refresh = observed  # type: ignore[method-assign]
        task = asyncio.create_task(worker.registry.run())
        try:
            await wait_event(refreshed, "the registry's own refresh (one period: 1 s)")
        finally:
            task.cancel()
        assert await scalar(dsn, "select heartbeat_at > now() - interval '1 minute' from pgqueue.workers")
        await worker.registry.deregister()


async def test_the_dashboard_shows_each_worker_its_jobs_and_the_gone_ones(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue(conn, envelope("emails", name="app:send_email"))
        reserve(conn, ["emails"], 1, lease=600)
        alive = register(conn, host="web-1", pid=101, held=[job_id])
        gone = register(conn, host="web-2", pid=202, stale_after=1)
        conn.execute("update pgqueue.workers set heartbeat_at = now() - interval '1 minute' where id = %s", (gone,))
    async with Client(settings=settings_for(dsn)) as client, httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(client)), base_url="http://localhost") as web:
        page = (await web.get("/workers")).text
        fragment = (await web.get("/workers/table")).text
    assert "1 running, 1 gone" in page and "<html" not in fragment
    alive_row = page[page.index(f'data-worker="{alive}"'):]
    alive_row = alive_row[:alive_row.index("</tr>")]
    assert "web-1" in alive_row and ">101<" in alive_row and "alive" in alive_row and "emails" in alive_row
    assert f'href="/jobs/{job_id}"' in alive_row and "app:send_email" in alive_row and "attempt 1" in alive_row
    gone_row = page[page.index(f'data-worker="{gone}"'):]
    assert ">gone<" in gone_row[:gone_row.index("</tr>")]


def test_queue_workers_lists_them(tmp_path: Path, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue(conn, envelope("emails", name="app:send_email"))
        reserve(conn, ["emails"], 1, lease=600)
        register(conn, host="web-1", pid=101, held=[job_id])
    text = pgqueue("queue:workers", "--dsn", dsn, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "web-1" in text.stdout and "alive" in text.stdout and "app:send_email" in text.stdout
    data = json.loads(pgqueue("queue:workers", "--json", "--dsn", dsn, cwd=tmp_path).stdout)
    assert [(w["host"], w["pid"], w["gone"], [j["id"] for j in w["jobs"]]) for w in data] == [
        ("web-1", 101, False, [str(job_id)])]


async def test_metrics_export_the_worker_info(dsn: str) -> None:
    recorder = Recorder()
    async with Client(settings=settings_for(dsn)) as client:
        worker = await client.worker(queues=["emails", "reports"], concurrency=4, listen=False,
                                     maintenance_interval=None, schedules=False, instruments=recorder,
                                     metrics_interval=None)
    registry = CollectorRegistry()
    registry.register(PgqueueCollector(lambda: [snapshot_of(recorder)]))
    text = generate_latest(registry).decode()
    line = next(li for li in text.splitlines() if li.startswith("pgqueue_worker_info{"))
    assert f'worker_id="{worker.registry.id}"' in line and f'pid="{os.getpid()}"' in line
    assert 'queues="emails,reports"' in line and 'concurrency="4"' in line and line.endswith(" 1.0")
