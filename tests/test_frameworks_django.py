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
    assert "1 job registered (from tests.frameworks.django_worker)" in work.stderr, work.stderr
    assert conn.execute("select id, receipt_sent from shop_order order by id").fetchall() == [(1, True)]
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)
    assert conn.execute("select count(*) from pgqueue.failed_jobs").fetchone() == (0,)


# ------------------------------------------------------- pgqueue.contrib.django

APP_SETTINGS = "tests.frameworks.django_app_settings"


def django_admin(*args: str, dsn: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m django ARGS`` (what ``manage.py ARGS`` runs) in the shop project with the pgqueue app."""
    return subprocess.run([sys.executable, "-m", "django", *args], cwd=REPO,
                          env=cli_env({"APP_DSN": dsn, "DJANGO_SETTINGS_MODULE": APP_SETTINGS}),
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_manage_py_migrate_installs_pgqueue_and_the_test_runner_gets_it(empty_dsn: str) -> None:
    migrated = django_admin("migrate", "--run-syncdb", dsn=empty_dsn)
    assert migrated.returncode == 0, migrated.stderr
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select to_regclass('pgqueue.jobs') is not null").fetchone() == (True,)
        assert conn.execute("select version_num from pgqueue_alembic_version").fetchall() == [
            (pgqueue_head(),)]
        assert conn.execute("select name from django_migrations where app = 'pgqueue'").fetchall() == [
            ("0001_pgqueue_schema",)]
    # The unmanaged admin models match their migration; a second migrate is a no-op for pgqueue.
    check = django_admin("makemigrations", "pgqueue", "--check", "--dry-run", dsn=empty_dsn)
    assert check.returncode == 0, check.stdout + check.stderr
    again = django_admin("migrate", dsn=empty_dsn)
    assert again.returncode == 0, again.stderr

    # Django's test runner: its test database is created by migrate, so it has pgqueue's schema.
    tested = django_admin("test", "tests.frameworks.shop", "--noinput", "-v", "2", dsn=empty_dsn)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "Ran 4 tests" in tested.stderr and "OK" in tested.stderr, tested.stderr


def test_dispatch_on_an_unopened_connection_and_manage_py_pgqueue_worker(empty_dsn: str) -> None:
    assert django_admin("migrate", "--run-syncdb", dsn=empty_dsn).returncode == 0
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("insert into shop_order (id, receipt_sent) select g, false from generate_series(1, 4) g")
    done = subprocess.run([sys.executable, "-m", "tests.frameworks.django_app_dispatch"], cwd=REPO,
                          env=cli_env({"APP_DSN": empty_dsn, "DJANGO_SETTINGS_MODULE": APP_SETTINGS}),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(empty_dsn) as conn:
        assert sorted(r[0] for r in conn.execute("select (envelope->'args'->>'order_id')::int from pgqueue.jobs")) \
            == [1, 2, 3]

    status = django_admin("pgqueue", "queue:status", dsn=empty_dsn)
    assert status.returncode == 0, status.stderr
    assert "shop" in status.stdout, status.stdout

    # No --app, no --dsn: the database is DATABASES["default"], the jobs come from the shop app.
    work = django_admin("pgqueue_worker", "--queue", "shop", "--stop-when-empty", dsn=empty_dsn)
    assert work.returncode == 0, work.stderr
    assert "3 reservations processed, 3 acked" in work.stderr, work.stderr
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select id, receipt_sent from shop_order order by id").fetchall() == [
            (1, True), (2, True), (3, True), (4, False)]
        assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)


def pgqueue_head() -> str:
    from pgqueue.migrate import revisions

    return revisions()[-1]


def test_the_django_doc_needs_no_logged_in_user() -> None:
    # `Order.objects.create(customer=request.user)` failed for an anonymous request in the recipe.
    doc = (REPO / "docs" / "django.md").read_text()
    assert "request.user" not in doc
    assert "dispatch_sync(connection.connection)" not in doc  # None before Django's first query
