"""Unique keys under every isolation level (issue 24, item 1), with real concurrent sessions.

Under REPEATABLE READ and SERIALIZABLE a caller's snapshot cannot show a holder committed after
it was taken; ``pgqueue.enqueue_unique`` used to look for that holder again and again, burning
transaction ids while holding its xmin, until a statement_timeout. Now the call ends at once:
with the holder's id when the snapshot shows it, else with a serialization failure
(SQLSTATE 40001) the caller runs again. Every caller session here has a statement_timeout, the
safety net that turns a regression into a failed test (SQLSTATE 57014) instead of a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from pgqueue import Client, Job, JobContext, QueueStorageError, UniqueDispatch
from tests.api_support import client
from tests.worker_support import finish, scalar, settings_for, wait_until

__all__ = ["client"]

AConn = psycopg.AsyncConnection[tuple[Any, ...]]
ISOLATIONS = ["read committed", "repeatable read", "serializable"]
SNAPSHOT_ISOLATIONS = ["repeatable read", "serializable"]
SCOPES: list[tuple[str, float | None]] = [("queued", None), ("active", None), ("period", 3600.0)]
SAFETY_NET = "10s"  # a regression fails with a statement timeout instead of spinning


class Receipt(Job):
    """A job dispatched with unique keys."""

    name = "tests.unique_isolation.receipt"

    order_id: int

    async def handle(self, context: JobContext) -> None:
        return None


@pytest.fixture
async def caller(dsn: str) -> AsyncIterator[AConn]:
    """The session of a producer that dispatches inside its own (non-autocommit) transactions."""
    conn = await psycopg.AsyncConnection.connect(dsn)
    await conn.execute(f"set statement_timeout = '{SAFETY_NET}'")
    await conn.commit()
    try:
        yield conn
    finally:
        await conn.close()


async def begin(conn: AConn, isolation: str) -> None:
    """Start a transaction at ``isolation`` and take its snapshot (its first statement)."""
    await conn.execute(f"set transaction isolation level {isolation}")
    await conn.execute("select 1")


async def dispatch(client: Client, conn: AConn | None, key: str, scope: str, period: float | None,
                   order_id: int = 1) -> UniqueDispatch:
    return await client.dispatch_unique(Receipt(order_id=order_id), key, scope=scope, period=period, conn=conn)


async def serialization_failure(pending: Any) -> QueueStorageError:
    """The QueueStorageError a dispatch ends with; it must be a serialization failure."""
    with pytest.raises(QueueStorageError) as caught:
        await finish(pending, "the dispatch to end")
    assert caught.value.sqlstate == "40001", caught.value  # 57014 here: the call spun until the safety net
    assert "serialization failure" in str(caught.value) and "run it again" in str(caught.value)
    return caught.value


@pytest.mark.parametrize(("scope", "period"), SCOPES)
@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_holder_committed_after_the_snapshot_ends_the_call_at_once(
        client: Client, caller: AConn, dsn: str, isolation: str, scope: str, period: float | None) -> None:
    await begin(caller, isolation)
    holder = await dispatch(client, None, "order:1", scope, period)  # another session, committed
    if isolation == "read committed":  # each statement sees the latest commits
        assert await dispatch(client, caller, "order:1", scope, period) == UniqueDispatch(holder.id, True)
        await caller.commit()
    else:
        failure = await serialization_failure(dispatch(client, caller, "order:1", scope, period))
        if scope != "period":  # the period scope gets PostgreSQL's own 40001 from ON CONFLICT
            assert "unique key 'order:1' is held by a job committed after this" in str(failure)
        await caller.rollback()
        # Run again, as the error says: the new snapshot shows the holder.
        await begin(caller, isolation)
        assert await dispatch(client, caller, "order:1", scope, period) == UniqueDispatch(holder.id, True)
        await caller.commit()
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1


@pytest.mark.parametrize(("scope", "period"), SCOPES)
@pytest.mark.parametrize("isolation", SNAPSHOT_ISOLATIONS)
async def test_a_holder_the_snapshot_shows_is_returned_as_the_duplicate(
        client: Client, caller: AConn, dsn: str, isolation: str, scope: str, period: float | None) -> None:
    holder = await dispatch(client, None, "order:2", scope, period)
    await begin(caller, isolation)
    assert await dispatch(client, caller, "order:2", scope, period) == UniqueDispatch(holder.id, True)
    await caller.commit()
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1


@pytest.mark.parametrize(("scope", "period"), SCOPES)
@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("holder_ends", ["commit", "rollback"])
async def test_a_caller_waits_for_an_uncommitted_holder_then_ends(
        client: Client, caller: AConn, dsn: str, isolation: str, scope: str, period: float | None,
        holder_ends: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as holder_conn:
        await holder_conn.execute("select 1")
        held = await dispatch(client, holder_conn, "order:3", scope, period)  # not committed yet
        await begin(caller, isolation)
        waiting = asyncio.create_task(dispatch(client, caller, "order:3", scope, period, order_id=3))
        # The caller blocks on the holder's index entry (or key row): a lock wait, not a loop.
        await wait_until(lambda: scalar(dsn, "select wait_event_type = 'Lock' from pg_stat_activity where pid = %s",
                                        (caller.info.backend_pid,)), "the caller to wait for the holder")
        assert not waiting.done()
        if holder_ends == "rollback":
            await holder_conn.rollback()
            result = await finish(waiting, "the caller's dispatch")
            assert not result.duplicate and result.id != held.id
        else:
            await holder_conn.commit()
            if isolation == "read committed":
                assert await finish(waiting, "the caller's dispatch") == UniqueDispatch(held.id, True)
            else:  # the holder committed after the caller's snapshot
                await serialization_failure(waiting)
                await caller.rollback()
                await begin(caller, isolation)
                assert await dispatch(client, caller, "order:3", scope, period) == UniqueDispatch(held.id, True)
        await caller.commit()
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1


@pytest.mark.parametrize("isolation", SNAPSHOT_ISOLATIONS)
async def test_dispatch_unique_many_in_a_snapshot_ends_with_a_serialization_failure(
        client: Client, caller: AConn, dsn: str, isolation: str) -> None:
    await begin(caller, isolation)
    holder = await dispatch(client, None, "order:4", "queued", None)
    jobs = [Receipt(order_id=n) for n in (4, 5)]
    await serialization_failure(client.dispatch_unique_many(jobs, ["order:5", "order:4"], conn=caller))
    await caller.rollback()
    await begin(caller, isolation)
    results = await client.dispatch_unique_many(jobs, ["order:5", "order:4"], conn=caller)
    await caller.commit()
    assert [r.duplicate for r in results] == [False, True] and results[1].id == holder.id
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 2


@pytest.mark.parametrize("isolation", SNAPSHOT_ISOLATIONS)
@pytest.mark.parametrize("many", [False, True])
async def test_pgqueues_own_transaction_runs_again_in_a_snapshot_database(dsn: str, isolation: str,
                                                                         many: bool) -> None:
    # A database whose default isolation is a snapshot one: a dispatch without conn= runs in a
    # transaction of pgqueue's own, which it may run again, so the caller gets the holder's id.
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        name = await scalar(dsn, "select current_database()")
        await admin.execute(f"alter database \"{name}\" set default_transaction_isolation = '{isolation}'")
        await admin.execute(f"alter database \"{name}\" set statement_timeout = '{SAFETY_NET}'")
    own = Client(settings=settings_for(dsn), pool_size=1)
    try:
        async with await psycopg.AsyncConnection.connect(dsn) as holder_conn:
            held = await dispatch(own, holder_conn, "order:6", "active", None)
            if many:
                pending: asyncio.Future[Any] = asyncio.ensure_future(
                    own.dispatch_unique_many([Receipt(order_id=6)], ["order:6"], scope="active"))
            else:
                pending = asyncio.ensure_future(dispatch(own, None, "order:6", "active", None, order_id=6))
            await wait_until(lambda: scalar(dsn, "select count(*) from pg_stat_activity where datname = "
                                                 "current_database() and wait_event_type = 'Lock'"),
                             "pgqueue's dispatch to wait for the holder")
            await holder_conn.commit()  # after the waiting statement's snapshot
            result = await finish(pending, "the dispatch")
    finally:
        await own.close()
    found = result[0] if isinstance(result, list) else result
    assert found == UniqueDispatch(held.id, True)
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1

