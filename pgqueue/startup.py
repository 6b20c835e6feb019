"""Choosing the database, as an explicit step: the configured one, or the embedded server.

Settings (:mod:`pgqueue.config`) only describe; this module acts. :meth:`pgqueue.Client.open`
and the CLI call :func:`prepare_database` when they need a database.
"""

from __future__ import annotations

import logging

from pgqueue.config import Settings
from pgqueue.embedded import EmbeddedPostgres

logger = logging.getLogger("pgqueue")


def prepare_database(settings: Settings, *, announce: bool = True) -> str:
    """The database DSN to use: the configured one, else the embedded PostgreSQL, started and migrated.

    With ``announce``, says in one log line that the embedded server is used and where its data is.
    Blocking (it may start a server and run migrations): from async code, run it in a thread.
    """
    configured = settings.database_dsn()
    if configured:
        return configured
    # alembic takes a noticeable time to import and only the embedded server needs it here.
    from pgqueue import migrate  # noqa: PLC0415

    server = EmbeddedPostgres()
    server.start()
    dsn = server.dsn("postgres")
    migrate.upgrade(dsn)
    if announce:
        logger.warning(
            "pgqueue: no database configured (PGQUEUE_DSN / DATABASE_URL unset); using the embedded "
            "PostgreSQL 18 with its data in %s (stop it with `pgqueue embedded stop`)", server.data_dir,
        )
    return dsn
