"""pgqueue.testing (issues 25 section 5, 30 section 2): the inline mode, drain(), dispatched() and
assert_dispatched(), and the deprecated ``driver = "sync"`` that the inline mode replaces."""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import Client, Job, JobContext, QueueDispatchError, load_settings
from pgqueue.testing import Outcome, Ran, assert_dispatched, dispatched, drain, inline
from tests.api_support import NO_PYPROJECT, client, failed_rows, job_rows, settings_for

__all__ = ["client"]

RAN: list[Any] = []


class Receipt(Job):
    name = "tests.kit:receipt"

    order_id: int
    note: str = ""

    async def handle(self, context: JobContext) -> None:
        RAN.append(("receipt", self.order_id, context.attempts))
        if self.note == "explode":
            raise ValueError(f"receipt {self.order_id} exploded")


class Once(Job):
    name = "tests.kit:once"
    tries = 1
    queue = "other"

    async def handle(self, context: JobContext) -> None:
        raise RuntimeError("no second chance")


class Chain(Job):
    """Dispatches a receipt from its handler: drain runs that one too."""

    name = "tests.kit:chain"

    order_id: int

    async def handle(self, context: JobContext) -> None:
        RAN.append(("chain", self.order_id, context.attempts))
        await Receipt(order_id=self.order_id + 1).dispatch(using=CLIENTS[0])


CLIENTS: list[Client] = []


class Delayer(Job):
    name = "tests.kit:delayer"

    async def handle(self, context: JobContext) -> None:
        await context.release(delay=5)


# -------------------------------------------------------------------- inline


async def test_inline_runs_each_dispatch_at_once_and_stores_nothing(client: Client, dsn: str) -> None:
    RAN.clear()
    with inline(client) as same:
        assert same is client and client.inline
        job_id = await Receipt(order_id=1).dispatch(using=client)
        ids = await client.dispatch_many([Receipt(order_id=2), Receipt(order_id=3)])
        unique = await client.dispatch_unique(Receipt(order_id=4), "key-4")
        [many_unique] = await client.dispatch_unique_many([Receipt(order_id=6)], ["key-6"])
    assert not client.inline
    assert isinstance(job_id, uuid.UUID) and len(ids) == 2 and not unique.duplicate
    assert not many_unique.duplicate
    assert RAN == [("receipt", 1, 1), ("receipt", 2, 1), ("receipt", 3, 1), ("receipt", 4, 1), ("receipt", 6, 1)]
    assert job_rows(dsn) == [] and failed_rows(dsn) == []
    await Receipt(order_id=5).dispatch(using=client)  # outside the block it is stored again
    assert [r["envelope"]["args"] for r in job_rows(dsn)] == [{"order_id": 5, "note": ""}]
    assert RAN[-1] == ("receipt", 6, 1)


async def test_inline_propagates_and_records_a_failure_and_refuses_a_delay(client: Client, dsn: str) -> None:
    with inline(client):
        with pytest.raises(ValueError, match="receipt 7 exploded"):
            await client.dispatch(Receipt(order_id=7, note="explode"))
        with pytest.raises(QueueDispatchError, match=r"the inline mode \(pgqueue.testing.inline\) runs jobs at "
                                                     r"dispatch and cannot delay them"):
            await client.dispatch(Receipt(order_id=8), delay=3)
        with pytest.raises(QueueDispatchError, match=r"release\(\) is not available on the inline mode"):
            await client.dispatch(Delayer())
    [failure] = failed_rows(dsn)
    assert (failure["exception"], failure["attempts"], failure["envelope"]["args"]["order_id"]) == (
        "ValueError", 1, 7)
    assert job_rows(dsn) == []


async def test_inline_validates_a_whole_batch_before_running_any(client: Client) -> None:
    RAN.clear()

    class Loose(Job):
        name = "tests.kit:loose"

        value: object

    with inline(client), pytest.raises(Exception, match=r"args\['value'\]"):
        await client.dispatch_many([Receipt(order_id=1), Loose(value=object())])
    assert RAN == []


def test_a_client_made_inline_runs_dispatch_sync_at_once(dsn: str) -> None:
    RAN.clear()
    q = Client(settings=settings_for(dsn), inline=True)
    with psycopg.connect(dsn) as conn:
        Receipt(order_id=9).dispatch_sync(conn, using=q)
        conn.rollback()  # the job ran anyway: the inline mode does not wait for the transaction
    assert RAN == [("receipt", 9, 1)] and job_rows(dsn) == []


# -------------------------------------------- the deprecated driver = "sync"


class OnSync(Job):
    name = "tests.kit:on_sync"
    connection = "sync"

    async def handle(self, context: JobContext) -> None:
        RAN.append(("on-sync", context.connection))


async def test_the_sync_driver_still_runs_inline_and_warns_naming_the_replacement(client: Client) -> None:
    RAN.clear()
    with pytest.warns(DeprecationWarning, match=r"connection 'sync': driver = \"sync\".*deprecated.*"
                                                r"pgqueue\.testing\.inline\(client\)") as caught:
        await OnSync().dispatch(using=client)
    assert RAN == [("on-sync", "sync")]
    assert caught[0].filename == __file__  # points at the dispatching line, not at pgqueue
    with pytest.warns(DeprecationWarning, match="connection 'sync'") as caught:
        await client.dispatch(OnSync())
    assert caught[0].filename == __file__
    with pytest.warns(DeprecationWarning), pytest.raises(QueueDispatchError, match="unique keys need a database"):
        await client.dispatch_unique(OnSync(), "k")


def test_a_configured_driver_sync_warns_when_read(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text('[tool.pgqueue.connections.inline]\ndriver = "sync"\n')
    with pytest.warns(DeprecationWarning, match=r"\[tool.pgqueue.connections.inline\]: driver = \"sync\".*"
                                                r"pgqueue\.testing\.inline") as caught:
        settings = load_settings(path, environ={})
    assert settings.connection("inline").driver == "sync"
    with pytest.warns(DeprecationWarning, match="connections.inline") as caught:
        Client(pyproject=path)
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_settings(NO_PYPROJECT, environ={})  # the built-in sync connection alone does not warn


# --------------------------------------------------------------------- drain


async def test_drain_runs_what_was_dispatched_with_a_real_worker(client: Client, dsn: str) -> None:
    RAN.clear()
    CLIENTS[:] = [client]
    first = await client.dispatch(Receipt(order_id=1))
    boom = await client.dispatch(Receipt(order_id=2, note="explode"))
    once = await client.dispatch(Once())
    chain = await client.dispatch(Chain(order_id=10))
    ran = await drain(client)
    by_id = {r.id: r for r in ran}
    assert by_id[first] == Ran(first, "tests.kit:receipt", "default", 1, Outcome.ACKED)
    assert by_id[boom].outcome == "released" and by_id[boom].attempt == 1
    assert by_id[once] == Ran(once, "tests.kit:once", "other", 1, Outcome.FAILED, "exception")
    assert by_id[chain].outcome == "acked"
    [child] = [r for r in ran if r.id not in (first, boom, once, chain)]
    assert (child.name, child.outcome) == ("tests.kit:receipt", "acked")
    assert ("receipt", 11, 1) in RAN
    # What is left is what the database says is left: the retried job, waiting for its backoff.
    assert [(r["id"], r["attempts"]) for r in job_rows(dsn)] == [(boom, 1)]
    assert [f["job_id"] for f in failed_rows(dsn)] == [once]
    assert await drain(client) == []  # the retry is not due yet


async def test_drain_of_an_empty_database_and_max_jobs(client: Client) -> None:
    assert await drain(client) == []
    await client.dispatch_many([Receipt(order_id=n) for n in range(3)])
    assert len(await drain(client, max_jobs=2)) == 2
    assert [r.outcome for r in await drain(client, queues=["default"])] == ["acked"]


# --------------------------------------------------- dispatched / assert_dispatched


async def test_dispatched_reads_committed_jobs_by_type_and_args(client: Client, dsn: str) -> None:
    await Receipt(order_id=1).dispatch(using=client)
    await Receipt(order_id=2, note="gift").dispatch(using=client, delay=60)
    await client.dispatch(Once())
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await Receipt(order_id=3).dispatch(conn, using=client)  # not committed yet: not dispatched
        assert dispatched(Receipt, using=client, order_id=3) == []
        await conn.rollback()
    assert [j.args["order_id"] for j in dispatched(Receipt, using=client)] == [1, 2]
    [gift] = assert_dispatched(Receipt, using=client, note="gift")
    assert (gift.state, gift.queue, gift.attempts, gift.connection) == ("delayed", "default", 0, "database")
    assert [j.name for j in dispatched(using=client)] == ["tests.kit:receipt", "tests.kit:receipt", "tests.kit:once"]
    assert len(assert_dispatched("tests.kit:once", using=client)) == 1


async def test_assert_dispatched_says_what_is_stored_instead(client: Client) -> None:
    with pytest.raises(AssertionError, match=r"no job tests.kit:receipt\(order_id=5\) was dispatched; "
                                             r"pgqueue.jobs holds no job"):
        assert_dispatched(Receipt, using=client, order_id=5)
    await Receipt(order_id=4).dispatch(using=client)
    with pytest.raises(AssertionError, match=r"holds 1 job\(s\):\n  tests.kit:receipt \{'note': '', 'order_id': 4\} "
                                             r"on queue 'default' \(ready\)"):
        assert_dispatched(Receipt, using=client, order_id=5)
    with pytest.raises(TypeError, match="job_type must be a Job class or a job name, got int 3"):
        dispatched(3, using=client)  # type: ignore[arg-type]
