"""Run pgqueue's packaged alembic migrations without an alembic.ini, or inside your own alembic tree.

Two ways to install pgqueue's schema; use one per database:

- ``pgqueue migrate`` / :func:`upgrade`: pgqueue's own environment, which records its
  revision in its own table, ``pgqueue_alembic_version``;
- pgqueue's revisions as a branch (label ``pgqueue``) of your alembic tree: list
  ``pgqueue:_migrations/versions`` (or :func:`version_location`) in your
  ``version_locations``, pass :func:`keep_revisions_in_your_tree` to ``context.configure`` in
  your ``env.py``, and ``alembic upgrade heads`` installs both histories, recorded in your
  ``alembic_version`` table.

:func:`upgrade` recognises a database whose pgqueue branch was applied the second way and
upgrades that branch where it is recorded, instead of installing the schema a second time.

On an empty database (no ``pgqueue`` schema, no pgqueue revision recorded), :func:`upgrade` to
head does not walk the revisions one by one: it installs pgqueue as it is at head (the head
schema, the newest version of every function, the triggers) and stamps the head revision, in
one transaction. A database at any revision, and ``alembic upgrade`` itself, walk the revisions.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from alembic.operations.ops import MigrationScript
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import coerce_resource_to_filename
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from pgqueue import store
from pgqueue.errors import QueueConfigurationError
from pgqueue.migration_support import INSTALL_HEAD
from pgqueue.resources import migrations_dir, versions_dir

# The table an application's alembic tree records its revisions in (alembic's default).
APP_VERSION_TABLE = "alembic_version"


def alembic_config(dsn: str | None = None, *, output: Any = None) -> Config:
    """An alembic :class:`Config` for pgqueue's own environment, bound to ``dsn``."""
    config = Config(output_buffer=output)
    # Paths are separated the platform's way (a space in a path must not split it).
    config.set_main_option("path_separator", "os")
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("version_locations", str(versions_dir()))
    if dsn is not None:
        config.attributes["dsn"] = dsn
    return config


def version_location() -> str:
    """pgqueue's alembic versions folder in the installed package, for your ``version_locations``.

    In an ``alembic.ini`` or ``[tool.alembic]`` write ``pgqueue:_migrations/versions`` instead
    (alembic resolves ``package:path`` itself); this is for configs built in Python.
    """
    return str(versions_dir())


def revisions() -> list[str]:
    """Every revision id pgqueue ships, oldest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [s.revision for s in reversed(list(script.walk_revisions()))]


def keep_revisions_in_your_tree(context: MigrationContext, revision: object,
                                directives: list[MigrationScript]) -> None:
    """``process_revision_directives`` hook: ``alembic revision`` writes into your tree, onto your head.

    Without it, with pgqueue's versions in ``version_locations``, a plain ``alembic revision``
    chains your migration onto pgqueue's branch and writes it into the installed package (a
    new tree), or stops with "Multiple heads are present" (a tree with history). With it, a
    revision given no ``--head`` goes onto your own head (a new base when you have none yet),
    in your first versions folder. Needs ``revision_environment = true`` so that ``alembic
    revision`` runs ``env.py``. ``--head``, ``--version-path`` and several heads of your own
    are left to alembic.
    """
    script = context.script
    if script is None:
        return
    ours = Path(versions_dir()).resolve()
    theirs = [p for p in (Path(coerce_resource_to_filename(str(loc))).resolve()
                          for loc in script.version_locations or [script.versions]) if p != ours]
    for directive in directives:
        if directive.head not in (None, "head"):  # the user chose with --head (the CLI leaves None)
            continue
        heads = [s for s in script.get_revisions("heads")
                 if s is not None and not Path(s.path).resolve().is_relative_to(ours)]
        if len(heads) == 1:
            directive.head = heads[0].revision
        elif not heads:
            directive.head = "base"
            if directive.version_path is None and theirs:
                directive.version_path = str(theirs[0])


#: The schema every pgqueue table, function and type lives in.
SCHEMA = "pgqueue"
#: The table ``pgqueue migrate`` records pgqueue's revision in (in your default schema).
VERSION_TABLE = "pgqueue_alembic_version"


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """``include_object`` hook: autogenerate leaves pgqueue's schema alone.

    With ``include_schemas=True``, ``alembic revision --autogenerate`` reflects the ``pgqueue``
    schema, finds tables your metadata does not declare, and proposes dropping them (and
    ``pgqueue_alembic_version``). Pass this as ``context.configure(include_object=...)`` in your
    ``env.py`` so that every table, index, constraint and column of pgqueue's, and its version
    table, is left out of the comparison; everything else is compared as usual. To combine it
    with a filter of your own, call it first: ``return include_object(obj, ...) and mine(obj, ...)``.
    """
    table = obj if type_ == "table" else getattr(obj, "table", None)  # a column, index or constraint's table
    if table is None:
        return True
    return getattr(table, "schema", None) != SCHEMA and getattr(table, "name", None) != VERSION_TABLE


def upgrade(dsn: str, revision: str = "head") -> None:
    """Migrate the database at ``dsn`` to ``revision`` (default: the newest).

    If pgqueue's branch was applied through your alembic tree (its revision is in your
    ``alembic_version`` table), that branch is upgraded and recorded there, in one transaction.
    An empty database migrated to head gets the head install (see the module's docstring); to
    walk the revisions instead, run ``alembic upgrade heads`` or ``command.upgrade(alembic_config(dsn),
    "head")``.
    """
    adopted, installed = _inspect(dsn)
    if adopted:
        _upgrade_in_app_table(dsn, adopted, revision)
    elif not installed and _is_head(revision):
        command.stamp(_head_install_config(dsn), "head")
    else:
        command.upgrade(alembic_config(dsn), revision)


def downgrade(dsn: str, revision: str = "base") -> None:
    """Migrate the database at ``dsn`` down to ``revision`` (``base`` removes pgqueue)."""
    adopted = _recorded_in_app_table(dsn)
    if adopted:
        raise QueueConfigurationError(
            f"pgqueue's schema in this database belongs to your alembic tree ({APP_VERSION_TABLE} records "
            f"{', '.join(adopted)}), so `pgqueue migrate --downgrade` leaves it alone: downgrade it with your "
            f"tree, e.g. `alembic downgrade pgqueue@{'base' if revision == 'base' else revision}`"
        )
    command.downgrade(alembic_config(dsn), revision)


def upgrade_sql(revision: str = "head") -> str:
    """The SQL that ``upgrade`` would run on an empty database, for teams applying DDL themselves.

    At head that is the head install and the stamp of the head revision; for an older
    ``revision``, the revisions up to it.
    """
    buffer = io.StringIO()
    if _is_head(revision):
        command.stamp(_head_install_config(output=buffer), "head", sql=True)
    else:
        command.upgrade(alembic_config(output=buffer), revision, sql=True)
    return buffer.getvalue()


def downgrade_sql(from_revision: str = "head", to_revision: str = "base") -> str:
    """The SQL that ``downgrade`` would run, for teams applying DDL themselves."""
    buffer = io.StringIO()
    command.downgrade(alembic_config(output=buffer), f"{from_revision}:{to_revision}", sql=True)
    return buffer.getvalue()


# ------------------------------------------------------------------ head install
def _is_head(revision: str) -> bool:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    return revision in ("head", "heads", "pgqueue@head", *heads)


def _head_install_config(dsn: str | None = None, *, output: Any = None) -> Config:
    # migrations/env.py sees the attribute and runs migration_support.install_head before the stamp.
    config = alembic_config(dsn, output=output)
    config.attributes[INSTALL_HEAD] = True
    return config


def _inspect(dsn: str) -> tuple[list[str], bool]:
    """(pgqueue's revisions in the application's alembic table, whether any of pgqueue is in the database)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        adopted = _adopted(conn)
        installed = bool(adopted) or bool(store.alembic_own_versions(conn)) or store.pgqueue_schema_exists(conn)
    return adopted, installed


# ----------------------------------------------------------- pgqueue in your tree
def _recorded_in_app_table(dsn: str) -> list[str]:
    """pgqueue's revisions recorded in the application's alembic table, if that is where its branch lives."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return _adopted(conn)


def _adopted(conn: psycopg.Connection[Any]) -> list[str]:
    adopted = store.alembic_user_versions(conn, revisions())
    if adopted and store.alembic_own_versions(conn):
        raise QueueConfigurationError(
            f"pgqueue's schema is recorded twice in this database: in pgqueue_alembic_version (by `pgqueue "
            f"migrate`) and in {APP_VERSION_TABLE} (by your alembic tree: {', '.join(adopted)}). Keep one: "
            "`drop table pgqueue_alembic_version` to let your tree own it"
        )
    return adopted


def _upgrade_in_app_table(dsn: str, adopted: Iterable[str], revision: str) -> None:
    old = list(adopted)
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool)
    try:
        # One transaction: pgqueue's own table holds the branch while alembic upgrades it, then the
        # result moves back to the application's table; a failure anywhere leaves both untouched.
        with engine.begin() as conn:
            config = alembic_config(dsn)
            config.attributes["connection"] = conn
            command.stamp(config, old)
            command.upgrade(config, revision)
            new = store.alembic_own_versions(conn)
            store.alembic_user_versions_delete(conn, old)
            store.alembic_user_versions_insert(conn, new)
            store.alembic_own_versions_drop(conn)
    finally:
        engine.dispose()
