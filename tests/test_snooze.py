"""Snooze (issue 13): run again later without using up a try; fenced; visible in SQL."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from pgqueue import Client, Job, JobContext, QueueRetryError, SyncJobContext
from tests.api_support import client, failed_rows, run_worker
from tests.worker_support import rows

__all__ = ["client"]

SEEN: dict[str, list[dict[str, Any]]] = {}


class CheckAgain(Job):
    """Snoozes ``times`` times (0 s), then returns; one try only."""

    name = "tests.snooze.check_again"
    tries = 1

    key: str
    times: int

    async def handle(self, context: JobContext) -> None:
        runs = SEEN.setdefault(self.key, [])
        runs.append({"attempts": context.attempts})
        if len(runs) <= self.times:
            await context.snooze(0)


class CheckAgainSync(Job):
    """The same, from a sync handler."""

    name = "tests.snooze.check_again_sync"
    tries = 1

    key: str
    times: int

    def handle(self, context: SyncJobContext) -> None:  # type: ignore[override]
        runs = SEEN.setdefault(self.key, [])
        runs.append({"attempts": context.attempts})
        if len(runs) <= self.times:
            context.snooze(0)


class SnoozePastDeadline(Job):
    """Tries to snooze an hour with a deadline a minute away, then fails the job by hand."""

    name = "tests.snooze.past_deadline"
    tries = 3

    key: str

    def retry_until(self) -> float | None:
        """A deadline a minute away."""
        return time.time() + 60

    async def handle(self, context: JobContext) -> None:
        try:
            await context.snooze(3600)
        except QueueRetryError as exc:
            SEEN.setdefault(self.key, []).append({"refused": str(exc), "type": type(exc)})
            await context.ack()


@pytest.mark.parametrize("job_type", [CheckAgain, CheckAgainSync])
async def test_snoozing_does_not_use_up_a_try(client: Client, dsn: str, job_type: type[Job]) -> None:
    key = job_type.name
    # tries = 1: a release would have sent it to failed_jobs after its first run.
    await client.dispatch(job_type(key=key, times=3))  # type: ignore[call-arg]
    await run_worker(client, schedules=False)
    assert SEEN[key] == [{"attempts": 1}] * 4
    assert failed_rows(dsn) == []
    assert await rows(dsn, "select * from pgqueue.jobs") == []


async def test_snoozes_are_counted_in_sql_and_the_job_is_delayed(dsn: str, client: Client) -> None:
    job_id = await client.dispatch(CheckAgain(key="sql", times=1))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("select id, token from pgqueue.reserve(array['default'], 1, 60)")
        reserved = await cur.fetchone()
        assert reserved is not None
        # A stale token changes nothing.
        cur = await conn.execute("select pgqueue.snooze(%s, %s, 300)", (reserved[0], reserved[1] + 1000))
        assert await cur.fetchone() == ("not_yours",)
        cur = await conn.execute("select pgqueue.snooze(%s, %s, 300)", reserved)
        assert await cur.fetchone() == ("snoozed",)
        cur = await conn.execute("select pgqueue.snooze(%s, %s, 300)", reserved)  # the token is spent
        assert await cur.fetchone() == ("not_yours",)
    [row] = await rows(dsn, "select id, attempts, snoozes, token,"
                            " extract(epoch from available_at - now())::float as due_in from pgqueue.jobs")
    assert (row["id"], row["attempts"], row["snoozes"], row["token"]) == (job_id, 0, 1, None)
    assert 290 < row["due_in"] <= 300


async def test_a_snooze_past_the_deadline_is_refused_and_changes_nothing(client: Client, dsn: str) -> None:
    await client.dispatch(SnoozePastDeadline(key="deadline"))
    await run_worker(client, schedules=False)
    [outcome] = SEEN["deadline"]
    assert "would be due after its retry_until deadline; nothing was changed" in outcome["refused"]
    # The error its docstring promises for this case (issue 25: it said "a failed job" only).
    assert outcome["type"] is QueueRetryError
    assert "snooze()" in (QueueRetryError.__doc__ or "") and "retry_until" in (QueueRetryError.__doc__ or "")
    assert await rows(dsn, "select * from pgqueue.jobs") == []  # the handler's delete still worked
