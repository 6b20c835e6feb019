"""Debounce (issue 28): dispatches of one key coalesce into one job, decided by PostgreSQL.

No test waits for a window to pass on the clock: a window is "closed" by moving the job's due time
into the past in SQL, which is what the clock would do, so the tests run at once and never race it.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import Client, DebouncedDispatch, Job, JobContext, QueueConfigurationError
from pgqueue.resources import sql_dir
from tests.api_support import client, run_worker
from tests.cli_support import pgqueue_all
from tests.helpers import envelope
from tests.worker_support import finish, rows, scalar, settings_for, wait_until

__all__ = ["client"]

RAN: list[tuple[int, int]] = []
HELD: dict[str, asyncio.Event] = {}


class Reindex(Job):
    """Reindexes one document; records the version it ran with."""

    name = "tests.debounce.reindex"

    doc_id: int
    version: int

    async def handle(self, context: JobContext) -> None:
        RAN.append((self.doc_id, self.version))


class HoldUntilSet(Job):
    """Runs until the test sets the event named ``hold``."""

    name = "tests.debounce.hold"

    hold: str
    version: int

    async def handle(self, context: JobContext) -> None:
        HELD[self.hold + ":started"].set()
        await HELD[self.hold].wait()


async def close_window(dsn: str, key: str) -> None:
    """What the clock does at the end of a window: the key's job becomes due now."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("update pgqueue.jobs set available_at = now() - interval '1 second'"
                           " where debounce_key = %s", (key,))


async def test_dispatches_of_one_key_coalesce_into_one_job_with_the_latest_args(client: Client, dsn: str) -> None:
    RAN.clear()
    results = [await client.dispatch_debounced(Reindex(doc_id=1, version=v), "doc:1", 3600) for v in (1, 2, 3)]
    assert all(isinstance(r, DebouncedDispatch) for r in results)
    assert [r.coalesced for r in results] == [False, True, True]
    assert len({r.id for r in results}) == 1
    assert results[0].available_at <= results[1].available_at <= results[2].available_at  # trailing: pushed later
    stored = await rows(dsn, "select id, debounce_key, envelope from pgqueue.jobs")
    assert len(stored) == 1
    assert stored[0]["id"] == results[0].id and stored[0]["debounce_key"] == "doc:1"
    assert stored[0]["envelope"]["args"] == {"doc_id": 1, "version": 3}  # the latest args win
    assert stored[0]["envelope"]["id"] == str(results[0].id)  # the first dispatch's id is kept
    assert (stored[0]["envelope"]["debounce_key"], stored[0]["envelope"]["debounce_window"]) == ("doc:1", 3600)
    # client.dispatch and Job.dispatch are the same door.
    assert await client.dispatch(Reindex(doc_id=1, version=4), debounce=3600, key="doc:1") == results[0].id
    assert await Reindex(doc_id=1, version=5).dispatch(using=client, debounce=3600, key="doc:1") == results[0].id
    other = await client.dispatch_debounced(Reindex(doc_id=2, version=1), "doc:2", 3600)
    assert not other.coalesced and other.id != results[0].id
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 2
    await close_window(dsn, "doc:1")
    await close_window(dsn, "doc:2")
    await run_worker(client)
    assert sorted(RAN) == [(1, 5), (2, 1)]  # one run per key, with its latest args


async def test_a_dispatch_after_the_window_closed_makes_a_new_job(client: Client, dsn: str) -> None:
    first = await client.dispatch_debounced(Reindex(doc_id=3, version=1), "doc:3", 60)
    await close_window(dsn, "doc:3")  # due, not reserved yet: its window is over
    second = await client.dispatch_debounced(Reindex(doc_id=3, version=2), "doc:3", 60)
    assert not second.coalesced and second.id != first.id
    stored = {r["id"]: r for r in await rows(
        dsn, "select id, debounce_key, envelope->'args' as args from pgqueue.jobs")}
    assert stored[first.id]["args"] == {"doc_id": 3, "version": 1}  # the closed window kept its args
    assert stored[first.id]["debounce_key"] is None
    assert stored[second.id]["args"] == {"doc_id": 3, "version": 2}
    assert stored[second.id]["debounce_key"] == "doc:3"
    RAN.clear()
    await run_worker(client)  # the first is due; the second waits for its own window
    assert RAN == [(3, 1)]
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 1


async def test_max_wait_bounds_how_far_dispatches_push_the_job(client: Client, dsn: str) -> None:
    first = await client.dispatch_debounced(Reindex(doc_id=4, version=1), "doc:4", 100, max_wait=100)
    second = await client.dispatch_debounced(Reindex(doc_id=4, version=2), "doc:4", 100)  # no bound of its own
    assert second.coalesced
    # The window would end 100 s after the second dispatch, but the first's bound holds.
    assert second.available_at == first.available_at
    assert await scalar(dsn, "select debounce_until = available_at from pgqueue.jobs") is True
    # Once the bound is reached the window is closed: the next dispatch starts a new one.
    await close_window(dsn, "doc:4")
    third = await client.dispatch_debounced(Reindex(doc_id=4, version=3), "doc:4", 100)
    assert not third.coalesced and third.id != first.id


async def test_a_running_job_is_not_modified_and_a_dispatch_starts_a_new_window(client: Client, dsn: str) -> None:
    hold = "running"
    HELD[hold], HELD[hold + ":started"] = asyncio.Event(), asyncio.Event()
    running = await client.dispatch_debounced(HoldUntilSet(hold=hold, version=1), "hold:1", 60)
    await close_window(dsn, "hold:1")
    worker = await client.worker(queues=("default",), concurrency=1, listen=False, schedules=False)
    task = asyncio.create_task(worker.run(max_jobs=1))
    try:
        await finish(HELD[hold + ":started"].wait(), "the debounced job to start")
        again = await client.dispatch_debounced(HoldUntilSet(hold=hold, version=2), "hold:1", 60)
        assert not again.coalesced and again.id != running.id
        stored = {r["id"]: r for r in await rows(
            dsn, "select id, token, debounce_key, envelope->'args' as args from pgqueue.jobs")}
        assert stored[running.id]["token"] is not None  # still running, unchanged
        assert stored[running.id]["args"] == {"hold": hold, "version": 1}
        assert stored[running.id]["debounce_key"] is None  # it left its window when it was reserved
        assert stored[again.id]["args"] == {"hold": hold, "version": 2}
    finally:
        HELD[hold].set()
        await finish(task, "the worker to finish its one job")
    # A job that ran and goes back to waiting is not debounced again: the reservation dropped its key.
    assert await scalar(dsn, "select count(*) from pgqueue.jobs where debounce_key = 'hold:1'") == 1


async def _produce_together(dsn: str, key: str, version: int, *, transactions: bool) -> list[DebouncedDispatch]:
    """50 producers on 50 connections dispatching ``key`` at once; their results."""
    q = Client(settings=settings_for(dsn), pool_size=2)
    connections = [await psycopg.AsyncConnection.connect(dsn, autocommit=not transactions) for _ in range(50)]
    try:
        start = asyncio.Event()

        async def produce(n: int, conn: psycopg.AsyncConnection[Any]) -> DebouncedDispatch:
            await start.wait()
            job = Reindex(doc_id=9, version=version * 100 + n)
            if not transactions:
                return await q.dispatch_debounced(job, key, 3600, conn=conn)
            async with conn.transaction():
                return await q.dispatch_debounced(job, key, 3600, conn=conn)

        tasks = [asyncio.create_task(produce(n, c)) for n, c in enumerate(connections)]
        start.set()
        return list(await finish(asyncio.gather(*tasks), "50 producers"))
    finally:
        for c in connections:
            await c.close()
        await q.close()


@pytest.mark.parametrize("transactions", [False, True], ids=["autocommit", "transactions"])
async def test_fifty_concurrent_producers_make_one_job_per_window(dsn: str, transactions: bool) -> None:
    windows = []
    for window in (1, 2):
        results = await _produce_together(dsn, "doc:9", window, transactions=transactions)
        assert len({r.id for r in results}) == 1, "one job per window"
        assert sorted(r.coalesced for r in results) == [False] + [True] * 49
        windows.append(results[0].id)
        stored = await rows(dsn, "select envelope->'args'->>'version' as v from pgqueue.jobs where id = %s",
                            (results[0].id,))
        assert int(stored[0]["v"]) // 100 == window  # one of this window's dispatches, the last to commit
        await close_window(dsn, "doc:9")
    assert windows[0] != windows[1]
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 2


def test_the_sync_client_debounces_in_the_callers_transaction(dsn: str) -> None:
    q = Client(settings=settings_for(dsn))
    with psycopg.connect(dsn) as conn:
        first = q.dispatch_debounced_sync(Reindex(doc_id=5, version=1), "doc:5", 60, conn=conn)
        second = q.dispatch_sync(Reindex(doc_id=5, version=2), conn=conn, debounce=60, key="doc:5")
        assert Reindex(doc_id=5, version=3).dispatch_sync(conn, using=q, debounce=60, key="doc:5") == first.id
        conn.rollback()  # inside the caller's transaction: nothing was stored
        q.dispatch_sync(Reindex(doc_id=5, version=4), conn=conn, debounce=60, key="doc:5")
        conn.commit()
        stored = conn.execute("select envelope->'args'->>'version', debounce_key from pgqueue.jobs").fetchall()
    assert not first.coalesced and second == first.id
    assert stored == [("4", "doc:5")]


BAD: list[tuple[dict[str, Any], str]] = [
    ({"debounce": 0, "key": "k"}, "window must be a finite number of seconds above 0"),
    ({"debounce": -1, "key": "k"}, "window must be a finite number of seconds above 0"),
    ({"debounce": math.nan, "key": "k"}, "got float nan"),
    ({"debounce": math.inf, "key": "k"}, "got float inf"),
    ({"debounce": True, "key": "k"}, "got bool True"),
    ({"debounce": "5", "key": "k"}, "got str '5'"),
    ({"debounce": 4e8, "key": "k"}, "at most 315360000"),
    ({"debounce": 5, "key": ""}, "a debounce key must be 1 to 1000 bytes of UTF-8, got 0"),
    ({"debounce": 5, "key": "k" * 1001}, "1 to 1000 bytes of UTF-8, got 1001"),
    ({"debounce": 5, "key": "\u4e00" * 334}, "got 1002"),
    ({"debounce": 5, "key": "a\x00b"}, "contains U\\+0000"),
    ({"debounce": 5, "key": 7}, "a debounce key must be a string, got int 7"),
    ({"debounce": 5, "key": "k", "max_wait": 2}, "max wait must be a finite number of seconds from the window"),
    ({"debounce": 5, "key": "k", "max_wait": math.nan}, "max wait"),
    ({"key": "k"}, "give debounce=<seconds> and key="),
    ({"max_wait": 5}, "give debounce=<seconds> and key="),
    ({"debounce": 5}, "needs key=<debounce key>"),
    ({"debounce": 5, "key": "k", "delay": 3}, "takes no delay"),
    ({"debounce": 5, "key": "k", "unique_key": "u"}, "either debounced or unique"),
]


@pytest.mark.parametrize(("keywords", "message"), BAD, ids=[m[:40] for _, m in BAD])
async def test_bad_debounce_arguments_store_nothing(client: Client, dsn: str, keywords: dict[str, Any],
                                                   message: str) -> None:
    with pytest.raises(QueueConfigurationError, match=message):
        await client.dispatch(Reindex(doc_id=1, version=1), **keywords)
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


@pytest.mark.parametrize(("key", "window", "max_wait", "message"), [
    (None, 5.0, None, "a debounce key must be a string, got null"),
    ("", 5.0, None, "1 to 1000 bytes of UTF-8, got 0"),
    ("k", 0.0, None, "window must be a finite number of seconds above 0"),
    ("k", float("nan"), None, "got NaN"),
    ("k", float("inf"), None, "got Infinity"),
    ("k", 5.0, 1.0, "max wait must be a finite number of seconds from the window"),
])
async def test_the_stored_function_refuses_what_the_client_refuses(
        dsn: str, key: str | None, window: float, max_wait: float | None, message: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            await conn.execute("select * from pgqueue.enqueue_debounced(%s::jsonb, %s, %s, %s)",
                               (psycopg.types.json.Jsonb(envelope()), key, window, max_wait))
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


async def test_the_inline_mode_refuses_a_debounced_dispatch(dsn: str) -> None:
    async with Client(settings=settings_for(dsn), inline=True) as q:
        with pytest.raises(QueueConfigurationError, match="cannot debounce"):
            await q.dispatch(Reindex(doc_id=1, version=1), debounce=5, key="doc:1")



def test_a_least_privilege_producer_debounces(dsn: str) -> None:
    # sql/roles/least_privilege.sql lets pgqueue_producer call enqueue_debounced (security definer).
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((sql_dir() / "roles" / "least_privilege.sql").read_bytes())
    q = Client(settings=settings_for(dsn))
    with psycopg.connect(dsn) as conn:
        conn.execute("set role pgqueue_producer")
        first = q.dispatch_debounced_sync(Reindex(doc_id=6, version=1), "doc:6", 60, conn=conn)
        second = q.dispatch_debounced_sync(Reindex(doc_id=6, version=2), "doc:6", 60, conn=conn)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select count(*) from pgqueue.jobs")  # a producer still reads nothing
        conn.rollback()
        conn.execute("set role pgqueue_producer")
        q.dispatch_debounced_sync(Reindex(doc_id=6, version=3), "doc:6", 60, conn=conn)
        conn.commit()
    assert second.coalesced and second.id == first.id
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select envelope->'args'->>'version' from pgqueue.jobs").fetchall() == [("3",)]


RAN_WITH: dict[str, list[int]] = {}


class Stamp(Job):
    """Records the job id it ran as and the version it ran with."""

    name = "tests.debounce.stamp"

    version: int

    async def handle(self, context: JobContext) -> None:
        RAN_WITH.setdefault(str(context.id), []).append(self.version)


async def test_producers_racing_a_worker_lose_no_dispatch_and_run_each_window_once(dsn: str) -> None:
    # 20 producers on 20 connections dispatch one key 10 times each with a 20 ms window while a
    # worker reserves: windows close and jobs are reserved in the middle of the dispatches. Every
    # dispatch lands in a job that then runs exactly once, with the args of one of its dispatches,
    # and nothing raises.
    RAN_WITH.clear()
    q = Client(settings=settings_for(dsn), pool_size=2)
    await q.open()
    connections = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(20)]
    worker = await q.worker(queues=("default",), concurrency=4, schedules=False)
    task = asyncio.create_task(worker.run())
    try:
        async def produce(n: int, conn: psycopg.AsyncConnection[Any]) -> list[tuple[uuid.UUID, int]]:
            got = []
            for i in range(10):
                version = n * 100 + i
                got.append(((await q.dispatch_debounced(Stamp(version=version), "stamp", 0.02, conn=conn)).id,
                            version))
            return got

        dispatched = [d for batch in await finish(asyncio.gather(*(produce(n, c) for n, c in enumerate(connections))),
                                                  "20 producers") for d in batch]
        await wait_until(lambda: scalar(dsn, "select count(*) = 0 from pgqueue.jobs"), "every window to run")
    finally:
        worker.stop()
        await finish(task, "the worker to stop")
        for c in connections:
            await c.close()
        await q.close()
    by_job: dict[str, set[int]] = {}
    for job_id, version in dispatched:
        by_job.setdefault(str(job_id), set()).add(version)
    assert set(RAN_WITH) == set(by_job)  # every job a dispatch named ran, and no other
    for job_id, versions in RAN_WITH.items():
        assert len(versions) == 1, f"job {job_id} ran {len(versions)} times"
        assert versions[0] in by_job[job_id]
    assert await scalar(dsn, "select count(*) from pgqueue.failed_jobs") == 0


def test_the_cli_dispatches_debounced(dsn: str, tmp_path: Path) -> None:
    app = ("--app", "tests.cli_jobs", "--dsn", dsn)
    first, again = pgqueue_all(
        ("queue:dispatch", "cli:broken", "--args", '{"reason": "x"}', "--debounce", "60", "--debounce-key", "r:7",
         *app),
        ("queue:dispatch", "cli:broken", "--args", '{"reason": "y"}', "--debounce", "60", "--debounce-key", "r:7",
         "--debounce-max-wait", "120", *app), cwd=tmp_path)
    assert first.returncode == 0 and again.returncode == 0, (first.stderr, again.stderr)
    outputs = sorted([first.stdout, again.stdout], key=lambda out: "joined" in out)
    assert "debounced by key 'r:7' (a new window)" in outputs[0]
    assert "debounced by key 'r:7' (joined an open window)" in outputs[1]
    job_id = outputs[0].split(" as job ")[1].split()[0]
    assert job_id in outputs[1]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select id::text, debounce_key from pgqueue.jobs").fetchall() == [(job_id, "r:7")]
    refused = pgqueue_all(
        ("queue:dispatch", "cli:broken", "--args", '{"reason": "z"}', "--debounce", "60", *app),
        ("queue:dispatch", "cli:broken", "--args", '{"reason": "z"}', "--debounce", "0", "--debounce-key", "k", *app),
        ("queue:dispatch", "cli:broken", "--args", '{"reason": "z"}', "--debounce", "5", "--debounce-key", "",
         *app),
        ("queue:dispatch", "cli:broken", "--args", '{"reason": "z"}', "--debounce", "5", "--debounce-key", "k",
         "--delay", "3", *app),
        ("queue:dispatch", "cli:broken", "--args", '{"reason": "z"}', "--debounce", "5", "--debounce-key", "k",
         "--debounce-max-wait", "2", *app), cwd=tmp_path)
    messages = ["go together", "Invalid value for '--debounce'", "Invalid value for '--debounce-key'",
                "takes no --delay", "--debounce-max-wait must be at least the window"]
    for done, message in zip(refused, messages, strict=True):
        assert done.returncode == 2 and message in done.stderr, (message, done.stdout, done.stderr)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (1,)
