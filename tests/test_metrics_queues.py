"""Per-queue gauges of the metrics (issue 29): the jobs a worker holds now (``pgqueue_jobs_in_flight``:
its running handlers and the reserved jobs in its prefetch buffer) and whether each queue is paused
(``pgqueue_queue_paused``, sampled from pgqueue.queues with the queue depths), both under the queue
label cap of the other metrics (tests/test_metrics_limits.py).

The least-privilege worker role's paused sample is in tests/faults/test_security.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import psycopg

from pgqueue import Client, JobContext
from pgqueue.metrics import PgqueueCollector, snapshot_of
from pgqueue.worker.depth import DepthSampler
from pgqueue.worker.instruments import Recorder
from tests.helpers import envelope
from tests.sql_calls import enqueue_many
from tests.test_metrics_limits import samples_of, total, values_of
from tests.worker_jobs import Probe
from tests.worker_support import Runs, client, finish, hooks, rows, runs, wait_until

__all__ = ["client", "hooks", "runs"]  # fixtures


class Hold:
    """A hook: each handler records its queue and waits for :attr:`open`."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.running: Counter[str] = Counter()

    async def __call__(self, job: Probe, context: JobContext) -> None:
        self.running[context.queue] += 1
        try:
            await self.open.wait()
        finally:
            self.running[context.queue] -= 1


async def _reserved(dsn: str) -> Counter[str]:
    """Per queue, the jobs reserved now (the database's view of what the worker holds)."""
    found = await rows(dsn, "select queue, count(*)::int as n from pgqueue.jobs where token is not null group by queue")
    return Counter({r["queue"]: r["n"] for r in found})


def _in_flight(recorder: Recorder) -> dict[tuple[str, str], float]:
    """The exported ``pgqueue_jobs_in_flight`` samples: (queue, state) -> value."""
    samples = samples_of(PgqueueCollector(lambda: [snapshot_of(recorder)]))
    return {(labels["queue"], labels["state"]): value for name, labels, value in samples
            if name == "pgqueue_jobs_in_flight"}


async def test_the_in_flight_gauge_counts_running_and_buffered_jobs_per_queue(
        client: Client, hooks: Any, runs: Runs, dsn: str) -> None:
    hold = Hold()
    hooks("hold", hold)
    for queue, count in (("a", 3), ("b", 2)):
        for n in range(count):
            await client.dispatch(Probe(hook="hold", n=n), queue=queue)
    recorder = Recorder()
    worker = await client.worker(queues=["a", "b", "idle"], concurrency=2, prefetch=2, listen=False,
                                 instruments=recorder, metrics_interval=None)
    task = runs.start(worker, stop_when_empty=True)
    # The worker holds concurrency + prefetch reservations: 2 handlers run, 2 jobs wait in its buffer.
    await wait_until(lambda: sum(hold.running.values()) == 2 and len(worker.fetcher.buffer) == 2,
                     "two handlers to run and two jobs to wait in the buffer")
    reserved = await _reserved(dsn)
    assert sum(reserved.values()) == 4
    exported = _in_flight(recorder)
    for queue in ("a", "b", "idle"):  # every queue the worker serves, held or not
        running = hold.running[queue]
        assert exported[queue, "running"] == running, (queue, exported)
        assert exported[queue, "buffered"] == reserved[queue] - running, (queue, exported, reserved)
    assert exported["idle", "running"] == exported["idle", "buffered"] == 0

    hold.open.set()
    assert await finish(task, "the worker to drain") == 5
    assert set(_in_flight(recorder).values()) == {0}


def test_the_in_flight_gauge_is_capped_like_the_other_queue_labels() -> None:
    first, second = Recorder(max_queues=2), Recorder(max_queues=2)
    first.in_flight = lambda: {"a": (1, 0), "b": (0, 2), "c": (3, 1), "d": (1, 1)}
    second.in_flight = lambda: {"e": (2, 2), "a": (1, 1)}
    alone = _in_flight(first)
    assert alone == {("a", "running"): 1, ("a", "buffered"): 0, ("b", "running"): 0, ("b", "buffered"): 2,
                     ("other", "running"): 4, ("other", "buffered"): 2}
    # The sum of a supervisor's processes is capped again, and loses nothing.
    samples = samples_of(PgqueueCollector(lambda: [snapshot_of(first), snapshot_of(second)], max_queues=2))
    assert values_of([s for s in samples if s[0] == "pgqueue_jobs_in_flight"], "queue") == {"a", "b", "other"}
    assert total(samples, "pgqueue_jobs_in_flight", queue="a", state="running") == 2
    assert total(samples, "pgqueue_jobs_in_flight", queue="other", state="running") == 6
    assert total(samples, "pgqueue_jobs_in_flight", state="buffered") == 7


async def _sample(dsn: str, recorder: Recorder) -> list[tuple[str, dict[str, str], float]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await DepthSampler(dsn, recorder, interval=1.0).sample(conn)
    return samples_of(PgqueueCollector(lambda: [snapshot_of(recorder)]))


async def test_the_paused_gauge_is_sampled_from_the_queue_controls(client: Client, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("busy"), envelope("busy"), envelope("held")])
    assert await client.pause("held") and await client.pause("empty")  # "empty" has no job at all
    assert await client.pause("resumed") and await client.resume("resumed")
    samples = await _sample(dsn, Recorder())
    paused = {labels["queue"]: value for name, labels, value in samples if name == "pgqueue_queue_paused"}
    assert paused == {"busy": 0, "held": 1, "empty": 1, "resumed": 0}
    # A paused queue without jobs is in the depth sample too (all zero), so its series exist.
    assert total(samples, "pgqueue_queue_jobs", queue="empty") == 0
    assert {s[2] for s in samples if s[0] == "pgqueue_queue_jobs" and s[1] == {"queue": "empty", "state": "ready"}} \
        == {0}
    assert total(samples, "pgqueue_queue_jobs", queue="held", state="ready") == 1

    assert await client.resume("held")
    paused = {labels["queue"]: value for name, labels, value in await _sample(dsn, Recorder())
              if name == "pgqueue_queue_paused"}
    assert paused == {"busy": 0, "held": 0, "empty": 1, "resumed": 0}

    # Past the cap (the first queues by name), other says how many of the rest are paused.
    capped = {labels["queue"]: value for name, labels, value in await _sample(dsn, Recorder(max_queues=2))
              if name == "pgqueue_queue_paused"}
    assert capped == {"busy": 0, "empty": 1, "other": 0}
    assert await client.pause("resumed") and await client.pause("zzz")
    capped = {labels["queue"]: value for name, labels, value in await _sample(dsn, Recorder(max_queues=2))
              if name == "pgqueue_queue_paused"}
    assert capped == {"busy": 0, "empty": 1, "other": 2}


async def test_the_concurrency_limit_gauge_follows_the_adaptive_limit(client: Client, dsn: str) -> None:
    """issue 28: pgqueue_queue_concurrency_limit, sampled from pgqueue.queues; absent without a limit."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("api"), envelope("plain")])
    await client.set_limits("api", concurrency=8, adaptive=(2, 8), adaptive_decrease=0.5)
    await client.set_limits("fixed", concurrency=3)
    await client.pause("paused")  # a row without a limit
    limit = {labels["queue"]: value for name, labels, value in await _sample(dsn, Recorder())
             if name == "pgqueue_queue_concurrency_limit"}
    assert limit == {"api": 8, "fixed": 3}
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(job_id, token)] = conn.execute("select id, token from pgqueue.reserve(array['api'], 1, 60)").fetchall()
        assert conn.execute("select pgqueue.backpressure(%s, %s, 0)", (job_id, token)).fetchone() == ("backpressured",)
    limit = {labels["queue"]: value for name, labels, value in await _sample(dsn, Recorder())
             if name == "pgqueue_queue_concurrency_limit"}
    assert limit == {"api": 4, "fixed": 3}
    # Past the cap: other holds the sum of the rest's limits.
    capped = {labels["queue"]: value for name, labels, value in await _sample(dsn, Recorder(max_queues=1))
              if name == "pgqueue_queue_concurrency_limit"}
    assert capped == {"api": 4, "other": 3}


async def test_a_blocked_job_is_counted_apart_from_delayed(client: Client, dsn: str) -> None:
    """Issue 26: a job waiting for a parent (available_at = pgqueue.never()) is blocked, not delayed,
    in ``client.stats`` (queue:stats) and in the depth gauge."""
    from pgqueue_cli.render import status_data
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("deps"), envelope("deps"), envelope("deps")], [0.0, 0.0, 3600.0])
        parent, child, _ = (r[0] for r in conn.execute("select id from pgqueue.jobs order by available_at").fetchall())
        conn.execute("select pgqueue.add_dependencies(array[%s]::uuid[], array[%s]::uuid[], 'cancel')",
                     (child, parent))
    [stats] = await client.stats()
    assert (stats.ready, stats.delayed, stats.blocked) == (1, 1, 1)
    [queue] = (await status_data(client, client.settings.connection(None).name))["queues"]
    assert (queue["ready"], queue["delayed"], queue["blocked"]) == (1, 1, 1)
    samples = await _sample(dsn, Recorder())
    assert {state: total(samples, "pgqueue_queue_jobs", queue="deps", state=state)
            for state in ("ready", "delayed", "blocked")} == {"ready": 1, "delayed": 1, "blocked": 1}


async def test_partition_metrics_are_capped_to_the_busiest_and_other(client: Client, dsn: str) -> None:
    """issue 28: pgqueue_partition_jobs and pgqueue_partition_concurrency_limit: 10,000 distinct partitions
    make max_partitions + 1 series per state, not 10,000; the busiest keep their own, in order."""
    await client.set_limits("tenants", per_partition_concurrency=3, per_partition_adaptive=(1, 10), fair=True)
    await client.set_partition_limit("tenants", "big", concurrency=7)
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("tenants") | {"partition": f"t{i:05d}"} for i in range(10_000)]
                     + [envelope("tenants") | {"partition": "big"} for _ in range(6)]
                     + [envelope("tenants") | {"partition": "mid"} for _ in range(3)])
        conn.execute("select * from pgqueue.reserve(array['tenants'], 2, 60)")  # big and mid, turn by turn
    samples = await _sample(dsn, Recorder(max_partitions=5))
    jobs = [(labels["partition"], labels["state"], value) for name, labels, value in samples
            if name == "pgqueue_partition_jobs"]
    assert len(jobs) == 2 * 6  # running and waiting of 5 partitions and other
    waiting = {p: v for p, state, v in jobs if state == "waiting"}
    running = {p: v for p, state, v in jobs if state == "running"}
    assert (waiting["big"], running["big"], waiting["mid"], running["mid"]) == (5, 1, 2, 1)
    assert waiting["other"] == 10_000 - 3 and sum(waiting.values()) == 10_000 + 9 - 2
    limits = {labels["partition"]: value for name, labels, value in samples
              if name == "pgqueue_partition_concurrency_limit"}
    assert (limits["big"], limits["mid"], limits["t00000"]) == (7, 3, 3)  # an override; where adaptive ones start
    assert limits["other"] == 3 * (10_000 - 3)
    # The default cap: 20 partitions + other per queue, whatever the number of tenants.
    default = {labels["partition"] for name, labels, _ in await _sample(dsn, Recorder())
               if name == "pgqueue_partition_jobs"}
    assert len(default) == 21 and "other" in default
