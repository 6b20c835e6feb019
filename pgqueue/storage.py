"""What a database error means: the pgqueue error it becomes, and whether it is worth retrying.

Owned by the store (:mod:`pgqueue.store`), which runs every statement; the worker asks
:func:`is_transient` to decide whether to keep going after a database error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from pgqueue.errors import QueueError, QueueRetryError, QueueStorageError

NOT_MIGRATED = "the database has no pgqueue schema (or an old one): run `pgqueue migrate` (or `alembic upgrade head`)"


def translate(error: psycopg.Error, what: str) -> QueueError:
    """A pgqueue error for a database error raised while doing ``what``."""
    state = error.sqlstate or ""
    if isinstance(error, pg_errors.UndefinedFunction | pg_errors.UndefinedTable | pg_errors.InvalidSchemaName):
        return QueueStorageError(f"{what}: {NOT_MIGRATED} ({error.diag.message_primary})")
    if state in ("PGQ01", "PGQ02", "P0002"):
        return QueueRetryError(error.diag.message_primary or str(error))
    if isinstance(error, psycopg.OperationalError):
        return QueueStorageError(f"{what}: the database could not be reached or the connection broke: {error}")
    return QueueStorageError(f"{what}: {error.diag.message_primary or error}")


@contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Re-raise psycopg errors inside the block as pgqueue errors describing ``what``."""
    try:
        yield
    except psycopg.Error as exc:
        raise translate(exc, what) from exc


# SQLSTATE classes worth retrying after a pause: connection exceptions (08), transaction
# rollbacks such as serialization failures and deadlocks (40), insufficient resources (53),
# operator intervention such as a server shutdown or a statement timeout (57).
_TRANSIENT_CLASSES = ("08", "40", "53", "57")


def is_transient(error: BaseException) -> bool:
    """Whether a database error is worth retrying after a pause (the worker keeps going)."""
    if isinstance(error, PoolTimeout | OSError | psycopg.OperationalError | psycopg.errors.PipelineAborted):
        return True
    if isinstance(error, psycopg.Error):
        state = error.sqlstate or ""
        return state[:2] in _TRANSIENT_CLASSES
    return False
