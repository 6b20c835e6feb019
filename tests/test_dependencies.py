"""Issue 26 §2 from Python: ``dispatch(job, after=[...])`` (also dispatch_many, dispatch_sync),
released by the parent's ack, cancelled with reason dependency_failed (transitively) by its
failure or cancellation unless ``on_parent_failure="run"``; parents that already ended; an
unknown parent refused with nothing stored; ``context.parent_results()``; chains and groups."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from pgqueue import (
    Client,
    Job,
    JobContext,
    JobFailedError,
    QueueConfigurationError,
    QueueDispatchError,
    SyncJobContext,
)
from tests.api_support import run_worker
from tests.worker_support import Runs, client, finish, runs, scalar, settings_for

__all__ = ["client", "runs"]

SEEN: dict[str, Any] = {}


class Step(Job):
    """Returns its value plus what its parents returned (a chain's step)."""

    name = "tests:deps_step"
    key: str
    value: int

    async def handle(self, context: JobContext) -> int:
        parents = await context.parent_results()
        SEEN[self.key] = parents
        return self.value + sum(int(v) for v in parents.values())


class SyncSum(Job):
    """A sync handler reading its parents' results (the blocking face)."""

    name = "tests:deps_sync_sum"

    def handle(self, context: SyncJobContext) -> int:  # type: ignore[override]  # a sync handler
        return sum(int(v) for v in context.parent_results().values())


class Broken(Job):
    """Fails terminally on its first attempt."""

    name = "tests:deps_broken"
    tries = 1

    async def handle(self, context: JobContext) -> None:
        raise RuntimeError("broken on purpose")


async def _drain(target: Client) -> None:
    await finish(run_worker(target, queues=("default",)), "the worker to drain the queue")


async def _worker(target: Client, runs: Runs) -> None:
    """A worker in the background: a released child wakes it (the release notifies its queue)."""
    runs.start(await target.worker(queues=["default"], concurrency=4, heartbeat=False))


async def test_a_child_runs_after_its_parents_with_their_results(client: Client, runs: Runs) -> None:
    a = await client.dispatch(Step(key="a", value=1))
    b = await client.dispatch(Step(key="b", value=2))
    child = await client.dispatch(Step(key="child", value=10), after=[a, str(b)])
    assert (await child.status()).state == "blocked"
    await _worker(client, runs)
    assert await child.result(timeout=10) == 13
    assert SEEN["child"] == {a: 1, b: 2}
    assert list(SEEN["child"]) == [a, b]  # in the order given
    in_sync = await client.dispatch(SyncSum(), after=[a, b, child])
    assert await in_sync.result(timeout=10) == 16


async def test_a_chain_passes_each_result_on_and_a_group_gathers(client: Client, runs: Runs) -> None:
    steps = await client.chain([Step(key="c1", value=1), Step(key="c2", value=10), Step(key="c3", value=100)])
    group = await client.group([Step(key="g1", value=5), Step(key="g2", value=6)])
    await _worker(client, runs)
    assert [await s.result(timeout=10) for s in steps] == [1, 11, 111]
    assert SEEN["c3"] == {steps[1]: 11}
    assert await finish(group.results(timeout=10), "the group's results") == [5, 6]


async def test_a_failed_parent_cancels_its_descendants_unless_they_run_anyway(client: Client, runs: Runs) -> None:
    parent = await client.dispatch(Broken())
    child = await client.dispatch(Step(key="x", value=1), after=parent)
    grandchild = await client.dispatch(Step(key="y", value=1), after=[child])
    anyway = await client.dispatch(Step(key="z", value=7), after=[parent], on_parent_failure="run")
    await _worker(client, runs)
    assert await anyway.result(timeout=10) == 7
    for cancelled in (child, grandchild):
        status = await cancelled.status()
        assert (status.state, status.reason) == ("cancelled", "dependency_failed")
        with pytest.raises(JobFailedError):
            await cancelled.result(timeout=5)
    assert SEEN["z"] == {}  # the failed parent kept no result
    assert "x" not in SEEN and "y" not in SEEN


async def test_cancelling_a_parent_cancels_its_children(client: Client) -> None:
    parent = await client.dispatch(Step(key="p", value=1), delay=3600)
    children = await client.dispatch_many([Step(key="k1", value=1), Step(key="k2", value=2)], after=[parent])
    assert await client.cancel(parent) == "cancelled"
    assert [(await c.status()).reason for c in children] == ["dependency_failed", "dependency_failed"]


async def test_a_parent_that_already_succeeded_releases_at_once(client: Client) -> None:
    parent = await client.dispatch(Step(key="done", value=4))
    await _drain(client)
    child = await client.dispatch(Step(key="late", value=1), after=[parent])
    assert (await child.status()).state == "waiting"
    await _drain(client)
    assert await child.result(timeout=10) == 5


async def test_an_unknown_parent_is_a_clear_error_and_nothing_is_stored(client: Client, dsn: str) -> None:
    known = await client.dispatch(Step(key="known", value=1), delay=3600)
    unknown = uuid.uuid4()
    with pytest.raises(QueueDispatchError, match=f"parent job {unknown} is unknown"):
        await client.dispatch(Step(key="orphan", value=1), after=[known, unknown])
    with pytest.raises(QueueDispatchError, match=f"parent job {unknown} is unknown"):
        await client.dispatch_many([Step(key="o1", value=1)], after=[unknown])
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1
    assert await scalar(dsn, "select count(*) from pgqueue.dependent_jobs") == 0
    with pytest.raises(QueueDispatchError, match="is not a job id"):
        await client.dispatch(Step(key="bad", value=1), after=["not-a-uuid"])
    with pytest.raises(QueueDispatchError, match="names no parent"):
        await client.dispatch(Step(key="bad", value=1), after=[])
    with pytest.raises(QueueConfigurationError, match="on_parent_failure"):
        await client.dispatch(Step(key="bad", value=1), after=[known], on_parent_failure="maybe")
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1


async def test_after_in_the_callers_transaction_and_sync(client: Client, dsn: str) -> None:
    parent = await client.dispatch(Step(key="tp", value=1), delay=3600)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        child = await client.dispatch(Step(key="tc", value=1), conn=conn, after=[parent])
        await conn.rollback()
    assert await scalar(dsn, "select count(*) from pgqueue.jobs where id = %s", (child,)) == 0
    with psycopg.connect(dsn) as sync_conn:
        sync_child = client.dispatch_sync(Step(key="ts", value=1), conn=sync_conn, after=[parent])
    assert (await client.job(sync_child).status()).state == "blocked"
    assert await scalar(dsn, "select parents from pgqueue.dependent_jobs where job_id = %s",
                        (sync_child,)) == [parent]


async def test_the_inline_mode_runs_a_group_and_refuses_what_must_wait(dsn: str) -> None:
    inline_client = Client(settings=settings_for(dsn), inline=True)
    group = await inline_client.group([Step(key="i1", value=1), Step(key="i2", value=2)])
    assert len(group.members) == 2 and SEEN["i1"] == {} and SEEN["i2"] == {}
    with pytest.raises(QueueConfigurationError, match="inline mode runs each job at dispatch"):
        await inline_client.chain([Step(key="i3", value=1), Step(key="i4", value=1)])
    with pytest.raises(QueueConfigurationError, match="inline mode runs each job at dispatch"):
        await inline_client.batch([Step(key="i5", value=1)], then=Step(key="i6", value=1))
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


class UniqueStep(Job):
    """A job whose class derives its unique key from its args."""

    name = "tests:deps_unique_step"
    unique_by = ("key",)
    key: str
    value: int

    async def handle(self, context: JobContext) -> int:
        return self.value


async def test_after_and_batches_refuse_unique_and_debounce_keys_and_store_nothing(client: Client, dsn: str) -> None:
    """Revision 0010: a unique (or debounced) dispatch of a duplicate returns another job, the one
    holding the key; it must never wait, or be counted in a batch, in the place of the job meant.
    So after=, chain, group and batch refuse keys, naming the job, and store nothing (a unique_by
    job's key was dropped silently by dispatch_many(after=), chain, group and batch; debounce=
    silently ignored after=)."""
    parent = await client.dispatch(Step(key="up", value=1), delay=3600)
    refused = [
        client.dispatch(Step(key="u1", value=1), after=[parent], unique_key="k"),
        client.dispatch(UniqueStep(key="u2", value=1), after=[parent]),
        client.dispatch_many([UniqueStep(key="u3", value=1)], after=[parent]),
        client.dispatch_many([Step(key="u4", value=1)], after=[parent], unique_keys=["k4"]),
        client.chain([Step(key="u5", value=1), UniqueStep(key="u6", value=1)]),
        client.group([UniqueStep(key="u7", value=1)]),
        client.batch([UniqueStep(key="u8", value=1)], then=Step(key="u9", value=1)),
        client.batch([Step(key="u10", value=1)], then=UniqueStep(key="u11", value=1)),
    ]
    for attempt in refused:
        with pytest.raises(QueueDispatchError, match=r"unique key|unique_by") as caught:
            await attempt
        assert "nothing was dispatched" in str(caught.value)
    with pytest.raises(QueueDispatchError, match="after= cannot be combined with debounce"):
        await client.dispatch(Step(key="d1", value=1), after=[parent], debounce=5, key="dk")
    with psycopg.connect(dsn) as sync_conn:
        with pytest.raises(QueueDispatchError, match="after= cannot be combined with debounce"):
            client.dispatch_sync(Step(key="d2", value=1), conn=sync_conn, after=[parent], debounce=5, key="dk")
        with pytest.raises(QueueDispatchError, match="unique_by"):
            client.dispatch_sync(UniqueStep(key="d3", value=1), conn=sync_conn, after=[parent])
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1
    assert await scalar(dsn, "select count(*) from pgqueue.dependent_jobs") == 0
    assert await scalar(dsn, "select count(*) from pgqueue.batches") == 0


async def test_a_unique_duplicates_handle_is_a_parent_the_job_holding_the_key(client: Client, runs: Runs) -> None:
    """The handle a duplicate's dispatch returns is the job holding the key: a child given it as a
    parent waits for that job and reads its result."""
    first = await client.dispatch(UniqueStep(key="held", value=5))
    duplicate = await client.dispatch(UniqueStep(key="held", value=99))
    assert duplicate == first
    child = await client.dispatch(Step(key="after_dup", value=1), after=[duplicate])
    assert (await child.status()).parents == (first,)
    await _worker(client, runs)
    assert await child.result(timeout=10) == 6
    assert SEEN["after_dup"] == {first: 5}
