"""Issue 26 §2 from Python: ``client.batch(jobs, then=callback)`` — the callback runs once every
member has ended (succeeded, failed terminally or cancelled), reading the counts
(``context.batch()``) and the members' results (``context.batch_results()``); its progress in
SQL (``pgqueue.batch_state``) and through ``client.batch_state``; bad input stores nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from pgqueue import BatchState, Client, Job, JobContext, QueueDispatchError
from tests.worker_support import Runs, client, runs, scalar

__all__ = ["client", "runs"]

SEEN: dict[str, Any] = {}


class Square(Job):
    """Returns n squared; fails terminally when n is negative."""

    name = "tests:batch_square"
    n: int
    tries = 1

    async def handle(self, context: JobContext) -> int:
        if self.n < 0:
            raise ValueError(f"no square of {self.n} today")
        return self.n * self.n


class Report(Job):
    """A batch's callback: keeps what it read of its batch."""

    name = "tests:batch_report"
    key: str

    async def handle(self, context: JobContext) -> int:
        state = await context.batch()
        SEEN[self.key] = (state, await context.batch_results())
        return 0 if state is None else state.succeeded


async def test_the_callback_runs_once_with_the_counts_and_results(client: Client, runs: Runs, dsn: str) -> None:
    batch = await client.batch([Square(n=2), Square(n=3), Square(n=-1), Square(n=4)], then=Report(key="r1"))
    assert (await batch.callback.status()).state == "blocked"
    assert await client.cancel(batch.members[3]) == "cancelled"
    progress = await client.batch_state(batch.id)
    assert progress is not None and (progress.total, progress.pending, progress.cancelled) == (4, 3, 1)
    runs.start(await client.worker(queues=["default"], concurrency=4, heartbeat=False))
    assert await batch.callback.result(timeout=10) == 2
    state, results = SEEN["r1"]
    assert isinstance(state, BatchState) and state.finished and state.id == batch.id
    assert (state.total, state.succeeded, state.failed, state.cancelled) == (4, 2, 1, 1)
    assert results == {batch.members[0]: 4, batch.members[1]: 9}
    assert await scalar(dsn, "select pending from pgqueue.batch_state(%s)", (batch.members[0],)) == 0
    assert await scalar(dsn, "select count(*) from pgqueue.batch_results(%s) where outcome = 'failed'",
                        (batch.id,)) == 1


async def test_a_batch_needs_members_and_stores_nothing_when_refused(client: Client, dsn: str) -> None:
    with pytest.raises(QueueDispatchError, match="at least one member"):
        await client.batch([], then=Report(key="none"))
    with pytest.raises(QueueDispatchError, match="batch: give at least one member"):
        await client.batch(iter([]), then=Report(key="none"))
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0
    assert await client.batch_state(uuid.uuid4()) is None
