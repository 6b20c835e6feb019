"""pgqueue's alembic migrations: from the repository root, programmatically, offline, and
as a branch inside a user's own alembic project; the head install of an empty database against
the revisions walked from each revision, and each revision's downgrade."""

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
from alembic import command
from psycopg.types.json import Jsonb

from pgqueue import migrate
from pgqueue.resources import function_names, function_path, sql_file, versions_dir
from tests.catalog import KINDS, differences, schema_snapshot
from tests.helpers import envelope
from tests.sql_calls import enqueue, reserve

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = function_names()
REVISIONS = migrate.revisions()
HEAD = REVISIONS[-1]

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
    assert schema_snapshot(empty_dsn) == []
    migrate.upgrade(empty_dsn)
    _works(empty_dsn)


def test_upgrade_sql_is_the_whole_schema_and_applies_as_printed(empty_dsn: str, dsn: str) -> None:
    script = migrate.upgrade_sql()
    assert "create table pgqueue.jobs" in script
    assert "create index jobs_reservation_idx" in script
    # What `upgrade` runs on an empty database: the head install, each function's newest version once.
    assert "-- head/schema.sql\n" in script and "-- head/triggers.sql\n" in script
    assert "-- revisions/0001/upgrade.sql" not in script
    for name in FUNCTIONS:
        assert script.count(f"-- {function_path(name)}\n") == 1, name
        assert script.count(f"-- functions/{name}/") == 1, name
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


def test_upgrade_sql_to_an_older_revision_walks_the_revisions() -> None:
    script = migrate.upgrade_sql("pgqueue_0002")
    assert script.index("-- revisions/0001/upgrade.sql") < script.index("-- revisions/0002/upgrade.sql")
    assert "-- functions/reserve/0002.sql" in script and "-- head/schema.sql" not in script


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
    assert _tables(empty_dsn) == ["pgqueue.attempt_failures", "pgqueue.batch_members", "pgqueue.batches",
                                  "pgqueue.completed_jobs", "pgqueue.dependent_jobs", "pgqueue.failed_jobs",
                                  "pgqueue.job_dependencies", "pgqueue.job_results", "pgqueue.job_stats",
                                  "pgqueue.jobs", "pgqueue.partitions", "pgqueue.queues", "pgqueue.schedule_ticks",
                                  "pgqueue.schedules",
                                  "pgqueue.unique_keys", "pgqueue.workers", "pgqueue.workflow_signals",
                                  "pgqueue.workflow_steps", "public.alembic_version", "public.orders"]
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


# ------------------------------------------------ head install against the revisions

def _walk(dsn: str, revision: str) -> None:
    """Upgrade through the revisions, one after the other, as `alembic upgrade` does (never the head install)."""
    command.upgrade(migrate.alembic_config(dsn), revision)


def _columns_with_missing_values(dsn: str) -> list[str]:
    # A column added to a table that already existed (a revision's ALTER TABLE ... ADD COLUMN with a
    # default) answers older rows from the catalog; a column created with its table never does. So
    # this tells how the database was built, although no query can tell the results apart.
    with psycopg.connect(dsn) as conn:
        return sorted(f"{r[0]}.{r[1]}" for r in conn.execute(
            b"select c.relname, a.attname from pg_attribute a join pg_class c on c.oid = a.attrelid"
            b" where c.relnamespace = 'pgqueue'::regnamespace and a.atthasmissing"))


def test_an_empty_database_gets_the_head_install_and_alembic_walks_the_revisions(empty_dsn: str, dsn: str) -> None:
    # The tests' template (behind `dsn`) was built by migrate.upgrade on an empty database: the head install.
    assert _version(dsn) == [HEAD]
    assert _columns_with_missing_values(dsn) == []
    # alembic itself walks the revisions: the columns that 0003 and 0007 added to pgqueue.jobs show it.
    _alembic("upgrade", "head", cwd=REPO_ROOT, env={"PGQUEUE_DSN": empty_dsn})
    assert _version(empty_dsn) == [HEAD]
    assert {"jobs.prefetched", "jobs.snoozes"} <= set(_columns_with_missing_values(empty_dsn))


@pytest.mark.parametrize("start", REVISIONS)
def test_upgrading_from_each_revision_gives_the_catalog_of_the_head_install(start: str, empty_dsn: str,
                                                                           dsn: str) -> None:
    # An existing database at `start` (jobs waiting), upgraded by migrate.upgrade, against a fresh
    # database at head: two paths that share no SQL file but the functions' newest versions.
    _walk(empty_dsn, start)
    assert _version(empty_dsn) == [start]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        waiting = enqueue(conn, envelope("waiting"))
        enqueue(conn, envelope("reports"), delay=60)
    migrate.upgrade(empty_dsn)
    assert _version(empty_dsn) == [HEAD]
    upgraded, fresh = schema_snapshot(empty_dsn), schema_snapshot(dsn)
    assert {kind for kind, _, _ in fresh} >= KINDS
    assert upgraded == fresh, differences(upgraded, fresh)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # the waiting jobs survived the upgrade
        assert [r["id"] for r in reserve(conn, ["waiting"], 5)] == [waiting]


@pytest.mark.parametrize("target", REVISIONS[:-1])
def test_downgrading_the_head_install_to_each_revision_gives_what_that_revision_installed(
        target: str, empty_dsn: str, dsn: str) -> None:
    _walk(empty_dsn, target)
    at_target = schema_snapshot(empty_dsn)
    migrate.downgrade(dsn, target)
    assert _version(dsn) == [target]
    downgraded = schema_snapshot(dsn)
    assert downgraded == at_target, differences(downgraded, at_target, ("downgraded", f"walked to {target}"))
    migrate.upgrade(dsn)
    _works(dsn)


# Each statement changes one thing the comparison must see (the kind it shows up as).
DELIBERATE = [
    ("relation", "alter table pgqueue.jobs set (autovacuum_vacuum_threshold = 5001)"),
    ("relation", "alter view pgqueue.queue_stats set (security_barrier = true)"),
    ("relation", "grant select on pgqueue.failed_jobs to public"),
    ("relation", "create table pgqueue.extra (id integer)"),
    ("column", "alter table pgqueue.jobs alter column priority set default 1"),
    ("column", "alter table pgqueue.completed_jobs alter column latency type numeric"),
    ("column", "alter table pgqueue.jobs alter column reserved_at set not null"),
    ("column", "alter table pgqueue.jobs alter column unique_key set statistics 500"),
    ("column", "alter table pgqueue.jobs alter column queue set (n_distinct = 10)"),
    ("constraint", "alter table pgqueue.jobs drop constraint jobs_snoozes_non_negative"),
    ("constraint", "alter table pgqueue.queues add constraint queues_extra check (rate_tokens >= 0) not valid"),
    ("index", "create index jobs_created_at_idx on pgqueue.jobs (created_at)"),
    ("index", "alter table pgqueue.jobs cluster on jobs_reservation_idx"),
    ("function", "alter function pgqueue.clear(text) set work_mem = '1MB'"),
    ("function", "alter function pgqueue.clear(text) cost 1000"),
    ("function", "revoke execute on function pgqueue.clear(text) from public"),
    ("trigger", "alter table pgqueue.jobs disable trigger jobs_unique_requeue"),
    ("sequence", "alter sequence pgqueue.lease_token_seq increment by 2"),
    ("sequence", "alter sequence pgqueue.lease_token_seq owned by pgqueue.jobs.token"),
    ("comment", "comment on column pgqueue.jobs.token is 'the fencing token'"),
    ("comment", "comment on table pgqueue.unique_keys is null"),
    ("schema", "grant usage on schema pgqueue to public"),
    ("default privileges", "alter default privileges in schema pgqueue grant select on tables to public"),
]


@pytest.mark.parametrize(("kind", "statement"), DELIBERATE, ids=[s for _, s in DELIBERATE])
def test_the_comparison_sees_each_kind_of_difference(kind: str, statement: str, dsn: str) -> None:
    before = schema_snapshot(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement.encode())
    after = schema_snapshot(dsn)
    assert after != before
    assert kind in {row[0] for row in set(after) ^ set(before)}, differences(after, before)


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


def test_revision_messages_say_what_each_revision_does_not_an_internal_issue() -> None:
    # A revision's docstring is what users read in `alembic history` of their own tree.
    import re

    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config())
    for revision in script.walk_revisions():
        doc = revision.module.__doc__ or ""
        assert doc.startswith("pgqueue: "), (revision.revision, doc)
        assert not re.search(r"\bissues? \d+", doc, re.IGNORECASE), (revision.revision, doc)


def test_0009_counts_blocked_jobs_in_the_view_and_its_downgrade_keeps_the_views_grants(empty_dsn: str) -> None:
    # Issue 26: pgqueue.queue_stats gains a blocked column at 0009 (create or replace keeps grants); a
    # view's column cannot be dropped, so the downgrade recreates 0008's view with its SELECT grants.
    role = f"stats_reader_{os.getpid()}"
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(f"drop role if exists {role}".encode())
        conn.execute(f"create role {role}".encode())
        try:
            conn.execute(f"grant usage on schema pgqueue to {role}; grant select on pgqueue.queue_stats to {role}"
                         .encode())
            parent = enqueue(conn, envelope("stats"))
            child = enqueue(conn, envelope("stats"))
            conn.execute("select pgqueue.add_dependencies(array[%s]::uuid[], array[%s]::uuid[], 'cancel')",
                         (child, parent))
            enqueue(conn, envelope("stats"), delay=600)
            conn.execute(f"set role {role}".encode())
            assert conn.execute("select ready, delayed, blocked from pgqueue.queue_stats").fetchone() == (1, 1, 1)
            conn.execute(b"reset role")
            migrate.downgrade(empty_dsn, "pgqueue_0008")
            columns = [r[0] for r in conn.execute("select attname from pg_attribute where attrelid ="
                                                  " 'pgqueue.queue_stats'::regclass and attnum > 0 order by attnum")]
            assert "blocked" not in columns
            conn.execute(f"set role {role}".encode())
            assert conn.execute("select ready from pgqueue.queue_stats").fetchone() is not None
            conn.execute(b"reset role")
        finally:
            conn.execute(b"reset role")
            conn.execute(f"drop owned by {role}; drop role {role}".encode())
