"""``pgqueue schedule:list`` (issue 13) in a subprocess against a real database."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import psycopg

from tests.cli_support import pgqueue, pgqueue_all


def test_schedule_list_shows_expression_timezone_last_and_next_tick(dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into pgqueue.schedule_ticks (schedule, tick, job_id)"
                     " values ('cli:nightly_report', '2026-11-29 03:00+01', gen_random_uuid())")
    app = ("--app", "tests.cli_schedule_jobs", "--dsn", dsn)
    table, as_json = pgqueue_all(("schedule:list", *app), ("schedule:list", "--json", *app), cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["JOB", "SCHEDULE", "TIMEZONE", "LAST", "TICK", "NEXT", "TICK"]
    nightly = next(line for line in lines if line.startswith("cli:nightly_report"))
    assert "0 3 * * *" in nightly and "Europe/Paris" in nightly and "2026-11-29 03:00:00+0100" in nightly
    assert " 03:00:00+0" in nightly.split("2026-11-29 03:00:00+0100")[1]  # the next tick, 03:00 Paris time
    beat = next(line for line in lines if line.startswith("cli:heartbeat"))
    assert "every 30s" in beat and " - " in beat  # never ticked yet
    assert as_json.returncode == 0, as_json.stderr
    data = {s["name"]: s for s in json.loads(as_json.stdout)}
    assert data["cli:nightly_report"]["args"] == {"kind": "daily"}
    assert datetime.fromisoformat(data["cli:nightly_report"]["last_tick"]) == datetime.fromisoformat(
        "2026-11-29T03:00:00+01:00")
    assert data["cli:heartbeat"]["last_tick"] is None
    assert datetime.fromisoformat(data["cli:heartbeat"]["next_tick"]).second in (0, 30)


def test_schedule_list_without_schedules_says_how_to_declare_them(dsn: str, tmp_path: Path) -> None:
    result = pgqueue("schedule:list", "--app", "tests.cli_jobs", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "no periodic jobs declared" in result.stdout


def test_the_table_shows_a_schedule_whose_next_tick_cannot_be_computed_with_its_problem() -> None:
    from pgqueue import ScheduleInfo
    from pgqueue_cli.render import schedule_table

    ok = ScheduleInfo(name="app:ok", expression="every 5s", timezone="UTC", catch_up=1, args={}, last_tick=None,
                      next_tick=datetime.fromisoformat("2026-01-01T00:00:05+00:00"))
    broken = ScheduleInfo(name="app:broken", expression="every 5s", timezone="UTC", catch_up=1, args={},
                          last_tick=None, next_tick=None, problem="its next tick cannot be computed (boom)")
    lines = schedule_table([ok, broken]).splitlines()
    assert "2026-01-01 00:00:05+0000" in next(line for line in lines if line.startswith("app:ok"))
    assert next(line for line in lines if line.startswith("app:broken")).rstrip().endswith("-")
    assert lines[-1] == "app:broken: its next tick cannot be computed (boom)"


def test_schedule_sync_registers_the_schedules_with_the_envelope_of_their_jobs(dsn: str, tmp_path: Path) -> None:
    from pgqueue import Schedule

    result = pgqueue("schedule:sync", "--app", "tests.cli_schedule_jobs", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "registered 2 schedules"
    with psycopg.connect(dsn) as conn:
        registered = conn.execute("select name, expression, timezone, period_seconds, template - 'timeout' - 'backoff'"
                                  " - 'tries' from pgqueue.schedules order by name").fetchall()
    nightly = Schedule(job_name="cli:nightly_report", every="0 3 * * *", timezone="Europe/Paris")
    common = {"connection": "database", "priority": 0, "retry_until": None, "version": 1}
    assert registered == [
        ("cli:heartbeat", "every 30s", "UTC", 30, {"name": "cli:heartbeat", "args": {}, "queue": "default", **common}),
        ("cli:nightly_report", "0 3 * * *", "Europe/Paris", nightly.period_seconds,
         {"name": "cli:nightly_report", "args": {"kind": "daily"}, "queue": "reports", **common})]
