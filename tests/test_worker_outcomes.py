"""What becomes of a job after its execution: retries with backoff, deadlines, the timeout
clipped by the lease, the handler's own decisions, the fence, terminal failures decided
before any handler runs, and the per-execution scope; and each decision a handler's context
can take, with its facts, its fencing and its races (one harness: handlers are hooks)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest

from pgqueue import Client, JobContext, QueueLeaseError, QueuePayloadError
from pgqueue.worker.instruments import Recorder
from pgqueue.worker.outcomes import Ended, Outcome
from tests.api_support import failed_rows, job_rows, run_worker
from tests.helpers import envelope
from tests.worker_jobs import Deadlined, Flaky, NeedsArgs, Once, Probe, Retrying
from tests.worker_support import client, failures, finish, hooks, jobs, rows, scalar

__all__ = ["client", "hooks"]


async def drain(client: Client, **options: Any) -> int:
    """Run a polling worker until no job is ready now; returns the reservations processed."""
    worker = await client.worker(listen=False, **{"concurrency": 1, **options})
    processed: int = await finish(worker.run(stop_when_empty=True), "the worker to drain the queue")
    return processed


# ---------------------------------------------------------------------------- retries
async def test_retries_follow_the_backoff_then_fail_with_the_exception(client: Client, hooks: Any, dsn: str) -> None:
    attempts: list[int] = []
    reserved: dict[int, Any] = {}
    raised: dict[int, Any] = {}

    async def fail_always(job: Probe, context: JobContext) -> None:
        attempts.append(context.attempts)
        reserved[context.attempts] = await scalar(dsn, "select reserved_at from pgqueue.jobs where id = %s",
                                                  (context.id,))
        raised[context.attempts] = await scalar(dsn, "select clock_timestamp()")
        raise ValueError(f"attempt {context.attempts} went wrong")

    hooks("fail", fail_always)
    job_id = await client.dispatch(Flaky(hook="fail"))  # tries=3, backoff=(0.05, 0.1)
    worker = await client.worker(concurrency=1, listen=False, poll_interval=600)

    assert await finish(worker.run(max_jobs=3), "three attempts") == 3

    assert attempts == [1, 2, 3]
    # Database clock: each retry was reserved no earlier than its backoff after the failure.
    assert (reserved[2] - raised[1]).total_seconds() >= 0.05
    assert (reserved[3] - raised[2]).total_seconds() >= 0.1
    assert (worker.stats.retried, worker.stats.failed) == (2, 1)
    assert await jobs(dsn) == []
    [failure] = await failures(dsn)
    assert failure["job_id"] == job_id
    assert failure["attempts"] == 3
    assert failure["reason"] == "exception"
    assert failure["exception"] == "ValueError"
    assert failure["message"] == "attempt 3 went wrong"
    assert "Traceback (most recent call last)" in failure["traceback"]
    assert "in fail_always" in failure["traceback"]
    assert "ValueError: attempt 3 went wrong" in failure["traceback"]


async def test_backoff_delay_is_applied_to_the_released_job(client: Client, hooks: Any, dsn: str) -> None:
    async def boom(job: Probe, context: JobContext) -> None:
        raise RuntimeError("later")

    hooks("boom", boom)
    await client.dispatch(Deadlined(hook="boom", deadline=time.time() + 3600))  # backoff 60 s, deadline far off

    assert await drain(client, poll_interval=600) == 1

    [row] = await jobs(dsn)
    assert (row["attempts"], row["token"]) == (1, None)
    assert 30 < row["due_in"] <= 60
    assert await failures(dsn) == []


async def test_deadline_stops_retries(client: Client, hooks: Any, dsn: str) -> None:
    async def boom(job: Probe, context: JobContext) -> None:
        raise RuntimeError("cannot make it")

    hooks("boom", boom)
    # The next try would be 60 s from now, after the deadline: fail now instead of releasing.
    job_id = await client.dispatch(Deadlined(hook="boom", deadline=time.time() + 20))

    assert await drain(client) == 1

    assert await jobs(dsn) == []
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["attempts"], failure["reason"]) == (job_id, 1, "exception")
    assert (failure["exception"], failure["message"]) == ("RuntimeError", "cannot make it")


async def test_job_past_its_deadline_is_not_run(client: Client, hooks: Any, dsn: str) -> None:
    ran: list[int] = []

    async def record(job: Probe, context: JobContext) -> None:
        ran.append(context.attempts)

    hooks("record", record)
    job_id = await client.dispatch(Deadlined(hook="record", deadline=time.time() - 1))

    assert await drain(client) == 0

    assert ran == []
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["reason"]) == (job_id, "deadline_passed")


# ---------------------------------------------------------------------------- timeout
async def test_timeout_is_clipped_by_the_lease(client: Client, hooks: Any, dsn: str) -> None:
    seen: dict[str, float] = {}

    async def forever(job: Probe, context: JobContext) -> None:
        seen["lease"] = context.lease_expires_in
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen["lease_left_at_cancel"] = context.lease_expires_in
            raise

    hooks("forever", forever)
    await client.dispatch(Once(hook="forever"))  # the envelope's timeout is the connection's 60 s
    # A 5.5 s lease minus the 5 s lease margin leaves the handler 0.5 s, far below 60 s.
    assert client.connection().lease_margin == 5.0

    # Without the heartbeat (issue 11): with it, the lease is renewed and only the timeout counts.
    assert await drain(client, lease=5.5, heartbeat=False) == 1

    assert seen["lease"] <= 5.5
    assert seen["lease_left_at_cancel"] > 0, "the handler outlived its lease"
    [failure] = await failures(dsn)
    assert (failure["exception"], failure["reason"], failure["attempts"]) == ("TimeoutError", "exception", 1)


async def test_timed_out_attempt_is_retried(client: Client, hooks: Any, dsn: str) -> None:
    attempts: list[int] = []

    async def hang_once(job: Probe, context: JobContext) -> None:
        attempts.append(context.attempts)
        if context.attempts == 1:
            await asyncio.Event().wait()

    hooks("hang", hang_once)
    await client.dispatch(Retrying(hook="hang"))

    assert await drain(client, lease=5.5, heartbeat=False) == 2

    assert attempts == [1, 2]
    assert await jobs(dsn) == []
    assert await failures(dsn) == []


# ------------------------------------------------------------------ handler decisions
async def test_handler_return_acknowledges(client: Client, hooks: Any, dsn: str) -> None:
    async def ok(job: Probe, context: JobContext) -> None:
        return None

    hooks("ok", ok)
    await client.dispatch_many([Probe(hook="ok", n=n) for n in range(3)])
    worker = await client.worker(concurrency=2, listen=False)

    assert await finish(worker.run(stop_when_empty=True), "three jobs") == 3

    assert worker.completer.acked == 3
    assert worker.stats.acked == 3
    assert await jobs(dsn) == []
    assert await failures(dsn) == []


async def test_handler_release_puts_the_job_back(client: Client, hooks: Any, dsn: str) -> None:
    async def later(job: Probe, context: JobContext) -> None:
        await context.release(30)

    hooks("later", later)
    job_id = await client.dispatch(Probe(hook="later"))

    assert await drain(client, poll_interval=600) == 1

    [row] = await jobs(dsn)
    assert (row["id"], row["attempts"], row["token"]) == (job_id, 1, None)
    assert 20 < row["due_in"] <= 30
    assert await failures(dsn) == []


async def test_a_handler_s_own_release_and_snooze_are_counted_as_such_not_as_acks(
        client: Client, hooks: Any, dsn: str) -> None:
    # The worker's stats and its instruments count the same outcome for each attempt: a handler
    # that released or snoozed its job itself was counted acked in WorkerStats (issue 25).
    async def release(job: Probe, context: JobContext) -> None:
        await context.release(600)

    async def snooze(job: Probe, context: JobContext) -> None:
        await context.snooze(600)

    hooks("release", release)
    hooks("snooze", snooze)
    await client.dispatch(Probe(hook="release"))
    await client.dispatch(Probe(hook="snooze"))
    recorder = Recorder()
    worker = await client.worker(concurrency=1, listen=False, poll_interval=600, instruments=recorder)

    assert await finish(worker.run(stop_when_empty=True), "the two jobs") == 2

    assert (worker.stats.acked, worker.stats.retried, worker.stats.snoozed) == (0, 1, 1)
    outcomes = {key[0]: value for key, value in recorder.counters.items() if key[0] != "reserved"}
    assert outcomes == {"retried": 1, "snoozed": 1}
    assert len(await jobs(dsn)) == 2


async def test_handler_release_now_runs_again_and_counts_the_attempt(client: Client, hooks: Any, dsn: str) -> None:
    attempts: list[int] = []

    async def again(job: Probe, context: JobContext) -> None:
        attempts.append(context.attempts)
        if context.attempts == 1:
            await context.release()

    hooks("again", again)
    await client.dispatch(Probe(hook="again"))

    assert await drain(client) == 2
    assert attempts == [1, 2]
    assert await jobs(dsn) == []


async def test_handler_ack_removes_the_job(client: Client, hooks: Any, dsn: str) -> None:
    calls: list[str | None] = []

    async def drop(job: Probe, context: JobContext) -> None:
        await context.ack()
        calls.append(context.decision)

    hooks("drop", drop)
    await client.dispatch(Probe(hook="drop"))
    worker = await client.worker(concurrency=1, listen=False)

    assert await finish(worker.run(stop_when_empty=True), "the job") == 1

    assert calls == ["acked"]
    assert worker.completer.acked == 0  # the worker did not acknowledge on top
    assert await jobs(dsn) == []
    assert await failures(dsn) == []


async def test_handler_fail_records_the_failure_without_retry(client: Client, hooks: Any, dsn: str) -> None:
    async def give_up(job: Probe, context: JobContext) -> None:
        try:
            raise LookupError("customer 42 is gone")
        except LookupError as exc:
            await context.fail(exc)

    hooks("give_up", give_up)
    job_id = await client.dispatch(Retrying(hook="give_up"))  # tries left, yet no retry

    assert await drain(client) == 1

    assert await jobs(dsn) == []
    [failure] = await failures(dsn)
    assert failure["job_id"] == job_id
    assert (failure["reason"], failure["attempts"]) == ("failed_by_handler", 1)
    assert (failure["exception"], failure["message"]) == ("LookupError", "customer 42 is gone")
    assert "in give_up" in failure["traceback"]


async def test_handler_extend_renews_the_lease(client: Client, hooks: Any, dsn: str) -> None:
    seen: dict[str, float] = {}
    lease_sql = "select extract(epoch from available_at - clock_timestamp())::float from pgqueue.jobs where id = %s"

    async def extend(job: Probe, context: JobContext) -> None:
        seen["before"] = await scalar(dsn, lease_sql, (context.id,))
        seen["returned"] = await context.extend(120)
        seen["after"] = await scalar(dsn, lease_sql, (context.id,))
        seen["context"] = context.lease_expires_in

    hooks("extend", extend)
    await client.dispatch(Probe(hook="extend"))

    assert await drain(client, lease=10) == 1

    assert seen["before"] <= 10
    assert 100 < seen["returned"] <= 120
    assert 100 < seen["after"] <= 120
    assert 100 < seen["context"] <= 120
    assert await jobs(dsn) == []  # then acknowledged


async def test_second_transition_raises_queue_lease_error(client: Client, hooks: Any, dsn: str) -> None:
    refused: list[str] = []

    async def twice(job: Probe, context: JobContext) -> None:
        await context.ack()
        attempts = {"release": context.release(), "ack": context.ack(), "fail": context.fail("late"),
                    "extend": context.extend(30)}
        for verb, call in attempts.items():
            try:
                await call
            except QueueLeaseError as exc:
                assert "already acked" in str(exc)
                refused.append(verb)

    hooks("twice", twice)
    await client.dispatch(Probe(hook="twice"))

    assert await drain(client) == 1

    assert refused == ["release", "ack", "fail", "extend"]
    assert await jobs(dsn) == []
    assert await failures(dsn) == []


async def test_lease_error_of_a_second_transition_leaves_the_first_decision(client: Client, hooks: Any,
                                                                            dsn: str) -> None:
    async def release_then_ack(job: Probe, context: JobContext) -> None:
        await context.release(60)
        await context.ack()  # raises QueueLeaseError out of the handler

    hooks("both", release_then_ack)
    job_id = await client.dispatch(Retrying(hook="both"))

    assert await drain(client, poll_interval=600) == 1

    [row] = await jobs(dsn)  # still released, not retried, not failed
    assert (row["id"], row["attempts"], row["token"]) == (job_id, 1, None)
    assert row["due_in"] > 30
    assert await failures(dsn) == []


async def test_lost_lease_is_never_touched(client: Client, hooks: Any, dsn: str) -> None:
    stolen: dict[str, int] = {}

    async def robbed(job: Probe, context: JobContext) -> None:
        # Someone else holds the job now (as after a lease expiry and a new reservation).
        stolen["token"] = await scalar(
            dsn, "update pgqueue.jobs set token = nextval('pgqueue.lease_token_seq') where id = %s"
                 " returning token", (context.id,))
        if job.n == 1:
            await context.ack()  # refused: QueueLeaseError leaves the handler

    hooks("robbed", robbed)
    await client.dispatch(Retrying(hook="robbed", n=1))
    worker = await client.worker(concurrency=1, listen=False)

    assert await finish(worker.run(max_jobs=1), "the job") == 1

    assert worker.stats.lost == 1
    [row] = await jobs(dsn)
    assert (row["token"], row["attempts"]) == (stolen["token"], 1)
    assert await failures(dsn) == []


async def test_refused_auto_ack_is_never_touched(client: Client, hooks: Any, dsn: str) -> None:
    stolen: dict[str, int] = {}

    async def robbed(job: Probe, context: JobContext) -> None:
        stolen["token"] = await scalar(
            dsn, "update pgqueue.jobs set token = nextval('pgqueue.lease_token_seq') where id = %s"
                 " returning token", (context.id,))

    hooks("robbed", robbed)
    await client.dispatch(Probe(hook="robbed"))
    worker = await client.worker(concurrency=1, listen=False)

    assert await finish(worker.run(max_jobs=1), "the job") == 1

    assert (worker.completer.acked, worker.completer.refused) == (0, 1)
    [row] = await jobs(dsn)
    assert row["token"] == stolen["token"]


async def test_a_refused_auto_ack_ends_the_attempt_lost_in_the_stats_the_metrics_and_the_log(
        client: Client, hooks: Any, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    # The attempt's outcome waits for the database's answer to the batched ack: it is never
    # counted acked first and corrected afterwards.
    async def robbed(job: Probe, context: JobContext) -> None:
        await scalar(dsn, "update pgqueue.jobs set token = nextval('pgqueue.lease_token_seq') where id = %s"
                          " returning token", (context.id,))

    hooks("robbed", robbed)
    job_id = await client.dispatch(Probe(hook="robbed"))
    recorder = Recorder()
    worker = await client.worker(concurrency=1, listen=False, instruments=recorder)
    ended: list[Ended] = []
    worker.outcomes.subscribe(ended.append)

    with caplog.at_level("WARNING", logger="pgqueue.worker"):
        assert await finish(worker.run(max_jobs=1), "the job") == 1

    assert [(e.job_id, e.outcome, e.reason) for e in ended] == [(job_id, Outcome.LOST, "ack_refused")]
    assert (worker.stats.acked, worker.stats.lost) == (0, 1)
    outcomes = {key[0]: value for key, value in recorder.counters.items() if key[0] != "reserved"}
    assert outcomes == {"lost": 1} and recorder.leases_lost == 1
    [warning] = [r for r in caplog.records if "ack was refused" in r.getMessage()]
    assert f"job {job_id} finished but its ack was refused" in warning.getMessage()
    assert Probe.name in warning.getMessage() and warning.__dict__["job_name"] == Probe.name


async def test_each_attempt_ends_in_one_outcome_heard_by_every_subscriber(client: Client, hooks: Any,
                                                                          dsn: str) -> None:
    async def returns(job: Probe, context: JobContext) -> None:
        pass

    async def raises(job: Probe, context: JobContext) -> None:
        raise ValueError("no")

    async def snoozes(job: Probe, context: JobContext) -> None:
        if context.attempts == 1 and not context.finished:
            await context.snooze(600)

    hooks("returns", returns)
    hooks("raises", raises)
    hooks("snoozes", snoozes)
    acked = await client.dispatch(Probe(hook="returns"))
    flaky = await client.dispatch(Flaky(hook="raises"))  # three tries: released, released, failed
    snoozed = await client.dispatch(Probe(hook="snoozes"))
    worker = await client.worker(concurrency=1, listen=False, poll_interval=600)
    ended: list[Ended] = []
    worker.outcomes.subscribe(ended.append)

    assert await finish(worker.run(max_jobs=5), "five attempts") == 5

    by_job: dict[uuid.UUID, list[tuple[Outcome, str | None]]] = {}
    for event in ended:
        by_job.setdefault(event.job_id, []).append((event.outcome, event.reason))
    assert by_job == {acked: [(Outcome.ACKED, None)],
                      flaky: [(Outcome.RELEASED, None), (Outcome.RELEASED, None), (Outcome.FAILED, "exception")],
                      snoozed: [(Outcome.SNOOZED, None)]}
    assert [e.attempts for e in ended if e.job_id == flaky] == [1, 2, 3]
    stats = worker.stats
    assert (stats.acked, stats.retried, stats.failed, stats.snoozed, stats.lost) == (1, 2, 1, 1, 0)


@pytest.mark.parametrize("error", [QueueLeaseError, QueuePayloadError])
async def test_queue_error_raised_by_a_handler_is_a_handler_failure(client: Client, hooks: Any, dsn: str,
                                                                     error: type[Exception]) -> None:
    attempts: list[int] = []

    async def pretend(job: Probe, context: JobContext) -> None:
        attempts.append(context.attempts)
        if context.attempts == 1:
            raise error("made up by the handler")

    hooks("pretend", pretend)
    await client.dispatch(Retrying(hook="pretend"))

    assert await drain(client) == 2  # retried like any other exception

    assert attempts == [1, 2]
    assert await jobs(dsn) == []
    assert await failures(dsn) == []


async def test_queue_error_raised_by_a_handler_fails_with_its_traceback(client: Client, hooks: Any, dsn: str) -> None:
    async def pretend(job: Probe, context: JobContext) -> None:
        raise QueueLeaseError("made up by the handler")

    hooks("pretend", pretend)
    await client.dispatch(Once(hook="pretend"))

    assert await drain(client) == 1

    [failure] = await failures(dsn)
    assert (failure["reason"], failure["exception"]) == ("exception", "pgqueue.errors.QueueLeaseError")
    assert failure["message"] == "made up by the handler"
    assert "in pretend" in failure["traceback"]


# ------------------------------------------------- terminal before any handler runs
async def _enqueue_raw(dsn: str, data: dict[str, Any]) -> uuid.UUID:
    job_id = await scalar(dsn, "select pgqueue.enqueue(%s::jsonb, 0)", (json.dumps(data),))
    assert isinstance(job_id, uuid.UUID)
    return job_id


async def _insert_raw(dsn: str, stored: Any) -> uuid.UUID:
    """A row whose envelope dispatch would never write (to simulate corruption or an old producer)."""
    job_id = uuid.uuid4()
    await scalar(dsn, "insert into pgqueue.jobs (id, queue, envelope, max_tries) values (%s, 'default', %s::jsonb, 3)"
                      " returning id", (job_id, json.dumps(stored)))
    return job_id


async def test_unknown_job_name_fails_without_retry(client: Client, hooks: Any, dsn: str) -> None:
    job_id = await _enqueue_raw(dsn, envelope(name="tests.worker:nobody-registered-this", tries=3))

    assert await drain(client) == 1

    assert await jobs(dsn) == []
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["reason"], failure["attempts"]) == (job_id, "unknown_job", 1)
    assert "tests.worker:nobody-registered-this" in failure["message"]
    assert failure["traceback"] is None


@pytest.mark.parametrize(("stored", "named"), [
    ({"name": "tests.worker:probe", "id": "x"}, "args"),
    ([1, 2], "object"),
    ({"id": str(uuid.uuid4()), "name": "tests.worker:probe", "args": {"hook": "h"}, "connection": "database",
      "queue": "default", "tries": 3, "timeout": "soon", "backoff": {"kind": "fixed", "delays": [0.0]}},
     "timeout"),
    ({"id": str(uuid.uuid4()), "name": "tests.worker:probe", "args": {"hook": "h"}, "connection": "database",
      "queue": "default", "tries": 3, "timeout": 30, "backoff": {"kind": "fibonacci"}}, "backoff"),
], ids=["no-args", "not-an-object", "bad-timeout", "bad-backoff"])
async def test_malformed_envelope_fails_as_payload_invalid(client: Client, hooks: Any, dsn: str, stored: Any,
                                                           named: str) -> None:
    ran: list[int] = []

    async def record(job: Probe, context: JobContext) -> None:
        ran.append(context.attempts)

    hooks("h", record)
    job_id = await _insert_raw(dsn, stored)

    assert await drain(client) == 1

    assert ran == []
    assert await jobs(dsn) == []
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["reason"], failure["attempts"]) == (job_id, "payload_invalid", 1)
    assert named in failure["message"]
    assert failure["traceback"] is None


@pytest.mark.parametrize("args", [{"hook": "h"}, {"hook": "h", "count": 1, "colour": "red"}],
                         ids=["missing", "unexpected"])
async def test_args_that_do_not_fit_the_job_fail_as_payload_invalid(client: Client, hooks: Any, dsn: str,
                                                                    args: dict[str, Any]) -> None:
    ran: list[int] = []

    async def record(job: Probe, context: JobContext) -> None:
        ran.append(context.attempts)

    hooks("h", record)
    job_id = await _enqueue_raw(dsn, envelope(name=NeedsArgs.name, args=args, tries=3))

    assert await drain(client) == 1

    assert ran == []
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["reason"], failure["attempts"]) == (job_id, "payload_invalid", 1)
    assert NeedsArgs.name in failure["message"]


# ------------------------------------------------------------------------------ scope
async def test_scope_wraps_each_execution(client: Client, hooks: Any, dsn: str) -> None:
    events: list[tuple[Any, ...]] = []
    current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar("current", default=None)

    @contextlib.asynccontextmanager
    async def scope(context: JobContext) -> AsyncIterator[None]:
        events.append(("enter", context.id, context.attempts))
        token = current.set(context)
        try:
            yield
        finally:
            current.reset(token)
            events.append(("exit", context.id, context.attempts))

    async def handle(job: Probe, context: JobContext) -> None:
        events.append(("handle", context.id, context.attempts, current.get() is context))
        if job.n == 1 and context.attempts == 1:
            raise RuntimeError("retry me")

    hooks("scoped", handle)
    first = await client.dispatch(Retrying(hook="scoped", n=0))
    second = await client.dispatch(Retrying(hook="scoped", n=1))

    assert await drain(client, scope=scope) == 3

    executions = [events[i:i + 3] for i in range(0, len(events), 3)]
    assert len(events) == 9
    for execution in executions:
        (enter, job_id, attempt), handled, exited = execution
        assert enter == "enter"
        assert handled == ("handle", job_id, attempt, True), "the handler ran outside its own scope"
        assert exited == ("exit", job_id, attempt)
    assert sorted((e[0][1], e[0][2]) for e in executions) == sorted([(first, 1), (second, 1), (second, 2)])
    assert await rows(dsn, "select 1 from pgqueue.jobs") == []


# ------------------------------------------------ the context's decisions, one by one
# (formerly tests/test_api_context.py: the same assertions, through this file's hooks.)
Decide = Callable[[JobContext, dict[str, Any]], Awaitable[None]]


async def run_decision(client: Client, hooks: Any, decide: Decide, *, job: type[Probe] = Probe,
                       ) -> tuple[uuid.UUID, dict[str, Any]]:
    """Run one job whose handler records the context's facts, then calls ``decide(context, seen)``."""
    seen: dict[str, Any] = {}

    async def handler(job: Probe, context: JobContext) -> None:
        seen.update(id=context.id, attempts=context.attempts, queue=context.queue, connection=context.connection,
                    finished_before=context.finished, lease_left=context.lease_expires_in, token=context.token)
        await decide(context, seen)

    name = hooks(f"decide-{uuid.uuid4().hex[:6]}", handler)
    job_id = await client.dispatch(job(hook=name))
    await run_worker(client)
    return job_id, seen


async def after_decision(context: JobContext, seen: dict[str, Any]) -> None:
    """Record the decision taken, then try every other one: each must raise QueueLeaseError."""
    seen.update(finished_after=context.finished, decision=context.decision, failure=context.failure)
    await second_decision(context, seen)


async def second_decision(context: JobContext, seen: dict[str, Any]) -> None:
    errors = []
    for attempt in (context.ack(), context.release(1.0), context.fail("again"), context.extend(30)):
        try:
            await attempt
        except QueueLeaseError as exc:
            errors.append(str(exc))
    seen["second"] = errors


async def expect_lost(context: JobContext, seen: dict[str, Any], decision: Awaitable[Any]) -> None:
    try:
        await decision
    except QueueLeaseError as exc:
        seen.update(lost=str(exc), decision=context.decision, finished_after=context.finished)
    else:
        seen["lost"] = None
    await second_decision(context, seen)


async def on_other_connection(dsn: str, sql: str, *params: Any) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(sql, params)
        return await cur.fetchall() if cur.description else []


async def test_read_only_facts(client: Client, hooks: Any, dsn: str) -> None:
    async def nothing(context: JobContext, seen: dict[str, Any]) -> None:
        return None

    job_id, seen = await run_decision(client, hooks, nothing)
    assert seen["id"] == job_id
    assert (seen["attempts"], seen["queue"], seen["connection"]) == (1, "default", "database")
    assert seen["finished_before"] is False
    assert 0 < seen["lease_left"] <= 90  # the connection's lease
    assert seen["token"] > 0
    assert job_rows(dsn) == []  # no decision: acknowledged


def test_facts_cannot_be_assigned() -> None:
    class Nothing:
        async def ack(self, job_id: uuid.UUID, token: int) -> bool:
            return True

    context = JobContext(job_id=uuid.uuid4(), token=1, attempts=2, tries=3, queue="q", connection="database",
                         lease_seconds_left=10, decisions=Nothing())  # type: ignore[arg-type]
    for fact in ("id", "attempts", "queue", "connection", "finished", "failure", "lease_expires_in", "token"):
        with pytest.raises(AttributeError):
            setattr(context, fact, None)
    with pytest.raises(AttributeError):
        context.something_new = 1  # type: ignore[attr-defined]
    assert (context.attempts, context.queue, context.finished, context.failure) == (2, "q", False, None)


async def test_attempts_count_up_across_retries(client: Client, hooks: Any, dsn: str) -> None:
    attempts: list[int] = []

    async def flaky(context: JobContext, seen: dict[str, Any]) -> None:
        attempts.append(context.attempts)
        if context.attempts < 3:
            raise RuntimeError("not yet")

    await run_decision(client, hooks, flaky, job=Retrying)  # tries=3, no backoff
    assert attempts == [1, 2, 3]
    assert job_rows(dsn) == [] and failed_rows(dsn) == []


async def test_release_puts_the_job_back_with_its_delay(client: Client, hooks: Any, dsn: str) -> None:
    async def release(context: JobContext, seen: dict[str, Any]) -> None:
        await context.release(delay=600)
        await after_decision(context, seen)

    job_id, seen = await run_decision(client, hooks, release)
    assert (seen["finished_after"], seen["decision"]) == (True, "released")
    [row] = job_rows(dsn)
    assert row["id"] == job_id and row["token"] is None and row["attempts"] == 1
    assert 590 < row["due_in"] <= 600
    assert len(seen["second"]) == 4 and all("already released" in e for e in seen["second"])


async def test_ack_removes_the_job(client: Client, hooks: Any, dsn: str) -> None:
    async def ack(context: JobContext, seen: dict[str, Any]) -> None:
        await context.ack()
        await after_decision(context, seen)

    _, seen = await run_decision(client, hooks, ack)
    assert seen["decision"] == "acked"
    assert job_rows(dsn) == [] and failed_rows(dsn) == []
    assert all("already acked" in e for e in seen["second"])


async def test_fail_moves_the_job_to_failed_jobs_at_once(client: Client, hooks: Any, dsn: str) -> None:
    async def fail(context: JobContext, seen: dict[str, Any]) -> None:
        await context.fail(ValueError(f"{context.id} is invalid"))
        await after_decision(context, seen)

    job_id, seen = await run_decision(client, hooks, fail)
    assert seen["decision"] == "failed"
    assert isinstance(seen["failure"], ValueError)
    assert job_rows(dsn) == []
    [failure] = failed_rows(dsn)
    assert failure["job_id"] == job_id and failure["reason"] == "failed_by_handler"
    assert failure["exception"] == "ValueError" and failure["message"].endswith("is invalid")
    assert failure["attempts"] == 1  # tries=3, but fail() does not retry
    assert all("already failed" in e for e in seen["second"])


async def test_extend_renews_the_lease(client: Client, hooks: Any, dsn: str) -> None:
    async def extend(context: JobContext, seen: dict[str, Any]) -> None:
        left = await context.extend(300)
        rows = await on_other_connection(
            dsn, "select extract(epoch from available_at - now()) from pgqueue.jobs where id = %s", context.id)
        seen.update(extended=left, lease_after=context.lease_expires_in, db_left=float(rows[0][0]))

    _, seen = await run_decision(client, hooks, extend)
    assert 290 < seen["extended"] <= 300
    assert 280 < seen["lease_after"] <= 300
    assert 290 < seen["db_left"] <= 300  # the database clock agrees
    assert job_rows(dsn) == []  # returning afterwards still acknowledges


async def test_a_decision_after_the_queue_was_cleared_is_refused(client: Client, hooks: Any, dsn: str) -> None:
    async def fence_clear(context: JobContext, seen: dict[str, Any]) -> None:
        await on_other_connection(dsn, "select pgqueue.clear('default')")
        await expect_lost(context, seen, context.ack())

    _, seen = await run_decision(client, hooks, fence_clear)
    assert seen["lost"] is not None and "lease was lost" in seen["lost"]
    assert (seen["decision"], seen["finished_after"]) == ("lost", True)
    assert all("already lost" in e for e in seen["second"])
    assert job_rows(dsn) == [] and failed_rows(dsn) == []


async def test_a_decision_after_someone_else_reserved_the_job_is_refused(client: Client, hooks: Any,
                                                                         dsn: str) -> None:
    async def fence_reserve(context: JobContext, seen: dict[str, Any]) -> None:
        # Expire the lease and let "another worker" reserve the job: its token replaces ours.
        await on_other_connection(dsn, "update pgqueue.jobs set available_at = now() - interval '1 second'"
                                       " where id = %s", context.id)
        rows = await on_other_connection(dsn, "select token from pgqueue.reserve(array['default'], 1, 60)")
        seen["thief_token"] = rows[0][0]
        await expect_lost(context, seen, context.release(0))

    job_id, seen = await run_decision(client, hooks, fence_reserve)
    assert seen["lost"] is not None and "refused" in seen["lost"]
    [row] = job_rows(dsn)  # nothing changed: the other holder still has it
    assert row["id"] == job_id and row["token"] == seen["thief_token"] != seen["token"]
    assert row["attempts"] == 2 and row["due_in"] > 30


async def test_an_extend_the_fence_refuses_raises(client: Client, hooks: Any, dsn: str) -> None:
    async def fence_extend(context: JobContext, seen: dict[str, Any]) -> None:
        await on_other_connection(dsn, "select pgqueue.clear('default')")
        await expect_lost(context, seen, context.extend(30))

    _, seen = await run_decision(client, hooks, fence_extend)
    assert seen["lost"] is not None and "extend refused" in seen["lost"]


@pytest.mark.parametrize("fail_first", [True, False], ids=["race_fail_first", "race_release_first"])
async def test_racing_fail_and_release_exactly_one_wins(client: Client, hooks: Any, dsn: str,
                                                        fail_first: bool) -> None:
    async def race(context: JobContext, seen: dict[str, Any]) -> None:
        fail = context.fail(RuntimeError("fail won"))
        release = context.release(delay=600)
        racers = (fail, release) if fail_first else (release, fail)
        results = await asyncio.gather(*(asyncio.create_task(r) for r in racers), return_exceptions=True)
        seen.update(race=[type(r).__name__ for r in results], decision=context.decision)

    job_id, seen = await run_decision(client, hooks, race)
    assert sorted(seen["race"]) == ["NoneType", "QueueLeaseError"]
    if seen["decision"] == "failed":
        assert job_rows(dsn) == [] and [f["job_id"] for f in failed_rows(dsn)] == [job_id]
    else:
        assert seen["decision"] == "released"
        assert [r["id"] for r in job_rows(dsn)] == [job_id] and failed_rows(dsn) == []
