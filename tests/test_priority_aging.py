"""Issue 28: priority aging (``queues.aging``): a ready job's priority counts one level higher per
``aging`` it has waited, never above the queue's highest priority with ready jobs, so low priorities
run eventually; decided by ``pgqueue.reserve`` (``pgqueue.aged_priority``), set from Python, SQL and
the CLI. Waits are made by moving ``available_at`` back, not by sleeping."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import Client, JobContext, QueueConfigurationError
from tests.cli_support import one_error_line, pgqueue, pgqueue_all
from tests.worker_jobs import Probe
from tests.worker_support import client, finish, hooks, scalar

__all__ = ["client", "hooks"]


async def dispatch(client: Client, dsn: str, queue: str, priority: int, count: int, waited: float = 0.0,
                   partition: str | None = None) -> list[str]:
    """``count`` jobs of ``priority`` that became due ``waited`` seconds ago; their ids."""
    ids = [await client.dispatch(Probe(hook="never", n=n), queue=queue, priority=priority, partition=partition)
           for n in range(count)]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("update pgqueue.jobs set available_at = available_at - make_interval(secs => %s) "
                           "where id = any(%s)", (waited, ids))
    return [str(i) for i in ids]


def reserve(dsn: str, queue: str, count: int) -> list[tuple[str, int]]:
    """(id, priority) of the jobs one reservation of ``count`` grants, in grant order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [(str(r[0]), r[1]) for r in conn.execute(
            "select id, priority from pgqueue.reserve(array[%s], %s, 60)", (queue, count)).fetchall()]


async def test_aging_is_set_from_python_and_sql_and_shown_in_the_controls(client: Client, dsn: str) -> None:
    await client.set_aging("reports", 30)
    assert [(c.queue, c.aging) for c in await client.controls()] == [("reports", 30.0)]
    assert await scalar(dsn, "select extract(epoch from aging) from pgqueue.queues where name = 'reports'") == 30
    # The queue's limits are left alone, and set_limits leaves the aging alone.
    await client.set_limits("reports", concurrency=3)
    assert [(c.concurrency, c.aging) for c in await client.controls()] == [(3, 30.0)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pgqueue.set_aging('reports', 0.5)")
    assert [c.aging for c in await client.controls()] == [0.5]
    await client.set_aging("reports", None)
    assert [(c.concurrency, c.aging) for c in await client.controls()] == [(3, None)]


@pytest.mark.parametrize("seconds", [0, -1, 0.0001, 31536001, math.nan, math.inf, "30", True])
async def test_bad_aging_is_refused_by_name_and_changes_nothing(client: Client, dsn: str, seconds: Any) -> None:
    with pytest.raises(QueueConfigurationError, match=r"aging must be a number of seconds from 0\.001 to 31536000"):
        await client.set_aging("reports", seconds)
    with pytest.raises(QueueConfigurationError, match="the queue's aging was not changed"):
        await client.set_aging("bad name\x07", 30)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if isinstance(seconds, float | int) and not isinstance(seconds, bool):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"set_aging: aging must be from 0\.001"):
                conn.execute("select pgqueue.set_aging('reports', %s::double precision)", (seconds,))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="set_aging: "):
            conn.execute("select pgqueue.set_aging('', 30)")
    assert await scalar(dsn, "select count(*) from pgqueue.queues") == 0


async def test_a_low_priority_job_that_waited_long_enough_goes_before_fresh_higher_ones(client: Client,
                                                                                       dsn: str) -> None:
    high = await dispatch(client, dsn, "mixed", 5, 3)
    low = await dispatch(client, dsn, "mixed", 0, 1, waited=10)
    # Strict priorities: the high ones first.
    first = reserve(dsn, "mixed", 1)
    assert [p for _, p in first] == [5]
    await client.set_aging("mixed", 1)
    # Waited 10 s at one level per second: counts as 5 (the top, the bound), due before the rest.
    assert reserve(dsn, "mixed", 1) == [(low[0], 0)]
    assert {i for i, _ in reserve(dsn, "mixed", 5)} == set(high) - {first[0][0]}


async def test_an_aged_job_counts_no_higher_than_the_top_and_the_top_due_first_goes_first(client: Client,
                                                                                          dsn: str) -> None:
    await client.set_aging("mixed", 1)
    older_high = await dispatch(client, dsn, "mixed", 5, 1, waited=200)
    low = await dispatch(client, dsn, "mixed", 0, 1, waited=100)   # counts as 5 (not 100): due after older_high
    halfway = await dispatch(client, dsn, "mixed", 2, 1, waited=2)  # counts as 4
    fresh_high = await dispatch(client, dsn, "mixed", 5, 1)
    assert [i for i, _ in reserve(dsn, "mixed", 4)] == [*older_high, *low, *fresh_high, *halfway]


async def test_a_level_is_served_only_as_far_as_its_jobs_come_first(client: Client, dsn: str) -> None:
    await client.set_aging("mixed", 1)
    old_low = await dispatch(client, dsn, "mixed", 0, 2, waited=10)  # count as 5: before the fresh high ones
    fresh_low = await dispatch(client, dsn, "mixed", 0, 2)           # count as 0
    high = await dispatch(client, dsn, "mixed", 5, 2)
    granted = [i for i, _ in reserve(dsn, "mixed", 5)]
    assert set(granted[:2]) == set(old_low) and set(granted[2:4]) == set(high)
    assert granted[4] in fresh_low


async def test_aging_orders_the_priorities_of_a_queue_served_by_partition(client: Client, dsn: str) -> None:
    await client.set_limits("tenants", fair=True)
    await client.set_aging("tenants", 1)
    await dispatch(client, dsn, "tenants", 5, 4, partition="a")
    await dispatch(client, dsn, "tenants", 5, 4, partition="b")
    old_low = await dispatch(client, dsn, "tenants", 0, 2, waited=10, partition="c")
    granted = reserve(dsn, "tenants", 4)
    assert {i for i, _ in granted[:2]} == set(old_low)
    assert [p for _, p in granted[2:]] == [5, 5]


async def test_a_low_priority_job_runs_while_high_priority_jobs_keep_arriving(client: Client, hooks: Any,
                                                                             dsn: str) -> None:
    """Every high-priority job dispatches another as it runs, so there is always one ready: with strict
    priorities the low one would never run. With aging it does, the stream still flowing."""
    low_ran = asyncio.Event()
    waiting_then: list[int] = []

    async def more(job: Probe, context: JobContext) -> None:
        if not low_ran.is_set():
            await client.dispatch(Probe(hook="more", n=job.n + 1), queue="stream", priority=5)

    async def low(job: Probe, context: JobContext) -> None:
        waiting_then.append(await scalar(dsn, "select count(*) from pgqueue.jobs where queue = 'stream' "
                                              "and priority = 5 and token is null"))
        low_ran.set()

    hooks("more", more)
    hooks("low", low)
    await client.set_aging("stream", 0.02)
    for _ in range(3):
        await client.dispatch(Probe(hook="more"), queue="stream", priority=5)
    await client.dispatch(Probe(hook="low"), queue="stream", priority=0)
    worker = await client.worker(queues=["stream"], concurrency=1, prefetch=0, poll_interval=600,
                                 maintenance_interval=None)
    task = asyncio.create_task(worker.run())
    try:
        await finish(low_ran.wait(), "the low-priority job to run")
    finally:
        worker.stop()
        await finish(task, "the worker to stop")
    assert waiting_then[0] >= 1  # high-priority jobs were still waiting when it ran


def test_aging_from_the_command_line(dsn: str, tmp_path: Path) -> None:
    aged = pgqueue("queue:limit", "reports", "--aging", "30s", "--dsn", dsn, cwd=tmp_path)
    assert aged.returncode == 0, aged.stderr
    shown, status = pgqueue_all(("queue:limit", "reports", "--dsn", dsn), ("queue:status", "--dsn", dsn),
                                cwd=tmp_path)
    assert "priority aging of queue 'reports': one level per 30 s waited" in aged.stdout
    assert "priority aging of queue 'reports': one level per 30 s waited" in shown.stdout
    assert "priority aging of queue 'reports': one level per 30 s waited" in status.stdout
    as_json = pgqueue("queue:status", "--json", "--dsn", dsn, cwd=tmp_path)
    assert [q["aging_seconds"] for q in json.loads(as_json.stdout)["queues"]] == [30.0]
    bad, partitioned, cleared, off = pgqueue_all(
        ("queue:limit", "reports", "--aging", "soon", "--dsn", dsn),
        ("queue:limit", "reports", "--partition", "p", "--aging", "5", "--dsn", dsn),
        ("queue:limit", "reports", "--clear", "--aging", "5", "--dsn", dsn),
        ("queue:limit", "reports", "--aging", "off", "--dsn", dsn), cwd=tmp_path)
    assert bad.returncode == 2 and "--aging: give seconds (30, 0.5)" in one_error_line(bad.stderr)
    assert partitioned.returncode == 2 and "--aging applies to the whole queue" in one_error_line(partitioned.stderr)
    assert cleared.returncode == 2 and "--clear removes the limits" in one_error_line(cleared.stderr)
    assert off.returncode == 0 and "priority aging" not in off.stdout
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select aging from pgqueue.queues").fetchall() == [(None,)]

