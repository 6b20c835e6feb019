"""Django 4.2+/5 on psycopg 3 against real PostgreSQL: dispatch in ``transaction.atomic()``, a worker with the ORM.

Django runs in subprocesses (its settings are process-wide), as it does in a deployment.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from tests.cli_support import cli_env, pgqueue

Conn = psycopg.Connection[Any]
REPO = Path(__file__).resolve().parent.parent


def test_dispatch_commits_and_rolls_back_with_the_orm_and_the_worker_uses_the_orm(
        dsn: str, conn: Conn, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.frameworks.django_dispatch"], cwd=REPO,
                          env=cli_env({"APP_DSN": dsn}), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr

    # Order 1 committed with its job; order 2 and its job rolled back together.
    assert conn.execute("select id, receipt_sent from shop_order order by id").fetchall() == [(1, False)]
    assert conn.execute("select envelope->>'name', envelope->'args' from pgqueue.jobs").fetchall() == [
        ("shop:send_receipt", {"order_id": 1})]

    # The worker loads Django through --app and the handler's ORM call updates the order.
    work = pgqueue("queue:work", "--queue", "shop", "--stop-when-empty", "--app", "tests.frameworks.django_worker",
                   "--dsn", dsn, cwd=tmp_path, env={"APP_DSN": dsn})
    assert work.returncode == 0, work.stderr
    assert "1 reservations processed, 1 acked" in work.stderr, work.stderr
    assert conn.execute("select id, receipt_sent from shop_order order by id").fetchall() == [(1, True)]
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)
    assert conn.execute("select count(*) from pgqueue.failed_jobs").fetchone() == (0,)
