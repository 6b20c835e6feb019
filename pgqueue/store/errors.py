"""What a database error means: the pgqueue error it becomes, and whether it is worth retrying.

Owned by the store (:mod:`pgqueue.store`), which runs every statement; the worker asks
:func:`is_transient` (or :func:`classify`) to decide whether to keep going after a database
error, and catches :data:`DATABASE_ERRORS` around a statement whose failure it survives.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from pgqueue.errors import QueueError, QueueRetryError, QueueStorageError

#: What a statement on a pooled connection can raise when the database, the pool or the network
#: fails it (PoolTimeout: no connection in time; OSError: the socket). The worker catches these
#: around a statement it survives (a lost ack, a failed lease renewal) and lets the rest through.
DATABASE_ERRORS: tuple[type[Exception], ...] = (psycopg.Error, PoolTimeout, OSError)

# `heads`, plural: with pgqueue's revisions as a branch of your alembic tree, `alembic upgrade head`
# stops with "Multiple head revisions are present"; in pgqueue's own tree `heads` is its one head.
NOT_MIGRATED = ("the database has no pgqueue schema (or an old one): run `pgqueue migrate` "
                "(or `alembic upgrade heads` where pgqueue's revisions are a branch of your alembic tree)")


# Errors that say nothing about the statement itself but about its circumstances, by SQLSTATE:
# what happened, and what to do. psycopg makes them all OperationalErrors, which must not read
# as "the database could not be reached".
_CIRCUMSTANCES: dict[str, tuple[str, str]] = {
    "40001": ("serialization failure",
              "under REPEATABLE READ or SERIALIZABLE a concurrent transaction committed a change this one's "
              "snapshot cannot see; the transaction is aborted: roll it back and run it again"),
    "40P01": ("deadlock",
              "this transaction and another each waited for a lock the other held, and PostgreSQL aborted this "
              "one; roll it back and run it again"),
    "55P03": ("lock timeout",
              "a lock it needed stayed held by another transaction for longer than lock_timeout; the transaction "
              "is aborted and nothing it did is kept: retry later, or find the holder (pg_locks, pg_stat_activity)"),
    "25P03": ("idle-in-transaction timeout",
              "the session sat idle inside a transaction for longer than idle_in_transaction_session_timeout and "
              "the server closed it; the transaction was rolled back: keep transactions short"),
    "25P04": ("transaction timeout",
              "the transaction ran longer than transaction_timeout and the server closed the session; it was "
              "rolled back: retry, or raise transaction_timeout"),
    "57P01": ("administrator shutdown",
              "the server is shutting down or an administrator ended this session (pg_terminate_backend); the "
              "connection is closed and an open transaction rolled back: retry once the server accepts "
              "connections again"),
    "57P02": ("crash shutdown",
              "the server is restarting after a crash; the connection is closed and an open transaction rolled "
              "back: retry once it accepts connections again"),
    "57P03": ("server not accepting connections",
              "it is starting up, shutting down or recovering: retry in a moment"),
    "53300": ("too many connections",
              "every connection the server allows (max_connections) is in use: retry later, or use fewer "
              "pool connections"),
}
_STATEMENT_TIMEOUT = ("statement timeout",
                      "the statement ran longer than statement_timeout and was cancelled; the transaction is "
                      "aborted and nothing it did is kept: retry, raise statement_timeout, or find what it waited "
                      "for (pg_locks, pg_stat_activity)")
_QUERY_CANCELLED = ("query cancelled",
                    "the statement was cancelled on request (pg_cancel_backend, a client's cancel, or "
                    "statement_timeout) before it finished; the transaction is aborted and nothing it did is kept: "
                    "run it again if the cancel was not meant for it")


def translate(error: psycopg.Error, what: str) -> QueueError:
    """A pgqueue error for a database error raised while doing ``what``.

    A statement timeout, lock timeout, serialization failure, deadlock, cancelled query or
    server shutdown is named as such, with what to do; the SQLSTATE stays on
    :attr:`QueueStorageError.sqlstate`.
    """
    state = error.sqlstate or ""
    primary = error.diag.message_primary or str(error)
    if isinstance(error, pg_errors.UndefinedFunction | pg_errors.UndefinedTable | pg_errors.InvalidSchemaName):
        return QueueStorageError(f"{what}: {NOT_MIGRATED} ({primary})", sqlstate=state)
    if state in ("PGQ01", "PGQ02", "P0002"):
        return QueueRetryError(primary)
    circumstance = _CIRCUMSTANCES.get(state)
    if state == "57014":
        # The SQLSTATE is the same for both; only the (English) message tells a timeout apart.
        circumstance = _STATEMENT_TIMEOUT if "statement timeout" in primary else _QUERY_CANCELLED
    if circumstance is not None:
        label, advice = circumstance
        return QueueStorageError(f"{what}: {label} ({primary}); {advice}", sqlstate=state)
    if isinstance(error, psycopg.OperationalError):
        return QueueStorageError(f"{what}: the database could not be reached or the connection broke: {error}",
                                 sqlstate=state or None)
    return QueueStorageError(f"{what}: {primary}", sqlstate=state or None)


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


#: What a worker does after a database error (:func:`classify`): ``transient``, retry after a pause;
#: ``refused``, the database refused this statement for its data (a trigger, a full disk refusing a
#: failure record): log it and keep trying with backoff; ``configuration``, the schema is missing or
#: a privilege is (SQLSTATE classes 42, 3F): raise :func:`translate`'s error, nothing will change by
#: waiting; ``other``: not a database error, let it through.
Fault = Literal["transient", "refused", "configuration", "other"]

# SQLSTATE classes of a configuration fault: syntax error or access rule violation (42: an undefined
# function or table, no privilege), invalid schema name (3F).
_CONFIGURATION_CLASSES = ("42", "3F")


def classify(error: BaseException) -> Fault:
    """What kind of fault ``error`` is for a worker that keeps going (see :data:`Fault`)."""
    if is_transient(error):
        return "transient"
    if not isinstance(error, psycopg.Error):
        return "other"
    return "configuration" if (error.sqlstate or "")[:2] in _CONFIGURATION_CLASSES else "refused"
