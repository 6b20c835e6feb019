"""``pgqueue queue:work`` in a subprocess: a small workload run to the end, its log lines and exit codes."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import Client
from pgqueue.resources import query
from tests.cli_jobs import Broken, FailsOnce, Quick
from tests.cli_support import cli_env, command, one_error_line, pgqueue, pgqueue_all

Conn = psycopg.Connection[Any]


async def test_work_until_empty(dsn: str, conn: Conn, tmp_path: Path) -> None:
    async with Client(dsn=dsn) as client:
        await client.dispatch_many([*(Quick(n=i) for i in range(20)), FailsOnce(), Broken()])
        await client.dispatch(Quick(n=99), delay=300)  # stays: --stop-when-empty ends with delayed jobs left

    result = pgqueue("queue:work", "--queue", "cli", "--concurrency", "4", "--stop-when-empty",
                     "--app", "tests.cli_jobs", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    log = result.stderr
    start = [line for line in log.splitlines() if "worker started" in line]
    assert len(start) == 1, log
    assert "connection database" in start[0] and "/pgqueue_test_" in start[0] and "queues cli" in start[0]
    assert "concurrency 4" in start[0] and "3 jobs registered (from tests.cli_jobs)" in start[0]
    assert "(cli:fails_once) attempt 1/2 failed: ConnectionError: first attempt fails on purpose" in log
    assert "(cli:broken) failed after 1 attempt(s) [exception]: RuntimeError: broken on purpose" in log
    assert "23 reservations processed, 21 acked, 1 retried, 1 failed" in log
    assert "running cli:quick" not in log  # only with -v

    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (1,)
    assert conn.execute("select envelope->>'name', reason from pgqueue.failed_jobs").fetchall() == [
        ("cli:broken", "exception")]


async def test_work_max_jobs_and_verbose(dsn: str, conn: Conn, tmp_path: Path) -> None:
    async with Client(dsn=dsn) as client:
        await client.dispatch_many([Quick(n=i) for i in range(5)])

    result = pgqueue("queue:work", "-q", "cli", "-c", "1", "--max-jobs", "2", "-v", "--no-listen",
                     "--app", "tests.cli_jobs", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("running cli:quick") == 2
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (3,)


def test_work_reads_app_and_connection_from_pyproject(dsn: str, conn: Conn, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pgqueue]\napp = ["tests.cli_jobs"]\n\n'
        f'[tool.pgqueue.connections.database]\ndsn = "{dsn}"\nqueue = "cli"\n'
    )
    conn.execute("select pgqueue.enqueue(%s::jsonb)", (
        '{"id": "7a0c3c8e-1b53-4df8-a2b6-2d2b41c1c4e5", "name": "cli:quick", "args": {"n": 1}, '
        '"connection": "database", "queue": "cli", "priority": 0, "tries": 1, "timeout": 10, '
        '"backoff": {"kind": "fixed", "delays": [0]}, "retry_until": null, "version": 1}',))
    result = pgqueue("queue:work", "--stop-when-empty", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "queues cli" in result.stderr and "(from [tool.pgqueue] in " in result.stderr
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)


def test_work_configuration_errors_exit_2(dsn: str, tmp_path: Path) -> None:
    app = ("--app", "tests.cli_jobs")
    cases = ((("queue:work",), "no jobs are registered"),
             (("queue:work", "--app", "no_such_module_xyz"), "cannot import job module 'no_such_module_xyz'"),
             (("queue:work", "--poll-interval", "0", *app), "--poll-interval must be > 0"),
             (("queue:work", "--poll-interval", "inf", *app), "--poll-interval must be > 0 seconds and finite"),
             (("queue:work", "--lease", "3", *app), "lease (3.0s) must exceed the lease margin"),
             # Checked by WorkerOptions, reported by the option's name.
             (("queue:work", "--timeout", "0", *app), "--timeout must be > 0 seconds and finite, got 0"),
             (("queue:work", "--drain-timeout", "inf", *app), "--drain-timeout must be a finite number of seconds"),
             (("queue:work", "--metrics-interval", "-1", *app), "--metrics-interval must be a finite number"))
    results = pgqueue_all(*((*args, "--dsn", dsn) for args, _ in cases), cwd=tmp_path)
    for ((args, expected), result) in zip(cases, results, strict=True):
        assert result.returncode == 2, (args, result.stderr)
        assert expected in one_error_line(result.stderr)


def test_status_counts_listening_workers(dsn: str, conn: Conn, tmp_path: Path) -> None:
    worker = subprocess.Popen([*command(), "queue:work", "--queue", "cli", "--app", "tests.cli_jobs", "--dsn", dsn],
                              cwd=tmp_path, env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        # Wait (bounded) for the worker's LISTEN session to show up in pg_stat_activity.
        deadline = time.monotonic() + 60
        while conn.execute(query("listening_workers")).fetchone() != (1,):
            assert worker.poll() is None, worker.communicate()[1]
            assert time.monotonic() < deadline, "the worker never started listening"
            time.sleep(0.05)
        status = pgqueue("queue:status", "--dsn", dsn, cwd=tmp_path)
        assert "workers listening: 1" in status.stdout, status.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        _, log = worker.communicate(timeout=60)
    assert worker.returncode == 0, log
