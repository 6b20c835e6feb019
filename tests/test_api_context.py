"""JobContext through real reservations: read-only facts, decisions, fencing, races (issue 3)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from pgqueue import Job, JobContext, Queue, QueueLeaseError
from tests.api_support import failed_rows, job_rows, queue, run_worker

__all__ = ["queue"]

STATE: dict[str, Any] = {}
OUTCOMES: dict[str, dict[str, Any]] = {}


def record(key: str, **facts: Any) -> None:
    OUTCOMES.setdefault(key, {}).update(facts)


async def second_decision(context: JobContext, key: str) -> None:
    """Try every decision after the first one: each must raise QueueLeaseError."""
    errors = []
    for attempt in (context.delete(), context.release(1.0), context.fail("again"), context.extend(30)):
        try:
            await attempt
        except QueueLeaseError as exc:
            errors.append(str(exc))
    record(key, second=errors)


async def on_other_connection(sql: str, *params: Any) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(STATE["dsn"], autocommit=True) as conn:
        cur = await conn.execute(sql, params)
        return await cur.fetchall() if cur.description else []


class Decide(Job):
    """Takes the decision named by ``action`` and records what happened."""

    name = "tests.context.decide"

    action: str
    key: str

    async def handle(self, context: JobContext) -> None:
        key, action = self.key, self.action
        record(key, id=context.id, attempts=context.attempts, queue=context.queue, connection=context.connection,
               finished_before=context.finished, lease_left=context.lease_expires_in, token=context.token)
        if action == "none":
            return
        if action == "release":
            await context.release(delay=600)
        elif action == "delete":
            await context.delete()
        elif action == "fail":
            await context.fail(ValueError(f"{key} is invalid"))
        elif action == "extend":
            left = await context.extend(300)
            rows = await on_other_connection(
                "select extract(epoch from available_at - now()) from pgqueue.jobs where id = %s", context.id)
            record(key, extended=left, lease_after=context.lease_expires_in, db_left=float(rows[0][0]))
            return
        elif action == "fence_clear":
            await on_other_connection("select pgqueue.clear('default')")
            await self._expect_lost(context, key, context.delete())
            return
        elif action == "fence_reserve":
            # Expire the lease and let "another worker" reserve the job: its token replaces ours.
            await on_other_connection("update pgqueue.jobs set available_at = now() - interval '1 second'"
                                      " where id = %s", context.id)
            rows = await on_other_connection("select token from pgqueue.reserve(array['default'], 1, 60)")
            record(key, thief_token=rows[0][0])
            await self._expect_lost(context, key, context.release(0))
            return
        elif action == "fence_extend":
            await on_other_connection("select pgqueue.clear('default')")
            await self._expect_lost(context, key, context.extend(30))
            return
        elif action in ("race_fail_first", "race_release_first"):
            fail = context.fail(RuntimeError("fail won"))
            release = context.release(delay=600)
            racers = (fail, release) if action == "race_fail_first" else (release, fail)
            results = await asyncio.gather(*(asyncio.create_task(r) for r in racers), return_exceptions=True)
            record(key, race=[type(r).__name__ for r in results], decision=context.decision)
            return
        record(key, finished_after=context.finished, decision=context.decision, failure=context.failure)
        await second_decision(context, key)

    @staticmethod
    async def _expect_lost(context: JobContext, key: str, decision: Any) -> None:
        try:
            await decision
        except QueueLeaseError as exc:
            record(key, lost=str(exc), decision=context.decision, finished_after=context.finished)
        else:
            record(key, lost=None)
        await second_decision(context, key)


@pytest.fixture(autouse=True)
def _state(dsn: str) -> None:
    STATE["dsn"] = dsn
    OUTCOMES.clear()


async def run(queue: Queue, action: str) -> tuple[uuid.UUID, dict[str, Any]]:
    key = f"{action}-{uuid.uuid4().hex[:6]}"
    job_id = await Decide(action=action, key=key).dispatch(using=queue)
    await run_worker(queue)
    return job_id, OUTCOMES[key]


# ------------------------------------------------------------ read-only facts

async def test_read_only_facts(queue: Queue, dsn: str) -> None:
    job_id, seen = await run(queue, "none")
    assert seen["id"] == job_id
    assert (seen["attempts"], seen["queue"], seen["connection"]) == (1, "default", "database")
    assert seen["finished_before"] is False
    assert 0 < seen["lease_left"] <= 90  # the connection's retry_after
    assert seen["token"] > 0
    assert job_rows(dsn) == []  # no decision: acknowledged


def test_facts_cannot_be_assigned() -> None:
    class Nothing:
        async def delete(self, job_id: uuid.UUID, token: int) -> bool:
            return True

    context = JobContext(job_id=uuid.uuid4(), token=1, attempts=2, max_tries=3, queue="q", connection="database",
                         lease_seconds_left=10, decisions=Nothing())  # type: ignore[arg-type]
    for fact in ("id", "attempts", "queue", "connection", "finished", "failure", "lease_expires_in", "token"):
        with pytest.raises(AttributeError):
            setattr(context, fact, None)
    with pytest.raises(AttributeError):
        context.something_new = 1  # type: ignore[attr-defined]
    assert (context.attempts, context.queue, context.finished, context.failure) == (2, "q", False, None)


async def test_attempts_count_up_across_retries(queue: Queue, dsn: str) -> None:
    class Flaky(Job):
        name = "tests.context.flaky"
        tries = 3
        backoff = 0

        key: str

        async def handle(self, context: JobContext) -> None:
            OUTCOMES.setdefault(self.key, {}).setdefault("attempts", []).append(context.attempts)
            if context.attempts < 3:
                raise RuntimeError("not yet")

    await Flaky(key="flaky").dispatch(using=queue)
    await run_worker(queue)
    assert OUTCOMES["flaky"]["attempts"] == [1, 2, 3]
    assert job_rows(dsn) == [] and failed_rows(dsn) == []


# ------------------------------------------------------------------ decisions

async def test_release_puts_the_job_back_with_its_delay(queue: Queue, dsn: str) -> None:
    job_id, seen = await run(queue, "release")
    assert (seen["finished_after"], seen["decision"]) == (True, "released")
    [row] = job_rows(dsn)
    assert row["id"] == job_id and row["token"] is None and row["attempts"] == 1
    assert 590 < row["due_in"] <= 600
    assert len(seen["second"]) == 4 and all("already released" in e for e in seen["second"])


async def test_delete_removes_the_job(queue: Queue, dsn: str) -> None:
    _, seen = await run(queue, "delete")
    assert seen["decision"] == "deleted"
    assert job_rows(dsn) == [] and failed_rows(dsn) == []
    assert all("already deleted" in e for e in seen["second"])


async def test_fail_moves_the_job_to_failed_jobs_at_once(queue: Queue, dsn: str) -> None:
    job_id, seen = await run(queue, "fail")
    assert seen["decision"] == "failed"
    assert isinstance(seen["failure"], ValueError)
    assert job_rows(dsn) == []
    [failure] = failed_rows(dsn)
    assert failure["job_id"] == job_id and failure["reason"] == "failed_by_handler"
    assert failure["exception"] == "ValueError" and failure["message"].endswith("is invalid")
    assert failure["attempts"] == 1  # tries=3, but fail() does not retry
    assert all("already failed" in e for e in seen["second"])


async def test_extend_renews_the_lease(queue: Queue, dsn: str) -> None:
    _, seen = await run(queue, "extend")
    assert 290 < seen["extended"] <= 300
    assert 280 < seen["lease_after"] <= 300
    assert 290 < seen["db_left"] <= 300  # the database clock agrees
    assert job_rows(dsn) == []  # returning afterwards still acknowledges


# -------------------------------------------------------------------- fencing

async def test_a_decision_after_the_queue_was_cleared_is_refused(queue: Queue, dsn: str) -> None:
    _, seen = await run(queue, "fence_clear")
    assert seen["lost"] is not None and "lease was lost" in seen["lost"]
    assert (seen["decision"], seen["finished_after"]) == ("lost", True)
    assert all("already lost" in e for e in seen["second"])
    assert job_rows(dsn) == [] and failed_rows(dsn) == []


async def test_a_decision_after_someone_else_reserved_the_job_is_refused(queue: Queue, dsn: str) -> None:
    job_id, seen = await run(queue, "fence_reserve")
    assert seen["lost"] is not None and "refused" in seen["lost"]
    [row] = job_rows(dsn)  # nothing changed: the other holder still has it
    assert row["id"] == job_id and row["token"] == seen["thief_token"] != seen["token"]
    assert row["attempts"] == 2 and row["due_in"] > 30


async def test_an_extend_the_fence_refuses_raises(queue: Queue) -> None:
    _, seen = await run(queue, "fence_extend")
    assert seen["lost"] is not None and "extend refused" in seen["lost"]


@pytest.mark.parametrize("action", ["race_fail_first", "race_release_first"])
async def test_racing_fail_and_release_exactly_one_wins(queue: Queue, dsn: str, action: str) -> None:
    job_id, seen = await run(queue, action)
    assert sorted(seen["race"]) == ["NoneType", "QueueLeaseError"]
    if seen["decision"] == "failed":
        assert job_rows(dsn) == [] and [f["job_id"] for f in failed_rows(dsn)] == [job_id]
    else:
        assert seen["decision"] == "released"
        assert [r["id"] for r in job_rows(dsn)] == [job_id] and failed_rows(dsn) == []
