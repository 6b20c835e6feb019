"""pgqueue's alembic migrations: from the repository root, programmatically, offline, and
as a branch inside a user's own alembic project."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from pgqueue import migrate
from pgqueue.resources import sql_dir, versions_dir
from tests.helpers import envelope
from tests.sql_calls import enqueue, reserve

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = sorted(p.stem for p in (sql_dir() / "functions").glob("*.sql"))

Snapshot = list[tuple[str, ...]]


def _alembic(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`uv run alembic ...` as a developer types it (plain `python -m alembic` without uv)."""
    uv = shutil.which("uv")
    command = [uv, "run", "--no-sync", "alembic", *args] if uv else [sys.executable, "-m", "alembic", *args]
    environment = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")}
    environment.update(env)
    result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result


def catalog(dsn: str) -> Snapshot:
    """What pgqueue installed, down to row versions: a re-created object shows up as changed."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(b"""
            select 'function', p.oid::text, p.xmin::text, pg_get_functiondef(p.oid)
            from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'pgqueue'
            union all
            select 'relation', c.oid::text, c.xmin::text, c.relkind::text || ' ' || c.relname
                   || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
            from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'pgqueue'
            union all
            select 'view', c.oid::text, '', pg_get_viewdef(c.oid)
            from pg_class c join pg_namespace n on n.oid = c.relnamespace
            where n.nspname = 'pgqueue' and c.relkind = 'v'
            union all
            select 'comment', d.objoid::text, d.xmin::text, d.description
            from pg_description d join pg_proc p on p.oid = d.objoid
            join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'pgqueue'
            order by 1, 2, 3
        """).fetchall()
    return [tuple(str(v) for v in row) for row in rows]


def _version(dsn: str, table: str = "pgqueue_alembic_version") -> list[str]:
    with psycopg.connect(dsn) as conn:
        exists = conn.execute(b"select to_regclass(%s) is not null", (table,)).fetchone()
        if not exists or not exists[0]:
            return []
        return sorted(r[0] for r in conn.execute(f"select version_num from {table}".encode()))


def _has_schema(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(b"select count(*) from pg_namespace where nspname = 'pgqueue'").fetchone()
    return row == (1,)


def _functions(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return sorted({r[0] for r in conn.execute(
            b"select p.proname from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
            b" where n.nspname = 'pgqueue'")})


def _works(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue(conn, envelope("migrated"))
        [r] = reserve(conn, ["migrated"], 1)
        assert r["id"] == job_id


def test_alembic_round_trip_from_the_repository_root(empty_dsn: str) -> None:
    env = {"PGQUEUE_DSN": empty_dsn}
    _alembic("upgrade", "head", cwd=REPO_ROOT, env=env)
    assert _version(empty_dsn) == ["pgqueue_0001"]
    assert _functions(empty_dsn) == FUNCTIONS
    first = catalog(empty_dsn)

    _alembic("downgrade", "base", cwd=REPO_ROOT, env=env)
    assert not _has_schema(empty_dsn)
    assert _version(empty_dsn) == []

    _alembic("upgrade", "head", cwd=REPO_ROOT, env=env)
    assert _version(empty_dsn) == ["pgqueue_0001"]
    again = catalog(empty_dsn)
    # Same objects (new oids after a drop and re-create): compare what they are.
    assert [(kind, body) for kind, _, _, body in again] == [(kind, body) for kind, _, _, body in first]
    _works(empty_dsn)


def test_alembic_reads_database_url_too(empty_dsn: str) -> None:
    _alembic("upgrade", "head", cwd=REPO_ROOT, env={"DATABASE_URL": empty_dsn})
    assert _version(empty_dsn) == ["pgqueue_0001"]


def test_upgrade_of_an_up_to_date_database_changes_nothing(dsn: str) -> None:
    before = catalog(dsn)
    assert any(kind == "function" for kind, *_ in before)
    _alembic("upgrade", "head", cwd=REPO_ROOT, env={"PGQUEUE_DSN": dsn})
    assert catalog(dsn) == before
    migrate.upgrade(dsn)
    assert catalog(dsn) == before
    assert _version(dsn) == ["pgqueue_0001"]


def test_programmatic_round_trip(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn)
    assert _functions(empty_dsn) == FUNCTIONS
    migrate.downgrade(empty_dsn)
    assert not _has_schema(empty_dsn)
    migrate.upgrade(empty_dsn)
    _works(empty_dsn)


def test_upgrade_sql_is_the_whole_schema_and_applies_as_printed(empty_dsn: str, dsn: str) -> None:
    script = migrate.upgrade_sql()
    assert "create table pgqueue.jobs" in script
    assert "create index jobs_reservation_idx" in script
    for name in FUNCTIONS:
        assert f"create or replace function pgqueue.{name}(" in script, name
    # A team applying DDL by hand gets exactly what alembic would have built.
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(script.encode())
    assert _version(empty_dsn) == ["pgqueue_0001"]
    assert [(k, body) for k, _, _, body in catalog(empty_dsn)] == [(k, body) for k, _, _, body in catalog(dsn)]
    before = catalog(empty_dsn)
    migrate.upgrade(empty_dsn)
    assert catalog(empty_dsn) == before
    _works(empty_dsn)


def test_downgrade_sql_drops_the_schema() -> None:
    assert "drop schema if exists pgqueue cascade" in migrate.downgrade_sql()


# ----------------------------------------------------------- the branch-label recipe

USER_ENV = '''
"""An application's own alembic environment: nothing pgqueue-specific in it."""
import os

import psycopg
from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

dsn = os.environ["APP_DSN"]
engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
'''

USER_REVISION = '''
"""orders

Revision ID: app_0001
"""
import sqlalchemy as sa
from alembic import op

revision = "app_0001"
down_revision = None
branch_labels = ("app",)
depends_on = None


def upgrade():
    op.create_table("orders", sa.Column("id", sa.Integer, primary_key=True), sa.Column("total", sa.Numeric))


def downgrade():
    op.drop_table("orders")
'''


@pytest.fixture
def user_project(tmp_path: Path) -> Path:
    """A throwaway application with its own alembic tree that lists pgqueue's versions folder."""
    project = tmp_path / "shop"
    (project / "migrations" / "versions").mkdir(parents=True)
    (project / "migrations" / "env.py").write_text(textwrap.dedent(USER_ENV))
    (project / "migrations" / "versions" / "app_0001_orders.py").write_text(textwrap.dedent(USER_REVISION))
    locations = os.pathsep.join(["%(here)s/migrations/versions", str(versions_dir())])
    (project / "alembic.ini").write_text(textwrap.dedent(f"""\
        [alembic]
        script_location = %(here)s/migrations
        path_separator = os
        version_locations = {locations}
        """))
    return project


def _tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return sorted(f"{r[0]}.{r[1]}" for r in conn.execute(
            b"select schemaname, tablename from pg_tables where schemaname in ('public', 'pgqueue')"))


def test_pgqueue_upgrades_as_a_branch_of_the_users_alembic_tree(user_project: Path, empty_dsn: str) -> None:
    env = {"APP_DSN": empty_dsn}
    heads = _alembic("heads", cwd=user_project, env=env).stdout
    assert "app_0001" in heads and "pgqueue_0001" in heads

    _alembic("upgrade", "heads", cwd=user_project, env=env)
    assert _tables(empty_dsn) == ["pgqueue.failed_jobs", "pgqueue.jobs", "public.alembic_version", "public.orders"]
    # One history, the application's: pgqueue's revision is recorded next to the user's.
    assert _version(empty_dsn, "alembic_version") == ["app_0001", "pgqueue_0001"]
    assert _functions(empty_dsn) == FUNCTIONS
    _works(empty_dsn)

    # The branch label addresses pgqueue alone.
    _alembic("downgrade", "pgqueue@base", cwd=user_project, env=env)
    assert _tables(empty_dsn) == ["public.alembic_version", "public.orders"]
    assert _version(empty_dsn, "alembic_version") == ["app_0001"]
    _alembic("upgrade", "pgqueue@head", cwd=user_project, env=env)
    assert _version(empty_dsn, "alembic_version") == ["app_0001", "pgqueue_0001"]
    _works(empty_dsn)
