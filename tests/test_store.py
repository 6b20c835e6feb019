"""The store: each typed method against a real database (issue 12).

Dispatch, failed jobs, statistics and the worker exercise most methods through the public
API; these tests pin what a method promises on its own: the Reservation it builds, the
refused acks riding with a reservation, the ids a hand-back returns, the errors it maps.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgqueue import QueueRetryError, QueueStorageError
from pgqueue.migrate import revisions
from pgqueue.resources import query
from pgqueue.sql import statement
from pgqueue.store import (
    AckBatch,
    QueueStats,
    Reservation,
    Store,
    alembic_own_versions,
    alembic_own_versions_drop,
    alembic_user_versions,
    alembic_user_versions_delete,
    alembic_user_versions_insert,
    listen,
    try_vacuum_lock,
    vacuum_jobs,
    vacuum_unlock,
)
from pgqueue.worker.completer import Completer

Conn = psycopg.Connection[tuple[Any, ...]]


def envelope(queue: str = "default", *, tries: int = 3, name: str = "tests.store.noop") -> str:
    return json.dumps({"id": str(uuid.uuid4()), "name": name, "args": {"n": 1}, "connection": "database",
                       "queue": queue, "priority": 0, "tries": tries, "timeout": 10.0,
                       "backoff": [1.0], "retry_until": None, "version": 1})


async def open_store(dsn: str) -> AsyncIterator[Store]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(dsn, min_size=1, max_size=3, open=False,
                                                         kwargs={"autocommit": True})
    await pool.open(wait=True)
    try:
        yield Store(pool)
    finally:
        await pool.close()


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[Store]:
    async for opened in open_store(dsn):
        yield opened


@pytest.fixture
async def unmigrated_store(empty_dsn: str) -> AsyncIterator[Store]:
    async for opened in open_store(empty_dsn):
        yield opened


async def test_reserve_returns_typed_reservations_with_the_envelope_as_stored(store: Store) -> None:
    text = envelope("mail")
    await store.enqueue(text, 0.0)
    reservations, refused = await store.reserve(["mail"], 10, 30.0)
    assert refused == []
    assert len(reservations) == 1
    reservation = reservations[0]
    assert isinstance(reservation, Reservation)
    assert reservation.id == uuid.UUID(json.loads(text)["id"])
    assert reservation.attempts == 1
    assert reservation.tries == 3
    assert reservation.queue == "mail"
    assert 0 < reservation.lease_seconds_left <= 30.0
    assert reservation.token > 0
    assert isinstance(reservation.envelope, str)  # text: the worker parses each one by itself
    assert json.loads(reservation.envelope) == json.loads(text)
    assert not hasattr(reservation, "__dict__")  # a slots dataclass: no per-row dict


async def test_acks_ride_with_a_reservation_and_refused_ones_come_back(store: Store, conn: Conn) -> None:
    await store.enqueue_many(json.dumps([json.loads(envelope()) for _ in range(3)]), None)
    first, _ = await store.reserve(["default"], 2, 30.0)
    assert len(first) == 2
    done, stale = first
    # The stale holder's token no longer matches: its ack must be refused, the other accepted.
    acks = AckBatch(ids=[done.id, stale.id], tokens=[done.token, stale.token + 1000], durations=[0.01, 0.01],
                    waits=[0.0, 0.0], keep=False)
    second, refused = await store.reserve(["default"], 5, 30.0, acks=acks)
    assert refused == [stale.id]
    assert len(second) == 1
    left = {row[0] for row in conn.execute("select id from pgqueue.jobs").fetchall()}
    assert done.id not in left
    assert stale.id in left


async def test_the_completers_pending_acks_include_a_batch_sent_and_not_yet_answered(store: Store) -> None:
    # Completer.pending (the pgqueue_acks_pending gauge) said "not yet confirmed by the database" but
    # counted only the acks not yet taken: a batch riding with a reservation was invisible (issue 25).
    await store.enqueue_many(json.dumps([json.loads(envelope()) for _ in range(2)]), None)
    reserved, _ = await store.reserve(["default"], 2, 30.0)
    completer = Completer(store)
    for reservation in reserved:
        completer.add(reservation.id, reservation.token)
    batch = completer.take()
    assert batch.ids == [r.id for r in reserved] and batch.keep is False
    assert completer.pending == 2  # taken, not yet answered
    _, refused = await store.reserve(["default"], 1, 30.0, acks=batch)
    completer.answered(batch.ids, refused)
    assert refused == [] and completer.pending == 0 and completer.acked == 2
    completer.add(reserved[0].id, reserved[0].token)
    completer.give_back(completer.take())  # could not be sent: pending again, counted once
    assert completer.pending == 1


async def test_ack_returns_only_the_refused_ids(store: Store) -> None:
    await store.enqueue_many(json.dumps([json.loads(envelope()) for _ in range(2)]), None)
    (a, b), _ = await store.reserve(["default"], 2, 30.0)
    assert await store.ack([a.id, b.id], [a.token, -1]) == [b.id]


async def test_release_unstarted_returns_the_ids_it_released_and_the_attempt_does_not_count(
        store: Store, conn: Conn) -> None:
    await store.enqueue(envelope(), 0.0)
    (held,), _ = await store.reserve(["default"], 1, 30.0)
    assert await store.release_unstarted([held.id, uuid.uuid4()], [held.token, 1]) == [held.id]
    assert conn.execute("select attempts, token from pgqueue.jobs where id = %s", (held.id,)).fetchone() == (0, None)


async def test_fenced_transitions_say_whether_the_fence_matched(store: Store) -> None:
    await store.enqueue_many(json.dumps([json.loads(envelope()) for _ in range(2)]), None)
    (one, two), _ = await store.reserve(["default"], 2, 30.0)
    assert await store.extend(one.id, one.token + 1, 60.0) is None
    left = await store.extend(one.id, one.token, 60.0)
    assert left is not None and 30.0 < left <= 60.0
    assert await store.release(one.id, one.token + 1, 0.0) is False
    assert await store.release(one.id, one.token, 0.0) is True
    assert await store.fail(two.id, two.token + 1, None, "boom", None, "exception") is False
    assert await store.fail(two.id, two.token, "builtins.ValueError", "boom", None, "exception") is True
    assert await store.failed_count(None) == 1


async def test_heartbeat_renews_matching_leases_and_answers_per_pair_in_order(store: Store) -> None:
    await store.enqueue_many(json.dumps([json.loads(envelope()) for _ in range(2)]), None)
    (one, two), _ = await store.reserve(["default"], 2, 5.0)
    answers = await store.heartbeat([two.id, one.id, one.id], [two.token, one.token + 1, one.token], 60.0)
    assert [(job_id, renewed) for job_id, renewed, _ in answers] == [(two.id, True), (one.id, False), (one.id, True)]
    assert answers[1][2] is None  # a stale pair gets no lease time
    for _, renewed, left in answers:
        assert not renewed or (left is not None and 30.0 < left <= 60.0)


async def test_served_queues_lists_each_queue_with_jobs_or_failures_once(store: Store) -> None:
    assert await store.served_queues() == []
    await store.enqueue_many(json.dumps([json.loads(envelope(q)) for q in ("mail", "mail", "reports")]), None)
    await store.record_failure(envelope("archive"), 1, None, "boom", None, "exception")
    assert sorted(await store.served_queues()) == ["archive", "mail", "reports"]


async def test_next_due_is_none_without_jobs_and_counts_down_to_a_delayed_one(store: Store) -> None:
    assert await store.next_due(["default"]) is None
    await store.enqueue(envelope(), 120.0)
    due = await store.next_due(["default"])
    assert due is not None and 100.0 < due <= 120.0
    assert await store.next_due(["elsewhere"]) is None


async def test_enqueue_on_the_callers_connection_joins_its_transaction(store: Store, dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as own, own.transaction(force_rollback=True):
        await Store.enqueue_on(own, envelope("rolled-back"), 0.0)
        await Store.enqueue_many_on(own, json.dumps([json.loads(envelope("rolled-back"))]), None)
    with psycopg.connect(dsn) as sync_conn:
        Store.enqueue_on_sync(sync_conn, envelope("kept"), 0.0)
        # The async door takes a blocking connection too (the statement runs without an await).
        await Store.enqueue_many_on(sync_conn, json.dumps([json.loads(envelope("kept"))]), [5.0])
        sync_conn.commit()
    counts = {s.queue: s.ready + s.delayed for s in await store.queue_stats()}
    assert counts == {"kept": 2}
    assert all(isinstance(s, QueueStats) for s in await store.queue_stats())


async def test_record_failure_and_the_failed_job_queries(store: Store) -> None:
    failure_id = await store.record_failure(envelope("reports"), 1, "builtins.KeyError", "k", "trace", "exception")
    row = await store.failed_find(failure_id)
    assert row is not None and row["queue"] == "reports" and row["reason"] == "exception"
    assert [r["id"] for r in await store.failed_list("reports", None, 10)] == [failure_id]
    assert await store.failed_count("reports") == 1
    job_id = await store.retry_failed(failure_id)
    assert job_id == uuid.UUID(row["envelope"]["id"])
    assert await store.failed_count(None) == 0
    assert await store.clear("reports") == 1
    with pytest.raises(QueueRetryError):
        await store.retry_failed(failure_id)
    assert await store.forget_failed(failure_id) is False


async def test_listening_workers_counts_other_sessions_listening(store: Store, dsn: str) -> None:
    assert await store.listening_workers() == 0
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
        await listen(listener)
        assert await store.listening_workers() == 1


async def test_the_vacuum_lock_is_held_by_one_session_at_a_time(dsn: str) -> None:
    key = 0x7067717565756599
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as one, \
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as two:
        assert await try_vacuum_lock(one, key) is True
        assert await try_vacuum_lock(two, key) is False
        await vacuum_jobs(one)
        await vacuum_unlock(one, key)
        assert await try_vacuum_lock(two, key) is True


async def test_table_statistics_read_the_jobs_table(store: Store) -> None:
    stats = await store.table_statistics()
    assert stats is not None
    assert stats.dead_tuples >= 0 and stats.threshold >= 0 and stats.role


async def test_an_unmigrated_database_is_named_with_what_to_do(unmigrated_store: Store) -> None:
    assert await unmigrated_store.schema_present() is False
    with pytest.raises(QueueStorageError, match="pgqueue migrate"):
        await unmigrated_store.check_schema()
    with pytest.raises(QueueStorageError, match=r"^dispatching job 'x': .*pgqueue migrate"):
        await unmigrated_store.enqueue(envelope(), 0.0, what="dispatching job 'x'")
    assert await unmigrated_store.table_statistics() is None


def test_a_missing_alembic_table_reads_as_no_revisions_without_aborting_the_callers_transaction(
        empty_dsn: str) -> None:
    # pgqueue migrate probes both alembic tables on databases that may have neither.
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("create table kept (id int)")
        assert alembic_user_versions(conn, revisions()) == []
        assert alembic_own_versions(conn) == []
        conn.execute("insert into kept values (1)")  # the transaction is still usable
        conn.commit()
        assert conn.execute("select id from kept").fetchall() == [(1,)]


def test_pgqueue_revisions_move_between_the_alembic_tables_in_one_transaction(dsn: str) -> None:
    head = revisions()[-1]
    with psycopg.connect(dsn) as conn:
        conn.execute("create table alembic_version (version_num varchar(32) primary key)")
        conn.execute("insert into alembic_version values ('app0001')")
        conn.commit()
        assert alembic_own_versions(conn) == [head]  # `pgqueue migrate` recorded it in its own table
        assert alembic_user_versions(conn, revisions()) == []  # the application's revision is not pgqueue's
        alembic_user_versions_insert(conn, [head])
        alembic_own_versions_drop(conn)
        assert alembic_user_versions(conn, revisions()) == [head]
        assert alembic_own_versions(conn) == []
        conn.rollback()  # nothing committed: both tables as they were
        assert alembic_own_versions(conn) == [head]
        alembic_user_versions_insert(conn, [head])
        alembic_user_versions_delete(conn, [head])
        assert conn.execute("select version_num from alembic_version").fetchall() == [("app0001",)]


def test_tools_outside_the_library_get_a_statement_as_the_store_runs_it() -> None:
    # pgqueue.sql is the benchmarks' public door (they imported the private pgqueue.resources.query).
    assert statement("reserve") == query("reserve") and b"pgqueue.reserve(" in statement("reserve")
    with pytest.raises(FileNotFoundError, match=r"no SQL statement named 'nope'"):
        statement("nope")
