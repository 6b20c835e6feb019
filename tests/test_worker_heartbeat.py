"""Leases as crash detection, not a runtime cap (issue 11, item 2), and the worker's smaller
guarantees of item 8: bounded ``extend``, refused acks counted lost, a finite poll interval,
a warning for a queue nothing was dispatched to."""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
import uuid
from collections.abc import Awaitable
from typing import Any

import psycopg
import pytest

from pgqueue import Client, JobContext, QueueConfigurationError
from pgqueue.resources import query
from pgqueue.worker.buffered import Prefetched
from pgqueue.worker.heartbeat import Heartbeat
from tests.worker_jobs import LedgerJob, Once, Probe
from tests.worker_support import (
    Spawned,
    create_ledger,
    equals,
    failures,
    finish,
    hooks,
    jobs,
    lock_waits,
    rows,
    scalar,
    settings_for,
    spawn,
    wait_event,
    wait_until,
)

__all__ = ["hooks", "spawn"]

LOCK = 4_2425  # the advisory lock a LedgerJob waits for while the test holds it
#: A 4 s lease renewed every (4 - 1) / 3 = 1 s, and job timeouts far longer than the lease.
SHORT_LEASE = {"lease": 4.0, "lease_margin": 1.0, "timeout": 20.0}


async def lease_left(dsn: str, job_id: uuid.UUID) -> float:
    """Seconds until the job's lease ends, on the database clock."""
    return float(await scalar(dsn, "select extract(epoch from available_at - clock_timestamp())"
                                   " from pgqueue.jobs where id = %s", (job_id,)))


async def steal(dsn: str, job_id: uuid.UUID) -> int:
    """Expire the job's lease and reserve it on another connection, as a second worker would:
    returns the thief's token."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("update pgqueue.jobs set available_at = now() - interval '1 second' where id = %s",
                           (job_id,))
        cur = await conn.execute("select id, token from pgqueue.reserve(array['default'], 1, 600)")
        [(stolen, token)] = await cur.fetchall()
    assert stolen == job_id
    return int(token)


# ---------------------------------------------------------------- the heartbeat
async def test_a_job_runs_far_longer_than_its_lease_on_one_reservation(hooks: Any, dsn: str) -> None:
    seen: list[tuple[int, float]] = []

    async def ten_seconds_of_work(job: Probe, context: JobContext) -> None:
        await asyncio.sleep(10)  # the work itself: 2.5 leases long
        seen.append((context.attempts, await lease_left(dsn, context.id)))

    hooks("work", ten_seconds_of_work)
    async with Client(settings=settings_for(dsn, **SHORT_LEASE)) as client:
        await client.dispatch(Once(hook="work"))  # timeout 20 s: dispatch accepts it with the heartbeat
        worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
        assert worker.heartbeat is not None and worker.heartbeat.period == pytest.approx(1.0)

        assert await finish(worker.run(stop_when_empty=True), "the 10 s job") == 1

    [(attempts, left)] = seen
    assert attempts == 1
    assert left > 0, "the lease was not renewed while the handler ran"
    assert (worker.stats.reserved, worker.stats.acked, worker.stats.lost) == (1, 1, 0)
    assert worker.heartbeat.ticks >= 3
    assert await jobs(dsn) == []
    assert await failures(dsn) == []


async def test_kill_9_of_a_long_jobs_worker_gets_it_reserved_again_after_one_lease(
        spawn: Any, dsn: str) -> None:
    await create_ledger(dsn)
    holder = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await holder.execute("select pg_advisory_lock(%s)", (LOCK,))
    try:
        async with Client(settings=settings_for(dsn, **SHORT_LEASE)) as client:
            job_id = await client.dispatch(LedgerJob(dsn=dsn, n=1, lock=LOCK))
            first: Spawned = await spawn(sys.executable, "-m", "tests.worker_process", "--dsn", dsn,
                                         "--concurrency", "1", "--lease", "4", "--lease-margin", "1",
                                         "--timeout", "20")
            [stale] = await wait_until(lambda: _ledger(dsn, "started"), "the first worker to start the job")
            # Its heartbeat keeps the job: after two renewals the lease still ends in the future.
            renewed_at = await scalar(dsn, "select available_at from pgqueue.jobs where id = %s", (job_id,))
            await wait_until(lambda: _lease_moved_past(dsn, job_id, renewed_at), "a lease renewal", within=10)

            await first.kill()  # SIGKILL mid-job: no ack, no release, no more renewals
            killed_at = await scalar(dsn, "select clock_timestamp()")
            [row] = await jobs(dsn)
            assert row["token"] == stale["token"]
            # The last renewal ran before the kill, so the lease ends at most lease after it.
            assert (row["available_at"] - killed_at).total_seconds() <= SHORT_LEASE["lease"]

            second = await client.worker(concurrency=1, listen=False, poll_interval=600, maintenance_interval=None)
            run = asyncio.create_task(second.run(max_jobs=1))
            started = await wait_until(lambda: _attempt(_ledger(dsn, "started"), 2), "the second worker's attempt")
            assert (started["pid"], started["token"]) != (stale["pid"], stale["token"])
            reserved_again = await scalar(dsn, "select reserved_at from pgqueue.jobs where id = %s", (job_id,))
            assert reserved_again >= row["available_at"], "reserved again before the lease had expired"
            await holder.execute("select pg_advisory_unlock(%s)", (LOCK,))
            assert await finish(run, "the second worker to finish the job") == 1
    finally:
        await holder.close()
    assert await jobs(dsn) == []
    assert await failures(dsn) == []


async def _ledger(dsn: str, event: str) -> list[dict[str, Any]]:
    return await rows(dsn, "select n, attempt, token, pid from test_ledger where event = %s order by at", (event,))


async def _attempt(pending: Awaitable[list[dict[str, Any]]], attempt: int) -> dict[str, Any] | None:
    return next((r for r in await pending if r["attempt"] == attempt), None)


async def _lease_moved_past(dsn: str, job_id: uuid.UUID, before: Any) -> bool:
    return bool(await scalar(dsn, "select available_at > %s from pgqueue.jobs where id = %s", (before, job_id)))


async def test_a_refused_renewal_stops_the_handler_and_its_ack_is_refused(hooks: Any, dsn: str) -> None:
    cancelled = asyncio.Event()
    facts: dict[str, Any] = {}

    async def held_until_stolen(job: Probe, context: JobContext) -> None:
        facts["token"] = context.token
        facts["thief"] = await steal(dsn, context.id)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            facts["decision"], facts["cancelled"] = context.decision, context.cancelled
            cancelled.set()
            raise

    hooks("stolen", held_until_stolen)
    async with Client(settings=settings_for(dsn, **SHORT_LEASE)) as client:
        job_id = await client.dispatch(Probe(hook="stolen"))  # tries left: the thief's reservation is granted
        worker = await client.worker(concurrency=1, listen=False, poll_interval=600, maintenance_interval=None)
        task = asyncio.create_task(worker.run(max_jobs=1))

        await wait_event(cancelled, "the heartbeat to stop the handler whose lease was stolen")
        assert await finish(task, "the worker to finish") == 1

    assert facts["decision"] == "lost" and facts["cancelled"]
    assert (worker.stats.lost, worker.stats.acked, worker.stats.failed) == (1, 0, 0)
    assert worker.heartbeat is not None and worker.heartbeat.refused == 1
    # The thief's reservation is untouched, and the stopped holder's ack is refused.
    [row] = await jobs(dsn)
    assert (row["token"], row["attempts"]) == (facts["thief"], 2)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        refused = await (await conn.execute(query("ack"), ([job_id], [facts["token"]], [0.0], [0.0], False))).fetchall()
    assert refused == [(job_id,)]
    assert await failures(dsn) == []


async def test_a_handler_whose_lease_cannot_be_renewed_is_stopped_before_the_lease_ends(
        hooks: Any, dsn: str) -> None:
    stopped = asyncio.Event()
    facts: dict[str, Any] = {}

    async def outlive_the_lease(job: Probe, context: JobContext) -> None:
        # The database refuses every renewal from now on (the function is gone).
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("alter function pgqueue.heartbeat(uuid[], bigint[], double precision)"
                               " rename to heartbeat_gone")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            facts["lease_left"] = await lease_left(dsn, context.id)
            facts["context"] = context
            stopped.set()
            raise

    hooks("outlive", outlive_the_lease)
    async with Client(settings=settings_for(dsn, **SHORT_LEASE)) as client:
        await client.dispatch(Once(hook="outlive"))
        worker = await client.worker(concurrency=1, listen=False, poll_interval=600, maintenance_interval=None)
        task = asyncio.create_task(worker.run(max_jobs=1))
        await wait_event(stopped, "the handler to be stopped")
        assert await finish(task, "the worker to finish") == 1

    assert facts["lease_left"] > 0, "the handler outlived its lease"
    assert facts["context"].decision == "lost" and facts["context"].cancelled
    assert worker.heartbeat is not None and worker.heartbeat.failures >= 1
    assert (worker.stats.lost, worker.stats.acked, worker.stats.retried) == (1, 0, 0)
    # Nothing was decided: the job waits for its lease to expire, then runs again.
    [row] = await jobs(dsn)
    assert row["token"] is not None and row["attempts"] == 1


# ------------------------------------------------------------------ extend
async def test_extend_moves_the_handlers_time_limit(hooks: Any, dsn: str) -> None:
    facts: dict[str, Any] = {}

    async def extend_past_the_first_lease(job: Probe, context: JobContext) -> None:
        first_end = await scalar(dsn, "select available_at from pgqueue.jobs where id = %s", (context.id,))
        while not await scalar(dsn, "select clock_timestamp() > %s + interval '1 second'", (first_end,)):
            await context.extend(4)
            await asyncio.sleep(0.5)
        facts["outlived"] = True

    hooks("extend", extend_past_the_first_lease)
    async with Client(settings=settings_for(dsn, **SHORT_LEASE)) as client:
        await client.dispatch(Once(hook="extend"))
        worker = await client.worker(concurrency=1, listen=False, heartbeat=False, maintenance_interval=None)
        assert worker.heartbeat is None
        assert await finish(worker.run(stop_when_empty=True), "the extending job") == 1

    assert facts == {"outlived": True}
    assert worker.stats.acked == 1
    assert await failures(dsn) == []


@pytest.mark.parametrize("seconds", [1e12, 1e-320, 0.0, -1.0, math.inf, math.nan])
async def test_extend_out_of_bounds_is_refused_and_changes_nothing(hooks: Any, dsn: str, seconds: float) -> None:
    facts: dict[str, Any] = {}

    async def extend(job: Probe, context: JobContext) -> None:
        before = await lease_left(dsn, context.id)
        with pytest.raises(QueueConfigurationError, match=r"lease renewal must be a number of seconds") as caught:
            await context.extend(seconds)
        facts["message"] = str(caught.value)
        facts["shorter"] = await lease_left(dsn, context.id) <= before

    hooks("extend", extend)
    async with Client(settings=settings_for(dsn)) as client:
        await client.dispatch(Once(hook="extend"))
        worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
        assert await finish(worker.run(stop_when_empty=True), "the job") == 1
    assert "the lease was not changed" in facts["message"] and facts["shorter"]
    assert worker.stats.acked == 1


# ---------------------------------------------------------------- item 8 bits
async def test_a_refused_ack_counts_as_lost_not_succeeded(hooks: Any, dsn: str) -> None:
    async def lose_it(job: Probe, context: JobContext) -> None:
        await steal(dsn, context.id)  # then return normally: the worker acks, the fence refuses

    hooks("lose", lose_it)
    async with Client(settings=settings_for(dsn)) as client:
        await client.dispatch(Probe(hook="lose"))
        worker = await client.worker(concurrency=1, listen=False, poll_interval=600, maintenance_interval=None)
        assert await finish(worker.run(max_jobs=1), "the job") == 1

    assert worker.completer.refused == 1
    assert (worker.stats.acked, worker.stats.lost) == (0, 1)


@pytest.mark.parametrize("interval", [math.inf, math.nan, 0, -1])
async def test_poll_interval_must_be_finite_and_positive(dsn: str, interval: float) -> None:
    async with Client(settings=settings_for(dsn)) as client:
        with pytest.raises(QueueConfigurationError, match="poll_interval must be > 0 seconds and finite"):
            await client.worker(poll_interval=interval)


async def test_serving_a_queue_nothing_was_dispatched_to_warns_once(
        hooks: Any, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    async def ok(job: Probe, context: JobContext) -> None:
        return None

    hooks("ok", ok)
    async with Client(settings=settings_for(dsn)) as client:
        await client.dispatch(Probe(hook="ok"))
        await client.dispatch(Probe(hook="ok"), queue="reports")
        with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
            worker = await client.worker(queues=("default", "reprots"), listen=False, maintenance_interval=None)
            assert await finish(worker.run(stop_when_empty=True), "the job") == 1
            known = await client.worker(queues=("reports",), listen=False, maintenance_interval=None)
            assert await finish(known.run(stop_when_empty=True), "the reports job") == 1
    warnings = [r.getMessage() for r in caplog.records if "no job or failure" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "queue(s) 'reprots', which this worker serves" in warnings[0]
    assert "'reports'" in warnings[0]


async def test_a_healthy_start_on_a_drained_queue_does_not_warn(
        hooks: Any, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    async def ok(job: Probe, context: JobContext) -> None:
        return None

    hooks("ok", ok)
    async with Client(settings=settings_for(dsn)) as client:
        await client.dispatch(Probe(hook="ok"))
        first = await client.worker(listen=False, maintenance_interval=None)
        assert await finish(first.run(stop_when_empty=True), "the job") == 1
        assert await scalar(dsn, "select count(*) from pgqueue.jobs where queue = 'default'") == 0
        assert await scalar(dsn, "select count(*) from pgqueue.failed_jobs") == 0
        with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
            again = await client.worker(queues=("default",), listen=False, maintenance_interval=None)
            assert await finish(again.run(stop_when_empty=True), "the drained queue") == 0
    assert [r.getMessage() for r in caplog.records if "no job or failure" in r.getMessage()] == []


async def test_the_queue_listing_reads_indexes_only(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("set enable_seqscan = off")
        cur = await conn.execute(b"explain " + query("served_queues"))
        plan = "\n".join(row[0] for row in await cur.fetchall())
    assert "jobs_reservation_idx" in plan and "failed_jobs_queue_failed_at_idx" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_heartbeat_bounds_match_the_limits() -> None:
    from pgqueue import limits
    from pgqueue.resources import function_path, sql_file

    text = sql_file(function_path("heartbeat"))
    assert f"p_seconds >= {limits.MIN_LEASE_SECONDS:g}" in text
    assert f"p_seconds <= {limits.MAX_LEASE_SECONDS:.0f}" in text
    assert "set search_path = pg_catalog, pg_temp" in text


async def test_the_heartbeat_function_refuses_bad_seconds_and_mismatched_arrays(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for seconds in (0.0, 1e-320, 1e12, math.nan, math.inf):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="seconds must be from"):
                await conn.execute(query("heartbeat"), ([uuid.uuid4()], [1], seconds))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="1 ids but 2 tokens"):
            await conn.execute(query("heartbeat"), ([uuid.uuid4()], [1, 2], 10.0))
        cur = await conn.execute(query("heartbeat"), ([uuid.uuid4()], [1], 10.0))
        assert [row[1:] for row in await cur.fetchall()] == [(False, None)]


async def test_a_buffered_job_started_and_acked_during_a_renewal_is_not_reported_lost(
        dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    # Under load a renewal can wait on the row lock of a concurrent ack: the job was taken from
    # the prefetch buffer (dropped from the heartbeat), run and acked meanwhile, so the renewal
    # finds no row. That is no lost lease: no warning, nothing counted, the item left alone
    # (a sustained run logged hundreds of such false "lease was lost" warnings).
    async with Client(settings=settings_for(dsn)) as client:
        job_id = await client.dispatch(Probe(hook="unused"))
        worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
        [reservation], _ = await worker.store.reserve(["default"], 1, 600.0, run_now=0)
        item = Prefetched(reservation, time.monotonic())
        heartbeat = Heartbeat(worker.store, lease=600.0, period=600.0)
        heartbeat.hold(item)
        async with await psycopg.AsyncConnection.connect(dsn) as acker:  # one open transaction
            await acker.execute(query("ack"), ([job_id], [reservation.token], [0.0], [0.0], False))
            with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
                tick = asyncio.create_task(heartbeat.tick())
                await wait_until(lambda: equals(lock_waits(dsn), 1), "the renewal to wait for the ack's lock")
                heartbeat.drop(item)  # the fetcher took the job from the buffer and started it
                await acker.commit()
                await finish(tick, "the renewal")

    assert await jobs(dsn) == [], "the ack went through"
    assert heartbeat.ticks == 1 and heartbeat.refused == 0
    assert not item.finished
    assert not [r for r in caplog.records if "lease was lost" in r.getMessage()]
