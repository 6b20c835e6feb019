"""Unique jobs (issue 13): keys enforced by PostgreSQL's unique indexes, under concurrency."""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqueue import (
    Client,
    Job,
    JobContext,
    QueueConfigurationError,
    QueueDuplicateError,
    Settings,
    UniqueDispatch,
    limits,
)
from tests.api_support import client, run_worker
from tests.helpers import envelope
from tests.worker_support import finish, rows, scalar, settings_for, wait_until

__all__ = ["client"]

HELD: dict[str, asyncio.Event] = {}


class Invoice(Job):
    """A job whose unique key is its invoice."""

    name = "tests.unique.invoice"

    invoice_id: int

    async def handle(self, context: JobContext) -> None:
        return None


class HoldUntilSet(Job):
    """Runs until the test sets the event named ``hold``."""

    name = "tests.unique.hold"

    hold: str

    async def handle(self, context: JobContext) -> None:
        HELD[self.hold + ":started"].set()
        await HELD[self.hold].wait()


async def test_a_second_dispatch_of_a_queued_key_returns_the_first_job(client: Client, dsn: str) -> None:
    first = await client.dispatch_unique(Invoice(invoice_id=42), "invoice:42")
    second = await client.dispatch_unique(Invoice(invoice_id=42), "invoice:42")
    assert (first.duplicate, second.duplicate) == (False, True)
    assert second.id == first.id
    # client.dispatch(unique_key=...) is the same door, returning the holder's id.
    assert await client.dispatch(Invoice(invoice_id=42), unique_key="invoice:42") == first.id
    other = await client.dispatch_unique(Invoice(invoice_id=43), "invoice:43")
    assert not other.duplicate
    stored = await rows(dsn, "select id, unique_key, unique_scope, envelope->>'unique_key' as in_envelope"
                             " from pgqueue.jobs order by unique_key")
    assert [(r["id"], r["unique_key"], r["unique_scope"], r["in_envelope"]) for r in stored] == [
        (first.id, "invoice:42", "queued", "invoice:42"), (other.id, "invoice:43", "queued", "invoice:43")]
    with pytest.raises(QueueDuplicateError, match=f"job {first.id} holds unique key 'invoice:42'"):
        await client.dispatch_unique(Invoice(invoice_id=42), "invoice:42", raise_on_duplicate=True)


async def test_bad_unique_arguments_store_nothing(client: Client, dsn: str) -> None:
    with pytest.raises(QueueConfigurationError, match="unique scope must be"):
        await client.dispatch_unique(Invoice(invoice_id=1), "k", scope="forever")
    with pytest.raises(QueueConfigurationError, match="needs period=<seconds>"):
        await client.dispatch_unique(Invoice(invoice_id=1), "k", scope="period")
    with pytest.raises(QueueConfigurationError, match="1 to 1000 bytes of UTF-8"):
        await client.dispatch_unique(Invoice(invoice_id=1), "")
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


async def test_queued_scope_frees_the_key_while_the_job_runs_and_active_scope_does_not(
        client: Client, dsn: str) -> None:
    for scope in ("queued", "active"):
        hold = f"run-{scope}"
        HELD[hold], HELD[hold + ":started"] = asyncio.Event(), asyncio.Event()
        running = await client.dispatch_unique(HoldUntilSet(hold=hold), f"hold:{scope}", scope=scope)
        worker = await client.worker(queues=("default",), concurrency=1, listen=False, schedules=False)
        task = asyncio.create_task(worker.run(max_jobs=1))
        await finish(HELD[hold + ":started"].wait(), "the held job to start")
        again = await client.dispatch_unique(HoldUntilSet(hold=hold), f"hold:{scope}", scope=scope)
        if scope == "queued":
            assert not again.duplicate and again.id != running.id  # the running job no longer holds it
        else:
            assert again.duplicate and again.id == running.id
        HELD[hold].set()
        await finish(task, "the worker to finish its one job")
        await client.clear("default")


async def test_fifty_concurrent_producers_of_one_key_make_one_job(dsn: str) -> None:
    q = Client(settings=queue_settings(dsn), pool_size=2)
    connections = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(50)]
    try:
        start = asyncio.Event()

        async def produce(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> tuple[uuid.UUID, bool]:
            await start.wait()
            result = await q.dispatch_unique(Invoice(invoice_id=7), "invoice:7", conn=conn)
            return result.id, result.duplicate

        tasks = [asyncio.create_task(produce(c)) for c in connections]
        start.set()
        results = await finish(asyncio.gather(*tasks), "50 producers")
    finally:
        for c in connections:
            await c.close()
        await q.close()
    assert len({job_id for job_id, _ in results}) == 1
    assert sorted(duplicate for _, duplicate in results) == [False] + [True] * 49
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1


async def test_fifty_concurrent_business_transactions_make_one_job(dsn: str) -> None:
    # Each producer dispatches inside its own transaction and commits; the one that inserted
    # holds the key until it commits, the others wait on the index entry, then see its job.
    q = Client(settings=queue_settings(dsn), pool_size=2)
    connections = [await psycopg.AsyncConnection.connect(dsn) for _ in range(50)]
    try:
        start = asyncio.Event()

        async def produce(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> tuple[uuid.UUID, bool]:
            await start.wait()
            async with conn.transaction():
                result = await q.dispatch_unique(Invoice(invoice_id=8), "invoice:8", conn=conn, scope="active")
            return result.id, result.duplicate

        tasks = [asyncio.create_task(produce(c)) for c in connections]
        start.set()
        results = await finish(asyncio.gather(*tasks), "50 transactions")
    finally:
        for c in connections:
            await c.close()
        await q.close()
    assert len({job_id for job_id, _ in results}) == 1
    assert sorted(duplicate for _, duplicate in results) == [False] + [True] * 49
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
async def test_a_second_transaction_waits_for_the_uncommitted_holder_of_the_key(
        client: Client, dsn: str, first_ends: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as first, \
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as second:
        await first.execute("select 1")
        held = await client.dispatch_unique(Invoice(invoice_id=9), "invoice:9", conn=first)
        second_pid = second.info.backend_pid
        waiting = asyncio.create_task(client.dispatch_unique(Invoice(invoice_id=9), "invoice:9", conn=second))
        # The second dispatch is blocked on a lock (the first's index entry), not refused.
        await wait_until(lambda: scalar(dsn, "select wait_event_type = 'Lock' from pg_stat_activity where pid = %s",
                                        (second_pid,)), "the second dispatch to wait on the key")
        assert not waiting.done()
        if first_ends == "commit":
            await first.commit()
        else:
            await first.rollback()
        result = await finish(waiting, "the second dispatch")
    if first_ends == "commit":
        assert (result.id, result.duplicate) == (held.id, True)
    else:
        assert not result.duplicate and result.id != held.id
    assert [r["id"] for r in await rows(dsn, "select id from pgqueue.jobs")] == [result.id]


async def test_period_scope_holds_the_key_after_the_job_finished_until_it_expires(client: Client, dsn: str) -> None:
    first = await client.dispatch_unique(Invoice(invoice_id=5), "report:5", scope="period", period=3600)
    await run_worker(client, schedules=False)
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0  # it ran and was acked
    again = await client.dispatch_unique(Invoice(invoice_id=5), "report:5", scope="period", period=3600)
    assert (again.id, again.duplicate) == (first.id, True)
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0
    # Once the period is over (moved into the past instead of waiting an hour), the key is free.
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("update pgqueue.unique_keys set expires_at = now() - interval '1 second'")
    later = await client.dispatch_unique(Invoice(invoice_id=5), "report:5", scope="period", period=3600)
    assert not later.duplicate and later.id != first.id
    assert await scalar(dsn, "select job_id from pgqueue.unique_keys where key = 'report:5'") == later.id


async def test_a_released_queued_job_drops_its_key_when_a_newer_job_holds_it(client: Client, dsn: str) -> None:
    first = await client.dispatch_unique(Invoice(invoice_id=3), "invoice:3")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("select id, token from pgqueue.reserve(array['default'], 1, 60)")
        reserved = await cur.fetchone()
        assert reserved is not None and reserved[0] == first.id
        newer = await client.dispatch_unique(Invoice(invoice_id=3), "invoice:3")
        assert not newer.duplicate
        # Releasing the first would put two waiting jobs on one key: it goes back without its key.
        assert (await (await conn.execute("select pgqueue.release(%s, %s, 0)", reserved)).fetchone()) == (True,)
    keys = {r["id"]: r["unique_key"] for r in await rows(dsn, "select id, unique_key from pgqueue.jobs")}
    assert keys == {first.id: None, newer.id: "invoice:3"}


async def test_push_many_with_keys_repeated_in_the_batch_and_held_by_existing_jobs(client: Client, dsn: str) -> None:
    existing = await client.dispatch_unique(Invoice(invoice_id=1), "invoice:1")
    batch = [Invoice(invoice_id=n) for n in (1, 2, 2, 3, 4)]
    results = await client.dispatch_unique_many(batch, ["invoice:1", "invoice:2", "invoice:2", None, "invoice:4"])
    assert [r.duplicate for r in results] == [True, False, True, False, False]
    assert results[0].id == existing.id and results[2].id == results[1].id
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 4  # 1, 2, 3 (no key) and 4
    ids = await client.dispatch_many([Invoice(invoice_id=4), Invoice(invoice_id=5)], unique_keys=["invoice:4", None])
    assert ids[0] == results[4].id
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 5
    # Inside the caller's transaction: a rollback stores none of them.
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await client.dispatch_unique_many([Invoice(invoice_id=6)], ["invoice:6"], conn=conn)
        await conn.rollback()
    assert await scalar(dsn, "select count(*) from pgqueue.jobs where unique_key = 'invoice:6'") == 0


def queue_settings(dsn: str) -> Settings:
    """The tests' settings for a Client of their own."""
    return settings_for(dsn)


class InvoiceByClass(Job):
    """Derives its key from its args: one queued job per invoice."""

    name = "tests.unique.invoice_by_class"
    unique_by = ("invoice_id",)
    unique_scope = "active"

    invoice_id: int
    note: str = ""

    async def handle(self, context: JobContext) -> None:
        return None


async def test_a_class_derives_its_key_from_args(client: Client, dsn: str) -> None:
    first = await InvoiceByClass(invoice_id=1, note="a").dispatch(using=client)
    assert await InvoiceByClass(invoice_id=1, note="b").dispatch(using=client) == first
    other = await InvoiceByClass(invoice_id=2).dispatch(using=client)
    ids = await client.dispatch_many([InvoiceByClass(invoice_id=2), InvoiceByClass(invoice_id=3)])
    assert ids[0] == other and ids[1] not in (first, other)
    keys = sorted(r["unique_key"] for r in await rows(dsn, "select unique_key from pgqueue.jobs"))
    assert keys == ['tests.unique.invoice_by_class:{"invoice_id":1}', 'tests.unique.invoice_by_class:{"invoice_id":2}',
                    'tests.unique.invoice_by_class:{"invoice_id":3}']
    assert {r["unique_scope"] for r in await rows(dsn, "select unique_scope from pgqueue.jobs")} == {"active"}
    # An explicit key wins over the derived one; Job.dispatch takes it too.
    assert await Invoice(invoice_id=1).dispatch(using=client, unique_key="x") == \
        await Invoice(invoice_id=9).dispatch(using=client, unique_key="x")
    with pytest.raises(QueueConfigurationError, match="unique_by must be a tuple of arg names"):
        class Wrong(Job, register=False):
            unique_by = ("nope",)
            invoice_id: int


# ------------------------------------------------ unique keys and periods (issue 24)

def _cjk(count: int) -> str:
    """``count`` distinct CJK characters (3 bytes each in UTF-8), so nothing compresses them."""
    return "".join(chr(0x4E00 + (n * 7919) % 20000) for n in range(count))


@pytest.mark.parametrize("key", ["k" * 1000, _cjk(333), "é" * 500, "\U0001f511" * 250])
async def test_a_key_of_up_to_1000_bytes_of_utf8_is_taken(client: Client, dsn: str, key: str) -> None:
    first = await client.dispatch_unique(Invoice(invoice_id=1), key, scope="active")
    assert await client.dispatch_unique(Invoice(invoice_id=1), key, scope="active") == UniqueDispatch(first.id, True)
    assert await scalar(dsn, "select octet_length(unique_key) from pgqueue.jobs") == len(key.encode())


@pytest.mark.parametrize(("key", "words"), [
    ("k" * 1001, "a unique key must be 1 to 1000 bytes of UTF-8, got 1001: 'kkk"),
    (_cjk(334), "a unique key must be 1 to 1000 bytes of UTF-8, got 1002: "),
    (_cjk(900), "got 2700: "),  # the issue's: PostgreSQL's index refused it (54000), past the check
    ("", "a unique key must be 1 to 1000 bytes of UTF-8, got 0: ''"),
    ("lone\udcff", "unique key 'lone\\udcff' contains U+DCFF, an unpaired surrogate, which is not valid Unicode"),
    ("nul\x00", "unique key 'nul\\u0000' contains U+0000 (NUL), which PostgreSQL cannot store"),
    (42, "a unique key must be a string, got int 42"),
])
async def test_a_bad_key_is_refused_by_name_in_python(client: Client, dsn: str, key: Any, words: str) -> None:
    for dispatch in (lambda: client.dispatch_unique(Invoice(invoice_id=1), key),
                     lambda: client.dispatch(Invoice(invoice_id=1), unique_key=key),
                     lambda: client.dispatch_unique_many([Invoice(invoice_id=2), Invoice(invoice_id=1)], ["ok", key])):
        with pytest.raises(QueueConfigurationError, match=re.escape(words)) as caught:
            await dispatch()
        assert str(caught.value).endswith("; the job was not dispatched")
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


@pytest.mark.parametrize("key", ["k" * 1001, _cjk(334), _cjk(900), ""])
async def test_sql_refuses_the_keys_python_refuses_with_the_same_message(dsn: str, key: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
            await conn.execute("select * from pgqueue.enqueue_unique(%s, 0, %s, 'queued', null)",
                               (Jsonb(envelope()), key))
    assert caught.value.diag.message_primary == f"pgqueue.enqueue_unique: {limits.unique_key_problem(key)}"
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


@pytest.mark.parametrize("period", ["5", True, "abc", [1], math.nan, math.inf, 0, -1.0,
                                    limits.MAX_UNIQUE_PERIOD_SECONDS + 1])
async def test_a_bad_period_is_refused_by_name(client: Client, dsn: str, period: Any) -> None:
    with pytest.raises(QueueConfigurationError) as caught:
        await client.dispatch_unique(Invoice(invoice_id=1), "k", scope="period", period=period)
    assert str(caught.value) == (
        "unique period must be a finite number of seconds above 0 and at most 315360000 (10 years), got "
        f"{type(period).__name__} {period!r}; the job was not dispatched")
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


async def test_the_longest_period_and_a_whole_number_are_taken(client: Client, dsn: str) -> None:
    await client.dispatch_unique(Invoice(invoice_id=1), "k1", scope="period", period=limits.MAX_UNIQUE_PERIOD_SECONDS)
    await client.dispatch_unique(Invoice(invoice_id=2), "k2", scope="period", period=5)
    assert await scalar(dsn, "select count(*) from pgqueue.unique_keys") == 2


@pytest.mark.parametrize("scope", [["queued"], None, "Queued"])
async def test_a_bad_scope_is_refused_by_name(client: Client, scope: Any) -> None:
    with pytest.raises(QueueConfigurationError, match=re.escape(f"got {scope!r}; the job was not dispatched")):
        await client.dispatch_unique(Invoice(invoice_id=1), "k", scope=scope)


class Receipt(Job):
    """A job type whose unique key its args derive (``unique_by``)."""

    name = "tests.unique.receipt"
    unique_by = ("order_id",)

    order_id: int

    async def handle(self, context: JobContext) -> None:
        return None


def test_dispatch_sync_keeps_the_key_unique_by_derives(dsn: str) -> None:
    # dispatch_sync stored such a job without its key: every dispatch from sync code was a new job.
    q = Client(settings=settings_for(dsn))
    with psycopg.connect(dsn) as conn:
        first = q.dispatch_sync(Receipt(order_id=7), conn=conn)
        again = Receipt(order_id=7).dispatch_sync(conn, using=q)
        other = q.dispatch_sync(Receipt(order_id=8), conn=conn)
        conn.commit()
    assert again == first and other != first
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(b"select id, unique_key, unique_scope from pgqueue.jobs order by unique_key").fetchall()
    assert stored == [(first.id, 'tests.unique.receipt:{"order_id":7}', "queued"),
                      (other.id, 'tests.unique.receipt:{"order_id":8}', "queued")]
