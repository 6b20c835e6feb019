"""pgqueue's alembic migrations: from the repository root, programmatically, offline, and
as a branch inside a user's own alembic project."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqueue import migrate
from pgqueue.resources import function_names, function_path, sql_file, versions_dir
from tests.helpers import envelope
from tests.sql_calls import enqueue, reserve

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = function_names()
HEAD = "pgqueue_0008"

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
    assert _version(empty_dsn) == [HEAD]
    assert _functions(empty_dsn) == FUNCTIONS
    first = catalog(empty_dsn)

    _alembic("downgrade", "base", cwd=REPO_ROOT, env=env)
    assert not _has_schema(empty_dsn)
    assert _version(empty_dsn) == []

    _alembic("upgrade", "head", cwd=REPO_ROOT, env=env)
    assert _version(empty_dsn) == [HEAD]
    again = catalog(empty_dsn)
    # Same objects (new oids after a drop and re-create): compare what they are.
    assert [(kind, body) for kind, _, _, body in again] == [(kind, body) for kind, _, _, body in first]
    _works(empty_dsn)


def test_alembic_reads_database_url_too(empty_dsn: str) -> None:
    _alembic("upgrade", "head", cwd=REPO_ROOT, env={"DATABASE_URL": empty_dsn})
    assert _version(empty_dsn) == [HEAD]


def test_upgrade_of_an_up_to_date_database_changes_nothing(dsn: str) -> None:
    before = catalog(dsn)
    assert any(kind == "function" for kind, *_ in before)
    _alembic("upgrade", "head", cwd=REPO_ROOT, env={"PGQUEUE_DSN": dsn})
    assert catalog(dsn) == before
    migrate.upgrade(dsn)
    assert catalog(dsn) == before
    assert _version(dsn) == [HEAD]


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
    assert _version(empty_dsn) == [HEAD]
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
    assert "app_0001" in heads and HEAD in heads

    _alembic("upgrade", "heads", cwd=user_project, env=env)
    assert _tables(empty_dsn) == ["pgqueue.completed_jobs", "pgqueue.failed_jobs", "pgqueue.job_stats", "pgqueue.jobs",
                                  "pgqueue.queues", "pgqueue.schedule_ticks", "pgqueue.schedules",
                                  "pgqueue.unique_keys", "public.alembic_version", "public.orders"]
    # One history, the application's: pgqueue's revision is recorded next to the user's.
    assert _version(empty_dsn, "alembic_version") == ["app_0001", HEAD]
    assert _functions(empty_dsn) == FUNCTIONS
    _works(empty_dsn)

    # The branch label addresses pgqueue alone.
    _alembic("downgrade", "pgqueue@base", cwd=user_project, env=env)
    assert _tables(empty_dsn) == ["public.alembic_version", "public.orders"]
    assert _version(empty_dsn, "alembic_version") == ["app_0001"]
    _alembic("upgrade", "pgqueue@head", cwd=user_project, env=env)
    assert _version(empty_dsn, "alembic_version") == ["app_0001", HEAD]
    _works(empty_dsn)


# ------------------------------------------------------------ immutable revisions

SCHEMA_SNAPSHOT = b"""
    select 'function', p.oid::regprocedure::text,
           pg_get_functiondef(p.oid) || ' config=' || coalesce(array_to_string(p.proconfig, ';'), '')
           || ' volatility=' || p.provolatile::text || ' security_definer=' || p.prosecdef::text
    from pg_proc p where p.pronamespace = 'pgqueue'::regnamespace
    union all
    select 'relation', c.relname, c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
    from pg_class c where c.relnamespace = 'pgqueue'::regnamespace
    union all
    select 'column', c.relname || '.' || a.attname,
           format_type(a.atttypid, a.atttypmod) || ' notnull=' || a.attnotnull::text
           || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' position=' || a.attnum
    from pg_attribute a join pg_class c on c.oid = a.attrelid
    left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
    where c.relnamespace = 'pgqueue'::regnamespace and a.attnum > 0 and not a.attisdropped
    union all
    select 'constraint', c.relname || '.' || k.conname, pg_get_constraintdef(k.oid) || ' valid=' || k.convalidated
    from pg_constraint k join pg_class c on c.oid = k.conrelid where c.relnamespace = 'pgqueue'::regnamespace
    union all
    select 'index', i.indexname, i.indexdef from pg_indexes i where i.schemaname = 'pgqueue'
    union all
    select 'view', c.relname, pg_get_viewdef(c.oid)
    from pg_class c where c.relnamespace = 'pgqueue'::regnamespace and c.relkind = 'v'
    union all
    select 'comment', d.classoid::regclass::text || ' ' || coalesce(p.oid::regprocedure::text, c.relname), d.description
    from pg_description d
    left join pg_proc p on d.classoid = 'pg_proc'::regclass and p.oid = d.objoid
    left join pg_class c on d.classoid = 'pg_class'::regclass and c.oid = d.objoid
    where p.pronamespace = 'pgqueue'::regnamespace or c.relnamespace = 'pgqueue'::regnamespace
    union all
    select 'sequence', s.sequencename, s.data_type::text || ' ' || s.start_value || ' ' || s.increment_by
    from pg_sequences s where s.schemaname = 'pgqueue'
    order by 1, 2, 3
"""


def schema_snapshot(dsn: str) -> list[tuple[str, str, str]]:
    """Everything pgqueue installed, by name and definition (oids and row versions left out):
    functions' bodies, settings, volatility; tables, columns, constraints, indexes, views,
    sequences and comments."""
    with psycopg.connect(dsn) as conn:
        conn.execute(b"set search_path = pg_catalog")  # names print schema-qualified
        return [(str(a), str(b), str(c)) for a, b, c in conn.execute(SCHEMA_SNAPSHOT).fetchall()]


def test_upgrading_from_0001_gives_the_same_schema_as_a_fresh_install_at_head(empty_dsn: str, dsn: str) -> None:
    migrate.upgrade(empty_dsn, "pgqueue_0001")
    assert _version(empty_dsn) == ["pgqueue_0001"]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # a database in use, jobs waiting
        waiting = enqueue(conn, envelope("waiting"))
        enqueue(conn, envelope("reports"), delay=60)
    migrate.upgrade(empty_dsn)
    assert _version(empty_dsn) == [HEAD]
    upgraded, fresh = schema_snapshot(empty_dsn), schema_snapshot(dsn)
    assert {kind for kind, _, _ in fresh} == {"function", "relation", "column", "constraint", "index", "view",
                                             "comment", "sequence"}
    assert upgraded == fresh
    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # the waiting jobs survived the upgrade
        assert [r["id"] for r in reserve(conn, ["waiting"], 5)] == [waiting]


def test_downgrading_0002_restores_what_0001_installed(empty_dsn: str, pg_admin_dsn: str) -> None:
    migrate.upgrade(empty_dsn, "pgqueue_0001")
    at_0001 = schema_snapshot(empty_dsn)
    migrate.upgrade(empty_dsn)
    assert schema_snapshot(empty_dsn) != at_0001
    migrate.downgrade(empty_dsn, "pgqueue_0001")
    assert _version(empty_dsn) == ["pgqueue_0001"]
    assert schema_snapshot(empty_dsn) == at_0001
    migrate.upgrade(empty_dsn)
    _works(empty_dsn)


def test_downgrading_0005_restores_what_0004_installed_and_keeps_the_jobs(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn, "pgqueue_0004")
    at_0004 = schema_snapshot(empty_dsn)
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # history written, a job reserved at 0005
        enqueue(conn, envelope("kept"))
        enqueue(conn, envelope("kept"))
        [first, _] = reserve(conn, ["kept"], 2)
        conn.execute("select * from pgqueue.ack(array[%s]::uuid[], array[%s]::bigint[])", (first["id"], first["token"]))
        assert conn.execute("select sum(succeeded) from pgqueue.job_stats").fetchone() == (1,)
    migrate.downgrade(empty_dsn, "pgqueue_0004")
    assert _version(empty_dsn) == ["pgqueue_0004"]
    assert schema_snapshot(empty_dsn) == at_0004
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (1,)
    migrate.upgrade(empty_dsn)
    _works(empty_dsn)


def test_downgrading_0008_restores_what_0007_installed_and_keeps_the_history(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn, "pgqueue_0007")
    at_0007 = schema_snapshot(empty_dsn)
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # an attempt given back at 0008
        enqueue(conn, envelope("kept"))
        [held] = reserve(conn, ["kept"], 1)
        assert conn.execute("select pgqueue.release_interrupted(%s, %s, 0.5, null)",
                            (held["id"], held["token"])).fetchone() == (True,)
        assert conn.execute("select sum(given_back), sum(retried) from pgqueue.job_stats").fetchone() == (1, 0)
        assert conn.execute("select attempts from pgqueue.jobs").fetchone() == (0,)
    migrate.downgrade(empty_dsn, "pgqueue_0007")
    assert _version(empty_dsn) == ["pgqueue_0007"]
    assert schema_snapshot(empty_dsn) == at_0007
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select count(*) from pgqueue.job_stats").fetchone() == (1,)
        assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (1,)
    migrate.upgrade(empty_dsn)
    _works(empty_dsn)


def test_0001_still_installs_functions_without_a_pinned_search_path(empty_dsn: str) -> None:
    # Revision 0001 installs today what it installed when it shipped (its frozen files), so a
    # database at 0001 has exactly the functions of every other database at 0001.
    migrate.upgrade(empty_dsn, "pgqueue_0001")
    with psycopg.connect(empty_dsn) as conn:
        configs = conn.execute(b"select proname, proconfig from pg_proc"
                               b" where pronamespace = 'pgqueue'::regnamespace order by 1").fetchall()
    assert len(configs) == 15
    assert [c for _, c in configs] == [None] * 15


def test_head_runs_the_newest_version_of_each_function(dsn: str) -> None:
    # A reader reviews sql/functions/<name>/<newest>.sql: it is what a database at head runs.
    with psycopg.connect(dsn) as conn:
        installed = {r[0]: r[1] for r in conn.execute(
            b"select p.oid::regprocedure::text, p.prosrc from pg_proc p"
            b" where p.pronamespace = 'pgqueue'::regnamespace")}
    newest = "".join(sql_file(function_path(name)) for name in FUNCTIONS)
    assert installed and all(body in newest for body in installed.values())
    assert {signature.split("(")[0].removeprefix("pgqueue.") for signature in installed} == set(FUNCTIONS)


def test_0002_stops_on_jobs_no_worker_can_serve_and_changes_nothing(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn, "pgqueue_0001")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # 0001 accepted these queue names
        stuck = [enqueue(conn, envelope("reports,daily")), enqueue(conn, envelope(" padded"))]
    before = schema_snapshot(empty_dsn)
    with pytest.raises(psycopg.errors.CheckViolation,
                       match=r"2 job\(s\) in pgqueue.jobs have a queue name no worker can serve") as caught:
        migrate.upgrade(empty_dsn)
    assert "then migrate again" in (caught.value.diag.message_hint or "")
    assert _version(empty_dsn) == ["pgqueue_0001"] and schema_snapshot(empty_dsn) == before
    # Following the hint: move the jobs to a valid queue, then the upgrade goes through.
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(b"""update pgqueue.jobs set queue = 'fixed',
                                              envelope = jsonb_set(envelope, '{queue}', '"fixed"')""")
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert sorted(r["id"] for r in reserve(conn, ["fixed"], 5)) == sorted(stuck)


def test_0008_keeps_the_schedules_of_a_database_in_use_and_downgrading_restores_0007(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn, "pgqueue_0007")
    at_0007 = schema_snapshot(empty_dsn)
    schedules = b"select name, expression, timezone, catch_up, changed_at from pgqueue.schedules"
    ticks = b"select schedule, tick, job_id from pgqueue.schedule_ticks order by tick"
    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # a worker of revision 0003 ticked a schedule
        conn.execute(b"select * from pgqueue.schedule_sync(array['app:beat'], array['every 5s'], array['UTC'],"
                     b" array[100])")
        conn.execute(b"update pgqueue.schedules set changed_at = now() - interval '1 hour'")
        last = conn.execute(b"select to_timestamp(floor(extract(epoch from now()) / 5) * 5 - 5)").fetchone()[0]  # type: ignore[index]
        conn.execute(b"select pgqueue.enqueue_tick('app:beat', %s, %s)", (last, Jsonb(envelope(name="app:beat"))))
        kept, kept_ticks = conn.execute(schedules).fetchall(), conn.execute(ticks).fetchall()
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert (conn.execute(schedules).fetchall(), conn.execute(ticks).fetchall()) == (kept, kept_ticks)
        [state] = conn.execute(b"select has_template, last_tick from pgqueue.schedule_state(array['app:beat'])")
        assert state == (False, last)
        # No template yet: it does not tick until registered again (a worker that may does it at start) ...
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="registered before revision 0008"):
            conn.execute(b"select pgqueue.enqueue_tick('app:beat', %s)", (last + timedelta(seconds=5),))
        template = {k: v for k, v in envelope(name="app:beat").items() if k != "id"}
        conn.execute(b"select * from pgqueue.schedule_sync(array['app:beat'], array['every 5s'], array['UTC'],"
                     b" array[100], array[5]::bigint[], array[%s]::jsonb[])", (Jsonb(template),))
        # ... and then goes on from its last tick: the same form keeps its change time.
        assert conn.execute(schedules).fetchall() == kept
        assert conn.execute(b"select pgqueue.enqueue_tick('app:beat', %s) is not null",
                            (last + timedelta(seconds=5),)).fetchone() == (True,)
        kept_ticks = conn.execute(ticks).fetchall()
    migrate.downgrade(empty_dsn, "pgqueue_0007")
    assert _version(empty_dsn) == ["pgqueue_0007"]
    assert schema_snapshot(empty_dsn) == at_0007
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert (conn.execute(schedules).fetchall(), conn.execute(ticks).fetchall()) == (kept, kept_ticks)
    migrate.upgrade(empty_dsn)
    _works(empty_dsn)
