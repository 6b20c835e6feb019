"""Issue 26 from Python: dispatch returns a JobHandle (still the job's UUID); its status() and
result() (woken by pgqueue_ended, with failures raising their record); the result checked against
the handler's return annotation (result_invalid), kept for result_ttl, written by the fenced ack
(a stale holder's never lands), also after context.transaction(); every failed attempt kept."""

from __future__ import annotations

import asyncio
import copy
import pickle
import uuid
from typing import Any

import psycopg
import pytest

from pgqueue import (
    Client,
    Job,
    JobContext,
    JobFailedError,
    JobHandle,
    JobResultTimeout,
    QueueConfigurationError,
    QueueResultError,
    job,
)
from pgqueue.results import MAX_RESULT_BYTES, declared_result
from tests.api_support import run_worker
from tests.worker_support import Runs, client, finish, rows, runs, scalar, settings_for

__all__ = ["client", "runs"]

ATTEMPTS: dict[str, int] = {}
GATES: dict[str, asyncio.Event] = {}


class Total(Job):
    """Declares its result: kept for the default day."""

    name = "tests:results_total"
    values: list[int]

    async def handle(self, context: JobContext) -> int:
        return sum(self.values)


class Shaped(Job):
    """Returns whatever it is told to, declaring a dict of ints."""

    name = "tests:results_shaped"
    kind: str

    async def handle(self, context: JobContext) -> dict[str, int]:
        values: dict[str, Any] = {"good": {"n": 1}, "wrong_type": {"n": "one"}, "not_json": {"n": {1, 2}},
                                  "too_large": {"x" * (MAX_RESULT_BYTES + 1): 1}}
        return values[self.kind]  # type: ignore[no-any-return]


class Plain(Job):
    """Declares no result: its ack keeps nothing (the plain path)."""

    name = "tests:results_plain"

    async def handle(self, context: JobContext) -> None:
        return None


class FlakyTotal(Job):
    """Fails its first ``failures`` attempts, then returns the attempt number."""

    name = "tests:results_flaky"
    key: str
    failures: int
    tries = 5
    backoff = 0.0

    async def handle(self, context: JobContext) -> int:
        ATTEMPTS[self.key] = ATTEMPTS.get(self.key, 0) + 1
        if context.attempts <= self.failures:
            raise RuntimeError(f"attempt {context.attempts} broke")
        return context.attempts


class Gated(Job):
    """Waits for its gate, then returns its label."""

    name = "tests:results_gated"
    gate: str

    async def handle(self, context: JobContext) -> str:
        await GATES[self.gate].wait()
        return self.gate


class InTransaction(Job):
    """Writes through context.transaction() (which acks inside the block), then returns a value."""

    name = "tests:results_in_transaction"
    label: str

    async def handle(self, context: JobContext) -> dict[str, str]:
        async with context.transaction() as conn:
            await conn.execute("insert into results_ledger (label) values (%s)", (self.label,))
        return {"written": self.label}


class Stale(Job):
    """Loses its lease to another reservation (made from SQL) before it returns its value."""

    name = "tests:results_stale"
    dsn: str

    async def handle(self, context: JobContext) -> str:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await conn.execute("update pgqueue.jobs set available_at = now() - interval '1 second' where id = %s",
                               (context.id,))
            await conn.execute("select * from pgqueue.reserve(array['stale'], 1, 60)")
        return "from the stale holder"


@job(name="tests:results_function", result_ttl=60)
async def double(n: int) -> int:
    return 2 * n


async def _worker(client: Client, runs: Runs, *queues: str) -> None:
    worker = await client.worker(queues=list(queues or ("default",)), concurrency=4, heartbeat=False)
    runs.start(worker)


async def test_dispatch_returns_a_handle_that_is_the_jobs_uuid(client: Client, dsn: str) -> None:
    handle = await client.dispatch(Plain())
    assert isinstance(handle, JobHandle) and isinstance(handle, uuid.UUID)
    assert handle == uuid.UUID(str(handle)) and hash(handle) == hash(uuid.UUID(str(handle)))
    assert handle.version == 7 and handle.id == handle and type(handle.id) is uuid.UUID
    by_id: dict[uuid.UUID, int] = {handle: 1}
    assert by_id[uuid.UUID(str(handle))] == 1
    # psycopg adapts it as the uuid it is; pickled or copied it is a plain UUID.
    assert await scalar(dsn, "select count(*) from pgqueue.jobs where id = %s", (handle,)) == 1
    assert type(pickle.loads(pickle.dumps(handle))) is uuid.UUID and copy.copy(handle) == handle
    many = await client.dispatch_many([Plain(), Plain()])
    assert all(isinstance(h, JobHandle) for h in many)
    assert (await many[1].status()).state == "waiting"
    assert client.job(str(handle)) == handle
    with pytest.raises(QueueConfigurationError, match="follows no client"):
        await JobHandle(handle).status()
    with pytest.raises(QueueConfigurationError, match="not a job id"):
        client.job("nope")


async def test_result_wakes_when_the_worker_acks_and_status_tells_the_story(client: Client, runs: Runs) -> None:
    GATES["g1"] = asyncio.Event()
    handle = await client.dispatch(Gated(gate="g1"))
    await _worker(client, runs)
    waiting = asyncio.create_task(handle.result(timeout=30))
    await asyncio.sleep(0)
    assert not waiting.done()
    GATES["g1"].set()
    assert await finish(waiting, "the result") == "g1"
    status = await handle.status()
    assert (status.state, status.attempts, status.result, status.has_result) == ("succeeded", 1, "g1", True)
    assert status.finished_at is not None and status.result_expires_at is not None
    assert (status.result_expires_at - status.finished_at).total_seconds() == pytest.approx(86400, abs=5)
    # Many waiters share the client's one listening connection.
    handles = await client.dispatch_many([Total(values=[i, 1]) for i in range(20)])
    assert await finish(asyncio.gather(*(h.result(timeout=30) for h in handles)), "20 results") == [
        i + 1 for i in range(20)]
    assert await client.job(handles[3]).result(timeout=0) == 4  # ended already: no wait at all


async def test_a_job_declaring_no_result_keeps_nothing(client: Client, dsn: str, runs: Runs) -> None:
    handle = await client.dispatch(Plain())
    with pytest.raises(QueueResultError, match="is waiting and keeps no result"):
        await handle.result(timeout=30)
    await finish(run_worker(client), "the worker to drain the queue")  # its acks flushed when it returns
    assert (await handle.status()).state == "unknown"
    assert await scalar(dsn, "select count(*) from pgqueue.job_results where job_id = %s", (handle,)) == 0
    with pytest.raises(QueueResultError, match="holds nothing of job"):
        await handle.result(timeout=1)


async def test_result_ttl_per_job_type_and_per_dispatch(client: Client, runs: Runs) -> None:
    await _worker(client, runs)
    made = await client.dispatch(double(n=21))
    assert await finish(made.result(timeout=30), "the function's result") == 42
    status = await made.status()
    assert status.result_expires_at is not None and status.finished_at is not None
    assert (status.result_expires_at - status.finished_at).total_seconds() == pytest.approx(60, abs=5)
    dropped = await client.dispatch(Total(values=[5]), result_ttl=0)
    with pytest.raises(QueueResultError, match="keeps no result"):
        await dropped.result(timeout=30)
    with pytest.raises(QueueConfigurationError, match="result_ttl must be a number of seconds"):
        await client.dispatch(Total(values=[1]), result_ttl=-1)
    with pytest.raises(QueueConfigurationError, match="result_ttl must be a number of seconds"):
        type("Bad", (Job,), {"name": "tests:results_bad_ttl", "result_ttl": "soon", "__annotations__": {}})


@pytest.mark.parametrize(("kind", "says"), [
    ("wrong_type", "must be dict"),
    ("not_json", "not JSON"),
    ("too_large", "over the limit of"),
])
async def test_a_result_that_cannot_be_kept_fails_with_result_invalid(client: Client, runs: Runs, kind: str,
                                                                     says: str) -> None:
    await _worker(client, runs)
    handle = await client.dispatch(Shaped(kind=kind))
    with pytest.raises(JobFailedError) as raised:
        await finish(handle.result(timeout=30), "the failure")
    status: Any = raised.value.status
    assert (status.state, status.reason) == ("failed", "result_invalid")
    assert says in status.message and str(handle) in str(raised.value)
    [attempt] = status.errors
    assert attempt.reason == "result_invalid" and attempt.exception == "pgqueue.errors.QueueResultError"


async def test_a_good_shaped_result_is_kept(client: Client, runs: Runs) -> None:
    await _worker(client, runs)
    assert await finish((await client.dispatch(Shaped(kind="good"))).result(timeout=30), "it") == {"n": 1}


async def test_every_failed_attempt_is_kept_and_survives_retry_failed(client: Client, runs: Runs) -> None:
    await _worker(client, runs)
    retried = await client.dispatch(FlakyTotal(key="a", failures=2))
    assert await finish(retried.result(timeout=30), "the third attempt") == 3
    status = await retried.status()
    assert [(e.attempt, e.reason, e.exception, e.message) for e in status.errors] == [
        (1, "retried", "RuntimeError", "attempt 1 broke"), (2, "retried", "RuntimeError", "attempt 2 broke")]
    assert all(e.worker and ":" in e.worker and e.duration is not None for e in status.errors)
    assert "Traceback" in (status.errors[0].traceback or "")

    failing = await client.dispatch(FlakyTotal(key="b", failures=99))  # 5 tries, all fail
    with pytest.raises(JobFailedError, match="failed after 5 attempt"):
        await finish(failing.result(timeout=30), "the terminal failure")
    first = await failing.status()
    assert [e.reason for e in first.errors] == ["retried"] * 4 + ["exception"]
    assert first.failure_id is not None
    await client.retry_failed(first.failure_id)
    with pytest.raises(JobFailedError) as raised:
        await finish(failing.result(timeout=30), "the second terminal failure")
    again: Any = raised.value.status
    assert len(again.errors) == 10 and [e.attempt for e in again.errors] == [1, 2, 3, 4, 5] * 2


async def test_a_cancelled_job_raises_with_its_record(client: Client) -> None:
    handle = await client.dispatch(Total(values=[1]), delay=3600)
    waiting = asyncio.create_task(handle.result(timeout=30))
    await asyncio.sleep(0.01)
    await client.cancel(handle)
    with pytest.raises(JobFailedError, match="cancelled") as raised:
        await finish(waiting, "the cancel to wake the waiter")
    assert raised.value.status.reason == "cancelled"  # type: ignore[attr-defined]


async def test_a_timeout_says_so(client: Client) -> None:
    handle = await client.dispatch(Total(values=[1]), delay=3600)
    with pytest.raises(JobResultTimeout, match=r"did not end within 0.05s; it is delayed \(attempt 0 of 3\)"):
        await handle.result(timeout=0.05)
    with pytest.raises(TimeoutError):
        await handle.result(timeout=0)
    with pytest.raises(QueueConfigurationError, match="timeout"):
        await handle.result(timeout=-1)


async def test_a_stale_holders_result_never_lands(client: Client, dsn: str, runs: Runs) -> None:
    handle = await client.dispatch(Stale(dsn=dsn), queue="stale", result_ttl=60)
    worker = await client.worker(queues=["stale"], concurrency=1, heartbeat=False)
    assert await finish(worker.run(max_jobs=1), "the stale attempt") == 1
    assert worker.completer.refused == 1
    assert await scalar(dsn, "select count(*) from pgqueue.job_results") == 0
    assert (await handle.status()).state == "running"  # the other reservation holds it


async def test_a_value_returned_after_context_transaction_is_kept(client: Client, dsn: str, runs: Runs) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("create table results_ledger (label text)")
    await _worker(client, runs)
    handle = await client.dispatch(InTransaction(label="x"))
    assert await finish(handle.result(timeout=30), "the result") == {"written": "x"}
    assert await rows(dsn, "select label from results_ledger") == [{"label": "x"}]
    assert await scalar(dsn, "select token from pgqueue.job_results where job_id = %s", (handle,)) is None


async def test_sync_variants(client: Client, runs: Runs) -> None:
    GATES["s1"] = asyncio.Event()
    handle = await client.dispatch(Gated(gate="s1"))
    assert (await asyncio.to_thread(handle.status_sync)).state == "waiting"
    await _worker(client, runs)
    waiting = asyncio.ensure_future(asyncio.to_thread(handle.result_sync, 30))
    GATES["s1"].set()
    assert await finish(waiting, "the sync result") == "s1"
    delayed = await client.dispatch(Total(values=[1]), delay=3600)
    with pytest.raises(JobResultTimeout):
        await asyncio.to_thread(delayed.result_sync, 0.05)


REPORTED: dict[str, asyncio.Event] = {}


class Reporting(Job):
    """Reports progress (the second report within the throttle is skipped), then waits for its gate."""

    name = "tests:results_reporting"
    gate: str

    async def handle(self, context: JobContext) -> list[bool]:
        stored = [await context.progress(0.5, {"step": "copy"}), await context.progress(0.6)]
        REPORTED[self.gate].set()
        await GATES[self.gate].wait()
        stored.append(await context.progress(1.0, {"step": "done"}))  # a final report is never skipped
        return stored


async def test_progress_is_throttled_and_visible_through_the_handle(client: Client, runs: Runs) -> None:
    GATES["p1"], REPORTED["p1"] = asyncio.Event(), asyncio.Event()
    handle = await client.dispatch(Reporting(gate="p1"))
    await _worker(client, runs)
    await finish(REPORTED["p1"].wait(), "the first reports")
    status = await handle.status()
    assert status.state == "running" and status.progress is not None
    assert (status.progress["fraction"], status.progress["note"], status.progress["attempt"]) == (
        0.5, {"step": "copy"}, 1)
    GATES["p1"].set()
    assert await finish(handle.result(timeout=30), "the result") == [True, False, True]


async def test_progress_refuses_bad_input(client: Client, runs: Runs) -> None:
    seen: list[str] = []

    class BadProgress(Job):
        name = "tests:results_bad_progress"

        async def handle(self, context: JobContext) -> None:
            for fraction, note in ((2.0, None), (None, {1, 2}), (None, "x" * 5000)):
                try:
                    await context.progress(fraction, note)
                except QueueConfigurationError as exc:
                    seen.append(str(exc))

    await client.dispatch(BadProgress())
    await finish(run_worker(client), "the worker")
    assert len(seen) == 3
    assert "fraction must be a number from 0 to 1" in seen[0] and "not JSON" in seen[1] and "4096" in seen[2]


class SecretLogin(Job):
    """Fails quoting its password (which its class declares secret) in its error."""

    name = "tests:results_secret_login"
    redact = ("password",)
    tries = 2
    backoff = 0.0
    user: str
    password: str

    async def handle(self, context: JobContext) -> str:  # declares a result, so result() waits for it
        raise RuntimeError(f"refused {self.user} with {self.password}")


async def test_status_and_result_mask_what_a_job_declares_secret(client: Client, runs: Runs) -> None:
    """Issue 26: a handle's status() and the error result() raises showed every attempt's message
    and traceback unmasked (the dashboard and queue:failed masked them)."""
    from pgqueue.redaction import MASK
    secret = "hunter2-very-secret"
    await _worker(client, runs)
    handle = await client.dispatch(SecretLogin(user="ann-the-user", password=secret))
    with pytest.raises(JobFailedError) as raised:
        await finish(handle.result(timeout=30), "the terminal failure")
    assert secret not in str(raised.value) and MASK in str(raised.value)
    carried: Any = raised.value.status
    for status in (await handle.status(), handle.status_sync(), carried):
        assert [e.message for e in status.errors] == [f"refused ann-the-user with {MASK}"] * 2
        assert all(secret not in (e.traceback or "") and "refused ann-the-user" in (e.traceback or "")
                   for e in status.errors)
        assert status.message == f"refused ann-the-user with {MASK}"
    also = await handle.status(redact=["user"])  # an arg named by the caller, masked too
    assert also.errors[0].message == f"refused {MASK} with {MASK}"


def test_attempts_of_a_job_whose_args_are_unknown_are_masked_whole() -> None:
    """When the args cannot be read (not kept, or a role that may not read them), what an attempt
    quotes cannot be told: its texts are masked whole, for a job that declares secrets."""
    from datetime import UTC, datetime

    from pgqueue.handles import Attempt, JobStatus, masked
    from pgqueue.redaction import MASK, Redactor
    attempt = Attempt(attempt=1, failed_at=datetime.now(UTC), reason="exception", exception="E",
                      message="refused s3cret!", traceback="Traceback s3cret!", worker="h:1", duration=0.1)
    status = JobStatus(id=uuid.uuid4(), state="failed", name=SecretLogin.name, message="refused s3cret!",
                       errors=(attempt,))
    shown = masked(status, Redactor(), None, known=False)
    assert (shown.message, shown.errors[0].message, shown.errors[0].traceback) == (MASK, MASK, MASK)
    kept = masked(status, Redactor(), {"user": "u", "password": "s3cret!"}, known=True)
    assert kept.errors[0].message == f"refused {MASK}" and kept.errors[0].exception == "E"


def test_a_least_privilege_producer_sees_a_secret_jobs_attempts_masked_whole(dsn: str) -> None:
    """A producer (sql/roles/least_privilege.sql) may follow its jobs (pgqueue.job_state) but never
    read their args: for a job that declares secrets, the texts that might quote them are masked
    whole."""
    from psycopg.conninfo import make_conninfo
    from psycopg.types.json import Jsonb

    from pgqueue.redaction import MASK
    from pgqueue.resources import sql_dir
    from tests.helpers import envelope
    role = f"results_producer_{uuid.uuid4().hex[:8]}"
    env = envelope(name=SecretLogin.name, args={"user": "ann", "password": "hunter2-very-secret"}, tries=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((sql_dir() / "roles" / "least_privilege.sql").read_bytes())
        conn.execute(f"create role {role} login in role pgqueue_producer".encode())
        conn.execute("select pgqueue.enqueue(%s, 0)", (Jsonb(env),))
        [held] = conn.execute("select id, token from pgqueue.reserve(array['default'], 1, 60)").fetchall()
        conn.execute("select pgqueue.fail(%s, %s, 'app.Refused', 'refused hunter2-very-secret', null, 'exception',"
                     " 0.1, null, 'h:1')", held)
    try:
        producer = Client(settings=settings_for(make_conninfo(dsn, user=role)))
        status = producer.job(env["id"]).status_sync()
        assert status.state == "failed"
        assert (status.message, status.errors[0].message, status.errors[0].exception) == (MASK, MASK, MASK)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"drop owned by {role}; drop role {role}".encode())


class ContextOnlyForTypeCheckers(Job):
    """Its context's annotation names a class imported only under TYPE_CHECKING (common practice)."""

    name = "tests.results.context_for_type_checkers"

    async def handle(self, context: NotImportedContext) -> int:  # type: ignore[name-defined]  # noqa: F821
        return 1


def test_a_parameter_annotation_that_does_not_resolve_leaves_the_return_checked(
        caplog: pytest.LogCaptureFixture) -> None:
    # All hints were resolved at once: one unresolvable parameter made the result unchecked, with a warning.
    with caplog.at_level("WARNING", logger="pgqueue.results"):
        assert declared_result(ContextOnlyForTypeCheckers) is int
    assert caplog.records == []
