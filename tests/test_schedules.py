"""Periodic jobs (issue 13): ticks by the database clock, exactly once across workers, DST, catch-up."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
import pytest

import pgqueue.client_operations
from pgqueue import Client, Job, JobContext, QueueConfigurationError, Schedule, job, schedule_of
from pgqueue.store import Store
from pgqueue.worker.scheduler import Scheduler, declared_schedules
from tests.worker_support import Spawned, client, rows, scalar, settings_for, spawn, wait_until

__all__ = ["client", "spawn"]

BERLIN = ZoneInfo("Europe/Berlin")


class EverySecond(Job, register=False):
    """Not registered: no other test's worker ticks it."""

    name = "tests.schedules.every_second"
    queue = "ticks"
    schedule = timedelta(seconds=1)

    async def handle(self, context: JobContext) -> None:
        return None


class EverySecondCatchUp(EverySecond, register=False):
    name = "tests.schedules.every_second_catch_up"
    schedule_catch_up = 100


class Nightly(Job, register=False):
    name = "tests.schedules.nightly"
    queue = "ticks"
    schedule = "30 2 * * *"
    schedule_timezone = "Europe/Berlin"
    schedule_args = {"region": "eu"}

    region: str

    async def handle(self, context: JobContext) -> None:
        return None


def local(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=BERLIN)  # type: ignore[arg-type,misc]


@pytest.mark.parametrize("day", [(2026, 3, 29), (2026, 10, 25)], ids=["spring-forward", "fall-back"])
def test_a_0230_daily_job_runs_once_on_dst_days(day: tuple[int, int, int]) -> None:
    schedule = Schedule(job_name="n", every="30 2 * * *", timezone="Europe/Berlin", catch_up=100)
    ticks = schedule.due_ticks(local(*day) - timedelta(days=1), local(*day) + timedelta(days=1, hours=12))
    on_the_day = [t for t in ticks if t.astimezone(BERLIN).date() == datetime(*day).date()]
    assert len(on_the_day) == 1
    if day[1] == 3:  # 02:30 does not exist: it runs at 03:00 CEST, the first valid time after it
        assert on_the_day[0] == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    else:  # 02:30 happens twice: it runs at the first, 02:30 CEST
        assert on_the_day[0] == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    # The days around it each have their one tick too, at 02:30 local time.
    assert [t.astimezone(BERLIN).strftime("%d %H:%M") for t in ticks] == [
        f"{day[2] - 1:02d} 02:30", f"{day[2]:02d} {'03:00' if day[1] == 3 else '02:30'}", f"{day[2] + 1:02d} 02:30"]


def test_next_tick_and_catch_up_bound() -> None:
    schedule = Schedule(job_name="n", every="30 2 * * *", timezone="Europe/Berlin")
    assert schedule.next_tick(local(2026, 3, 28, 12, 0)) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    # After ten missed days only the latest tick is due by default.
    assert schedule.due_ticks(local(2026, 1, 1), local(2026, 1, 11, 12, 0)) == [
        local(2026, 1, 11, 2, 30).astimezone(UTC)]
    every = Schedule(job_name="e", every=timedelta(seconds=5), catch_up=3)
    now = datetime(2026, 1, 1, 0, 1, 2, tzinfo=UTC)
    assert every.due_ticks(now - timedelta(minutes=1), now) == [
        datetime(2026, 1, 1, 0, 0, 50, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 55, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 1, 0, tzinfo=UTC)]


def test_bad_schedules_fail_at_declaration() -> None:
    with pytest.raises(QueueConfigurationError, match="is not a 5-field cron expression"):
        @job(schedule="61 * * * *")
        async def bad_minute() -> None: ...
    with pytest.raises(QueueConfigurationError, match="unknown timezone 'Mars/Olympus'"):
        @job(schedule="0 3 * * *", schedule_timezone="Mars/Olympus")
        async def bad_zone() -> None: ...
    with pytest.raises(QueueConfigurationError, match="whole number of seconds"):
        Schedule(job_name="x", every=timedelta(milliseconds=500))

    @job(schedule="0 3 * * *", schedule_timezone="Europe/Paris", schedule_args={"n": 1})
    async def nightly(n: int) -> None: ...

    found = schedule_of(nightly)  # type: ignore[arg-type]
    assert found is not None and (found.expression, found.timezone, dict(found.args)) == (
        "0 3 * * *", "Europe/Paris", {"n": 1})
    from pgqueue.jobs import _REGISTRY  # keep other tests' workers from ticking it

    _REGISTRY.pop(nightly.name)


def test_the_issues_endless_interval_and_other_bad_intervals_are_refused_at_declaration() -> None:
    # Issue 24 item 7: accepted at import, it then stopped every schedule of the worker.
    with pytest.raises(QueueConfigurationError, match=r"schedule datetime.timedelta\(days=999999999\) must be a "
                                                      r"whole number of seconds from 1 to 31536000 \(365 days\)"):
        @job(schedule=timedelta(days=999_999_999))
        async def forever() -> None: ...
    for bad in (timedelta(days=365, seconds=1), timedelta(0), timedelta(seconds=-5), timedelta(seconds=1.5)):
        with pytest.raises(QueueConfigurationError, match="whole number of seconds from 1 to 31536000"):
            Schedule(job_name="x", every=bad)
    longest = Schedule(job_name="x", every=timedelta(days=365))
    assert longest.expression == "every 31536000s"
    assert longest.next_tick(datetime(2026, 1, 1, tzinfo=UTC)).timestamp() % (365 * 86400) == 0


@pytest.mark.parametrize(("every", "words"), [
    ("* * * * * *", "it has 6 fields, not minute hour day-of-month month day-of-week (a seconds field is not "
                    "supported: for a schedule of less than a minute use a datetime.timedelta)"),
    ("0 3 * *", "it has 4 fields"),
    ("@daily", "it has 1 fields"),
    ("", "it has 0 fields"),
    ("0 0 30 2 *", "Bad day-of-month"),  # 30 February: never
])
def test_a_cron_expression_of_other_than_5_valid_fields_is_refused(every: str, words: str) -> None:
    # A 6-field expression used to tick every second, while the README promised 5 fields.
    with pytest.raises(QueueConfigurationError, match="is not a 5-field cron expression") as caught:
        Schedule(job_name="x", every=every)
    assert words in str(caught.value)


def test_schedule_args_that_name_no_field_or_lack_one_are_refused_at_declaration() -> None:
    with pytest.raises(QueueConfigurationError, match=r"job 'tests.schedules.typo': schedule_args has an unknown "
                                                      r"field 'regoin'; the job's fields are region"):
        class Typo(Job, register=False):
            name = "tests.schedules.typo"
            schedule = "0 3 * * *"
            schedule_args = {"regoin": "eu"}
            region: str
    with pytest.raises(QueueConfigurationError, match="schedule_args lacks the required field 'region'"):
        @job(name="tests.schedules.lacking", schedule="0 3 * * *")
        async def lacking(region: str) -> None: ...
    with pytest.raises(QueueConfigurationError, match="cannot define retry_until"):
        class Deadline(EverySecond, register=False):
            name = "tests.schedules.deadline"

            def retry_until(self) -> float | None:
                return 0.0

    @job(name="tests.schedules.defaulted", schedule="0 3 * * *")
    async def defaulted(region: str = "eu") -> None: ...

    found = schedule_of(defaulted)  # type: ignore[arg-type]
    assert found is not None and dict(found.args) == {}
    from pgqueue.jobs import _REGISTRY

    _REGISTRY.pop(defaulted.name)


async def _scheduler(dsn: str, *job_types: type[Job], schedules: Sequence[tuple[type[Job], Schedule]] = ()
                     ) -> tuple[Scheduler, psycopg.AsyncConnection[tuple[object, ...]]]:
    from psycopg_pool import AsyncConnectionPool

    settings = settings_for(dsn)
    pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[object, ...]]] = AsyncConnectionPool(
        dsn, min_size=1, max_size=2, open=False, kwargs={"autocommit": True})
    await pool.open()
    config = settings.connection(None)
    scheduler = Scheduler(Store(pool), config, [*declared_schedules(list(job_types), config.name), *schedules])
    return scheduler, await psycopg.AsyncConnection.connect(dsn, autocommit=True)


class BadRegion(Nightly, register=False):
    """Args that name the job's field but do not fit its type: refused when the schedule registers."""

    name = "tests.schedules.bad_region"
    schedule_args = {"region": 7}


class Unforeseen(Schedule):
    """A schedule that passed every check and still fails when its ticks are computed."""

    def due_ticks(self, after: datetime, now: datetime) -> list[datetime]:
        raise ValueError("year 2739765 is out of range")


class UnforeseenJob(EverySecond, register=False):
    name = "tests.schedules.unforeseen"


async def test_one_schedule_that_fails_alone_does_not_stop_the_others(dsn: str,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    unforeseen = Unforeseen(job_name="tests.schedules.unforeseen", every=timedelta(seconds=1))
    # A schedule whose job template the database refuses (its job's name is not the schedule's).
    misnamed = Schedule(job_name="tests.schedules.misnamed", every=timedelta(seconds=1))
    scheduler, conn = await _scheduler(dsn, EverySecondCatchUp, BadRegion,
                                       schedules=[(UnforeseenJob, unforeseen), (EverySecond, misnamed)])
    try:
        with caplog.at_level(logging.ERROR, logger="pgqueue.scheduler"):
            await scheduler.tick()  # first sight: recorded, nothing due yet
            await conn.execute("update pgqueue.schedules set changed_at = now() - interval '1 hour'")
            await scheduler.tick()
            await conn.execute("update pgqueue.schedules set changed_at = now() - interval '2 hours'")
            await scheduler.tick()
    finally:
        await conn.close()
        await scheduler._store.pool.close()
    ticked = await rows(dsn, "select distinct schedule from pgqueue.schedule_ticks")
    assert [r["schedule"] for r in ticked] == ["tests.schedules.every_second_catch_up"]
    messages = [r.getMessage() for r in caplog.records]
    # The one that fails at run time is named each time it fails; the others go on.
    assert sum("'tests.schedules.unforeseen'" in m and "year 2739765 is out of range" in m
               and "the other schedules go on" in m for m in messages) >= 2
    # Args that do not fit are found once, when the schedule registers, not at each tick.
    [bad] = [m for m in messages if "tests.schedules.bad_region" in m]
    assert "schedule_args cannot be dispatched" in bad and "must be str, given int 7" in bad
    [refused] = [m for m in messages if "tests.schedules.misnamed" in m]
    assert "the database refuses to register its schedule" in refused and "the other schedules go on" in refused
    assert 'its "name" must be the schedule\'s, got "tests.schedules.every_second"' in refused


class NoNextTick(Schedule):
    """A schedule that passed every check and whose next tick still cannot be computed."""

    def next_tick(self, now: datetime) -> datetime:
        raise OverflowError("date value out of range")


async def test_schedule_list_shows_a_schedule_that_cannot_be_computed_beside_the_others(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: one such schedule made Client.schedules() raise, and `schedule:list` exit 1.
    @job(name="tests.schedules.listed_nightly", schedule="0 3 * * *")
    async def listed_nightly() -> None: ...

    def declared(job_types: Sequence[type[Job]], connection: str) -> list[tuple[type[Job], Schedule]]:
        return [(listed_nightly, schedule_of(listed_nightly)),  # type: ignore[list-item,arg-type]
                (EverySecond, NoNextTick(job_name="tests.schedules.listed_broken", every=timedelta(seconds=5)))]

    monkeypatch.setattr(pgqueue.client_operations, "declared_schedules", declared)
    from pgqueue.jobs import _REGISTRY

    try:
        listed = {s.name: s for s in await client.schedules()}
    finally:
        _REGISTRY.pop(listed_nightly.name)
    assert listed["tests.schedules.listed_nightly"].next_tick is not None
    broken = listed["tests.schedules.listed_broken"]
    assert broken.next_tick is None
    assert broken.problem == "its next tick cannot be computed (OverflowError: date value out of range)"
    assert broken.to_data()["problem"] == broken.problem


@pytest.mark.parametrize("job_type", [EverySecond, EverySecondCatchUp], ids=["default", "catch_up=100"])
async def test_catch_up_after_a_ten_tick_outage(dsn: str, job_type: type[Job]) -> None:
    scheduler, conn = await _scheduler(dsn, job_type)
    try:
        await scheduler.tick()  # first sight: the schedule is recorded, nothing is due yet
        # An outage: the last tick was ten seconds ago (by the database clock) and nobody ran since.
        await conn.execute("update pgqueue.schedules set changed_at = now() - interval '1 hour'")
        await conn.execute("delete from pgqueue.schedule_ticks")
        await conn.execute("delete from pgqueue.jobs")
        last = await (await conn.execute(
            "insert into pgqueue.schedule_ticks (schedule, tick, job_id)"
            " values (%s, date_trunc('second', clock_timestamp()) - interval '10 seconds', gen_random_uuid())"
            " returning tick", (job_type.name,))).fetchone()
        assert last is not None
        last_tick = last[0]
        assert isinstance(last_tick, datetime)
        await scheduler.tick()
        ticks = [r["tick"] for r in await rows(
            dsn, "select tick from pgqueue.schedule_ticks where tick > %s order by tick", (last_tick,))]
        now = await scalar(dsn, "select clock_timestamp()")
        jobs = await rows(dsn, "select envelope->>'tick' as tick, envelope->'args' as args from pgqueue.jobs")
    finally:
        await conn.close()
        await scheduler._store.pool.close()
    assert len(jobs) == len(ticks)
    assert ticks[-1] <= now
    if job_type is EverySecond:
        assert len(ticks) == 1 and ticks[0] >= last_tick + timedelta(seconds=10)  # only the most recent
    else:
        assert 10 <= len(ticks) <= 12  # every missed second (one or two more if the clock moved on)
        assert ticks == [last_tick + timedelta(seconds=n) for n in range(1, len(ticks) + 1)]


async def test_a_tick_dated_2099_does_not_stop_an_every_second_schedule(dsn: str) -> None:
    # Issue 24 item 9: revision 0003's enqueue_tick took any tick, and the scheduler counted on from
    # the latest one, so a tick dated 2099 stopped the schedule until 2099.
    scheduler, conn = await _scheduler(dsn, EverySecondCatchUp)
    try:
        await scheduler.tick()
        await conn.execute("update pgqueue.schedules set changed_at = now() - interval '1 hour'")
        await conn.execute("insert into pgqueue.schedule_ticks (schedule, tick, job_id)"
                           " values (%s, '2099-01-01 00:00+00', gen_random_uuid())", (EverySecondCatchUp.name,))
        await scheduler.tick()
    finally:
        await conn.close()
        await scheduler._store.pool.close()
    assert scheduler.enqueued == EverySecondCatchUp.schedule_catch_up
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == EverySecondCatchUp.schedule_catch_up


async def test_many_schedulers_racing_enqueue_each_tick_once(dsn: str) -> None:
    pairs = [await _scheduler(dsn, Nightly) for _ in range(5)]
    try:
        await pairs[0][0].tick()
        await pairs[0][1].execute("update pgqueue.schedules set changed_at = now() - interval '3 days'")
        await asyncio.gather(*(scheduler.tick() for scheduler, _ in pairs))
    finally:
        for scheduler, conn in pairs:
            await conn.close()
            await scheduler._store.pool.close()
    # Three days missed, catch_up 1: one tick, enqueued by exactly one of the five.
    assert sum(scheduler.enqueued for scheduler, _ in pairs) == 1
    [job_row] = await rows(dsn, "select envelope from pgqueue.jobs")
    assert job_row["envelope"]["args"] == {"region": "eu"}
    assert job_row["envelope"]["name"] == "tests.schedules.nightly"


async def test_a_changed_schedule_starts_afresh_without_manual_sql(dsn: str) -> None:
    scheduler, conn = await _scheduler(dsn, Nightly)
    try:
        await scheduler.tick()
        first = await scalar(dsn, "select changed_at from pgqueue.schedules")
        await scheduler.tick()
        assert await scalar(dsn, "select changed_at from pgqueue.schedules") == first  # unchanged: kept

        class NightlyAt4(Nightly, register=False):
            name = "tests.schedules.nightly"
            schedule = "0 4 * * *"

        changed, _ = await _scheduler(dsn, NightlyAt4)
        await changed.tick()
        assert await scalar(dsn, "select expression from pgqueue.schedules") == "0 4 * * *"
        assert await scalar(dsn, "select changed_at from pgqueue.schedules") > first
        await changed._store.pool.close()
    finally:
        await conn.close()
        await scheduler._store.pool.close()


async def test_three_workers_one_killed_and_restarted_twice_enqueue_every_tick_once(
        dsn: str, spawn: Callable[..., Awaitable[Spawned]]) -> None:
    async def worker() -> Spawned:
        process = await spawn(sys.executable, "-m", "tests.schedule_process", "--dsn", dsn)
        await process.wait_for_line("scheduler running", "a scheduling worker to start")
        return process

    name = "tests.schedule.every_second"
    workers = [await worker() for _ in range(3)]
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def ticks() -> int:
        return int(await scalar(dsn, "select count(*) from pgqueue.schedule_ticks where schedule = %s", (name,)))

    for _ in range(2):
        # Let a few ticks pass, then kill -9 one worker (mid-loop, maybe mid-transaction) and restart it.
        await wait_until(_more(dsn, name, await ticks() + 8), "eight more ticks")
        workers[0].proc.kill()
        await workers[0].proc.wait()
        await wait_until(_more(dsn, name, await ticks() + 3), "ticks while one worker is dead")
        workers[0] = await worker()
    while loop.time() - began < 30:
        await wait_until(_more(dsn, name, await ticks() + 1), "the next tick")
    for process in workers:
        process.proc.terminate()
    for process in workers:
        await process.exit_code("a worker to stop")

    recorded = [r["tick"] for r in await rows(
        dsn, "select tick from pgqueue.schedule_ticks where schedule = %s order by tick", (name,))]
    enqueued = [r["tick"] for r in await rows(
        dsn, "select (envelope->>'tick')::timestamptz as tick from pgqueue.jobs"
             " where envelope->>'name' = %s order by 1", (name,))]
    assert len(recorded) >= 28
    # Every second from the first tick to the last: none missed, none twice, one job each.
    assert recorded == [recorded[0] + timedelta(seconds=n) for n in range(len(recorded))]
    assert enqueued == recorded


def _more(dsn: str, name: str, at_least: int) -> Callable[[], Awaitable[bool]]:
    """A check for wait_until: at least ``at_least`` ticks of ``name`` are recorded."""
    async def check() -> bool:
        count = await scalar(dsn, "select count(*) from pgqueue.schedule_ticks where schedule = %s", (name,))
        return int(count) >= at_least
    return check
