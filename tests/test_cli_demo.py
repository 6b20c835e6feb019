"""The quickstart: ``pgqueue demo`` with no database configured, on the embedded PostgreSQL 18."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from pgqueue.embedded import EmbeddedPostgres
from tests.cli_support import pgqueue


def test_demo_runs_on_the_embedded_server_and_ends_with_the_expected_counts(tmp_path: Path) -> None:
    # A short folder of the test's own (socket paths must be short), never the default data dir.
    data = Path(tempfile.mkdtemp(prefix="pgqd-", dir="/tmp"))
    env = {"PGQUEUE_EMBEDDED_DIR": str(data)}
    try:
        demo = pgqueue("demo", cwd=tmp_path, env=env, timeout=300)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert f"pgqueue: using the embedded PostgreSQL 18 (data in {data};" in demo.stderr
        out = demo.stdout
        assert "Dispatched 48 jobs" in out
        assert "48/48" in out  # the progress bar, completed
        assert ("48 jobs, 52 attempts, 47 succeeded, 4 retried after a failure, 1 failed "
                "(expected 47 succeeded, 4 retried, 1 failed): OK") in out
        assert "$ pgqueue queue:status" in out and "$ pgqueue queue:failed --queue demo" in out
        assert "demo:charge_card" in out and "ValueError: card declined for order 1042 (simulated)" in out
        assert out.count("(demo:sync_inventory) attempt 1/3 failed: ConnectionError") == 3

        # The server keeps running for the next commands, which find it without any DSN.
        status = pgqueue("queue:status", cwd=tmp_path, env=env)
        assert status.returncode == 0, status.stderr
        demo_row = next(line.split() for line in status.stdout.splitlines() if line.startswith("demo "))
        assert demo_row[1:7] == ["0", "0", "0", "0", "0", "1"]  # ready, delayed, blocked, reserved, expired, failed

        running = pgqueue("embedded", "status", cwd=tmp_path, env=env)
        assert running.returncode == 0 and "running (pid" in running.stdout
        stopped = pgqueue("embedded", "stop", cwd=tmp_path, env=env)
        assert stopped.returncode == 0 and "stopped (pid" in stopped.stdout
        after = pgqueue("embedded", "status", cwd=tmp_path, env=env)
        assert after.returncode == 3 and "not running" in after.stdout
    finally:
        with contextlib.suppress(Exception):
            EmbeddedPostgres(data).stop()
        shutil.rmtree(data, ignore_errors=True)
