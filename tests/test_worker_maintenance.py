"""Table maintenance: a worker vacuums pgqueue.jobs when autovacuum does not, one worker at a
time, defers to an autovacuum that keeps up, and survives a role that may not vacuum.

Each test lowers the table's vacuum threshold (a reloption) so a few hundred dead tuples are
enough, and drives ``worker.maintenance.tick()`` itself; one test goes through ``Worker.run``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqueue import Client, JobContext, QueueConfigurationError, Worker
from pgqueue.resources import sql_dir
from pgqueue.worker.maintenance import VACUUM_LOCK_KEY, Maintenance, TableHealth
from tests.worker_jobs import Probe
from tests.worker_support import Runs, client, finish, hooks, runs, scalar, settings_for, wait_until

__all__ = ["client", "hooks", "runs"]

THRESHOLD = 100


async def owner(dsn: str, statement: str, params: Any = None) -> None:
    """Run a statement as the test database's owner (autocommit)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(statement, params)


async def autovacuum_off_for_the_table(dsn: str) -> None:
    await owner(dsn, f"alter table pgqueue.jobs set (autovacuum_enabled = false,"
                     f" autovacuum_vacuum_threshold = {THRESHOLD})")


async def dead_tuples(dsn: str) -> int:
    return int(await scalar(dsn, "select n_dead_tup from pg_stat_user_tables where relid = 'pgqueue.jobs'::regclass"))


async def vacuum_count(dsn: str) -> int:
    return int(await scalar(dsn, "select vacuum_count from pg_stat_user_tables where relid = 'pgqueue.jobs'::regclass"))


async def make_dead_tuples(dsn: str, n: int) -> None:
    """Insert and delete ``n`` rows, then wait until the statistics count them as dead."""
    before = await dead_tuples(dsn)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("insert into pgqueue.jobs (id, queue, envelope, max_tries)"
                           " select gen_random_uuid(), 'bloat', '{}'::jsonb, 1 from generate_series(1, %s)", (n,))
        await conn.execute("delete from pgqueue.jobs where queue = 'bloat'")
        cur = await conn.execute("select current_setting('server_version_num')::int >= 150000")
        if (await cur.fetchone()) == (True,):
            # Statistics reach shared memory asynchronously; this flushes ours when the statement ends.
            await conn.execute("select pg_stat_force_next_flush()")
            await conn.execute("select 1")
    await wait_until(lambda: _at_least(dsn, before + n), f"{n} dead tuples in pg_stat_user_tables")


async def _at_least(dsn: str, n: int) -> bool:
    return await dead_tuples(dsn) >= n


def maintenance_of(worker: Worker) -> Maintenance:
    assert worker.maintenance is not None
    return worker.maintenance


# ------------------------------------------------------------------------ vacuuming
async def test_vacuums_a_table_autovacuum_does_not_cover(client: Client, dsn: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    await autovacuum_off_for_the_table(dsn)
    await make_dead_tuples(dsn, 3 * THRESHOLD)
    worker = await client.worker(listen=False, maintenance_interval=600)
    maintenance = maintenance_of(worker)
    health = await maintenance.check()
    assert health.dead_tuples >= 3 * THRESHOLD
    assert (health.threshold, health.autovacuum_applies, health.may_vacuum) == (THRESHOLD, False, True)
    before = await vacuum_count(dsn)

    with caplog.at_level(logging.INFO, logger="pgqueue.worker"):
        assert await maintenance.tick() is True

    assert await vacuum_count(dsn) == before + 1
    assert worker.stats.vacuums == 1
    assert "vacuumed pgqueue.jobs" in caplog.text and "dead tuples before" in caplog.text
    # The VACUUM reset the count: nothing left to do.
    assert await maintenance.tick() is False
    assert worker.stats.vacuums == 1


async def test_below_the_threshold_it_does_not_vacuum(client: Client, dsn: str) -> None:
    await autovacuum_off_for_the_table(dsn)
    await make_dead_tuples(dsn, THRESHOLD // 2)
    worker = await client.worker(listen=False, maintenance_interval=600)
    before = await vacuum_count(dsn)

    assert await maintenance_of(worker).tick() is False

    assert await vacuum_count(dsn) == before
    assert worker.stats.vacuums == 0


@pytest.mark.parametrize("interval", [None, 0])
async def test_maintenance_can_be_turned_off(client: Client, dsn: str, interval: float | None) -> None:
    await autovacuum_off_for_the_table(dsn)
    await make_dead_tuples(dsn, 3 * THRESHOLD)
    worker = await client.worker(listen=False, maintenance_interval=interval)
    before = await vacuum_count(dsn)

    assert worker.maintenance is None
    await finish(worker.run(stop_when_empty=True), "the worker to find the queue empty")

    assert await vacuum_count(dsn) == before
    assert worker.stats.vacuums == 0


async def test_only_one_session_vacuums_at_a_time(client: Client, dsn: str) -> None:
    await autovacuum_off_for_the_table(dsn)
    await make_dead_tuples(dsn, 3 * THRESHOLD)
    worker = await client.worker(listen=False, maintenance_interval=600)
    maintenance = maintenance_of(worker)
    before = await vacuum_count(dsn)

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
        await other.execute("select pg_advisory_lock(%s)", (VACUUM_LOCK_KEY,))
        assert await maintenance.tick() is False
        assert await vacuum_count(dsn) == before
        await other.execute("select pg_advisory_unlock(%s)", (VACUUM_LOCK_KEY,))

    assert await maintenance.tick() is True
    assert await vacuum_count(dsn) == before + 1
    assert worker.stats.vacuums == 1


async def test_a_vacuum_already_holding_the_table_is_not_waited_for(client: Client, dsn: str) -> None:
    await autovacuum_off_for_the_table(dsn)
    await make_dead_tuples(dsn, 3 * THRESHOLD)
    worker = await client.worker(listen=False, maintenance_interval=600)
    before = await vacuum_count(dsn)

    async with await psycopg.AsyncConnection.connect(dsn) as other:
        # The lock a running VACUUM (an autovacuum worker, an operator) holds on the table.
        await other.execute("lock table pgqueue.jobs in share update exclusive mode")
        assert await finish(maintenance_of(worker).tick(), "a tick that skips a locked table") is False
        await other.rollback()

    assert await vacuum_count(dsn) == before
    assert worker.stats.vacuums == 0


# ------------------------------------------------------------ deferring to autovacuum
def health(**changes: Any) -> TableHealth:
    base = TableHealth(dead_tuples=6000, live_tuples=10, since_vacuum=None, autovacuum_applies=False,
                       threshold=5000, may_vacuum=True, role="app")
    return replace(base, **changes)


@pytest.mark.parametrize(("changes", "due"), [
    ({"dead_tuples": 4999}, False),                                         # below the threshold
    ({}, True),                                                             # autovacuum does not apply
    ({"autovacuum_applies": True, "since_vacuum": 5.0}, False),             # it ran recently: defer
    ({"autovacuum_applies": True, "since_vacuum": 60.0}, True),             # lagging
    ({"autovacuum_applies": True, "since_vacuum": None}, True),             # never ran
    ({"autovacuum_applies": True, "since_vacuum": 5.0, "dead_tuples": 10}, False),
])
def test_when_a_vacuum_is_due(changes: dict[str, Any], due: bool) -> None:
    assert health(**changes).vacuum_due(grace=60.0) is due


async def test_defers_to_an_autovacuum_that_ran_recently(client: Client, dsn: str) -> None:
    await owner(dsn, f"alter table pgqueue.jobs set (autovacuum_vacuum_threshold = {THRESHOLD})")
    await owner(dsn, "vacuum pgqueue.jobs")
    await make_dead_tuples(dsn, 3 * THRESHOLD)
    worker = await client.worker(listen=False, maintenance_interval=600, vacuum_grace=3600)

    found = await maintenance_of(worker).check()

    # This server may run without autovacuum (the statistics say so): judge the same table
    # as if autovacuum applied. The recent VACUUM is seen, so the worker defers.
    assert found.dead_tuples >= 3 * THRESHOLD and found.since_vacuum is not None and found.since_vacuum < 3600
    with_autovacuum = replace(found, autovacuum_applies=True)
    assert with_autovacuum.vacuum_due(grace=3600) is False
    assert with_autovacuum.vacuum_due(grace=0) is True


async def test_defers_on_a_server_running_autovacuum(client: Client, dsn: str) -> None:
    if await scalar(dsn, "select current_setting('autovacuum')") != "on":
        pytest.skip("autovacuum is off on this server")
    await owner(dsn, f"alter table pgqueue.jobs set (autovacuum_vacuum_threshold = {THRESHOLD})")
    await owner(dsn, "vacuum pgqueue.jobs")
    await make_dead_tuples(dsn, 3 * THRESHOLD)
    worker = await client.worker(listen=False, maintenance_interval=600, vacuum_grace=3600)

    assert (await maintenance_of(worker).check()).autovacuum_applies is True
    assert await maintenance_of(worker).tick() is False
    assert worker.stats.vacuums == 0


# ------------------------------------------------------------------------- options
@pytest.mark.parametrize(("option", "value"), [
    ("maintenance_interval", -1), ("maintenance_interval", "10"), ("maintenance_interval", True),
    ("maintenance_interval", float("nan")), ("maintenance_interval", float("inf")),
    ("vacuum_grace", -0.5), ("vacuum_grace", None), ("vacuum_grace", "60"),
])
async def test_bad_options_are_named(client: Client, option: str, value: Any) -> None:
    with pytest.raises(QueueConfigurationError, match=option):
        await client.worker(listen=False, **{option: value})


async def test_behind_a_transaction_pooler_it_needs_a_direct_connection(dsn: str,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    async with Client(settings=settings_for(dsn, transaction_pooler=True)) as pooled:
        with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
            worker = await pooled.worker(listen=False)
        # History pruning still runs through the pool; only the VACUUM (it holds a session
        # advisory lock, which a transaction pooler does not keep) is off.
        assert worker.maintenance is not None and worker.maintenance._dsn is None
        assert "table maintenance" in caplog.text and "listen_dsn" in caplog.text
    direct = make_conninfo(dsn, application_name="direct")
    async with Client(settings=settings_for(dsn, transaction_pooler=True, listen_dsn=direct)) as pooled:
        worker = await pooled.worker(listen=False)
        assert worker.maintenance is not None
        assert worker.maintenance._dsn == direct


# ------------------------------------------------------------------- through run()
async def test_a_running_worker_vacuums_and_stops_cleanly(client: Client, dsn: str, runs: Runs) -> None:
    await autovacuum_off_for_the_table(dsn)
    await make_dead_tuples(dsn, 3 * THRESHOLD)
    before = await vacuum_count(dsn)
    worker = await client.worker(listen=False, poll_interval=0.05, maintenance_interval=0.05)
    task = runs.start(worker)

    await wait_until(lambda: worker.stats.vacuums >= 1, "the running worker to vacuum")
    assert await vacuum_count(dsn) > before

    worker.stop()
    await finish(task, "the worker to stop")
    assert not task.cancelled() and task.exception() is None


# ------------------------------------------------------------- roles that may not
@pytest.fixture
def least_privilege_worker(dsn: str) -> Iterator[str]:
    """The least-privilege script applied to the test's database; a DSN of a login role in
    pgqueue_worker (it owns nothing)."""
    login = f"pgq_maint_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((sql_dir() / "roles" / "least_privilege.sql").read_bytes())
        conn.execute(sql.SQL("create role {} login in role pgqueue_worker").format(sql.Identifier(login)))
    try:
        yield make_conninfo(dsn, user=login)
    finally:
        _drop_role(dsn, login)


@pytest.fixture
def database_owner_without_schema(dsn: str) -> Iterator[str]:
    """A DSN of a login role that owns the test's database (so PostgreSQL would let it vacuum)
    but has no USAGE on schema pgqueue: its VACUUM fails with SQLSTATE 42501."""
    login = f"pgq_dbo_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create role {} login").format(sql.Identifier(login)))
        conn.execute(sql.SQL("alter database {} owner to {}").format(
            sql.Identifier(conn.info.dbname), sql.Identifier(login)))
    try:
        yield make_conninfo(dsn, user=login)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("alter database {} owner to current_user").format(sql.Identifier(conn.info.dbname)))
        _drop_role(dsn, login)


def _drop_role(dsn: str, login: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where usename = %s", (login,))
        conn.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(login)))


@pytest.fixture
async def as_role(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    """An open Client connecting as the role of the fixture named by the test's parameter."""
    role_dsn: str = request.getfixturevalue(request.param)
    q = Client(settings=settings_for(role_dsn))
    await q.open()
    try:
        yield q
    finally:
        await q.close()


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and "may not VACUUM" in r.getMessage()]


@pytest.mark.parametrize("as_role", ["least_privilege_worker", "database_owner_without_schema"], indirect=True)
async def test_a_role_that_may_not_vacuum_is_told_once(as_role: Client, dsn: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    await autovacuum_off_for_the_table(dsn)
    await make_dead_tuples(dsn, 3 * THRESHOLD)
    worker = await as_role.worker(listen=False, maintenance_interval=600)
    maintenance = maintenance_of(worker)
    before = await vacuum_count(dsn)

    with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
        assert await maintenance.tick() is False
        assert await maintenance.tick() is False

    [warning] = refusals(caplog)
    message = warning.getMessage()
    assert "owner role" in message and "autovacuum" in message and "GRANT MAINTAIN" in message
    assert maintenance.refused
    assert await vacuum_count(dsn) == before
    assert worker.stats.vacuums == 0


async def test_a_least_privilege_worker_keeps_processing_jobs(least_privilege_worker: str, client: Client,
                                                              dsn: str, hooks: Any, runs: Runs,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    await autovacuum_off_for_the_table(dsn)
    await make_dead_tuples(dsn, 3 * THRESHOLD)
    done = asyncio.Event()

    async def finish_job(job: Probe, context: JobContext) -> None:
        done.set()

    hooks("maintenance-done", finish_job)
    async with Client(settings=settings_for(least_privilege_worker)) as as_worker:
        worker = await as_worker.worker(listen=False, poll_interval=0.05, maintenance_interval=0.05)
        with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
            task = runs.start(worker)
            await wait_until(lambda: maintenance_of(worker).refused, "the worker to give up on maintenance")
            await client.dispatch(Probe(hook="maintenance-done"))
            await finish(done.wait(), "the job to run after maintenance gave up")
            await wait_until(lambda: worker.stats.acked == 1, "the job to be counted")
            worker.stop()
            await finish(task, "the worker to stop")

    assert len(refusals(caplog)) == 1
    assert worker.stats.vacuums == 0
    assert task.exception() is None
