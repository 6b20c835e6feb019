"""The frozen SQL files: one history per function, each revision running its own files, and the lock.

``sql/migrations.lock`` holds the SHA-256 of every frozen file; a migration refuses a file that is
not what the lock says, and ``python -m pgqueue.migration_lock`` records a new revision's files but
never a new checksum for a shipped one. The refusals are shown on a copy of the source tree (its
own pgqueue, sql/ and migrations/), run as a developer or a deployment would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.script import ScriptDirectory

from pgqueue import migrate
from pgqueue.migration_lock import (
    LOCK_FILE,
    checksum,
    compare,
    frozen_paths,
    read_lock,
    render,
    revision_of,
    update,
)
from pgqueue.resources import function_names, function_path, function_versions, sql_dir, sql_file

REPO_ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Any]:
    scripts = ScriptDirectory.from_config(migrate.alembic_config())
    return {script.revision: script.module for script in scripts.walk_revisions()}


def test_the_lock_matches_the_tree() -> None:
    differences = compare()
    assert not differences, "\n".join(differences.lines())
    lock = read_lock()
    assert sorted(lock) == frozen_paths()
    # The file is in its one canonical form (what the command writes), and sha256sum's format.
    assert (sql_dir() / LOCK_FILE).read_text(encoding="utf-8") == render(lock)
    assert lock["functions/enqueue/0001.sql"] == "10741439c8c996f1ff22aa602fe2758b832e129105dd28139a2d3aea8259f64a"


def test_each_revision_runs_its_own_files_and_its_downgrade_restores_the_versions_it_replaced() -> None:
    modules = _modules()
    assert sorted(modules) == migrate.revisions() == [f"pgqueue_{n:04d}" for n in range(1, len(modules) + 1)]
    lock = read_lock()
    run: set[str] = set()
    for revision, module in modules.items():
        number = revision.removeprefix("pgqueue_")
        upgrade, downgrade = list(module.UPGRADE), list(module.DOWNGRADE)
        assert all(path in lock for path in upgrade + downgrade), revision
        # Up: every file of this revision, and none of another's.
        own = sorted(p for p in lock if revision_of(p) == number and p != f"revisions/{number}/downgrade.sql")
        assert sorted(upgrade) == own, revision
        assert f"revisions/{number}/upgrade.sql" in upgrade, revision
        # Down: the table changes undone first, then the version before this one of each function it replaced.
        assert downgrade[0] == f"revisions/{number}/downgrade.sql", revision
        replaced = set()
        for name in function_names():
            versions = function_versions(name)
            if f"functions/{name}/{number}.sql" in versions[1:]:
                replaced.add(versions[versions.index(f"functions/{name}/{number}.sql") - 1])
        assert set(downgrade[1:]) == replaced and len(downgrade[1:]) == len(replaced), revision
        run.update(upgrade + downgrade)
    # Every version of every function belongs to a revision that exists, and every frozen file runs.
    assert {revision_of(path) for path in lock} == {r.removeprefix("pgqueue_") for r in modules}
    assert run == set(lock)


def _copy_of_the_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for folder in ("pgqueue", "sql", "migrations"):
        shutil.copytree(REPO_ROOT / folder, tree / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def _python(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Python with the copy's pgqueue first on the path (its sql/ and migrations/ are found beside it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")}
    env["PYTHONPATH"] = str(tree)
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


MIGRATE = "import sys; from pgqueue import migrate; assert migrate.__file__.startswith(sys.argv[1]); " \
          "migrate.upgrade(sys.argv[2], sys.argv[3])"


def _state(dsn: str) -> tuple[bool, list[str]]:
    with psycopg.connect(dsn) as conn:
        schema = conn.execute(b"select to_regnamespace('pgqueue') is not null").fetchone()
        table = conn.execute(b"select to_regclass('pgqueue_alembic_version') is not null").fetchone()
        versions = [r[0] for r in conn.execute(b"select version_num from pgqueue_alembic_version")] \
            if table and table[0] else []
    return bool(schema and schema[0]), versions


def test_a_frozen_file_edited_after_shipping_is_refused_by_every_migration_and_by_the_lock(
        tmp_path: Path, empty_dsn: str) -> None:
    tree = _copy_of_the_tree(tmp_path)
    newest = function_path("reserve")  # the version head runs, e.g. functions/reserve/0007.sql
    number = revision_of(newest)
    assert number is not None and number != "0001"
    (tree / "sql" / newest).write_text(sql_file(newest) + "-- a fix, straight into the shipped file\n")
    lock_before = (tree / "sql" / LOCK_FILE).read_bytes()

    # A fresh install runs the newest reserve: refused, nothing installed.
    fresh = _python(tree, "-c", MIGRATE, str(tree), empty_dsn, "head")
    assert fresh.returncode != 0
    assert f"FrozenFileChangedError: pgqueue migrations: sql/{newest} was changed after its revision shipped" \
           in fresh.stderr
    assert _state(empty_dsn) == (False, [])
    # Walking the revisions: those before never read it; its own refuses it and changes nothing.
    before = f"pgqueue_{int(number) - 1:04d}"
    assert _python(tree, "-c", MIGRATE, str(tree), empty_dsn, before).returncode == 0
    walked = _python(tree, "-c", MIGRATE, str(tree), empty_dsn, "head")
    assert walked.returncode != 0 and f"sql/{newest} was changed" in walked.stderr
    assert _state(empty_dsn) == (True, [before])

    # The lock command will not record the new bytes (nor will --amend of another revision).
    other = "0001"
    for args in ([], ["--amend", other]):
        refused = _python(tree, "-m", "pgqueue.migration_lock", *args)
        assert refused.returncode == 1, refused
        assert f"changed after it was locked: sql/{newest}" in refused.stderr
        assert (tree / "sql" / LOCK_FILE).read_bytes() == lock_before
    check = _python(tree, "-m", "pgqueue.migration_lock", "--check")
    assert check.returncode == 1 and f"sql/{newest}" in check.stderr


def test_a_new_revisions_files_are_refused_until_the_lock_command_records_them(tmp_path: Path,
                                                                                empty_dsn: str) -> None:
    # A developer's change to a function in the newest revision, listed in its module.
    tree = _copy_of_the_tree(tmp_path)
    sql = tree / "sql"
    number = migrate.revisions()[-1].removeprefix("pgqueue_")
    name = next(n for n in function_names() if revision_of(function_path(n)) != number)
    previous = function_path(name)
    changed = f"functions/{name}/{number}.sql"
    (sql / changed).write_text(sql_file(previous) + f"-- changed in {number}\n")
    [module] = (tree / "migrations" / "versions").glob(f"{number}_*.py")
    text = module.read_text()
    module.write_text(text.replace(f'    "revisions/{number}/upgrade.sql",\n',
                                   f'    "revisions/{number}/upgrade.sql",\n    "{changed}",\n', 1)
                      .replace(f'    "revisions/{number}/downgrade.sql",\n',
                               f'    "revisions/{number}/downgrade.sql",\n    "{previous}",\n', 1))

    assert compare(sql).new == [changed]
    refused = _python(tree, "-c", MIGRATE, str(tree), empty_dsn, "head")
    assert refused.returncode != 0
    assert f"sql/{changed} is not in sql/migrations.lock, so nothing was migrated" in refused.stderr
    assert _state(empty_dsn) == (False, [])

    recorded = _python(tree, "-m", "pgqueue.migration_lock")
    assert recorded.returncode == 0, recorded.stderr
    assert f"recorded {changed}" in recorded.stdout
    assert read_lock(sql)[changed] == checksum((sql / changed).read_bytes())
    assert _python(tree, "-m", "pgqueue.migration_lock", "--check").returncode == 0
    assert _python(tree, "-c", MIGRATE, str(tree), empty_dsn, "head").returncode == 0
    assert _state(empty_dsn) == (True, [migrate.revisions()[-1]])  # the file it refused before, it ran now

    # Before the revision ships, its files may still change: --amend re-records them, and only them.
    (sql / changed).write_text((sql / changed).read_text() + "-- reviewed\n")
    assert update(sql).changed == [changed]
    assert not update(sql, amend=[number])
    assert read_lock(sql)[changed] == checksum((sql / changed).read_bytes())
    assert not compare(sql)


def test_the_lock_names_a_file_that_is_not_a_frozen_files_name(tmp_path: Path) -> None:
    tree = _copy_of_the_tree(tmp_path)
    sql = tree / "sql"
    (sql / "functions" / "reserve" / "next.sql").write_text("-- a draft\n")
    (sql / "revisions" / "0001" / "extra.sql").write_text("-- a draft\n")
    assert compare(sql).misnamed == ["functions/reserve/next.sql", "revisions/0001/extra.sql"]
    assert update(sql).misnamed == ["functions/reserve/next.sql", "revisions/0001/extra.sql"]
    assert read_lock(sql) == read_lock()


def test_a_damaged_lock_is_refused_by_line(tmp_path: Path) -> None:
    tree = _copy_of_the_tree(tmp_path)
    lock = tree / "sql" / LOCK_FILE
    lines = lock.read_text().splitlines(keepends=True)
    lock.write_text("".join([*lines[:2], "not a checksum  functions/ack/0001.sql\n", *lines[2:]]))
    with pytest.raises(ValueError, match=r"migrations.lock, line 3 is not '<sha256>  <path>'"):
        read_lock(tree / "sql")
