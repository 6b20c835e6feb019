"""Issue 14 from the command line: queue:cancel, queue:pause, queue:resume, queue:limit, and
the paused queues and limits in queue:status."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg

from tests.cli_support import enqueue, one_error_line, pgqueue, pgqueue_all

Conn = psycopg.Connection[Any]


def test_cancel_says_what_happened_to_each_job(dsn: str, conn: Conn, tmp_path: Path) -> None:
    waiting = enqueue(conn, "reports")
    running = enqueue(conn, "mail")
    conn.execute("select * from pgqueue.reserve(array['mail'], 1, 60)")
    unknown = str(uuid.uuid4())
    done = pgqueue("queue:cancel", waiting, running, unknown, "--dsn", dsn, cwd=tmp_path)
    assert done.returncode == 1
    assert f"cancelled job {waiting} (it was waiting)" in done.stdout
    assert f"cancelled job {running} while it ran" in done.stdout
    assert f"job {unknown} is not queued" in done.stderr
    again, bad = pgqueue_all(("queue:cancel", waiting, "--dsn", dsn), ("queue:cancel", "nope", "--dsn", dsn),
                             cwd=tmp_path)
    assert again.returncode == 1 and "was already cancelled; nothing changed" in again.stderr
    assert bad.returncode == 2 and "'nope' is not a job id" in one_error_line(bad.stderr)
    reasons = conn.execute("select job_id::text, reason from pgqueue.failed_jobs order by 1").fetchall()
    assert reasons == sorted([(waiting, "cancelled"), (running, "cancelled")])
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)


def test_pause_resume_and_limits_show_in_status(dsn: str, conn: Conn, tmp_path: Path) -> None:
    enqueue(conn, "reports")
    paused, limited = pgqueue_all(("queue:pause", "reports", "--dsn", dsn),
                                  ("queue:limit", "mailer", "--concurrency", "3", "--rate", "100/s", "--dsn", dsn),
                                  cwd=tmp_path)
    assert paused.returncode == 0 and "queue 'reports' paused" in paused.stdout
    assert limited.returncode == 0, limited.stderr
    # The rate's bucket holds the rate per period unless --burst says otherwise.
    assert "limits of queue 'mailer': concurrency 3, rate 100/s, burst 100" in limited.stdout
    # A limit not given keeps its value.
    rate_only = pgqueue("queue:limit", "mailer", "--rate", "20/min", "--dsn", dsn, cwd=tmp_path)
    assert "limits of queue 'mailer': concurrency 3, rate 20/min, burst 20" in rate_only.stdout
    burst, zero_burst = pgqueue_all(("queue:limit", "mailer", "--burst", "5", "--dsn", dsn),
                                    ("queue:limit", "mailer", "--burst", "0", "--dsn", dsn), cwd=tmp_path)
    assert "limits of queue 'mailer': concurrency 3, rate 20/min, burst 5" in burst.stdout
    assert zero_burst.returncode == 2 and "burst must be a whole number >= 1" in one_error_line(zero_burst.stderr)
    status = pgqueue("queue:status", "--dsn", dsn, cwd=tmp_path)
    assert "paused: reports" in status.stdout
    assert "limits of queue 'mailer': concurrency 3, rate 20/min, burst 5" in status.stdout
    assert conn.execute("select count(*) from pgqueue.reserve(array['reports'], 5, 60)").fetchone() == (0,)

    resumed, cleared, bad = pgqueue_all(
        ("queue:resume", "reports", "--dsn", dsn), ("queue:limit", "mailer", "--clear", "--dsn", dsn),
        ("queue:limit", "mailer", "--rate", "lots", "--dsn", dsn), cwd=tmp_path)
    assert "queue 'reports' resumed" in resumed.stdout
    assert "limits of queue 'mailer': none" in cleared.stdout
    assert bad.returncode == 2 and "'lots' is not a rate" in one_error_line(bad.stderr)
    assert conn.execute("select count(*) from pgqueue.reserve(array['reports'], 5, 60)").fetchone() == (1,)
    status = pgqueue("queue:status", "--dsn", dsn, cwd=tmp_path)
    assert "paused:" not in status.stdout and "limits of" not in status.stdout


def test_queue_limit_adaptive_sets_keeps_and_turns_off_the_bounds(dsn: str, conn: Conn, tmp_path: Path) -> None:
    """issue 28: queue:limit NAME --adaptive MIN:MAX; bad bounds exit 2 naming the option and store nothing."""
    bad = pgqueue_all(*[("queue:limit", "api", "--adaptive", text, "--dsn", dsn) for text in ("5:2", "0:3", "x")],
                      cwd=tmp_path)
    assert [b.returncode for b in bad] == [2, 2, 2]
    assert all("--adaptive:" in one_error_line(b.stderr) for b in bad)
    assert conn.execute("select count(*) from pgqueue.queues").fetchone() == (0,)
    made = pgqueue("queue:limit", "api", "--concurrency", "10", "--adaptive", "2:50", "--dsn", dsn, cwd=tmp_path)
    assert "limits of queue 'api': concurrency 10 (adaptive 2:50, now 10)" in made.stdout, made.stderr
    kept = pgqueue("queue:limit", "api", "--rate", "100/s", "--dsn", dsn, cwd=tmp_path)
    assert "concurrency 10 (adaptive 2:50, now 10), rate 100/s" in kept.stdout, kept.stderr
    status = pgqueue("queue:status", "--dsn", dsn, cwd=tmp_path)
    off = pgqueue("queue:limit", "api", "--adaptive", "off", "--dsn", dsn, cwd=tmp_path)
    assert "limits of queue 'api': concurrency 10 (adaptive 2:50, now 10)" in status.stdout
    assert "limits of queue 'api': concurrency 10, rate 100/s" in off.stdout
    assert conn.execute("select adaptive_min, adaptive_max from pgqueue.queues").fetchone() == (None, None)
