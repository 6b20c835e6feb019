"""Dispatch inside the caller's transaction (psycopg, SQLAlchemy), the own pool, dispatch_many and
the sync connection (issue 3)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from pgqueue import (
    Client,
    Job,
    JobContext,
    QueueConfigurationError,
    QueueDispatchError,
    QueuePayloadError,
    SyncJobContext,
    load_settings,
)
from pgqueue import job as job_function
from tests.api_support import NO_PYPROJECT, client, failed_rows, job_rows, settings_for

__all__ = ["client"]

RAN: list[Any] = []


class Receipt(Job):
    name = "tests.receipt"

    order_id: int

    async def handle(self, context: JobContext) -> None:
        RAN.append(("receipt", self.order_id, context.attempts))


class Numbered(Job):
    name = "tests.numbered"

    n: int


class Boom(Job):
    name = "tests.boom"
    connection = "sync"

    order_id: int

    async def handle(self, context: JobContext) -> None:
        raise ValueError(f"order {self.order_id} exploded")


class SyncDecides(Job):
    name = "tests.sync_decides"
    connection = "sync"

    decision: str

    async def handle(self, context: JobContext) -> None:
        RAN.append(("sync", self.decision, context.attempts, context.connection))
        if self.decision == "release":
            await context.release(delay=1.0)
        elif self.decision == "fail":
            await context.fail("refused by the handler")
        elif self.decision == "ack":
            await context.ack()


class SyncHandled(Job):
    """A plain ``def handle`` on the sync connection: run in a thread with the blocking context."""

    name = "tests.sync_handled"
    connection = "sync"

    decision: str

    def handle(self, context: SyncJobContext) -> None:  # type: ignore[override]  # a sync handler
        RAN.append(("sync-handle", self.decision, context.attempts, threading.get_ident(), type(context)))
        if self.decision == "fail":
            context.fail("refused by the sync handler")
        elif self.decision == "ack":
            context.ack()
        elif self.decision == "release":
            context.release(delay=1.0)
        elif self.decision == "raise":
            raise ValueError("sync handler exploded")


@job_function(name="tests.sync_inline_function", connection="sync")
def sync_inline_function(n: int, context: SyncJobContext) -> None:
    RAN.append(("sync-function", n, threading.get_ident(), type(context)))


#: The sync handler that outlives its timeout: its context, a gate holding its thread, and
#: whether the thread has returned.
SLOW: dict[str, Any] = {}


class SyncSlow(Job):
    name = "tests.sync_slow"
    connection = "sync"
    timeout = 0.2

    def handle(self, context: SyncJobContext) -> None:  # type: ignore[override]  # a sync handler
        SLOW["context"] = context
        SLOW["gate"].wait(30)
        SLOW["returned"].set()


@pytest.fixture
def orders(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("create table orders (id integer primary key, total numeric not null)")
    return dsn


def counts(dsn: str) -> tuple[int, int]:
    """(orders, jobs) as seen from a fresh connection."""
    with psycopg.connect(dsn) as c:
        row = c.execute("select (select count(*) from orders), (select count(*) from pgqueue.jobs)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# ------------------------------------------------------------------ psycopg

async def test_psycopg_async_connection_rollback_leaves_nothing(client: Client, orders: str) -> None:
    async with await psycopg.AsyncConnection.connect(orders) as conn:
        await conn.execute("insert into orders values (1, 10)")
        await Receipt(order_id=1).dispatch(conn, using=client)
        assert counts(orders) == (0, 0)  # not visible before commit
        await conn.rollback()
    assert counts(orders) == (0, 0)


async def test_psycopg_async_connection_commit_leaves_exactly_one(client: Client, orders: str) -> None:
    async with await psycopg.AsyncConnection.connect(orders) as conn:
        async with conn.transaction():
            await conn.execute("insert into orders values (1, 10)")
            job_id = await Receipt(order_id=1).dispatch(conn, using=client)
        assert counts(orders) == (1, 1)
    [row] = job_rows(orders)
    assert row["id"] == job_id and row["envelope"]["args"] == {"order_id": 1}


async def test_psycopg_async_transaction_block_that_raises_rolls_the_job_back(client: Client, orders: str) -> None:
    async with await psycopg.AsyncConnection.connect(orders, autocommit=True) as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await conn.execute("insert into orders values (1, 10)")
                await client.dispatch(Receipt(order_id=1), conn=conn)
                raise RuntimeError("business logic failed")
    assert counts(orders) == (0, 0)


def test_psycopg_sync_connection_rollback_and_commit(dsn: str, orders: str) -> None:
    q = Client(settings=settings_for(dsn))
    with psycopg.connect(orders) as conn:
        conn.execute("insert into orders values (1, 10)")
        Receipt(order_id=1).dispatch_sync(conn, using=q)
        conn.rollback()
        assert counts(orders) == (0, 0)
        conn.execute("insert into orders values (2, 20)")
        job_id = q.dispatch_sync(Receipt(order_id=2), conn=conn, delay=30)
        conn.commit()
    assert counts(orders) == (1, 1)
    [row] = job_rows(orders)
    assert row["id"] == job_id and row["due_in"] > 20


# --------------------------------------------------------------- SQLAlchemy

@pytest.fixture
def engine(orders: str) -> Iterator[Engine]:
    eng = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(orders))
    yield eng
    eng.dispose()


@pytest.fixture
async def async_engine(orders: str) -> AsyncIterator[AsyncEngine]:
    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(orders)

    eng = create_async_engine("postgresql+psycopg://", async_creator=connect)
    yield eng
    await eng.dispose()


def test_sqlalchemy_session(dsn: str, orders: str, engine: Engine) -> None:
    q = Client(settings=settings_for(dsn))
    with Session(engine) as session:
        session.execute(text("insert into orders values (1, 10)"))
        Receipt(order_id=1).dispatch_sync(session, using=q)
        session.rollback()
    assert counts(orders) == (0, 0)
    with Session(engine) as session, session.begin():
        session.execute(text("insert into orders values (2, 20)"))
        Receipt(order_id=2).dispatch_sync(session, using=q)
    assert counts(orders) == (1, 1)


def test_sqlalchemy_connection(dsn: str, orders: str, engine: Engine) -> None:
    q = Client(settings=settings_for(dsn))
    with engine.connect() as connection:
        connection.execute(text("insert into orders values (1, 10)"))
        q.dispatch_sync(Receipt(order_id=1), conn=connection)
        connection.rollback()
        assert counts(orders) == (0, 0)
        connection.execute(text("insert into orders values (2, 20)"))
        q.dispatch_sync(Receipt(order_id=2), conn=connection)
        connection.commit()
    assert counts(orders) == (1, 1)


async def test_sqlalchemy_async_session(client: Client, orders: str, async_engine: AsyncEngine) -> None:
    async with AsyncSession(async_engine) as session:
        await session.execute(text("insert into orders values (1, 10)"))
        await Receipt(order_id=1).dispatch(session, using=client)
        await session.rollback()
    assert counts(orders) == (0, 0)
    async with AsyncSession(async_engine) as session, session.begin():
        await session.execute(text("insert into orders values (2, 20)"))
        await Receipt(order_id=2).dispatch(session, using=client)
    assert counts(orders) == (1, 1)


async def test_sqlalchemy_async_connection(client: Client, orders: str, async_engine: AsyncEngine) -> None:
    async with async_engine.connect() as connection:
        await connection.execute(text("insert into orders values (1, 10)"))
        await client.dispatch(Receipt(order_id=1), conn=connection)
        await connection.rollback()
        assert counts(orders) == (0, 0)
        await connection.execute(text("insert into orders values (2, 20)"))
        ids = await client.dispatch_many([Receipt(order_id=2), Receipt(order_id=3)], conn=connection)
        await connection.commit()
    assert counts(orders) == (1, 2)
    assert sorted(r["id"] for r in job_rows(orders)) == sorted(ids)


async def test_an_unsupported_connection_object_is_refused(client: Client, dsn: str) -> None:
    with pytest.raises(QueueConfigurationError, match=r"cannot dispatch with a builtins.str"):
        await client.dispatch(Receipt(order_id=1), conn="postgresql://elsewhere")
    with pytest.raises(QueueConfigurationError, match="cannot dispatch synchronously"):
        client.dispatch_sync(Receipt(order_id=1), conn=object())
    assert job_rows(dsn) == []


async def test_only_job_instances_can_be_dispatched(client: Client) -> None:
    with pytest.raises(QueueDispatchError, match="can only dispatch Job instances"):
        await client.dispatch(Receipt, conn=None)  # type: ignore[arg-type]


# ----------------------------------------------------------------- own pool

async def test_without_a_connection_the_queue_pool_commits_each_push(client: Client, dsn: str) -> None:
    first = await client.dispatch(Receipt(order_id=1))
    assert [r["id"] for r in job_rows(dsn)] == [first]  # visible at once: autocommit
    second = await Receipt(order_id=2).dispatch(using=client, delay=60, queue="later", priority=7)
    rows = {r["id"]: r for r in job_rows(dsn)}
    assert rows[second]["queue"] == "later" and rows[second]["priority"] == 7
    assert 50 < rows[second]["due_in"] <= 60
    assert rows[first]["due_in"] <= 0


async def test_dispatch_uses_the_default_client(dsn: str) -> None:
    from pgqueue import default_client, set_default_client

    q = Client(settings=settings_for(dsn))
    set_default_client(q)
    try:
        assert default_client() is q
        await Receipt(order_id=5).dispatch()
        assert [r["envelope"]["args"] for r in job_rows(dsn)] == [{"order_id": 5}]
    finally:
        set_default_client(None)
        await q.close()


async def test_a_pushed_job_runs_in_a_worker(client: Client) -> None:
    RAN.clear()
    await Receipt(order_id=42).dispatch(using=client)
    worker = await client.worker(listen=False)
    await worker.run(stop_when_empty=True)
    assert RAN == [("receipt", 42, 1)]


# ---------------------------------------------------------------- dispatch_many

async def test_push_many_stores_every_job_and_returns_ids_in_order(client: Client, dsn: str) -> None:
    jobs = [Numbered(n=i) for i in range(250)]
    ids = await client.dispatch_many(jobs)
    assert len(ids) == 250 and len(set(ids)) == 250
    by_id = {r["id"]: r for r in job_rows(dsn)}
    assert [by_id[i]["envelope"]["args"]["n"] for i in ids] == list(range(250))
    assert all(r["due_in"] <= 0 and r["token"] is None for r in by_id.values())


async def test_push_many_one_delay_for_all(client: Client, dsn: str) -> None:
    await client.dispatch_many([Numbered(n=i) for i in range(3)], delay=120)
    assert all(100 < r["due_in"] <= 120 for r in job_rows(dsn))


async def test_push_many_one_delay_per_job(client: Client, dsn: str) -> None:
    ids = await client.dispatch_many([Numbered(n=i) for i in range(3)], delay=[0, 60, 600.5])
    due = {r["id"]: r["due_in"] for r in job_rows(dsn)}
    assert due[ids[0]] <= 0
    assert 50 < due[ids[1]] <= 60
    assert 590 < due[ids[2]] <= 600.5
    [stats] = await client.stats()
    assert (stats.ready, stats.delayed) == (1, 2)


async def test_push_many_accepts_a_generator_and_a_queue_override(client: Client, dsn: str) -> None:
    ids = await client.dispatch_many((Numbered(n=i) for i in range(4)), delay=(d for d in (0, 0, 5, 5)),
                                queue="bulk")
    assert len(ids) == 4
    assert {r["queue"] for r in job_rows(dsn)} == {"bulk"}


async def test_push_many_with_the_wrong_number_of_delays_is_refused(client: Client, dsn: str) -> None:
    with pytest.raises(QueueDispatchError, match="3 jobs but 2 delays"):
        await client.dispatch_many([Numbered(n=i) for i in range(3)], delay=[0, 1])
    with pytest.raises(QueueDispatchError, match="2 jobs but 3 delays"):
        await client.dispatch_many([Numbered(n=i) for i in range(2)], delay=(d for d in (0, 1, 2)))
    assert job_rows(dsn) == []


async def test_push_many_with_nothing_does_nothing(client: Client) -> None:
    assert await client.dispatch_many([]) == []


async def test_push_many_stores_nothing_when_one_job_is_invalid(client: Client, dsn: str) -> None:
    class Loose(Job):
        name = "tests.loose"

        value: object

    with pytest.raises(QueuePayloadError, match=r"args\['value'\]"):
        await client.dispatch_many([Loose(value=1), Loose(value=object())])
    assert job_rows(dsn) == []


async def test_push_many_refuses_sync_connection_jobs(client: Client) -> None:
    with pytest.raises(QueueDispatchError, match="sync connection"):
        await client.dispatch_many([Numbered(n=1), SyncDecides(decision="none")])


async def test_push_many_in_a_transaction_that_rolls_back(client: Client, orders: str) -> None:
    async with await psycopg.AsyncConnection.connect(orders) as conn:
        await conn.execute("insert into orders values (1, 10)")
        await client.dispatch_many([Receipt(order_id=i) for i in range(10)], conn=conn)
        await conn.rollback()
        await conn.execute("insert into orders values (2, 20)")
        await client.dispatch_many([Receipt(order_id=i) for i in range(3)], conn=conn)
        await conn.commit()
    assert counts(orders) == (1, 3)


# ---------------------------------------------------------- sync connection

async def test_a_sync_connection_job_runs_inline_once(client: Client, dsn: str) -> None:
    RAN.clear()
    job_id = await SyncDecides(decision="none").dispatch(using=client)
    assert isinstance(job_id, uuid.UUID)
    assert RAN == [("sync", "none", 1, "sync")]
    assert job_rows(dsn) == [] and failed_rows(dsn) == []


async def test_a_sync_job_exception_propagates_and_is_recorded(client: Client, dsn: str) -> None:
    with pytest.raises(ValueError, match="order 7 exploded"):
        await Boom(order_id=7).dispatch(using=client)
    [failure] = failed_rows(dsn)
    assert failure["reason"] == "exception" and failure["attempts"] == 1
    assert failure["exception"] == "ValueError" and failure["message"] == "order 7 exploded"
    assert "Traceback" in failure["traceback"] and "exploded" in failure["traceback"]
    assert failure["connection"] == "sync" and failure["envelope"]["args"] == {"order_id": 7}
    assert job_rows(dsn) == []


async def test_a_sync_job_failed_by_its_handler_raises_and_is_recorded(client: Client, dsn: str) -> None:
    with pytest.raises(RuntimeError, match="refused by the handler"):
        await client.dispatch(SyncDecides(decision="fail"))
    [failure] = failed_rows(dsn)
    assert failure["reason"] == "failed_by_handler"


async def test_a_sync_job_may_ack_itself(client: Client, dsn: str) -> None:
    await client.dispatch(SyncDecides(decision="ack"))
    assert failed_rows(dsn) == []


async def test_the_sync_connection_refuses_a_delay(client: Client, dsn: str) -> None:
    RAN.clear()
    with pytest.raises(QueueDispatchError, match="cannot delay") as caught:
        await SyncDecides(decision="none").dispatch(using=client, delay=5)
    assert "'sync'" in str(caught.value) and "tests.sync_decides" in str(caught.value)
    assert RAN == [] and failed_rows(dsn) == []


async def test_the_sync_connection_refuses_release(client: Client, dsn: str) -> None:
    with pytest.raises(QueueDispatchError, match=r"release\(\) is not available on the sync connection"):
        await SyncDecides(decision="release").dispatch(using=client)
    assert failed_rows(dsn) == []


async def test_a_sync_handle_runs_inline_in_a_thread_with_the_blocking_context(client: Client, dsn: str) -> None:
    RAN.clear()
    await SyncHandled(decision="none").dispatch(using=client)
    await client.dispatch(SyncHandled(decision="ack"))
    await sync_inline_function(n=3).dispatch(using=client)
    assert failed_rows(dsn) == [] and job_rows(dsn) == []
    with pytest.raises(RuntimeError, match="refused by the sync handler"):
        await client.dispatch(SyncHandled(decision="fail"))
    with pytest.raises(ValueError, match="sync handler exploded"):
        await client.dispatch(SyncHandled(decision="raise"))
    with pytest.raises(QueueDispatchError, match=r"release\(\) is not available on the sync connection"):
        await client.dispatch(SyncHandled(decision="release"))
    loop_thread = threading.get_ident()
    assert [(entry[0], entry[1]) for entry in RAN] == [
        ("sync-handle", "none"), ("sync-handle", "ack"), ("sync-function", 3), ("sync-handle", "fail"),
        ("sync-handle", "raise"), ("sync-handle", "release")]
    assert all(entry[-2] != loop_thread and entry[-1] is SyncJobContext for entry in RAN)
    assert [(f["reason"], f["exception"], f["message"]) for f in failed_rows(dsn)] == [
        ("failed_by_handler", "RuntimeError", "refused by the sync handler"),
        ("exception", "ValueError", "sync handler exploded")]
    assert job_rows(dsn) == []


def test_push_sync_runs_a_sync_handle_inline_in_a_thread(dsn: str) -> None:
    q = Client(settings=settings_for(dsn))
    RAN.clear()
    with psycopg.connect(dsn) as conn:
        q.dispatch_sync(SyncHandled(decision="ack"), conn=conn)
        with pytest.raises(RuntimeError, match="refused by the sync handler"):
            SyncHandled(decision="fail").dispatch_sync(conn, using=q)
    assert [(entry[0], entry[1], entry[2]) for entry in RAN] == [("sync-handle", "ack", 1),
                                                                 ("sync-handle", "fail", 1)]
    assert all(entry[3] != threading.get_ident() for entry in RAN)
    [failure] = failed_rows(dsn)
    assert (failure["reason"], failure["message"]) == ("failed_by_handler", "refused by the sync handler")
    assert q._pools == {}


async def test_a_sync_handle_past_its_timeout_raises_and_sees_cancelled(client: Client, dsn: str) -> None:
    SLOW.update(gate=threading.Event(), returned=threading.Event())
    try:
        with pytest.raises(TimeoutError):
            await client.dispatch(SyncSlow())
        context = SLOW["context"]
        assert isinstance(context, SyncJobContext) and context.cancelled  # the thread is asked to stop
    finally:
        SLOW["gate"].set()
    assert await asyncio.to_thread(SLOW["returned"].wait, 30)
    [failure] = failed_rows(dsn)
    assert (failure["reason"], failure["exception"], failure["attempts"]) == ("exception", "TimeoutError", 1)


async def test_a_sync_failure_without_a_configured_database_just_propagates() -> None:
    q = Client(settings=load_settings(NO_PYPROJECT, environ={}))
    try:
        assert q.settings.database_dsn() is None
        with pytest.raises(ValueError, match="order 1 exploded"):
            await q.dispatch(Boom(order_id=1))
    finally:
        await q.close()


def test_push_sync_to_the_sync_connection_runs_inline_and_records_failures(dsn: str) -> None:
    q = Client(settings=settings_for(dsn))
    RAN.clear()
    with psycopg.connect(dsn) as conn:
        q.dispatch_sync(SyncDecides(decision="none"), conn=conn)
        assert RAN == [("sync", "none", 1, "sync")]
        with pytest.raises(ValueError, match="order 3 exploded"):
            Boom(order_id=3).dispatch_sync(conn, using=q)
        with pytest.raises(ValueError, match="order 4 exploded"):
            Boom(order_id=4).dispatch_sync(conn, using=q)
    assert [f["envelope"]["args"]["order_id"] for f in failed_rows(dsn)] == [3, 4]


# ------------------------------------------- dispatch_many validates like dispatch

class Loose(Job):
    name = "tests.loose_many"

    value: object = None


class Deadlined(Job):
    name = "tests.deadlined"
    queue = "dl"
    tries = 2
    priority = -3

    n: int

    def retry_until(self) -> float | None:
        return 4102444800.5 if self.n % 2 else None


def test_bulk_encoding_is_byte_identical_to_single_encoding(client: Client) -> None:
    import json

    from pgqueue import Envelope

    jobs: list[Job] = [Loose(value={"nested": [1, 2.5, "é", None]}), Deadlined(n=1), Deadlined(n=2),
                       Loose(value="\U0001f600"), Receipt(order_id=3), Loose(value=(1, 2))]
    encoded = client.encode_many(jobs)
    stored = json.loads(encoded.text)
    assert [uuid.UUID(e["id"]) for e in stored] == encoded.ids
    expected = "[" + ",".join(Envelope.decode(e).encode(10**7) for e in stored) + "]"
    assert encoded.text == expected
    assert stored[1]["retry_until"] == 4102444800.5 and stored[2]["retry_until"] is None
    assert (stored[1]["queue"], stored[1]["tries"], stored[1]["priority"]) == ("dl", 2, -3)
    for job, envelope in zip(jobs, stored, strict=True):
        single, _ = client.envelope(job)
        assert json.loads(json.dumps({**single.to_data(), "id": envelope["id"]})) == envelope


@pytest.mark.parametrize(("value", "message"), [
    ("a\x00b", r"args\['value'\] contains a NUL"),
    ({"k": ["\ud800"]}, r"args\['value'\]\['k'\]\[0\] contains an unpaired surrogate"),
    (float("nan"), r"args\['value'\] is nan"),
    ({"deep": float("inf")}, r"args\['value'\]\['deep'\] is inf"),
    ({1: "x"}, "JSON keys are strings"),
    (object(), r"args\['value'\] is of type builtins.object"),
    (b"raw", r"args\['value'\] is of type builtins.bytes"),
])
async def test_push_many_refuses_what_push_refuses(client: Client, dsn: str, value: object, message: str) -> None:
    with pytest.raises(QueuePayloadError, match=message):
        await client.dispatch_many([Loose(value=1), Loose(value=value), Loose(value=2)])
    assert job_rows(dsn) == []


async def test_push_many_refuses_an_oversized_envelope_with_its_size(dsn: str, tmp_path: Any) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.pgqueue.connections.database]\nmax_payload_bytes = 450\n")
    q = Client(settings=load_settings(path, dsn=dsn, environ={}))
    try:
        envelope, _ = q.envelope(Loose(value="é" * 100))
        size = len(envelope.encode(10**6).encode("utf-8"))
        assert len(envelope.encode(10**6)) <= 450 < size  # under the limit in characters, over in bytes
        with pytest.raises(QueuePayloadError, match=f"envelope is {size} bytes, over the limit of 450 bytes"):
            await q.dispatch_many([Loose(value=1), Loose(value="é" * 100)])
        await q.dispatch_many([Loose(value="é" * 10)])
    finally:
        await q.close()
    assert len(job_rows(dsn)) == 1


async def test_push_many_stores_text_that_only_looks_like_an_escaped_nul(client: Client, dsn: str) -> None:
    await client.dispatch_many([Loose(value="backslash \\u0000 is just text")])
    assert job_rows(dsn)[0]["envelope"]["args"] == {"value": "backslash \\u0000 is just text"}


async def test_push_many_refuses_a_non_job(client: Client) -> None:
    with pytest.raises(QueueDispatchError, match="can only dispatch Job instances"):
        await client.dispatch_many([Receipt(order_id=1), {"order_id": 2}])  # type: ignore[list-item]


def test_push_sync_failures_leave_no_pool_behind(dsn: str) -> None:
    q = Client(settings=settings_for(dsn))
    with psycopg.connect(dsn) as conn, pytest.raises(ValueError, match="order 9 exploded"):
        q.dispatch_sync(Boom(order_id=9), conn=conn)
    assert q._pools == {}  # a pool made in dispatch_sync's short-lived loop would be bound to a closed loop
    assert len(failed_rows(dsn)) == 1


async def test_push_sync_to_the_sync_connection_inside_an_event_loop_is_refused(client: Client, dsn: str) -> None:
    RAN.clear()
    with psycopg.connect(dsn) as conn, pytest.raises(QueueDispatchError, match="use `await dispatch"):
        client.dispatch_sync(SyncDecides(decision="none"), conn=conn)
    assert RAN == []
