"""What a database error is called (issue 24): a statement timeout, lock timeout, serialization
failure, deadlock, cancelled query or server shutdown is named as what it is, with what to do,
never as "the database could not be reached". Every error here is raised by the real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import psycopg
import pytest

from pgqueue import Client, Job, JobContext, QueueStorageError
from pgqueue.store.errors import DATABASE_ERRORS, classify, translate
from tests.api_support import client
from tests.worker_support import finish, scalar, wait_until

__all__ = ["client"]

AConn = psycopg.AsyncConnection[tuple[Any, ...]]


class Note(Job):
    """A plain job."""

    name = "tests.storage_errors.note"

    async def handle(self, context: JobContext) -> None:
        return None


@pytest.fixture
async def locker(dsn: str) -> AsyncIterator[AConn]:
    """A session holding pgqueue.jobs locked (inside an open transaction) until the test ends."""
    conn = await psycopg.AsyncConnection.connect(dsn)
    await conn.execute("lock table pgqueue.jobs in access exclusive mode")
    try:
        yield conn
    finally:
        await conn.close()


async def waiting_on_the_lock(dsn: str, conn: AConn) -> None:
    await wait_until(lambda: scalar(dsn, "select wait_event_type = 'Lock' from pg_stat_activity where pid = %s",
                                    (conn.info.backend_pid,)), "the statement to wait for the lock")


async def raised(call: Awaitable[Any]) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as caught:
        await finish(call, "the statement to fail")
    return caught.value


def assert_named(error: QueueStorageError, sqlstate: str, label: str, advice: str) -> None:
    text = str(error)
    assert text.startswith(f"dispatching job 'tests.storage_errors.note': {label} ("), text
    assert advice in text and "could not be reached" not in text, text
    assert error.sqlstate == sqlstate


async def test_a_statement_timeout_is_named_with_what_to_do(client: Client, dsn: str, locker: AConn) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as caller:
        await caller.execute("set statement_timeout = '200ms'")
        with pytest.raises(QueueStorageError) as caught:
            await finish(client.dispatch(Note(), conn=caller), "the dispatch to time out")
    assert_named(caught.value, "57014", "statement timeout", "raise statement_timeout")


async def test_a_lock_timeout_is_named_with_what_to_do(client: Client, dsn: str, locker: AConn) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as caller:
        await caller.execute("set lock_timeout = '200ms'")
        with pytest.raises(QueueStorageError) as caught:
            await finish(client.dispatch(Note(), conn=caller), "the dispatch to give up on the lock")
    assert_named(caught.value, "55P03", "lock timeout", "find the holder")


async def test_a_cancelled_query_is_named(client: Client, dsn: str, locker: AConn) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as caller:
        pending = asyncio.create_task(client.dispatch(Note(), conn=caller))
        await waiting_on_the_lock(dsn, caller)
        assert await scalar(dsn, "select pg_cancel_backend(%s)", (caller.info.backend_pid,))
        with pytest.raises(QueueStorageError) as caught:
            await finish(pending, "the cancelled dispatch")
    assert_named(caught.value, "57014", "query cancelled", "run it again if the cancel was not meant for it")


async def test_a_terminated_session_is_named_as_an_administrator_shutdown(client: Client, dsn: str,
                                                                         locker: AConn) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as caller:
        pending = asyncio.create_task(client.dispatch(Note(), conn=caller))
        await waiting_on_the_lock(dsn, caller)
        assert await scalar(dsn, "select pg_terminate_backend(%s)", (caller.info.backend_pid,))
        with pytest.raises(QueueStorageError) as caught:
            await finish(pending, "the dispatch of the terminated session")
    assert_named(caught.value, "57P01", "administrator shutdown", "retry once the server accepts connections again")


async def test_serialization_failures_and_deadlocks_are_named(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as setup:
        await setup.execute("create table scratch (id int primary key, n int)")
        await setup.execute("insert into scratch values (1, 0), (2, 0)")
    async with await psycopg.AsyncConnection.connect(dsn) as one, await psycopg.AsyncConnection.connect(dsn) as two:
        # Serialization failure: a REPEATABLE READ transaction updates a row changed after its snapshot.
        await one.execute("set transaction isolation level repeatable read")
        await one.execute("select n from scratch where id = 1")
        await two.execute("update scratch set n = 1 where id = 1")
        await two.commit()
        failure = await raised(one.execute("update scratch set n = 2 where id = 1"))
        await one.rollback()
        # Deadlock: each holds the row the other wants.
        for conn in (one, two):
            await conn.execute("set deadlock_timeout = '10ms'")
        await one.execute("update scratch set n = 3 where id = 1")
        await two.execute("update scratch set n = 3 where id = 2")
        blocked = asyncio.create_task(one.execute("update scratch set n = 4 where id = 2"))
        await waiting_on_the_lock(dsn, one)
        outcomes = await asyncio.gather(two.execute("update scratch set n = 4 where id = 1"), blocked,
                                        return_exceptions=True)
        [deadlock] = [o for o in outcomes if isinstance(o, psycopg.Error)]
    for error, sqlstate, label, advice in ((failure, "40001", "serialization failure", "roll it back and run it again"),
                                           (deadlock, "40P01", "deadlock", "roll it back and run it again")):
        translated = translate(error, "dispatching job 'tests.storage_errors.note'")
        assert isinstance(translated, QueueStorageError)
        assert_named(translated, sqlstate, label, advice)


async def test_an_unreachable_server_still_says_so() -> None:
    error = await raised(psycopg.AsyncConnection.connect("postgresql://postgres@127.0.0.1:1/postgres",
                                                         connect_timeout=5))  # a closed local port
    translated = translate(error, "dispatching a job")
    assert isinstance(translated, QueueStorageError)
    assert "could not be reached or the connection broke" in str(translated) and translated.sqlstate is None


async def test_a_worker_tells_transient_refused_and_configuration_faults_apart(dsn: str) -> None:
    # What the fetcher does after a failed reservation (issue 25: the SQLSTATE classification moved
    # out of the fetcher): wait and retry, log and retry, or stop with the translated error.
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        refused = await raised(conn.execute("select 1 / 0"))  # a data-dependent refusal (22012)
        undefined = await raised(conn.execute("select pgqueue_no_such_function()"))  # 42883
        no_schema = await raised(conn.execute("create table pgqueue_no_such_schema.t (n int)"))  # 3F000
    unreachable = await raised(psycopg.AsyncConnection.connect("postgresql://postgres@127.0.0.1:1/postgres",
                                                               connect_timeout=5))
    assert no_schema.sqlstate == "3F000", no_schema.sqlstate
    assert classify(unreachable) == "transient"
    assert classify(refused) == "refused"
    assert classify(undefined) == "configuration" and classify(no_schema) == "configuration"
    assert classify(ValueError("not a database error")) == "other"
    # The errors a worker survives around one statement: the database's, the pool's, the socket's.
    assert all(isinstance(e, DATABASE_ERRORS) for e in (refused, unreachable, OSError("reset")))
    assert not isinstance(ValueError(), DATABASE_ERRORS)
