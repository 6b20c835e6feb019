"""What pgqueue's alembic revisions run, and the head install of a fresh database.

Under ``sql/``:

- ``functions/<name>/<NNNN>.sql``: every version of a stored function; revision ``pgqueue_<NNNN>``
  installs it, and the newest is what head runs (a review of a change is a diff of two files);
- ``revisions/<NNNN>/upgrade.sql`` and ``downgrade.sql``: what revision ``NNNN`` changes in the
  tables, and its undo;
- ``migrations.lock``: the SHA-256 of each of those frozen files (:mod:`pgqueue.migration_lock`);
- ``head/schema.sql`` and ``head/triggers.sql``: the tables and triggers as they are at head.

A revision runs the frozen files its module lists (``UPGRADE``, ``DOWNGRADE``), in that order, each
checked against the lock first: a database migrated to a revision holds exactly what that
revision shipped, whenever it was migrated, and a frozen file edited afterwards is refused
instead of silently installing something else under the same revision id.

An empty database migrated to head by :func:`pgqueue.migrate.upgrade` does not walk the revisions:
:func:`install_head` runs ``head/schema.sql``, the newest version of every function, then
``head/triggers.sql``, and alembic stamps the head revision, in one transaction. The tests compare
its catalog with that of databases upgraded from every revision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from alembic import context
from alembic.runtime.migration import MigrationContext

from pgqueue.migration_lock import COMMAND, checksum, read_lock, revision_of
from pgqueue.resources import function_names, function_path, sql_bytes, sql_file

HEAD_SCHEMA = "head/schema.sql"
HEAD_TRIGGERS = "head/triggers.sql"
# The alembic config attribute that makes migrations/env.py install head before a `stamp`.
INSTALL_HEAD = "pgqueue_install_head"


class FrozenFileChangedError(RuntimeError):
    """A frozen SQL file is not what ``sql/migrations.lock`` records for it (or the lock has no entry)."""


def frozen_text(path: str, lock: Mapping[str, str] | None = None) -> str:
    """The text of ``sql/<path>``, after checking it against its checksum in the lock."""
    recorded = (read_lock() if lock is None else lock).get(path)
    data = sql_bytes(path)
    if recorded is None:
        raise FrozenFileChangedError(
            f"pgqueue migrations: sql/{path} is not in sql/migrations.lock, so nothing was migrated. A new "
            f"revision's files are added to the lock with `{COMMAND}`; in an installed package, reinstall pgqueue.")
    found = checksum(data)
    if found != recorded:
        raise FrozenFileChangedError(
            f"pgqueue migrations: sql/{path} was changed after its revision shipped (sha256 {found}, "
            f"sql/migrations.lock records {recorded}); nothing was migrated. A shipped revision must install "
            "what it always installed: restore the file, and put the change in a new version, "
            "sql/functions/<name>/<new revision>.sql. (If revision "
            f"{revision_of(path) or '?'} has not shipped yet, re-record it: `{COMMAND} --amend "
            f"{revision_of(path) or 'NNNN'}`.)")
    return data.decode("utf-8")


def run_sql_files(paths: Sequence[str]) -> None:
    """Execute frozen SQL files (paths under sql/), in order, after checking every one against the lock.

    Online they run on the migration's connection and transaction; in ``--sql`` (offline)
    mode they are printed verbatim. Call it from a revision's ``upgrade()`` or ``downgrade()``.
    """
    lock = read_lock()
    texts = [(path, frozen_text(path, lock)) for path in paths]
    migration = context.get_context()
    for path, text in texts:
        _run(migration, path, text)


def head_files() -> list[str]:
    """What the head install runs, in order (paths under sql/): the schema, every function's newest version,
    the triggers."""
    return [HEAD_SCHEMA, *(function_path(name) for name in function_names()), HEAD_TRIGGERS]


def install_head(migration: MigrationContext) -> None:
    """Install pgqueue as it is at head into an empty database, on ``migration``'s connection and transaction.

    migrations/env.py calls it before alembic stamps the head revision (``pgqueue.migrate.upgrade``
    of an empty database); it is never part of a revision. The functions' files are frozen and
    checked against the lock; the head schema and triggers are not (they change with every
    revision that changes a table, and the tests hold them to the revisions).
    """
    lock = read_lock()
    paths = head_files()
    texts = [(path, sql_file(path) if path in (HEAD_SCHEMA, HEAD_TRIGGERS) else frozen_text(path, lock))
             for path in paths]
    for path, text in texts:
        _run(migration, path, text)


def _run(migration: MigrationContext, path: str, text: str) -> None:
    if migration.as_sql:
        # Printed verbatim: no bind-parameter parsing of colons in PL/pgSQL bodies.
        migration.impl.static_output(f"-- {path}\n{text}\n")
        return
    # Straight to the driver cursor without parameters, so that `%` in comments and
    # PL/pgSQL format() strings is not taken for a placeholder. Same connection, same
    # transaction as the rest of the migration.
    assert migration.connection is not None
    dbapi_connection = migration.connection.connection.dbapi_connection
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(text)
    finally:
        cursor.close()
