"""Issue 24, item 2: ``context.transaction()`` carries the job's ack in ONE transaction, whatever the
handler does inside it: a second block (nested, or from a second task) is refused before it writes
anything, and a raw COMMIT / ROLLBACK on the block's connection fails the attempt instead of letting
the ack commit apart from the effects."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from pgqueue import Client, JobContext, QueueLeaseError, job
from pgqueue.context import SyncJobContext
from tests.worker_jobs import Once, Probe, Retrying
from tests.worker_support import client, failures, finish, hooks, jobs, rows

__all__ = ["client", "hooks"]

EFFECTS_DDL = "create table effects (job_id uuid not null, n integer not null)"

#: What the sync handlers below saw, per test.
SEEN: dict[str, Any] = {}


@pytest.fixture
async def effects(dsn: str) -> str:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(EFFECTS_DDL)
    return dsn


async def _run_one(client: Client) -> Any:
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the job") == 1
    return worker


async def _effects(dsn: str) -> list[int]:
    return [r["n"] for r in await rows(dsn, "select n from effects order by n")]


# ------------------------------------------------------------------- a second block
async def test_a_nested_block_is_refused_before_it_writes_and_the_outer_block_rolls_back(
        client: Client, hooks: Any, effects: str) -> None:
    refused: list[QueueLeaseError] = []

    async def nested(job: Probe, context: JobContext) -> None:
        async with context.transaction() as outer:
            await outer.execute("insert into effects values (%s, 1)", (context.id,))
            try:
                async with context.transaction() as inner:
                    await inner.execute("insert into effects values (%s, 2)", (context.id,))
            except QueueLeaseError as exc:
                refused.append(exc)
                raise

    hooks("nested", nested)
    await client.dispatch(Once(hook="nested"))
    worker = await _run_one(client)

    assert len(refused) == 1 and "already open" in str(refused[0]) and "nothing was written" in str(refused[0])
    # Neither block committed, the job was not acked: its one try failed with the refusal.
    assert await _effects(effects) == []
    [failure] = await failures(effects)
    assert failure["reason"] == "exception" and "already open" in failure["message"]
    assert worker.stats.acked == 0 and worker.stats.failed == 1


async def test_a_refused_inner_block_the_handler_catches_leaves_the_outer_block_to_commit_with_the_ack(
        client: Client, hooks: Any, effects: str) -> None:
    async def nested(job: Probe, context: JobContext) -> None:
        async with context.transaction() as outer:
            await outer.execute("insert into effects values (%s, 1)", (context.id,))
            with pytest.raises(QueueLeaseError, match="already open"):
                async with context.transaction():
                    pass
            async with outer.transaction():  # a savepoint is how to nest: on the block's connection
                await outer.execute("insert into effects values (%s, 2)", (context.id,))
        assert context.decision == "acked"

    hooks("nested", nested)
    await client.dispatch(Once(hook="nested"))
    worker = await _run_one(client)

    assert await _effects(effects) == [1, 2]
    assert await jobs(effects) == [] and await failures(effects) == []
    assert worker.stats.acked == 1


async def test_a_block_opened_by_a_second_task_is_refused(client: Client, hooks: Any, effects: str) -> None:
    async def two_tasks(job: Probe, context: JobContext) -> None:
        async with context.transaction() as conn:
            await conn.execute("insert into effects values (%s, 1)", (context.id,))

            async def other() -> None:
                async with context.transaction() as second:
                    await second.execute("insert into effects values (%s, 2)", (context.id,))

            with pytest.raises(QueueLeaseError, match="already open"):
                await asyncio.create_task(other())

    hooks("two_tasks", two_tasks)
    await client.dispatch(Once(hook="two_tasks"))
    await _run_one(client)

    assert await _effects(effects) == [1]
    assert await jobs(effects) == [] and await failures(effects) == []


@job(name="tests.transaction:sync_nested", tries=1)
def sync_nested(context: SyncJobContext) -> None:
    with context.transaction() as outer:
        outer.execute("insert into effects values (%s, 1)", (context.id,))
        try:
            with context.transaction() as inner:
                inner.execute("insert into effects values (%s, 2)", (context.id,))
        except QueueLeaseError as exc:
            SEEN["refused"] = str(exc)
            raise


async def test_a_nested_block_of_a_sync_handler_is_refused_the_same_way(client: Client, effects: str) -> None:
    SEEN.clear()
    await sync_nested().dispatch(using=client)
    await _run_one(client)

    assert "already open" in SEEN["refused"]
    assert await _effects(effects) == []
    [failure] = await failures(effects)
    assert "already open" in failure["message"]


# ------------------------------------------------------- the block's transaction ended
@pytest.mark.parametrize(("statements", "committed"), [
    # What the handler committed itself stays: its COMMIT, and after it the connection's autocommit.
    (["commit"], [1, 2]),
    (["rollback"], [2]),
    # A transaction of the handler's own is not the block's: it rolls back with the refused ack.
    (["commit", "begin"], [1]),
    (["rollback", "begin"], []),
])
async def test_a_raw_commit_or_rollback_fails_the_attempt_and_the_ack_never_commits_apart(
        client: Client, hooks: Any, effects: str, statements: list[str], committed: list[int]) -> None:
    async def ends_it(job: Probe, context: JobContext) -> None:
        async with context.transaction() as conn:
            await conn.execute("insert into effects values (%s, 1)", (context.id,))
            for statement in statements:
                await conn.execute(statement)
            await conn.execute("insert into effects values (%s, 2)", (context.id,))

    hooks("ends_it", ends_it)
    job_id = await client.dispatch(Once(hook="ends_it"))
    worker = await _run_one(client)

    # Not acked: the one try failed, saying why.
    assert await _effects(effects) == committed
    [failure] = await failures(effects)
    assert failure["job_id"] == job_id and failure["reason"] == "exception"
    assert "COMMIT or ROLLBACK" in failure["message"] and "not acknowledged" in failure["message"]
    assert worker.stats.acked == 0 and worker.stats.failed == 1


@job(name="tests.transaction:sync_commits", tries=1)
def sync_commits(context: SyncJobContext) -> None:
    with context.transaction() as conn:
        conn.execute("insert into effects values (%s, 1)", (context.id,))
        conn.execute("rollback")
        conn.execute("insert into effects values (%s, 2)", (context.id,))


async def test_a_raw_rollback_in_a_sync_handlers_block_fails_the_attempt(client: Client, effects: str) -> None:
    await sync_commits().dispatch(using=client)
    await _run_one(client)

    assert await _effects(effects) == [2]  # run after the ROLLBACK, in autocommit
    [failure] = await failures(effects)
    assert "COMMIT or ROLLBACK" in failure["message"]


async def test_the_blocks_connection_goes_back_to_the_pool_in_autocommit(client: Client, hooks: Any,
                                                                         effects: str) -> None:
    used: list[psycopg.AsyncConnection[Any]] = []

    async def ends_it(job: Probe, context: JobContext) -> None:
        async with context.transaction() as conn:
            used.append(conn)
            await conn.execute("commit")

    hooks("ends_it", ends_it)
    await client.dispatch(Once(hook="ends_it"))
    await _run_one(client)
    [conn] = used
    assert conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def test_going_on_after_a_failed_statement_fails_the_attempt_saying_so(client: Client, hooks: Any,
                                                                            effects: str) -> None:
    async def goes_on(job: Probe, context: JobContext) -> None:
        async with context.transaction() as conn:
            await conn.execute("insert into effects values (%s, 1)", (context.id,))
            with pytest.raises(psycopg.errors.UndefinedTable):
                await conn.execute("insert into no_such_table values (1)")

    hooks("goes_on", goes_on)
    await client.dispatch(Once(hook="goes_on"))
    await _run_one(client)

    assert await _effects(effects) == []
    [failure] = await failures(effects)
    assert "failed and the handler went on" in failure["message"]


async def test_a_commit_the_database_refuses_is_retried_at_once_not_left_to_the_lease(
        client: Client, hooks: Any, effects: str) -> None:
    async with await psycopg.AsyncConnection.connect(effects, autocommit=True) as conn:
        await conn.execute("create table once_only (n integer unique deferrable initially deferred)")

    async def twice(job: Probe, context: JobContext) -> None:
        async with context.transaction() as conn:  # the unique check runs at COMMIT, after the ack
            await conn.execute("insert into once_only values (1), (1)")

    hooks("twice", twice)
    job_id = await client.dispatch(Retrying(hook="twice"))
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(max_jobs=1), "the first attempt") == 1

    # Nothing committed, so nothing was acked: released for its next try like any failed attempt
    # (it used to count as acked and wait for its lease to expire).
    [row] = await jobs(effects)
    assert row["id"] == job_id and row["attempts"] == 1 and row["token"] is None
    assert worker.stats.retried == 1 and worker.stats.acked == 0
