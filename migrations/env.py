"""Alembic environment for pgqueue's own migrations.

The database comes, in this order, from a DSN handed over by ``pgqueue migrate``
(``config.attributes["dsn"]``), ``sqlalchemy.url`` in the alembic config, ``PGQUEUE_DSN``,
then ``DATABASE_URL``. Any libpq DSN works (URI or key=value), and SQLAlchemy's
``postgresql+psycopg://`` form too. pgqueue records its
revision in its own table, ``pgqueue_alembic_version``, so it never collides with an
application's alembic history in the same database.

``pgqueue migrate`` of an empty database runs alembic's ``stamp`` with the config attribute
``pgqueue_install_head`` set: the schema as it is at head is installed first (see
pgqueue.migration_support.install_head), in the same transaction. Every other command,
``alembic upgrade head`` included, walks the revisions.
"""

from __future__ import annotations

import os

import psycopg
from alembic import context
from alembic.util import CommandError
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from pgqueue.config import normalize_dsn
from pgqueue.errors import QueueConfigurationError
from pgqueue.migration_support import INSTALL_HEAD, install_head

config = context.config


def _option(name: str) -> str | None:
    # Run from the repository root, alembic reads [tool.alembic] in pyproject.toml and has
    # no alembic.ini; asking for an ini option then raises instead of returning None.
    try:
        return config.get_main_option(name)
    except CommandError:
        return None


VERSION_TABLE = _option("version_table") or "pgqueue_alembic_version"


def _dsn() -> str:
    candidates = (
        ("pgqueue migrate", config.attributes.get("dsn")),
        ("sqlalchemy.url of the alembic config", _option("sqlalchemy.url")),
        ("the environment variable PGQUEUE_DSN", os.environ.get("PGQUEUE_DSN")),
        ("the environment variable DATABASE_URL", os.environ.get("DATABASE_URL")),
    )
    for source, dsn in candidates:
        if dsn:
            # SQLAlchemy's postgresql+psycopg:// (an application's sqlalchemy.url) is accepted.
            try:
                return normalize_dsn(str(dsn), source)
            except QueueConfigurationError as exc:
                raise SystemExit(f"pgqueue migrations: {exc}") from None
    raise SystemExit(
        "pgqueue migrations: no database given. Set PGQUEUE_DSN (or DATABASE_URL), "
        "or run `pgqueue migrate --dsn ...`."
    )


def _run_migrations() -> None:
    with context.begin_transaction():
        # pgqueue.migrate.upgrade of an empty database: install head, then `stamp` records it, in
        # the same transaction (instead of walking every revision).
        if config.attributes.get(INSTALL_HEAD):
            install_head(context.get_context())
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(dialect_name="postgresql", version_table=VERSION_TABLE, literal_binds=True,
                      transactional_ddl=True)
    _run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
        _run_migrations()
        return
    dsn = _dsn()
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool)
    with engine.connect() as conn:
        context.configure(connection=conn, version_table=VERSION_TABLE, transactional_ddl=True)
        _run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
