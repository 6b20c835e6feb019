"""Named connections and settings: ``[tool.pgqueue]`` in pyproject.toml, the environment, arguments.

Precedence, highest first: explicit arguments, environment (``PGQUEUE_DSN``, falling back to
``DATABASE_URL``), ``[tool.pgqueue]``, built-in defaults. Two connections always exist:
``database`` (jobs stored in PostgreSQL, run by workers) and ``sync`` (jobs run inline at
dispatch). With no DSN anywhere, the embedded PostgreSQL is used (started by
:func:`pgqueue.startup.prepare_database`, not here: resolving settings has no side effects).
"""

from __future__ import annotations

import math
import os
import sys
import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgqueue.backoff import Backoff
from pgqueue.errors import QueueConfigurationError
from pgqueue.limits import queue_name_problem

Driver = Literal["database", "sync"]

#: Why ``driver = "sync"`` warns, and what replaces it (:mod:`pgqueue.testing.inline`).
DRIVER_SYNC_DEPRECATED = (
    'driver = "sync" (jobs run inline at dispatch) is deprecated and will be removed in the next '
    "release; in tests use pgqueue.testing.inline(client) (every dispatch of that client runs at once) "
    "or pgqueue.testing.drain(client) (run what was stored, with a real worker)")

_PACKAGE_DIR = str(Path(__file__).resolve().parent) + os.sep


def warn_deprecated(message: str) -> None:
    """A DeprecationWarning pointing at the first frame outside pgqueue: the user's line, whichever
    of pgqueue's calls (a client's, a job's, the settings') led here."""
    frame = sys._getframe(1)
    level = 2  # the caller of this function, as seen from warnings.warn here
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


DEFAULT_LEASE = 90.0
DEFAULT_TIMEOUT = 60.0
DEFAULT_LEASE_MARGIN = 5.0
DEFAULT_TRIES = 3
DEFAULT_BACKOFF = Backoff.exponential(base=1.0, factor=2.0, max=600.0, jitter=0.1)
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024


def _positive(value: object, what: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)) \
            or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise QueueConfigurationError(f"{what} must be a finite number {bound}, got {value!r}")
    return float(value)


#: SQLAlchemy's URL schemes for PostgreSQL drivers, and the libpq scheme each one stands for.
#: ``DATABASE_URL=postgresql+psycopg://…`` is what a SQLAlchemy (FastAPI, alembic) app already has;
#: pgqueue speaks libpq itself, so the driver part is dropped.
SQLALCHEMY_SCHEMES = {
    f"{base}+{driver}://": f"{base}://"
    for base in ("postgresql", "postgres")
    for driver in ("psycopg", "psycopg2", "psycopg2cffi", "asyncpg", "pg8000")
}


def normalize_dsn(dsn: str, source: str) -> str:
    """``dsn`` as libpq takes it: a SQLAlchemy driver scheme (``postgresql+psycopg://``) becomes
    ``postgresql://``; a value libpq cannot parse raises, naming ``source`` (where it came from:
    ``PGQUEUE_DSN``, ``--dsn``, a pyproject table), never the password."""
    value = dsn.strip()
    lowered = value.lower()
    for scheme, libpq in SQLALCHEMY_SCHEMES.items():
        if lowered.startswith(scheme):
            value = libpq + value[len(scheme):]
            break
    else:
        head, sep, _ = lowered.partition("://")
        if sep and "+" in head:
            raise QueueConfigurationError(
                f"invalid DSN in {source}: the scheme {head + '://'!r} is a SQLAlchemy URL for a driver "
                "pgqueue does not know; use postgresql://user:password@host:5432/dbname "
                "(postgresql+psycopg://, +psycopg2 and +asyncpg are accepted too)")
    try:
        conninfo_to_dict(value)
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
        raise QueueConfigurationError(
            f"invalid DSN in {source}: {reason} (expected a libpq URI such as "
            "postgresql://user:password@host:5432/dbname, or key=value pairs)") from None
    return value


@dataclass(frozen=True)
class ConnectionConfig:
    """One named connection.

    ``lease`` is how long a reservation lasts, in seconds: a reserved job whose worker neither settles
    nor renews it within that time becomes reservable again. With ``heartbeat`` (the
    default) workers renew the leases of running handlers every ``(lease -
    lease_margin) / 3`` seconds, so ``lease`` is the time it takes to notice a crashed
    worker and a job's ``timeout`` may be far longer. With ``heartbeat = false`` a job's
    ``timeout`` must stay below ``lease - lease_margin`` so the handler stops before
    its lease ends (or the handler renews it with ``context.extend``).
    """

    name: str
    driver: Driver = "database"
    dsn: str | None = None
    listen_dsn: str | None = None
    queue: str = "default"
    lease: float = DEFAULT_LEASE
    lease_margin: float = DEFAULT_LEASE_MARGIN
    timeout: float = DEFAULT_TIMEOUT
    tries: int = DEFAULT_TRIES
    backoff: Backoff = DEFAULT_BACKOFF
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    # PgBouncer in transaction mode cannot keep server-side prepared statements.
    prepared_statements: bool = True
    # The DSN goes through a transaction-mode pooler (PgBouncer): no prepared statements, and
    # LISTEN only through listen_dsn (a direct connection); without one, workers poll.
    transaction_pooler: bool = False
    # Workers of this connection renew the leases of running handlers (see the class docstring).
    heartbeat: bool = True

    def __post_init__(self) -> None:
        for key in ("dsn", "listen_dsn"):
            value = getattr(self, key)
            if isinstance(value, str) and value.lower().startswith(tuple(SQLALCHEMY_SCHEMES)):
                object.__setattr__(self, key, normalize_dsn(value, f"connection {self.name!r}: {key}"))
        if self.driver not in ("database", "sync"):
            raise QueueConfigurationError(
                f"connection {self.name!r}: driver must be 'database' or 'sync', got {self.driver!r}"
            )
        problem = queue_name_problem(self.queue)
        if problem is not None:
            raise QueueConfigurationError(f"connection {self.name!r}: queue: {problem}")
        if not isinstance(self.heartbeat, bool):
            raise QueueConfigurationError(
                f"connection {self.name!r}: heartbeat must be true or false, got {self.heartbeat!r}")
        _positive(self.lease, f"connection {self.name!r}: lease")
        _positive(self.lease_margin, f"connection {self.name!r}: lease_margin", allow_zero=True)
        if self.lease_margin >= self.lease:
            raise QueueConfigurationError(
                f"connection {self.name!r}: lease_margin ({self.lease_margin}s) must be below "
                f"lease ({self.lease}s)"
            )
        check_timeout(self.timeout, self, what=f"connection {self.name!r}: timeout")
        check_tries(self.tries, what=f"connection {self.name!r}: tries")
        if isinstance(self.max_payload_bytes, bool) or not isinstance(self.max_payload_bytes, int) \
                or self.max_payload_bytes < 1:
            raise QueueConfigurationError(
                f"connection {self.name!r}: max_payload_bytes must be a positive integer, "
                f"got {self.max_payload_bytes!r}"
            )


#: The longest job timeout: one year. Longer is a mistake, and a bound keeps the event
#: loop's deadline arithmetic exact.
MAX_TIMEOUT = 31_536_000.0


def check_timeout(timeout: object, connection: ConnectionConfig, *, what: str) -> float:
    """Validate a job timeout for the connection; returns it as float.

    Always: a finite number of seconds, > 0 and at most :data:`MAX_TIMEOUT`. With the
    connection's ``heartbeat`` on, the lease is renewed while the handler runs, so nothing
    else bounds it; with it off, the handler must stop before its lease ends:
    ``timeout < lease - lease_margin``.
    """
    seconds = _positive(timeout, what)
    if seconds > MAX_TIMEOUT:
        raise QueueConfigurationError(f"{what} is {seconds:g}s, over the limit of {MAX_TIMEOUT:g}s (one year)")
    limit = connection.lease - connection.lease_margin
    if connection.driver == "database" and not connection.heartbeat and seconds >= limit:
        raise QueueConfigurationError(
            f"{what} is {seconds:g}s but must be below lease - lease_margin = "
            f"{connection.lease:g} - {connection.lease_margin:g} = {limit:g}s on connection "
            f"{connection.name!r}, or the lease could expire while the handler still runs: "
            "lower the timeout or raise the lease (or turn the connection's heartbeat on)"
        )
    return seconds


def check_tries(tries: object, *, what: str) -> int:
    """Validate a number of tries (>= 1: the first run counts)."""
    if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
        raise QueueConfigurationError(
            f"{what} must be an integer >= 1 (tries=3 means the first run and 2 retries), got {tries!r}"
        )
    return tries


@dataclass(frozen=True)
class Settings:
    """All of pgqueue's configuration: the named connections and the default one."""

    connections: Mapping[str, ConnectionConfig] = field(default_factory=dict)
    default: str = "database"
    app: tuple[str, ...] = ()
    source: str = "defaults"

    def connection(self, name: str | None = None) -> ConnectionConfig:
        """The named connection (default: the default one); unknown names raise."""
        key = name or self.default
        try:
            return self.connections[key]
        except KeyError:
            known = ", ".join(sorted(self.connections)) or "none"
            raise QueueConfigurationError(
                f"unknown connection {key!r}; configured connections: {known}. "
                "Define it under [tool.pgqueue.connections] in pyproject.toml"
            ) from None

    def database_dsn(self) -> str | None:
        """The DSN of the default database connection, if any is configured."""
        for conn in (self.connections.get(self.default), self.connections.get("database")):
            if conn is not None and conn.driver == "database" and conn.dsn:
                return conn.dsn
        return None


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml from ``start`` (default: the working directory) upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


#: Settings renamed in a 0.x release: old key -> new key. Not aliases: the old key is refused with
#: an error that names its replacement, so a pyproject never silently keeps a default.
_RENAMED_KEYS = {"retry_after": "lease"}


def _connection_from_table(name: str, table: Mapping[str, Any], where: str) -> ConnectionConfig:
    for old, new in _RENAMED_KEYS.items():
        if old in table:
            raise QueueConfigurationError(
                f"[tool.pgqueue.connections.{name}]: setting {old!r} was renamed to {new!r}; "
                f"write {new} = {table[old]!r} instead (the value is unchanged, nothing else was read)"
            )
    known = {"driver", "dsn", "listen_dsn", "queue", "lease", "lease_margin", "timeout", "tries",
             "backoff", "max_payload_bytes", "prepared_statements", "transaction_pooler", "heartbeat"}
    unknown = set(table) - known
    if unknown:
        raise QueueConfigurationError(
            f"[tool.pgqueue.connections.{name}]: unknown setting(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(known))}"
        )
    values: dict[str, Any] = dict(table)
    for key in ("dsn", "listen_dsn"):
        if isinstance(values.get(key), str) and values[key]:
            values[key] = normalize_dsn(values[key], f"[tool.pgqueue.connections.{name}] {key} of {where}")
    if "backoff" in values:
        try:
            values["backoff"] = Backoff.coerce(values["backoff"])
        except QueueConfigurationError as exc:
            raise QueueConfigurationError(f"connection {name!r}: {exc}") from None
    if values.get("driver") == "sync":
        warn_deprecated(f"[tool.pgqueue.connections.{name}]: {DRIVER_SYNC_DEPRECATED}")
    values.setdefault("driver", "sync" if name == "sync" else "database")
    return ConnectionConfig(name=name, **values)


def load_settings(pyproject: Path | None = None, *, dsn: str | None = None,
                  environ: Mapping[str, str] | None = None, dsn_source: str = "the dsn argument (--dsn)") -> Settings:
    """Build the settings from pyproject.toml, the environment and an explicit DSN.

    Every DSN may be a libpq URI, key=value pairs, or a SQLAlchemy URL of a PostgreSQL driver
    (``postgresql+psycopg://``, ``+psycopg2``, ``+asyncpg``: the driver part is dropped). A value
    that is none of these raises :class:`~pgqueue.QueueConfigurationError` naming where it came
    from: ``dsn_source`` for ``dsn``, the environment variable, or the pyproject table.
    """
    env = os.environ if environ is None else environ
    path = pyproject if pyproject is not None else find_pyproject()
    table: Mapping[str, Any] = {}
    source = "defaults"
    if path is not None and path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise QueueConfigurationError(f"{path}: not valid TOML: {exc}") from None
        table = data.get("tool", {}).get("pgqueue", {})
        if table:
            source = str(path)
    unknown = set(table) - {"default", "connections", "app"}
    if unknown:
        raise QueueConfigurationError(
            f"[tool.pgqueue] in {path}: unknown setting(s) {', '.join(sorted(unknown))}; "
            "known: default, connections, app"
        )
    connections: dict[str, ConnectionConfig] = {
        "database": ConnectionConfig(name="database"),
        "sync": ConnectionConfig(name="sync", driver="sync"),
    }
    for name, conn_table in dict(table.get("connections", {})).items():
        connections[name] = _connection_from_table(name, conn_table, str(path))
    env_name = "PGQUEUE_DSN" if env.get("PGQUEUE_DSN") else "DATABASE_URL"
    env_dsn = env.get(env_name)
    default = str(table.get("default", "database"))
    chosen: str | None = None
    if dsn:
        chosen = normalize_dsn(dsn, dsn_source)
    elif env_dsn:
        chosen = normalize_dsn(env_dsn, f"the environment variable {env_name}")
    if chosen:
        for name, conn in connections.items():
            # An explicit DSN replaces every database DSN. The environment outranks the file for
            # the default connection's DSN and fills in the others that have none; a named
            # connection with a DSN of its own in the file keeps it.
            if conn.driver == "database" and (dsn or not conn.dsn or name == default):
                connections[name] = replace(conn, dsn=chosen)
    app = table.get("app", ())
    if isinstance(app, str):
        app = (app,)
    settings = Settings(connections=connections, default=default, app=tuple(app), source=source)
    settings.connection(default)  # an unknown default fails here, not at first dispatch
    return settings
