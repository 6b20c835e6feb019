"""Issue 14: cancel a job, pause and resume a queue, global limits, and context.transaction(),
in process against the real database (the multi-process checks are in tests/faults/test_control.py)."""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from pgqueue import Client, JobContext, QueueConfigurationError, QueueLeaseError, job, parse_rate
from pgqueue.context import SyncJobContext
from tests.worker_jobs import Once, Probe
from tests.worker_support import client, failures, finish, hooks, jobs, rows, scalar, settings_for, wait_until

__all__ = ["client", "hooks"]

EFFECTS_DDL = "create table effects (job_id uuid not null, n integer not null)"


# ------------------------------------------------------------------------- cancel
async def test_cancelling_a_waiting_job_records_it_once_and_it_can_be_retried(client: Client, dsn: str) -> None:
    ready = await client.dispatch(Probe(hook="never"))
    delayed = await client.dispatch(Probe(hook="never"), delay=600)
    assert await client.cancel(ready) == "cancelled"
    assert await client.cancel(str(delayed)) == "cancelled"
    assert await jobs(dsn) == []
    recorded = await failures(dsn)
    assert sorted((f["job_id"], f["reason"], f["message"]) for f in recorded) == sorted(
        [(ready, "cancelled", "cancelled before it ran"), (delayed, "cancelled", "cancelled before it ran")])

    # Again, unknown, or failed for another reason: says so and changes nothing.
    assert await client.cancel(ready) == "already_cancelled"
    assert await client.cancel(uuid.uuid4()) == "not_found"
    assert len(await failures(dsn)) == 2
    with pytest.raises(QueueConfigurationError, match="not a job id"):
        await client.cancel("nope")

    # Retryable like any failure: back in jobs under its own id.
    failure = next(f for f in recorded if f["job_id"] == ready)
    assert await client.retry_failed(failure["id"]) == ready
    assert [j["id"] for j in await jobs(dsn)] == [ready]


async def test_cancelling_a_running_job_stops_its_handler_at_once_and_fences_the_attempt(
        client: Client, hooks: Any, dsn: str) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()
    later: list[BaseException] = []

    async def forever(job: Probe, context: JobContext) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            try:  # any decision of the cancelled attempt is refused
                await context.release()
            except QueueLeaseError as exc:
                later.append(exc)
            raise

    hooks("forever", forever)
    job_id = await client.dispatch(Probe(hook="forever"))
    # The poll interval is long: only the NOTIFY can stop the handler within the test's wait.
    worker = await client.worker(concurrency=2, poll_interval=600, maintenance_interval=None, heartbeat=False)
    task = asyncio.create_task(worker.run())
    try:
        await finish(started.wait(), "the handler to start")
        # A NOTIFY sent before the worker LISTENs is not delivered (the heartbeat would catch it, but
        # it is off here): on a loaded machine the first reservation can beat the LISTEN connection.
        assert worker.notifier is not None
        await finish(worker.notifier.connected.wait(), "the worker to LISTEN")
        assert await client.cancel(job_id) == "cancelled_running"
        await finish(stopped.wait(), "the cancelled handler to be stopped", within=5)
        await wait_until(lambda: worker.stats.cancelled == 1, "the worker to count the cancellation")
        assert await client.cancel(job_id) == "already_cancelled"
    finally:
        worker.stop()
        await finish(task, "the worker to stop")
    assert len(later) == 1
    assert await jobs(dsn) == []
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["reason"], failure["attempts"]) == (job_id, "cancelled", 1)
    assert failure["message"] == "cancelled while attempt 1 was running"
    assert worker.stats.lost == 0 and worker.stats.acked == 0


SYNC_STATE: dict[str, Any] = {}


@job(name="tests.control:sync_waits", tries=1)
def sync_waits(context: SyncJobContext) -> None:
    SYNC_STATE["started"].set()
    deadline = time.monotonic() + 30
    while not context.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    SYNC_STATE["saw"] = context.cancelled


async def test_a_cancelled_sync_handler_sees_context_cancelled(client: Client, dsn: str) -> None:
    SYNC_STATE.update(started=threading.Event(), saw=None)
    job_id = await sync_waits().dispatch(using=client)
    worker = await client.worker(concurrency=1, poll_interval=600, maintenance_interval=None)
    task = asyncio.create_task(worker.run())
    try:
        assert await finish(asyncio.to_thread(SYNC_STATE["started"].wait, 30), "the sync handler to start")
        assert worker.notifier is not None
        await finish(worker.notifier.connected.wait(), "the worker to LISTEN")
        assert await client.cancel(job_id) == "cancelled_running"
        await wait_until(lambda: SYNC_STATE["saw"] is not None, "the sync handler to return")
    finally:
        worker.stop()
        await finish(task, "the worker to stop")
    assert SYNC_STATE["saw"] is True
    assert [f["reason"] for f in await failures(dsn)] == ["cancelled"]


# ------------------------------------------------------------------ pause, resume
async def test_a_paused_queue_is_not_reserved_from_until_resumed(client: Client, hooks: Any, dsn: str) -> None:
    ran: list[int] = []

    async def note(job: Probe, context: JobContext) -> None:
        ran.append(job.n)

    hooks("note", note)
    assert await client.pause() is True
    assert await client.pause() is False  # already paused
    await client.dispatch(Probe(hook="note", n=1))  # dispatch is still accepted
    await client.dispatch(Probe(hook="note", n=2), delay=0.05)  # falls due, then waits
    worker = await client.worker(concurrency=4, poll_interval=600, maintenance_interval=None)
    task = asyncio.create_task(worker.run())
    try:
        await wait_until(worker.idle.is_set, "the worker to idle on the paused queue")
        await wait_until(lambda: scalar(dsn, "select count(*) = 2 from pgqueue.jobs where available_at <= now()"),
                         "the delayed job to fall due")
        # Due jobs of a paused queue do not wake the worker in a loop: it stays idle.
        assert ran == [] and worker.idle.is_set() and worker.stats.reserved == 0
        assert [c.paused for c in await client.controls()] == [True]
        assert await client.resume() is True
        await wait_until(lambda: sorted(ran) == [1, 2], "both jobs to run after resume (NOTIFY)", within=5)
    finally:
        worker.stop()
        await finish(task, "the worker to stop")
    assert await client.resume() is False
    assert [c.paused for c in await client.controls()] == [False]


async def test_a_worker_started_later_honours_the_pause(client: Client, dsn: str) -> None:
    await client.dispatch(Probe(hook="never"))
    await client.pause("default")
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the worker to find nothing to do") == 0
    assert len(await jobs(dsn)) == 1


# ------------------------------------------------------------------------- limits
async def test_the_concurrency_limit_is_decided_by_the_reservation(client: Client, dsn: str) -> None:
    await client.dispatch_many([Probe(hook="never", n=n) for n in range(10)])
    await client.set_limits(concurrency=3)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as a, \
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as b:
        first = await (await a.execute("select id, token from pgqueue.reserve(array['default'], 2, 60)")).fetchall()
        second = await (await b.execute("select id from pgqueue.reserve(array['default'], 10, 60)")).fetchall()
        assert (len(first), len(second)) == (2, 1)
        assert await (await b.execute("select id from pgqueue.reserve(array['default'], 10, 60)")).fetchall() == []
        # An ack frees a slot for the next reservation.
        await a.execute("select * from pgqueue.ack(%s::uuid[], %s::bigint[])", ([first[0][0]], [first[0][1]]))
        assert len(await (await b.execute("select id from pgqueue.reserve(array['default'], 10, 60)")).fetchall()) == 1
        # Changed live: no limit, the rest is granted.
        await client.set_limits(concurrency=None)
        assert len(await (await b.execute("select id from pgqueue.reserve(array['default'], 10, 60)")).fetchall()) == 6
    [control] = await client.controls()
    assert (control.queue, control.concurrency, control.rate_limit) == ("default", None, None)


async def test_the_rate_limit_grants_one_token_at_a_time(client: Client, dsn: str) -> None:
    await client.dispatch_many([Probe(hook="never", n=n) for n in range(5)])
    await client.set_limits(rate_limit=1, rate_period=3600)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        granted = [len(await (await conn.execute("select id from pgqueue.reserve(array['default'], 5, 60)"))
                       .fetchall()) for _ in range(3)]
        assert granted == [1, 0, 0]
        # The next token is an hour away: an idle worker is told to wait for it, not to spin.
        due = await (await conn.execute("select extract(epoch from pgqueue.next_due(array['default']) - now())"))\
            .fetchone()
        assert due is not None and 3500 < float(due[0]) <= 3600
    [control] = await client.controls()
    assert (control.rate_limit, control.rate_period, control.burst) == (1, 3600.0, None)


async def test_one_reservation_takes_as_many_jobs_as_the_bucket_holds(client: Client, dsn: str) -> None:
    await client.dispatch_many([Probe(hook="never", n=n) for n in range(150)])
    # 100 per hour: the bucket starts full with the rate per period, and refills one token per 36 s.
    await client.set_limits(rate_limit=100, rate_period=3600)
    reserve = "select id from pgqueue.reserve(array['default'], 200, 60)"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        granted = [len(await (await conn.execute(reserve)).fetchall()) for _ in range(2)]
        assert granted == [100, 0]
        # A burst of 10: after a quiet hour (100 tokens' worth of refill) the bucket holds 10.
        await client.set_limits(rate_limit=100, rate_period=3600, burst=10)
        assert await (await conn.execute(reserve)).fetchall() == []
        await conn.execute("update pgqueue.queues set rate_refilled_at = now() - interval '1 hour'")
        granted = [len(await (await conn.execute(reserve)).fetchall()) for _ in range(2)]
        assert granted == [10, 0]
        # Free slots bound it too: min(free slots, tokens).
        await client.set_limits(concurrency=115, rate_limit=100, rate_period=3600, burst=10)
        await conn.execute("update pgqueue.queues set rate_refilled_at = now() - interval '1 hour'")
        assert len(await (await conn.execute(reserve)).fetchall()) == 5
    [control] = await client.controls()
    assert (control.concurrency, control.rate_limit, control.rate_period, control.burst) == (115, 100, 3600.0, 10)


def test_limits_and_rates_are_checked_before_anything_changes() -> None:
    assert parse_rate("100/s") == (100, 1.0)
    assert parse_rate("20 / min") == (20, 60.0)
    for bad in ("0/s", "fast", "10/fortnight", "-1/s", "2147483648/s", "9" * 5000 + "/s"):
        with pytest.raises(QueueConfigurationError, match="is not a rate"):
            parse_rate(bad)
    assert parse_rate("2147483647/h") == (2147483647, 3600.0)


async def test_limits_past_an_sql_integer_are_refused_by_name(client: Client) -> None:
    # Issue 24: they reached pgqueue.set_limits and came back as a raw "integer out of range".
    cases: list[tuple[dict[str, Any], str]] = [
        ({"concurrency": 2**31}, "concurrency must be a whole number >= 1 and at most 2147483647"),
        ({"rate_limit": 2**31, "rate_period": 1}, "rate_limit must be a whole number >= 1 and at"),
        ({"rate_limit": 5, "rate_period": 1, "burst": 2**31}, "burst must be a whole number >= 1")]
    for kwargs, words in cases:
        with pytest.raises(QueueConfigurationError, match=f"{words}.* got 2147483648; the limits were not changed"):
            await client.set_limits("mail", **kwargs)
    await client.set_limits("mail", concurrency=2**31 - 1, rate_limit=2**31 - 1, rate_period=1, burst=2**31 - 1)
    [control] = await client.controls()
    assert (control.concurrency, control.rate_limit, control.burst) == (2**31 - 1,) * 3


async def test_a_worker_refuses_what_a_reservation_cannot_take(client: Client) -> None:
    # Issue 24: `queue:work --lease 1e308` or a concurrency past an SQL integer hung the worker,
    # every reservation refused by the database.
    for options, words in (({"lease": 1e308}, "lease must be from 0.001 to 31536000 seconds"),
                           ({"lease": math.nan}, "lease must be from"),
                           ({"concurrency": 2**31}, "plus prefetch (500) must be at most 2147483647"),
                           ({"concurrency": 10, "prefetch": 2**31 - 10}, "plus prefetch (2147483638) must be at most")):
        with pytest.raises(QueueConfigurationError, match=re.escape(words)):
            await client.worker(**options)


async def test_bad_limits_are_refused_and_change_nothing(client: Client, dsn: str) -> None:
    for kwargs in ({"concurrency": 0}, {"rate_limit": 5}, {"rate_limit": 5, "rate_period": 0.0},
                   {"rate_limit": 5, "rate_period": 1, "burst": 0}, {"rate_limit": 5, "rate_period": 1, "burst": True},
                   {"rate_limit": 5, "rate_period": 1, "burst": 2.5}):
        with pytest.raises(QueueConfigurationError, match="limits were not changed"):
            await client.set_limits(**kwargs)
    with pytest.raises(QueueConfigurationError, match="burst 5 needs a rate limit"):
        await client.set_limits(concurrency=2, burst=5)
    with pytest.raises(QueueConfigurationError, match="nothing was changed"):
        await client.pause("a,b")
    assert await client.controls() == []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="concurrency must be >= 1"):
            await conn.execute("select pgqueue.set_limits('default', 0, null, null)")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="burst 5 needs a rate limit"):
            await conn.execute("select pgqueue.set_limits('default', 2, null, null, 5)")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="burst must be >= 1"):
            await conn.execute("select pgqueue.set_limits('default', null, 5, 1, 0)")


# ----------------------------------------------------------- context.transaction()
async def test_the_handlers_writes_commit_with_the_ack(client: Client, hooks: Any, dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(EFFECTS_DDL)

    async def write(job: Probe, context: JobContext) -> None:
        async with context.transaction() as conn:
            await conn.execute("insert into effects values (%s, %s)", (context.id, job.n))
            # Inside the block the job is still there; it goes with the commit.
            assert await (await conn.execute("select count(*) from pgqueue.jobs")).fetchone() == (1,)
        assert context.decision == "acked"

    hooks("write", write)
    job_id = await client.dispatch(Once(hook="write", n=7))
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the job") == 1
    assert await rows(dsn, "select job_id, n from effects") == [{"job_id": job_id, "n": 7}]
    assert await jobs(dsn) == [] and await failures(dsn) == []
    assert worker.stats.acked == 1 and worker.stats.lost == 0


async def test_a_stale_holders_writes_roll_back(client: Client, hooks: Any, dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(EFFECTS_DDL)
    refused: list[QueueLeaseError] = []

    async def stale(job: Probe, context: JobContext) -> None:
        # Another holder took the job meanwhile (as after a lease expiry): a new token.
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
            await other.execute("update pgqueue.jobs set token = nextval('pgqueue.lease_token_seq')")
        try:
            async with context.transaction() as conn:
                await conn.execute("insert into effects values (%s, %s)", (context.id, job.n))
        except QueueLeaseError as exc:
            refused.append(exc)
            raise

    hooks("stale", stale)
    await client.dispatch(Once(hook="stale", n=1))
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the job") == 1
    assert len(refused) == 1 and "rolled back" in str(refused[0])
    assert await rows(dsn, "select * from effects") == []
    assert len(await jobs(dsn)) == 1  # the other holder still has it
    assert worker.stats.lost == 1


async def test_an_error_inside_the_transaction_rolls_back_and_the_job_is_retried(
        client: Client, hooks: Any, dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(EFFECTS_DDL)

    async def boom(job: Probe, context: JobContext) -> None:
        async with context.transaction() as conn:
            await conn.execute("insert into effects values (%s, %s)", (context.id, job.n))
            raise RuntimeError("downstream said no")

    hooks("boom", boom)
    await client.dispatch(Once(hook="boom", n=1))
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the job") == 1
    assert await rows(dsn, "select * from effects") == []
    assert [f["message"] for f in await failures(dsn)] == ["downstream said no"]


SYNC_EFFECTS: dict[str, Any] = {}


@job(name="tests.control:sync_effect", tries=1)
def sync_effect(n: int, context: SyncJobContext) -> None:
    with context.transaction() as conn:
        conn.execute("insert into effects values (%s, %s)", (context.id, n))
    SYNC_EFFECTS["decision"] = context.decision


async def test_a_sync_handler_writes_through_its_transaction(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(EFFECTS_DDL)
    async with Client(settings=settings_for(dsn)) as client:
        job_id = await sync_effect(n=3).dispatch(using=client)
        worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
        assert await finish(worker.run(stop_when_empty=True), "the job") == 1
    assert await rows(dsn, "select job_id, n from effects") == [{"job_id": job_id, "n": 3}]
    assert SYNC_EFFECTS["decision"] == "acked"
    assert await jobs(dsn) == [] and await failures(dsn) == []
