"""What every command shares: choosing the database, reporting errors, logging, loading job modules."""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import NoReturn, ParamSpec, TypeVar

import psycopg
import typer
from psycopg.conninfo import conninfo_to_dict

# typer 0.29 vendors click and exports only part of it: typer.BadParameter (how a bad value becomes a
# usage error naming its option) is public; the current context and a parameter's base class are not.
from typer._click.core import Parameter
from typer._click.globals import get_current_context
from typer.core import TyperArgument, TyperOption

from pgqueue import (
    Client,
    ConnectionConfig,
    Settings,
    load_settings,
    normalize_dsn,
    prepare_database,
    registered_jobs,
)
from pgqueue.embedded import EmbeddedPostgres, default_data_dir
from pgqueue.errors import QueueConfigurationError, QueueError, QueueStorageError
from pgqueue.limits import queue_name_problem, shown
from pgqueue.redaction import redact_record

P = ParamSpec("P")
R = TypeVar("R")

# Exit codes: 0 success, 1 the operation failed (database, unknown id, refused retry),
# 2 bad usage or configuration (click uses 2 for usage errors too), 130 interrupted.
EXIT_FAILURE = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An error the CLI reports as one line, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


_debug = False


def set_debug(value: bool) -> None:
    """Show tracebacks for errors (``--debug``, or ``PGQUEUE_DEBUG=1``)."""
    global _debug  # noqa: PLW0603
    _debug = _debug or value


def debugging() -> bool:
    """Whether ``--debug`` is on."""
    return _debug or os.environ.get("PGQUEUE_DEBUG", "") not in ("", "0")


def err(message: str) -> None:
    """One line on stderr."""
    typer.echo(message, err=True)


def one_line(text: object) -> str:
    """A message folded onto one line."""
    return " ".join(str(text).split())


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Report an error and exit."""
    raise CliError(message, code)


def reports_errors(function: Callable[P, R]) -> Callable[P, R]:
    """Turn pgqueue, psycopg and CLI errors into one line on stderr and a non-zero exit code.

    With ``--debug`` the traceback is printed as well.
    """

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if kwargs.get("debug"):
            set_debug(True)
        refuse_undecodable(kwargs)  # a usage error (exit 2), raised outside the handler below
        try:
            return function(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            err("pgqueue: interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            if debugging():
                traceback.print_exc(file=sys.stderr)
            code, message = _describe(exc)
            err(f"pgqueue: error: {one_line(message)}")
            raise typer.Exit(code) from None

    return wrapper


def refuse_undecodable(values: dict[str, object]) -> None:
    """Raise a usage error naming the option (or argument) whose value is not valid UTF-8.

    Python keeps the bytes of such an argument as lone surrogates, which no PostgreSQL text (a
    queue, a key, a DSN, a filter) can hold: the command would fail later with a raw
    UnicodeEncodeError, after connecting.
    """
    ctx = get_current_context(silent=True)
    if ctx is None:
        return
    for param in ctx.command.params:
        value = values.get(param.name or "")
        for item in value if isinstance(value, list | tuple) else (value,):
            if isinstance(item, str) and any("\ud800" <= c <= "\udfff" for c in item):
                raise typer.BadParameter(f"{shown(item)} is not valid UTF-8 (each \\udcXX is a byte that decodes to no "
                                   "character); nothing was done", ctx=ctx, param_hint=_hint(param))


def _hint(param: Parameter) -> str:
    """How a usage error names a parameter: ``'--queue' / '-q'``, ``'QUEUE'``."""
    return param.get_error_hint() if isinstance(param, TyperOption | TyperArgument) else repr(param.name)


def _describe(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, CliError):
        return exc.code, str(exc)
    if isinstance(exc, QueueConfigurationError):
        return EXIT_CONFIG, f"configuration: {exc}"
    if isinstance(exc, QueueError):
        return EXIT_FAILURE, str(exc)
    if isinstance(exc, psycopg.Error):
        return EXIT_FAILURE, f"database: {exc}"
    return EXIT_FAILURE, f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"


# ------------------------------------------------------------------ the database
def describe_dsn(dsn: str) -> str:
    """``user@host:port/dbname`` for a DSN, never showing its password."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparseable DSN>"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    user = params.get("user")
    dbname = params.get("dbname") or user or "?"
    who = f"{user}@" if user else ""
    return f"{who}{host}:{port}/{dbname}"


@dataclass(frozen=True)
class Target:
    """The database a command works on, and where that choice came from."""

    settings: Settings
    connection: ConnectionConfig
    dsn: str
    source: str
    embedded: bool

    def describe(self) -> str:
        """One line: which database, from where (never the password)."""
        if self.embedded:
            return (f"the embedded PostgreSQL 18 (data in {default_data_dir()}; "
                    "stop it with `pgqueue embedded stop`)")
        return f"{describe_dsn(self.dsn)} (from {self.source})"

    def client(self) -> Client:
        """A :class:`Client` bound to this database."""
        return Client(settings=self.settings)


def check_dsn(dsn: str) -> None:
    """Refuse a ``--dsn`` libpq cannot parse (SQLAlchemy's ``postgresql+psycopg://`` is accepted)."""
    try:
        normalize_dsn(dsn, "--dsn")
    except QueueConfigurationError as exc:
        fail(str(exc), EXIT_CONFIG)


def _source(dsn_arg: str | None, settings: Settings, config: ConnectionConfig) -> str:
    if dsn_arg:
        return "--dsn"
    try:
        bare = load_settings(environ={}).connections.get(config.name)
    except QueueError:
        bare = None
    if bare is not None and bare.dsn == config.dsn:
        return f"[tool.pgqueue] in {settings.source}"
    return "PGQUEUE_DSN" if os.environ.get("PGQUEUE_DSN") else "DATABASE_URL"


def _with_dsn(settings: Settings, dsn: str) -> Settings:
    """Fill ``dsn`` into every database connection that has none."""
    connections = {
        name: replace(conn, dsn=dsn) if conn.driver == "database" and not conn.dsn else conn
        for name, conn in settings.connections.items()
    }
    return replace(settings, connections=connections)


def target(dsn_arg: str | None, connection: str | None = None, *, need_schema: bool = True,
           announce: bool = True, embedded: bool = True, command: str = "") -> Target:
    """Choose the database: ``--dsn``, else configuration/environment, else the embedded server.

    Connects once to check the server answers (and, with ``need_schema``, that it is
    migrated), and says on stderr which database it is. With ``embedded=False`` (a worker
    without ``--embedded``) no configured database is an error, not the embedded server: a
    production worker that lost its ``PGQUEUE_DSN`` must not look healthy.
    """
    if dsn_arg is not None:
        check_dsn(dsn_arg)
    settings = load_settings(dsn=dsn_arg, dsn_source="--dsn")
    config = settings.connection(connection)
    if config.driver != "database":
        fail(f"connection {config.name!r} uses the {config.driver!r} driver, which runs jobs inline at "
             "dispatch and has no database; use a database connection", EXIT_CONFIG)
    if config.dsn:
        # load_settings checked it, naming where it came from.
        found = Target(settings, config, config.dsn, _source(dsn_arg, settings, config), embedded=False)
    elif not embedded:
        fail(f"no database is configured for {command or 'this command'} (no --dsn, PGQUEUE_DSN, DATABASE_URL, "
             f"or dsn for connection {config.name!r} in [tool.pgqueue]), and a worker does not fall back to "
             "the embedded PostgreSQL on its own: set PGQUEUE_DSN=postgresql://user:password@host/dbname, or pass "
             "--embedded to run against the embedded server (development only)", EXIT_CONFIG)
    else:
        # prepare_database starts and migrates the embedded server; `pgqueue migrate` only starts it.
        dsn = prepare_database(settings, announce=False) if need_schema else EmbeddedPostgres().start()
        settings = _with_dsn(settings, dsn)
        found = Target(settings, settings.connection(config.name), dsn, "embedded", embedded=True)
    if announce:
        err(f"pgqueue: using {found.describe()}")
    preflight(found, need_schema=need_schema)
    return found


def preflight(found: Target, *, need_schema: bool) -> None:
    """Fail with one clear line if the server is unreachable or not migrated."""
    try:
        # Reachability first, with libpq's own words; the schema check is the library's.
        with psycopg.connect(found.dsn, connect_timeout=10, autocommit=True):
            pass
    except psycopg.OperationalError as exc:
        fail(f"cannot connect to {describe_dsn(found.dsn)}: {one_line(exc)}")
    if need_schema:
        try:
            asyncio.run(_check_schema(found))
        except QueueStorageError as exc:
            fail(f"{describe_dsn(found.dsn)}: {exc}")


async def _check_schema(found: Target) -> None:
    async with Client(settings=found.settings, pool_size=1) as client:
        await client.check_schema(found.connection.name)


# --------------------------------------------------------------------- job modules
def import_apps(modules: Iterable[str]) -> list[str]:
    """Import the modules that define jobs (``--app`` / ``[tool.pgqueue] app``); returns their names.

    The working directory is put on ``sys.path`` first, as ``python -m`` would, so
    ``--app myapp.jobs`` finds the application's package.
    """
    names = list(dict.fromkeys(m.strip() for m in modules if m and m.strip()))
    cwd = os.getcwd()
    if names and cwd not in sys.path:
        sys.path.insert(0, cwd)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            if debugging():
                traceback.print_exc(file=sys.stderr)
            fail(f"cannot import job module {name!r} (--app): {type(exc).__name__}: {one_line(exc)}", EXIT_CONFIG)
    return names


def app_modules(options: list[str] | None, settings: Settings) -> list[str]:
    """The job modules to import: ``--app`` options (comma lists allowed) and ``[tool.pgqueue] app``."""
    found: list[str] = []
    for item in [*(options or []), *settings.app]:
        found.extend(part for part in item.split(",") if part.strip())
    return found


def job_count() -> int:
    """How many job types are registered in this process."""
    return len(registered_jobs())


#: The fields a log line about a job carries (``JobContext.log_fields``), in this order.
JOB_FIELDS = ("job_id", "job_name", "queue", "attempt", "token")
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


class TextFormatter(logging.Formatter):
    """``time LEVEL message``, then ``[job_id=… job_name=… queue=… attempt=… token=…]`` on a line about a job."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(message)s", "%Y-%m-%d %H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(redact_record(record))
        fields = [f"{name}={record.__dict__[name]}" for name in JOB_FIELDS if name in record.__dict__]
        if not fields:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} [{' '.join(fields)}]{newline}{rest}"


#: On a line about a failed attempt (issue 29): the exception's qualified class and the attempt's seconds.
FAILURE_FIELDS = ("error", "duration")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the job's
    fields (``job_id``, ``job_name``, ``queue``, ``attempt``, ``token``) on a line about a job, ``error``
    (the exception's class) and ``duration`` (the attempt's seconds) on a line about a failed attempt, and
    ``exception`` (the traceback) when there is one. What a job declares secret is masked
    (:func:`pgqueue.redaction.redact_record`)."""

    def format(self, record: logging.LogRecord) -> str:
        redact_record(record)
        line: dict[str, object] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        for name in (*JOB_FIELDS, *FAILURE_FIELDS):
            if name in record.__dict__:
                line[name] = record.__dict__[name]
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str)

    converter = time.gmtime  # type: ignore[assignment]  # UTC timestamps


def configure_logging(verbose: bool = False, handler: logging.Handler | None = None, *, log_format: str = "text",
                      log_level: str | None = None) -> None:
    """pgqueue's log lines on stderr: failures and retries always, every job with ``-v`` (or
    ``log_level="debug"``); ``log_format="json"``: one JSON object per line (:class:`JsonFormatter`)."""
    if log_format not in LOG_FORMATS:
        fail(f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}", EXIT_CONFIG)
    if log_level is not None and log_level.lower() not in LOG_LEVELS:
        fail(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}", EXIT_CONFIG)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger("pgqueue")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    level = logging.getLevelName(log_level.upper()) if log_level else None
    root.setLevel(level or logging.INFO)
    root.propagate = False
    logging.getLogger("pgqueue.worker").setLevel(level or (logging.DEBUG if verbose else logging.INFO))


def parse_queues(text: str | None) -> list[str] | None:
    """``high,default`` -> ``["high", "default"]`` (None when not given); each name must follow
    the queue-name rule (:func:`pgqueue.limits.queue_name_problem`)."""
    if text is None:
        return None
    queues = [q.strip() for q in text.split(",")]
    if not any(queues):
        fail(f"--queue: expected queue names separated by commas, got {shown(text)}", EXIT_CONFIG)
    for name in queues:  # an empty one ("a,,b", "a,") too: "" is no queue, never the default
        problem = queue_name_problem(name)
        if problem is not None:
            fail(f"--queue: {problem}", EXIT_CONFIG)
    return queues


def queue_name(value: str | None) -> str | None:
    """Callback of a ``--queue QUEUE`` option: a name that breaks the queue-name rule is a usage
    error (no job can be on such a queue)."""
    if value is not None:
        problem = queue_name_problem(value)
        if problem is not None:
            raise typer.BadParameter(problem)
    return value
