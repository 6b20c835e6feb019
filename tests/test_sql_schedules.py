"""Revision 0008 (issue 24, part C): a schedule is registered with its period and the template of
its jobs, and the database decides which ticks it enqueues (pgqueue.schedule_sync,
pgqueue.schedule_state, pgqueue.enqueue_tick), whoever calls them."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqueue import Client, Schedule, limits
from pgqueue.worker import maintenance
from pgqueue.worker.maintenance import Maintenance
from tests.helpers import envelope
from tests.sql_calls import Conn, rows, scalar
from tests.worker_support import client

__all__ = ["client"]

REGISTER = "select * from pgqueue.schedule_sync(%s::text[], %s::text[], %s::text[], %s::integer[], %s::bigint[], " \
           "%s::jsonb[])"
TICK = "select pgqueue.enqueue_tick(%s, %s::timestamptz)"


def template(name: str, **changes: Any) -> dict[str, Any]:
    """The template of a schedule's jobs: an envelope without its id."""
    return {**{k: v for k, v in envelope().items() if k != "id"}, "name": name, **changes}


def register(conn: Conn, name: str, expression: str = "every 5s", *, timezone: str = "UTC", catch_up: int = 3,
             period: int | None = 5, job: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Register one schedule; its state."""
    return rows(conn, REGISTER, ([name], [expression], [timezone], [catch_up], [period],
                                 [Jsonb(job if job is not None else template(name))]))


def backdate(conn: Conn, name: str) -> None:
    """As if the schedule had been registered two days ago: its recent ticks are due."""
    conn.execute(b"update pgqueue.schedules set changed_at = now() - interval '2 days' where name = %s", (name,))


def aligned(conn: Conn, step: int, back: int = 0) -> datetime:
    """The latest multiple of ``step`` seconds since the epoch, ``back`` steps ago, by the database clock."""
    found: datetime = scalar(conn, "select to_timestamp((floor(extract(epoch from clock_timestamp()) / %s) - %s) * %s)",
                             (step, back, step))
    return found


def test_a_tick_is_the_registered_template_with_a_fresh_id_once(conn: Conn) -> None:
    job = template("app:beat", args={"region": "eu"}, queue="reports", tries=5)
    [state] = register(conn, "app:beat", job={**job, "id": str(uuid.uuid4()), "tick": "forged"})
    assert (state["expression"], state["catch_up"], state["has_template"], state["last_tick"]) == (
        "every 5s", 3, True, None)
    backdate(conn, "app:beat")
    tick = aligned(conn, 5)
    job_id = scalar(conn, TICK, ("app:beat", tick))
    assert scalar(conn, TICK, ("app:beat", tick)) is None  # the second caller enqueues nothing
    [stored] = rows(conn, "select id, queue, max_tries, envelope from pgqueue.jobs")
    assert stored["id"] == job_id and job_id.version == 7 and (stored["queue"], stored["max_tries"]) == ("reports", 5)
    made = stored["envelope"]
    assert {k: v for k, v in made.items() if k not in ("id", "schedule", "tick")} == job
    assert (made["id"], made["schedule"], datetime.fromisoformat(made["tick"])) == (str(job_id), "app:beat", tick)
    assert rows(conn, "select schedule, tick, job_id from pgqueue.schedule_ticks") == [
        {"schedule": "app:beat", "tick": tick, "job_id": job_id}]
    [state] = rows(conn, "select * from pgqueue.schedule_state(array['app:beat', 'app:unknown'])")
    assert state["last_tick"] == tick and state["now"] >= tick


@pytest.mark.parametrize(("expression", "period", "step"), [("every 5s", 5, 5), ("every 3600s", 3600, 3600),
                                                            ("*/5 * * * *", 360, 60)])
def test_only_the_ticks_a_schedule_has_within_its_catch_up_window_are_taken(conn: Conn, expression: str, period: int,
                                                                           step: int) -> None:
    register(conn, "app:s", expression, catch_up=3, period=period)
    backdate(conn, "app:s")
    now = scalar(conn, "select clock_timestamp()")
    oldest = now - timedelta(seconds=3 * period + 60)
    refusals = [
        (aligned(conn, step) + timedelta(seconds=1), "has no tick at"),
        (aligned(conn, step) + timedelta(milliseconds=1), "has no tick at"),
        (aligned(conn, step, back=-(600 // step + 2)), "is in the future"),  # minutes ahead, not 5 s
        (datetime.fromisoformat("2099-01-01T00:00:00+00:00"), "is in the future"),
        (datetime.fromtimestamp((oldest.timestamp() // step - 1) * step, now.tzinfo), "older than its catch-up window"),
    ]
    for tick, words in refusals:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=re.escape(words)):
            conn.execute(TICK.encode(), ("app:s", tick))
    conn.execute(b"update pgqueue.schedules set changed_at = clock_timestamp()")  # changed since that tick
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="is not after the schedule took its current form"):
        conn.execute(TICK.encode(), ("app:s", aligned(conn, step)))
    backdate(conn, "app:s")
    assert scalar(conn, "select count(*) from pgqueue.jobs") == 0
    assert scalar(conn, "select count(*) from pgqueue.schedule_ticks") == 0
    # A tick near the old end of the window (half a minute in: the clock moves on) and the current one are taken.
    first = datetime.fromtimestamp(-(-(oldest.timestamp() + 30) // step) * step, now.tzinfo)
    assert scalar(conn, TICK, ("app:s", first)) is not None
    assert scalar(conn, TICK, ("app:s", aligned(conn, step))) is not None


def test_unknown_schedules_and_schedules_registered_before_0008_do_not_tick(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no schedule named 'app:forged' is registered"):
        conn.execute(TICK.encode(), ("app:forged", aligned(conn, 1)))
    # As revision 0003's schedule_sync left it: no period, no template.
    conn.execute(b"insert into pgqueue.schedules (name, expression, timezone, catch_up, changed_at)"
                 b" values ('app:old', 'every 1s', 'UTC', 1, now() - interval '1 hour')")
    assert [r["has_template"] for r in rows(conn, "select * from pgqueue.schedule_state(array['app:old'])")] == [False]
    with pytest.raises(psycopg.errors.InvalidParameterValue,
                       match="schedule 'app:old' was registered before revision 0008") as caught:
        conn.execute(TICK.encode(), ("app:old", aligned(conn, 1)))
    assert "pgqueue schedule:sync" in (caught.value.diag.message_hint or "")
    register(conn, "app:new")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="the tick must be a finite time, got infinity"):
        conn.execute(TICK.encode(), ("app:new", "infinity"))


def test_a_tick_dated_ahead_before_0008_does_not_hide_the_ticks_before_it(conn: Conn) -> None:
    register(conn, "app:beat")
    conn.execute(b"insert into pgqueue.schedule_ticks (schedule, tick, job_id)"
                 b" values ('app:beat', '2099-01-01 00:00+00', gen_random_uuid())")
    backdate(conn, "app:beat")
    tick = aligned(conn, 5)
    scalar(conn, TICK, ("app:beat", tick))
    [state] = rows(conn, "select * from pgqueue.schedule_state(array['app:beat'])")
    assert state["last_tick"] == tick


@pytest.mark.parametrize(("names", "expressions", "timezones", "catch_ups", "periods", "templates", "words"), [
    (["a", "a"], ["every 5s"] * 2, ["UTC"] * 2, [1, 1], [5, 5], [template("a")] * 2, "schedule 'a' is given twice"),
    (["a"], ["every 5s"], [], [1], [5], [template("a")], "got 2, 1, 2, 2, 2 for 2 names"),
    ([""], ["every 5s"], ["UTC"], [1], [5], [template("")], "name must be 1 to 1000 characters, got 0 characters"),
    (["a"], ["every 0s"], ["UTC"], [1], [0], [template("a")], "the interval of 'every 0s' must be 1 to 31536000"),
    (["a"], [f"every {limits.MAX_SCHEDULE_INTERVAL_SECONDS + 1}s"], ["UTC"], [1], [1], [template("a")],
     "must be 1 to 31536000 seconds (365 days)"),
    (["a"], ["every 5s"], ["UTC"], [1], [6], [template("a")], "the period of 'every 5s' is 5 seconds, got 6"),
    (["a"], ["* * * * * *"], ["UTC"], [1], [60], [template("a")], "is neither 'every <n>s' nor a cron expression of 5"),
    (["a"], ["every 5 s"], ["UTC"], [1], [5], [template("a")], "is neither 'every <n>s' nor a cron expression of 5"),
    (["a"], ["0 3 * * *"], ["UTC"], [1], [59], [template("a")], "must be 60 to 3155760000 seconds, got 59"),
    (["a"], ["0 3 * * *"], ["UTC"], [1], [limits.MAX_SCHEDULE_PERIOD_SECONDS + 1], [template("a")],
     "must be 60 to 3155760000 seconds"),
    (["a"], ["every 5s"], [""], [1], [5], [template("a")], "the timezone must be 1 to 200 characters"),
    (["a"], ["every 5s"], ["UTC"], [0], [5], [template("a")], "catch_up must be 1 to 1000, got 0"),
    (["a"], ["every 5s"], ["UTC"], [limits.MAX_CATCH_UP + 1], [5], [template("a")], "catch_up must be 1 to 1000"),
    (["a"], ["every 5s"], ["UTC"], [1], [5], [template("b")], "its \"name\" must be the schedule's, got \"b\""),
    (["a"], ["every 5s"], ["UTC"], [1], [5], [template("a", queue="x,y")], "queue name 'x,y' is not valid"),
    (["a"], ["every 5s"], ["UTC"], [1], [5], [template("a", tries="3")], "\"tries\" must be an integer"),
    (["a"], ["every 5s"], ["UTC"], [1], [5], [[1]], "the envelope must be a JSON object, got array"),
])
def test_a_registration_the_rules_refuse_registers_nothing(conn: Conn, names: list[str], expressions: list[str],
                                                          timezones: list[str], catch_ups: list[int],
                                                          periods: list[int], templates: list[Any], words: str) -> None:
    register(conn, "kept")
    before = rows(conn, "select * from pgqueue.schedules")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=re.escape(words)):
        conn.execute(REGISTER.encode(), (["kept", *names], ["every 10s", *expressions], ["UTC", *timezones],
                                         [2, *catch_ups], [10, *periods],
                                         [Jsonb(template("kept")), *(Jsonb(t) for t in templates)]))
    assert rows(conn, "select * from pgqueue.schedules") == before


def test_the_bounds_of_registration_are_the_python_ones(conn: Conn) -> None:
    longest = Schedule(job_name="a", every=timedelta(seconds=limits.MAX_SCHEDULE_INTERVAL_SECONDS),
                       catch_up=limits.MAX_CATCH_UP)
    [state] = register(conn, "a", longest.expression, catch_up=longest.catch_up, period=longest.period_seconds)
    assert (state["expression"], state["catch_up"]) == ("every 31536000s", 1000)
    register(conn, "b", "0 0 * 2 5#5", period=limits.MAX_SCHEDULE_PERIOD_SECONDS)
    assert scalar(conn, "select period_seconds from pgqueue.schedules where name = 'b'") == 3_155_760_000


def test_registering_again_changes_the_form_only_when_the_form_changes(conn: Conn) -> None:
    [first] = register(conn, "app:s", "every 5s", period=5, job=template("app:s", args={"n": 1}))
    [same] = register(conn, "app:s", "every 5s", period=5, job=template("app:s", args={"n": 2}))
    assert same["changed_at"] == first["changed_at"]  # a new template alone is not a new form
    assert scalar(conn, "select template->'args' from pgqueue.schedules") == {"n": 2}
    [changed] = register(conn, "app:s", "every 10s", period=10)
    assert changed["changed_at"] > first["changed_at"] and changed["expression"] == "every 10s"


async def test_maintenance_prunes_the_ticks_and_keys_no_guarantee_needs_in_batches(
        client: Client, conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before revision 0008 both tables only grew: a 1 s schedule adds 86,400 ticks a day.
    register(conn, "app:minutely", "every 60s", catch_up=2, period=60)  # window: 2 * 60 + 60 s
    register(conn, "app:stopped", "every 60s", catch_up=1, period=60)   # removed from the code long ago
    conn.execute(b"insert into pgqueue.schedules (name, expression, timezone, catch_up)"
                 b" values ('app:before_0008', 'every 60s', 'UTC', 1)")  # no period: its window is unknown
    now = aligned(conn, 60)
    ago = [now - timedelta(minutes=m) for m in (600, 500, 400, 300, 200, 100, 2, 1, 0)]
    for schedule, ticks in (("app:minutely", ago), ("app:stopped", ago[:3]), ("app:before_0008", ago[:2])):
        for tick in ticks:
            conn.execute(b"insert into pgqueue.schedule_ticks (schedule, tick, job_id)"
                         b" values (%s, %s, gen_random_uuid())", (schedule, tick))
    conn.execute(b"insert into pgqueue.schedule_ticks (schedule, tick, job_id)"  # dated ahead before 0008
                 b" values ('app:minutely', '2099-01-01 00:00+00', gen_random_uuid())")
    running = scalar(conn, "select pgqueue.enqueue(%s)", (Jsonb(envelope()),))
    conn.execute(b"insert into pgqueue.unique_keys (key, job_id, expires_at) values"
                 b" ('expired, job gone', gen_random_uuid(), now() - interval '1 hour'),"
                 b" ('expired, job gone too', gen_random_uuid(), now() - interval '1 second'),"
                 b" ('expired, job still there', %s, now() - interval '1 hour'),"
                 b" ('period not over', gen_random_uuid(), now() + interval '1 hour')", (running,))
    monkeypatch.setattr(maintenance, "PRUNE_BATCH", 2)
    store = await client._store(client.settings.connection(None))  # the worker's own door
    pruning = Maintenance(store, None, interval=1, grace=0)
    assert await pruning.prune_ticks_and_keys() == (6 + 2, 2)
    assert pruning.pruned_ticks_and_keys == (8, 2)
    left = rows(conn, "select schedule, array_agg(tick order by tick) as ticks from pgqueue.schedule_ticks"
                      " group by schedule order by schedule")
    assert [(r["schedule"], r["ticks"]) for r in left] == [
        ("app:before_0008", ago[:2]),            # kept: no period yet
        ("app:minutely", [*ago[6:], datetime.fromisoformat("2099-01-01T00:00:00+00:00")]),  # the window, and after
        ("app:stopped", ago[2:3])]               # the latest, which the scheduler counts on from
    assert [r["key"] for r in rows(conn, "select key from pgqueue.unique_keys order by key")] == [
        "expired, job still there", "period not over"]
    # What was pruned cannot come back: the database refuses those ticks.
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="older than its catch-up window"):
        conn.execute(TICK.encode(), ("app:minutely", ago[5]))
    assert await pruning.prune_ticks_and_keys() == (0, 0)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="batch must be >= 1"):
        conn.execute(b"select * from pgqueue.prune_ticks_and_keys(0)")
