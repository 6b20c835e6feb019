"""A notification is a hint, never an authority (issue 24, item 8).

Anyone who may connect to the database can ``pg_notify`` on pgqueue's channels. A worker acts
only on what the database recorded: a ``pgqueue_cancel`` notification stops a running handler
or drops a buffered job only once ``pgqueue.cancelled`` confirms that the attempt's job was
cancelled (its reservation is gone and its latest failure is a cancellation); a wake-up on
``pgqueue`` or ``pgqueue_delayed`` makes it look (reserve, or read the next due time), and the
reservation decides as always. Each test forges the notifications as a role that has nothing
but CONNECT, created by the test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqueue import Client, JobContext
from pgqueue.worker.instruments import Recorder
from tests.helpers import envelope
from tests.sql_calls import enqueue, reserve, rows, scalar
from tests.worker_jobs import Once, Probe
from tests.worker_support import Runs, client, failures, finish, hooks, jobs, runs, wait_event, wait_until

__all__ = ["client", "hooks", "runs"]  # fixtures


class TwoTries(Probe):
    """Two tries: a lost attempt would leave one."""

    name = "tests.notifications:two_tries"
    tries = 2


@pytest.fixture
def forger(dsn: str) -> Iterator[str]:
    """The DSN of a login role with nothing but CONNECT (PUBLIC's default): no pgqueue privilege."""
    role = f"pgq_forger_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
    forger_dsn = make_conninfo(dsn, user=role)
    with psycopg.connect(forger_dsn, autocommit=True) as conn:  # it may not touch pgqueue
        for statement in (b"select count(*) from pgqueue.jobs", b"select pgqueue.cancel(gen_random_uuid())"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    try:
        yield forger_dsn
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("select pg_terminate_backend(pid) from pg_stat_activity where usename = {}")
                         .format(sql.Literal(role)))
            conn.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(role)))


async def forge(forger_dsn: str, *notifications: tuple[str, str]) -> None:
    """Send ``(channel, payload)`` notifications as the forger, in one transaction (delivered in order)."""
    async with await psycopg.AsyncConnection.connect(forger_dsn) as conn:
        for channel, payload in notifications:
            await conn.execute("select pg_notify(%s, %s)", (channel, payload))


def _unconfirmed(worker: Any) -> int:
    # How many cancel notifications for jobs held here the database did not confirm.
    return int(getattr(worker.cancellations, "unconfirmed", 0))


async def test_a_forged_cancel_stops_no_handler_and_a_real_cancel_still_does(
        client: Client, hooks: Any, runs: Runs, dsn: str, forger: str) -> None:
    release = asyncio.Event()
    started = {n: asyncio.Event() for n in range(3)}
    stopped: list[int] = []
    ran: list[tuple[int, int]] = []

    async def hold(job: Probe, context: JobContext) -> None:
        ran.append((job.n, context.attempts))
        started[job.n].set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            stopped.append(job.n)
            raise

    hooks("hold", hold)
    once = await client.dispatch(Once(hook="hold", n=0))
    twice = await client.dispatch(TwoTries(hook="hold", n=1))
    victim = await client.dispatch(Once(hook="hold", n=2))
    # The poll interval is long and the heartbeat off: only a notification could stop a handler.
    worker = await client.worker(concurrency=3, prefetch=0, poll_interval=600, maintenance_interval=None,
                                 heartbeat=False)
    task = runs.start(worker)
    for event in started.values():
        await wait_event(event, "the three handlers to start")
    assert worker.notifier is not None
    await wait_event(worker.notifier.connected, "the worker to LISTEN")

    # Forged: the ids of two running jobs, garbage, and a job this worker does not hold.
    await forge(forger, ("pgqueue_cancel", str(once)), ("pgqueue_cancel", str(twice)),
                ("pgqueue_cancel", "not a job id"), ("pgqueue_cancel", "x" * 7000),
                ("pgqueue_cancel", str(uuid.uuid4())))
    await wait_until(lambda: stopped or _unconfirmed(worker) >= 2, "the worker to check the forged cancels")
    assert stopped == [], "a forged pgqueue_cancel notification stopped a running handler"
    assert worker.cancellations.cancelled == 0

    # A real cancel still reaches its handler by NOTIFY, and only that one.
    assert await client.cancel(victim) == "cancelled_running"
    await wait_until(lambda: stopped, "the cancelled handler to be stopped", within=5)
    assert stopped == [2]

    release.set()
    await wait_until(lambda: worker.stats.acked == 2 and worker.completer.pending == 0, "the two acks")
    worker.stop()
    await finish(task, "the worker to stop")
    assert sorted(ran) == [(0, 1), (1, 1), (2, 1)]
    assert await jobs(dsn) == [], "a job whose cancel was forged did not end acked"
    assert [(f["job_id"], f["reason"]) for f in await failures(dsn)] == [(victim, "cancelled")]
    assert (worker.stats.acked, worker.stats.cancelled, worker.stats.lost) == (2, 1, 0)


async def test_a_forged_cancel_drops_no_buffered_job_and_a_real_cancel_still_does(
        client: Client, hooks: Any, runs: Runs, dsn: str, forger: str) -> None:
    gate = asyncio.Event()
    first = asyncio.Event()
    ran: list[int] = []

    async def wait_at_the_gate(job: Probe, context: JobContext) -> None:
        ran.append(job.n)
        if job.n == 0:
            first.set()
            await gate.wait()

    hooks("gate", wait_at_the_gate)
    ids = await client.dispatch_many([Probe(hook="gate", n=n) for n in range(4)])
    worker = await client.worker(concurrency=1, prefetch=3, poll_interval=600, maintenance_interval=None)
    task = runs.start(worker, stop_when_empty=True)
    await wait_event(first, "the first handler to start")
    await wait_until(lambda: len(worker.fetcher.buffer) == 3, "the buffer to fill")
    assert worker.notifier is not None
    await wait_event(worker.notifier.connected, "the worker to LISTEN")

    await forge(forger, ("pgqueue_cancel", str(ids[1])), ("pgqueue_cancel", str(ids[3])))
    await wait_until(lambda: any(item.finished for item in worker.fetcher.buffer) or _unconfirmed(worker) >= 2,
                     "the worker to check the forged cancels")
    assert [item.finished for item in worker.fetcher.buffer] == [False, False, False], \
        "a forged pgqueue_cancel notification dropped a buffered job"

    assert await client.cancel(ids[2]) == "cancelled_running"
    await wait_until(lambda: [item.finished for item in worker.fetcher.buffer] == [False, True, False],
                     "the real cancel to reach the buffer", within=5)
    gate.set()
    await finish(task, "the worker to drain")
    assert sorted(ran) == [0, 1, 3]
    assert [(f["job_id"], f["reason"]) for f in await failures(dsn)] == [(ids[2], "cancelled")]
    assert await jobs(dsn) == []


async def test_when_the_check_fails_the_heartbeat_still_stops_a_cancelled_handler(
        client: Client, hooks: Any, runs: Runs, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()

    async def hold(job: Probe, context: JobContext) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            raise

    hooks("hold", hold)
    job_id = await client.dispatch(Once(hook="hold"))
    # A long lease: the heartbeat renews only when the test calls tick().
    worker = await client.worker(concurrency=1, prefetch=0, poll_interval=600, maintenance_interval=None,
                                 lease=600)
    runs.start(worker)
    await wait_event(started, "the handler to start")
    assert worker.notifier is not None and worker.heartbeat is not None
    await wait_event(worker.notifier.connected, "the worker to LISTEN")
    with psycopg.connect(dsn, autocommit=True) as conn:  # the check cannot run
        conn.execute("alter function pgqueue.cancelled(uuid[], bigint[]) rename to cancelled_gone")
    assert await client.cancel(job_id) == "cancelled_running"
    await wait_until(lambda: "could not check 1 cancel notification" in caplog.text, "the check to fail")
    assert not stopped.is_set(), "a handler was stopped on a notification the database did not confirm"
    await worker.heartbeat.tick()  # the fence refuses the cancelled attempt's renewal
    await wait_event(stopped, "the heartbeat to stop the handler", within=5)
    await wait_until(lambda: worker.stats.lost == 1, "the worker to count the lost lease")
    assert [f["reason"] for f in await failures(dsn)] == ["cancelled"]


async def test_forged_wake_ups_only_make_the_worker_look(client: Client, runs: Runs, dsn: str,
                                                         forger: str) -> None:
    # A paused queue's ready job and a delayed job: a wake-up cannot make either run.
    await client.dispatch(Once(hook="never"), queue="held")
    await client.pause("held")
    delayed = await client.dispatch(Once(hook="never"), delay=600)
    recorder = Recorder()
    worker = await client.worker(queues=("default", "held"), concurrency=2, poll_interval=600,
                                 maintenance_interval=None, instruments=recorder)
    runs.start(worker)
    assert worker.notifier is not None
    await wait_event(worker.notifier.connected, "the worker to LISTEN")
    await wait_until(worker.idle.is_set, "the worker to idle")
    looks = recorder.batch_sizes.count

    await forge(forger, ("pgqueue_delayed", "default"), ("pgqueue", "held"), ("pgqueue", "default"),
                ("pgqueue", "not served here"))
    await wait_until(lambda: recorder.batch_sizes.count > looks and worker.idle.is_set(),
                     "the forged wake-up to cause a look")
    assert worker.stats.reserved == 0
    left = {row["id"]: (row["queue"], row["token"], row["due_in"] > 500) for row in await jobs(dsn)}
    assert left[delayed] == ("default", None, True)
    assert [v for k, v in left.items() if k != delayed] == [("held", None, False)]


def test_cancelled_answers_true_only_for_a_cancel_the_database_recorded(dsn: str) -> None:
    check = "select id, cancelled from pgqueue.cancelled(%s::uuid[], %s::bigint[])"
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue(conn, envelope())
        [first] = reserve(conn, ["default"], 1)
        job_id, token = first["id"], first["token"]
        stranger = uuid.uuid4()
        # Running under its reservation, and a job that does not exist: nothing was cancelled.
        assert rows(conn, check, ([job_id, stranger], [token, 1])) == [
            {"id": job_id, "cancelled": False}, {"id": stranger, "cancelled": False}]
        assert scalar(conn, "select pgqueue.cancel(%s)", (job_id,)) == "cancelled_running"
        assert rows(conn, check, ([job_id], [token])) == [{"id": job_id, "cancelled": True}]
        # Retried and running again under a new token: neither the old attempt nor the new one is.
        failure = scalar(conn, "select id from pgqueue.failed_jobs where job_id = %s", (job_id,))
        conn.execute("select pgqueue.retry_failed(%s)", (failure,))
        [again] = reserve(conn, ["default"], 1)
        assert rows(conn, check, ([job_id, job_id], [token, again["token"]])) == [
            {"id": job_id, "cancelled": False}, {"id": job_id, "cancelled": False}]
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="2 ids but 1 tokens"):
            conn.execute(check, ([job_id, stranger], [token]))
