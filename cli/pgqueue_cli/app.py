"""The ``pgqueue`` command: migrations, workers, failed jobs, queue operations, the embedded server.

Every command that touches a database takes ``--dsn``; without it the database comes from
``[tool.pgqueue]`` / ``PGQUEUE_DSN`` / ``DATABASE_URL``, else the embedded PostgreSQL is used.
The chosen database is named once on stderr. Errors are one line on stderr and a non-zero
exit code (1: the operation failed, 2: bad usage or configuration); ``--debug`` adds the
traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import json
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypeVar

import typer

# typer vendors click here; its exceptions are how usage errors reach main() (standalone_mode=False).
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

import pgqueue
from pgqueue import limits
from pgqueue.embedded import EmbeddedPostgres, require_wheel
from pgqueue.redaction import Redactor
from pgqueue_cli import observe, partitions, render, supervisor, workflows
from pgqueue_cli.dashboard import dashboard_command
from pgqueue_cli.runtime import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    Target,
    app_modules,
    configure_logging,
    describe_dsn,
    err,
    fail,
    import_apps,
    job_count,
    one_line,
    parse_queues,
    queue_name,
    reports_errors,
    set_debug,
    target,
)

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help text: what the README's CLI reference shows
    context_settings={"help_option_names": ["-h", "--help"]},
    help="pgqueue: a PostgreSQL-native job queue. Start with `pgqueue demo`.",
)
embedded_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                           help="The embedded PostgreSQL used when no database is configured.")
app.add_typer(embedded_app, name="embedded", short_help="Start, stop or inspect the embedded PostgreSQL.")

logger = logging.getLogger("pgqueue.cli")

# Options shared by the commands.
Dsn = Annotated[str | None, typer.Option(
    "--dsn", metavar="DSN",
    help="PostgreSQL DSN (libpq URI or key=value). Default: [tool.pgqueue], PGQUEUE_DSN, DATABASE_URL, "
         "else the embedded PostgreSQL.")]
Debug = Annotated[bool, typer.Option("--debug", help="Show the traceback of an error.")]
Connection = Annotated[str | None, typer.Argument(
    metavar="CONNECTION", help="Named connection from [tool.pgqueue.connections] (default: the default one).",
    show_default=False)]
Apps = Annotated[list[str] | None, typer.Option(
    "--app", metavar="MODULE",
    help="Module that defines jobs, imported so they register (repeatable; also [tool.pgqueue] app).")]
Redact = Annotated[list[str] | None, typer.Option(
    "--redact", metavar="FIELD",
    help="Mask this args field of every job (repeatable), besides each job class's own `redact`.")]
QueueFilter = Annotated[str | None, typer.Option("--queue", "-q", metavar="QUEUE", help="Only this queue.",
                                                 callback=queue_name)]

#: The most worker processes `queue:work --processes` runs (a typo of 10**20 must not fork until the
#: machine gives out).
MAX_PROCESSES = 1024


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pgqueue {pgqueue.__version__}")
        raise typer.Exit


@app.callback()
def _root(
    debug: Debug = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """pgqueue: a PostgreSQL-native job queue. Start with `pgqueue demo`."""
    set_debug(debug)


def _unique_key(value: str | None) -> str | None:
    """Callback of ``--unique-key``: a key the library would refuse is a usage error naming the option."""
    if value is not None:
        problem = limits.unique_key_problem(value)
        if problem is not None:
            raise typer.BadParameter(problem)
    return value


def _unique_scope(value: str) -> str:
    if value not in ("queued", "active", "period"):
        raise typer.BadParameter(f"must be queued, active or period, got {limits.shown(value)}")
    return value


def _debounce_key(value: str | None) -> str | None:
    """Callback of ``--debounce-key``: the unique key's rule, named for the option."""
    if value is not None:
        problem = limits.unique_key_problem(value)
        if problem is not None:
            raise typer.BadParameter(problem.replace("unique key", "debounce key"))
    return value


def _debounce_seconds(value: float | None) -> float | None:
    """Callback of ``--debounce`` and ``--debounce-max-wait``: seconds above 0 and at most 10 years."""
    if value is not None and not 0 < value <= limits.MAX_DELAY_SECONDS:  # NaN too
        raise typer.BadParameter(f"must be a finite number of seconds above 0 and at most "
                                 f"{limits.MAX_DELAY_SECONDS:.0f} (10 years), got {value:g}")
    return value


def _dispatch_options(delay: float, unique_key: str | None, unique_scope: str, unique_period: float | None,
                      debounce: float | None, debounce_key: str | None, debounce_max_wait: float | None) -> None:
    """The option combinations ``queue:dispatch`` refuses (before any database is touched)."""
    if not 0 <= delay <= limits.MAX_DELAY_SECONDS:  # NaN too
        fail(f"--delay must be a finite number of seconds >= 0 and at most {limits.MAX_DELAY_SECONDS:.0f} "
             f"(10 years), got {delay:g}", EXIT_CONFIG)
    if unique_key is None and (unique_scope != "queued" or unique_period is not None):
        fail("--unique-scope and --unique-period only apply with --unique-key", EXIT_CONFIG)
    if unique_key is not None and (unique_scope == "period") != (unique_period is not None):
        fail("--unique-scope period needs --unique-period SECONDS (and only it takes one)", EXIT_CONFIG)
    if (debounce is None) != (debounce_key is None) or (debounce is None and debounce_max_wait is not None):
        fail("--debounce SECONDS and --debounce-key KEY go together (--debounce-max-wait only with them)",
             EXIT_CONFIG)
    if debounce is not None and (delay or unique_key is not None):
        fail("a debounced dispatch takes no --delay (the window is its delay) and no --unique-key", EXIT_CONFIG)
    if debounce is not None and debounce_max_wait is not None and debounce_max_wait < debounce:
        fail(f"--debounce-max-wait must be at least the window (--debounce {debounce:g}), got "
             f"{debounce_max_wait:g}", EXIT_CONFIG)


def _unique_period(value: float | None) -> float | None:
    if value is not None and not 0 < value <= limits.MAX_UNIQUE_PERIOD_SECONDS:  # NaN too
        raise typer.BadParameter(f"must be a finite number of seconds above 0 and at most "
                                 f"{limits.MAX_UNIQUE_PERIOD_SECONDS:.0f} (10 years), got {value:g}")
    return value


def _failure_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        fail(f"{text!r} is not a failure id (a UUID; list them with `pgqueue queue:failed`)", EXIT_CONFIG)


# ------------------------------------------------------------------------ migrate
@app.command("migrate", short_help="Create or upgrade pgqueue's schema (or print its SQL).")
@reports_errors
def migrate_command(
    sql: Annotated[bool, typer.Option("--sql", help="Print the SQL instead of running it.")] = False,
    downgrade: Annotated[str | None, typer.Option(
        "--downgrade", metavar="REV", help="Migrate down to REV instead (`base` removes pgqueue).")] = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Run pgqueue's migrations to the newest revision (no alembic.ini needed).

    With --sql, print the SQL instead (no database needed), for teams that apply DDL
    with another tool. --downgrade base removes pgqueue's schema.
    """
    from alembic.util import CommandError  # noqa: PLC0415  # alembic is slow to import: only here

    from pgqueue import migrate as migrations  # noqa: PLC0415

    if sql:
        try:
            text = migrations.downgrade_sql("head", downgrade) if downgrade else migrations.upgrade_sql()
        except CommandError as exc:  # alembic's word for a revision it does not know
            fail(f"--downgrade: {one_line(exc)} (pgqueue's revisions: base, {', '.join(migrations.revisions())})",
                 EXIT_CONFIG)
        typer.echo(text, nl=False)
        return
    found = target(dsn, need_schema=False)
    if downgrade:
        try:
            migrations.downgrade(found.dsn, downgrade)
        except CommandError as exc:
            fail(f"--downgrade: {one_line(exc)} (pgqueue's revisions: base, {', '.join(migrations.revisions())}); "
                 "nothing was changed", EXIT_CONFIG)
        typer.echo(f"pgqueue: {describe_dsn(found.dsn)} migrated down to {downgrade}")
    else:
        migrations.upgrade(found.dsn)
        typer.echo(f"pgqueue: {describe_dsn(found.dsn)} is migrated to head ({_head()})")


def _head() -> str:
    # alembic is slow to import: only the commands that migrate pay for it.
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    from pgqueue import migrate as migrations  # noqa: PLC0415

    return ", ".join(ScriptDirectory.from_config(migrations.alembic_config()).get_heads())


# --------------------------------------------------------------------- queue:work
@app.command("queue:work", short_help="Run a worker.")
@reports_errors
def queue_work(  # noqa: PLR0913  # a typer command: one parameter per option
    connection: Connection = None,
    queue: Annotated[str | None, typer.Option(
        "--queue", "-q", metavar="QUEUES",
        help="Queues in priority order, comma-separated (default: the connection's queue).")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, max=limits.MAX_SQL_INTEGER,
                                             help="Handlers running at once.")] = 10,
    prefetch: Annotated[int | None, typer.Option(
        "--prefetch", min=0, max=limits.MAX_SQL_INTEGER, metavar="N",
        help="Jobs reserved beyond the free slots into a local buffer (default: min(500, max(50, "
             "10 x concurrency)); 0: only what the free slots take).")] = None,
    stop_when_empty: Annotated[bool, typer.Option(
        "--stop-when-empty", help="Exit once no job is ready (delayed jobs may remain).")] = False,
    max_jobs: Annotated[int | None, typer.Option(
        "--max-jobs", min=1, help="Exit after this many reservations (retries count).")] = None,
    apps: Apps = None,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", help="Cap on every job's timeout, in seconds.")] = None,
    lease: Annotated[float | None, typer.Option(
        "--lease", help="Lease in seconds (default: the connection's lease).")] = None,
    poll_interval: Annotated[float, typer.Option(
        "--poll-interval", help="Longest idle sleep without a notification, in seconds.")] = 5.0,
    drain_timeout: Annotated[float, typer.Option(
        "--drain-timeout", help="On SIGINT/SIGTERM, how long running handlers may take to finish.")] = 30.0,
    listen: Annotated[bool, typer.Option(
        "--listen/--no-listen",
        help="Wake on LISTEN/NOTIFY (--no-listen: poll every --poll-interval, e.g. behind PgBouncer "
             "without a listen_dsn).")] = True,
    maintenance_interval: Annotated[float, typer.Option(
        "--maintenance-interval",
        help="How often to check whether pgqueue.jobs needs a VACUUM that autovacuum is not doing, in "
             "seconds (0: never).")] = 2.0,
    history_hours: Annotated[float, typer.Option(
        "--history-hours",
        help="How long the per-minute history pgqueue.job_stats is kept, in hours (pruned by the table "
             "maintenance).")] = 168.0,
    keep_completed_hours: Annotated[float | None, typer.Option(
        "--keep-completed-hours",
        help="Keep a copy of every job this worker acks in pgqueue.completed_jobs for this many hours "
             "(default: off).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every job.")] = False,
    processes: Annotated[int, typer.Option(
        "--processes", min=1, max=MAX_PROCESSES,
        help="Worker processes run by a supervisor that restarts them (1: this process is the worker). "
             "--concurrency and --max-jobs apply to each.")] = 1,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", min=0, max=65535, envvar="PGQUEUE_METRICS_PORT", show_envvar=True,
        help="Serve Prometheus metrics on this port (http://HOST:PORT/metrics; with --processes, one endpoint "
             "for all). Needs pip install 'pgqueue-py[metrics]'.")] = None,
    metrics_host: Annotated[str, typer.Option(
        "--metrics-host", metavar="HOST", envvar="PGQUEUE_METRICS_HOST", show_envvar=True,
        help="With --metrics-port: the address to serve on (0.0.0.0 or :: for every interface: put a "
             "firewall or a proxy in front).")] = "127.0.0.1",
    metrics_interval: Annotated[float, typer.Option(
        "--metrics-interval",
        help="With --metrics-port: how often one worker of the database samples the queue depths, in seconds "
             "(0: never).")] = 15.0,
    metrics_max_queues: Annotated[int, typer.Option(
        "--metrics-max-queues", min=1, metavar="N",
        help="With --metrics-port: at most N queues get their own label value per metric; the rest are "
             "counted under queue=\"other\".")] = 200,
    metrics_max_job_names: Annotated[int, typer.Option(
        "--metrics-max-job-names", min=1, metavar="N",
        help="With --metrics-port: at most N job names get their own label value per metric; the rest are "
             "counted under job_name=\"other\" (names not registered here: \"unregistered\").")] = 500,
    metrics_max_partitions: Annotated[int, typer.Option(
        "--metrics-max-partitions", min=1, metavar="N",
        help="With --metrics-port: per queue, its N busiest partitions get their own label value in the "
             "per-partition metrics; the rest are summed under partition=\"other\".")] = 20,
    log_format: Annotated[str, typer.Option(
        "--log-format", metavar="text|json", envvar="PGQUEUE_LOG_FORMAT", show_envvar=True,
        help="text, or json: one JSON object per line, a job's id, name, queue, attempt and token as "
             "fields.")] = "text",
    log_level: Annotated[str | None, typer.Option(
        "--log-level", metavar="debug|info|warning|error", envvar="PGQUEUE_LOG_LEVEL", show_envvar=True,
        help="Least severe level logged (default info; -v: debug).")] = None,
    embedded: Annotated[bool, typer.Option(
        "--embedded",
        help="With no database configured, run against the embedded PostgreSQL (development only; without "
             "this flag a worker with no --dsn, PGQUEUE_DSN or DATABASE_URL exits 2).")] = False,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Run a worker: reserve jobs of the given queues and run their handlers until stopped.

    Queues are served in the order given: while the first has ready jobs, the next waits.
    The modules named by --app (and [tool.pgqueue] app) are imported so their jobs register.
    SIGINT or SIGTERM stops it gracefully (no new reservations; running handlers finish
    within --drain-timeout; exit 0); a second signal cancels them. Exit 2 on a
    configuration error.

    With --processes N, a supervisor runs N such workers: it restarts one that dies
    (with backoff), forwards SIGINT/SIGTERM to all, and exits 1 if one keeps dying
    right after it starts.
    """
    configure_logging(verbose, log_format=log_format, log_level=log_level)
    metrics = observe.MetricsOptions(metrics_port, metrics_host.strip(), metrics_max_queues, metrics_max_job_names,
                                     metrics_max_partitions)
    if metrics_port is not None:
        observe.metrics_module()  # the extra is missing: say so before anything starts
        if not metrics.host:
            fail("--metrics-host must be an address or a host name (127.0.0.1, ::1, 0.0.0.0, ...), got "
                 f"{metrics_host!r}", EXIT_CONFIG)
    for hours, what in ((history_hours, "--history-hours"), (keep_completed_hours, "--keep-completed-hours")):
        if hours is not None and not 0 <= hours * 3600 < math.inf:  # 1e308 hours is no number of seconds
            fail(f"{what} must be >= 0 hours and finite, got {hours:g}", EXIT_CONFIG)
    try:  # validated here, once, before a supervisor starts any worker process
        options = pgqueue.WorkerOptions(
            queues=parse_queues(queue), concurrency=concurrency, timeout=timeout, lease=lease,
            poll_interval=poll_interval, drain_timeout=drain_timeout, listen=listen,
            maintenance_interval=maintenance_interval, prefetch=prefetch, history_retention=history_hours * 3600,
            keep_completed=None if keep_completed_hours is None else keep_completed_hours * 3600,
            metrics_interval=metrics_interval)
    except pgqueue.QueueConfigurationError as exc:
        fail(_named_by_flag(str(exc)), EXIT_CONFIG)
    settings = pgqueue.load_settings(dsn=dsn, dsn_source="--dsn")
    modules = import_apps(app_modules(apps, settings))
    if job_count() == 0:
        fail("no jobs are registered, so every job would fail as `unknown_job`: pass the module that defines "
             "them with --app myapp.jobs, or set app = [\"myapp.jobs\"] under [tool.pgqueue]", EXIT_CONFIG)
    found = target(dsn, connection, announce=False, embedded=embedded, command="queue:work")
    if processes > 1:  # checked above in one process, so a configuration error is reported once
        command = supervisor.worker_command(sys.argv[1:])
        code = asyncio.run(observe.supervise(
            lambda extra: supervisor.Supervisor(command, processes, env=dict(os.environ, **extra)).run(), metrics))
        raise typer.Exit(code)
    supervisor.follow_supervisor()
    asyncio.run(_work(found, options, stop_when_empty, max_jobs, modules, metrics))


#: The ``queue:work`` option of each WorkerOptions field whose error it reports.
_FLAGS = {"worker concurrency": "--concurrency", "worker queues": "--queue", "poll_interval": "--poll-interval",
          "drain_timeout": "--drain-timeout", "lease": "--lease", "timeout": "--timeout", "prefetch": "--prefetch",
          "maintenance_interval": "--maintenance-interval", "metrics_interval": "--metrics-interval"}


def _named_by_flag(message: str) -> str:
    """A WorkerOptions error as ``queue:work`` says it: naming the option, not the field."""
    for field, flag in _FLAGS.items():
        if message.startswith(field + " ") or message.startswith(field + ":"):
            return flag + message[len(field):]
    return message


async def _work(found: Target, options: pgqueue.WorkerOptions, stop_when_empty: bool, max_jobs: int | None,
                modules: list[str], metrics: observe.MetricsOptions | None = None) -> None:
    async with found.client() as client, observe.worker_metrics(metrics or observe.MetricsOptions()) as recorder:
        worker = await client.worker(found.connection.name, options, instruments=recorder)
        worker.install_signal_handlers()
        registered = job_count()
        logger.info("pgqueue: worker started: connection %s, database %s, queues %s, concurrency %d, "
                    "%d %s registered%s, lease %gs", found.connection.name, found.describe(),
                    ",".join(worker.queues), worker.concurrency, registered, "job" if registered == 1 else "jobs",
                    f" (from {', '.join(modules)})" if modules else "", worker.lease)
        started = time.monotonic()
        processed = await worker.run(stop_when_empty=stop_when_empty, max_jobs=max_jobs)
        s = worker.stats
        logger.info("pgqueue: worker stopped after %.1fs: %d reservations processed, %d acked, %d retried, "
                    "%d failed, %d leases lost, %d vacuums", time.monotonic() - started, processed, s.acked,
                    s.retried, s.failed, s.lost, s.vacuums)


# ------------------------------------------------------------------- failed jobs
@app.command("queue:failed", short_help="List failed jobs, or show one in full.")
@reports_errors
def queue_failed(
    failure_id: Annotated[str | None, typer.Argument(
        metavar="ID", help="Show this failure in full (traceback, args, envelope).", show_default=False)] = None,
    queue: QueueFilter = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=limits.MAX_SQL_INTEGER,
                                       help="How many, newest first.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    redact: Redact = None,
    apps: Annotated[list[str] | None, typer.Option(
        "--app", metavar="MODULE",
        help="Module that defines jobs, imported so their `redact` fields are known (repeatable; also "
             "[tool.pgqueue] app).")] = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """List failed jobs (newest first), or show one in full.

    Args a job declares secret (its class's `redact`, known for the --app modules, and --redact
    fields) are masked, in the args, the envelope's unique key, the message and the traceback.
    """
    wanted = _failure_id(failure_id) if failure_id is not None else None
    import_apps(app_modules(apps, pgqueue.load_settings(dsn=dsn, dsn_source="--dsn")))
    found = target(dsn)
    typer.echo(asyncio.run(_failed(found, wanted, queue, limit, as_json, Redactor(redact or ()))))


async def _failed(found: Target, wanted: uuid.UUID | None, queue_name: str | None, limit: int, as_json: bool,
                  redactor: Redactor) -> str:
    async with found.client() as client:
        repo = await client.failed(found.connection.name)
        if wanted is not None:
            failure = await repo.find(wanted)
            if failure is None:
                fail(f"no failed job with id {wanted} (list them with `pgqueue queue:failed`)")
            failure = redactor.failure(failure)
            return json.dumps(failure.to_data(), indent=2) if as_json else render.failed_detail(failure)
        failures = [redactor.failure(f) for f in await repo.all(queue=queue_name, limit=limit)]
        if as_json:
            return json.dumps([f.to_data() for f in failures], indent=2)
        text = render.failed_table(failures)
        if len(failures) == limit:
            total = await repo.count(queue_name)
            if total > limit:
                text += f"\n({limit} of {total} shown; use --limit to see more)"
        return text


@app.command("queue:retry", short_help="Put failed jobs back on their queue.")
@reports_errors
def queue_retry(
    ids: Annotated[list[str], typer.Argument(
        metavar="ID|all", help="Failure ids (not job ids: `pgqueue queue:failed` lists both), or `all`.")],
    queue: Annotated[str | None, typer.Option(
        "--queue", "-q", metavar="QUEUE", help="With `all`: only failures of this queue.",
        callback=queue_name)] = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Put failed jobs back on their queue (same job id and args, attempts reset).

    A job whose deadline (retry_until) has passed is refused and its failure record stays.
    """
    retry_all = [i.lower() for i in ids] == ["all"]
    if not retry_all and queue is not None:
        fail("--queue only applies to `pgqueue queue:retry all`", EXIT_CONFIG)
    wanted = [] if retry_all else [_failure_id(i) for i in ids]
    found = target(dsn)
    ok = asyncio.run(_retry(found, wanted, retry_all, queue))
    if not ok:
        raise typer.Exit(EXIT_FAILURE)


async def _retry(found: Target, wanted: list[uuid.UUID], retry_all: bool, queue_name: str | None) -> bool:
    async with found.client() as client:
        if retry_all:
            count = await client.retry_failed_all(queue_name, connection=found.connection.name)
            where = f" of queue {queue_name!r}" if queue_name else ""
            typer.echo(f"retried {count} failed job{'s' if count != 1 else ''}{where}")
            return True
        ok = True
        for failure_id in wanted:
            try:
                job_id = await client.retry_failed(failure_id, connection=found.connection.name)
            except pgqueue.QueueRetryError as exc:
                hint = ""
                if "no failed job with failure id" in str(exc):
                    hint = ("; queue:retry takes failure ids, which differ from job ids (`pgqueue queue:failed` "
                            "shows both: the failure id first)")
                err(f"pgqueue: error: {one_line(exc)}{hint}")
                ok = False
                continue
            typer.echo(f"retried failure {failure_id}: job {job_id} is queued again")
        return ok


@app.command("queue:forget", short_help="Delete one failure record.")
@reports_errors
def queue_forget(
    failure_id: Annotated[str, typer.Argument(metavar="ID", help="The failure id.")],
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Delete one failure record."""
    wanted = _failure_id(failure_id)
    found = target(dsn)

    async def forget() -> bool:
        async with found.client() as client:
            return await (await client.failed(found.connection.name)).forget(wanted)

    if not asyncio.run(forget()):
        fail(f"no failed job with id {wanted} (list them with `pgqueue queue:failed`)")
    typer.echo(f"forgot failure {wanted}")


@app.command("queue:flush", short_help="Delete all failure records (of one queue).")
@reports_errors
def queue_flush(queue: QueueFilter = None, dsn: Dsn = None, debug: Debug = False) -> None:
    """Delete every failure record (of one queue, or all)."""
    found = target(dsn)
    count = asyncio.run(_flush(found, queue, None))
    where = f" of queue {queue!r}" if queue else ""
    typer.echo(f"deleted {count} failure record{'s' if count != 1 else ''}{where}")


@app.command("queue:prune-failed", short_help="Delete failure records older than --hours.")
@reports_errors
def queue_prune_failed(
    hours: Annotated[float, typer.Option("--hours", help="Delete failure records older than this.")] = 24.0,
    queue: QueueFilter = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Delete failure records older than --hours (default 24)."""
    if not 0 <= hours <= limits.MAX_FLUSH_HOURS:
        fail(f"--hours must be from 0 to {limits.MAX_FLUSH_HOURS:.0f} (10 years), got {hours:g}", EXIT_CONFIG)
    found = target(dsn)
    count = asyncio.run(_flush(found, queue, hours))
    where = f" of queue {queue!r}" if queue else ""
    typer.echo(f"deleted {count} failure record{'s' if count != 1 else ''}{where} older than {hours:g}h")


async def _flush(found: Target, queue_name: str | None, hours: float | None) -> int:
    async with found.client() as client:
        repo = await client.failed(found.connection.name)
        return await repo.flush(queue=queue_name, older_than_hours=hours)


# -------------------------------------------------------------- queue operations
@app.command("queue:clear", short_help="Remove every job of a queue.")
@reports_errors
def queue_clear(
    connection: Connection = None,
    queue: Annotated[str | None, typer.Option(
        "--queue", "-q", metavar="QUEUE", help="The queue to empty (default: the connection's queue).",
        callback=queue_name)] = None,
    force: Annotated[bool, typer.Option("--force", "-f", help="Do not ask for confirmation.")] = False,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Remove every ready, delayed and reserved job of a queue (failure records stay).

    Asks for confirmation on a terminal unless --force. Handlers still running jobs of
    that queue lose their leases: their acks and retries are refused.
    """
    found = target(dsn, connection)
    name = found.connection.queue if queue is None else queue
    if not force and sys.stdin.isatty():
        typer.confirm(f"Remove every ready, delayed and reserved job of queue {name!r} on "
                      f"{describe_dsn(found.dsn)}? Handlers running jobs of that queue will lose their leases",
                      abort=True, err=True)
    reserved, removed = asyncio.run(_clear(found, name))
    typer.echo(f"removed {removed} job{'s' if removed != 1 else ''} from queue {name!r}")
    if reserved:
        err(f"pgqueue: warning: {reserved} of them were reserved: the handlers running them lost their leases "
            "(their acks and retries will be refused)")


async def _clear(found: Target, name: str) -> tuple[int, int]:
    async with found.client() as client:
        before = {s.queue: s for s in await client.stats(found.connection.name)}
        removed = await client.clear(name, connection=found.connection.name)
    stats = before.get(name)
    return (stats.reserved + stats.expired if stats else 0), removed


# ------------------------------------------------------------------------ control
QueueName = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue.", callback=queue_name)]

_CANCELLED = {
    "cancelled": "cancelled job {id} (it was waiting); recorded in failed_jobs with reason 'cancelled'",
    "cancelled_running": "cancelled job {id} while it ran: its worker stops the handler, and any later ack "
                         "or retry of that attempt is refused; recorded in failed_jobs with reason 'cancelled'",
}
_NOT_CANCELLED = {
    "already_cancelled": "job {id} was already cancelled; nothing changed",
    "already_failed": "job {id} already failed (see `pgqueue queue:failed`); nothing changed",
    "not_found": "job {id} is not queued: unknown, or finished (a finished job leaves no row); nothing changed",
}


@app.command("queue:cancel", short_help="Cancel jobs (waiting or running).")
@reports_errors
def queue_cancel(
    ids: Annotated[list[str], typer.Argument(metavar="JOB_ID...", help="Job ids, as dispatch returned them.")],
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Cancel jobs: each is removed and recorded in failed_jobs with reason `cancelled`
    (retry it with `pgqueue queue:retry`). A running job's handler is stopped by its worker
    within milliseconds. Exits 1 if any job could not be cancelled (unknown, finished, or
    already cancelled or failed)."""
    wanted = []
    for text in ids:
        try:
            wanted.append(uuid.UUID(text))
        except ValueError:
            fail(f"{text!r} is not a job id (a UUID, as dispatch returned it); nothing was cancelled", EXIT_CONFIG)
    found = target(dsn)

    async def cancel() -> bool:
        ok = True
        async with found.client() as client:
            for job_id in wanted:
                outcome = await client.cancel(job_id, connection=found.connection.name)
                if outcome in _CANCELLED:
                    typer.echo(_CANCELLED[outcome].format(id=job_id))
                else:
                    err("pgqueue: " + _NOT_CANCELLED[outcome].format(id=job_id))
                    ok = False
        return ok

    if not asyncio.run(cancel()):
        raise typer.Exit(EXIT_FAILURE)


@app.command("queue:pause", short_help="Stop every worker reserving from a queue.")
@reports_errors
def queue_pause(queue: QueueName, dsn: Dsn = None, debug: Debug = False) -> None:
    """Pause a queue: no worker on any host reserves from it (running jobs finish; dispatch
    is still accepted; delayed jobs fall due and wait). Stored in the database, so workers
    started later honour it too. Undo with `pgqueue queue:resume`."""
    found = target(dsn)

    async def pause() -> bool:
        async with found.client() as q:
            return await q.pause(queue, connection=found.connection.name)

    changed = asyncio.run(pause())
    typer.echo(f"queue {queue!r} {'paused' if changed else 'was already paused'}")


@app.command("queue:resume", short_help="Let workers reserve from a paused queue again.")
@reports_errors
def queue_resume(queue: QueueName, dsn: Dsn = None, debug: Debug = False) -> None:
    """Resume a paused queue: idle workers are woken at once."""
    found = target(dsn)

    async def resume() -> bool:
        async with found.client() as q:
            return await q.resume(queue, connection=found.connection.name)

    changed = asyncio.run(resume())
    typer.echo(f"queue {queue!r} {'resumed' if changed else 'was not paused'}")


@app.command("queue:limit", short_help="Set a queue's global concurrency and rate limits.")
@reports_errors
def queue_limit(  # noqa: PLR0913  # a typer command: one parameter per option
    queue: QueueName,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", metavar="N", max=limits.MAX_SQL_INTEGER,
        help="At most N jobs of the queue reserved at once, across all workers.")] = None,
    rate: Annotated[str | None, typer.Option(
        "--rate", metavar="RATE", help="At most this many reservations per period: 100/s, 20/min, 500/h.")] = None,
    burst: Annotated[int | None, typer.Option(
        "--burst", metavar="N", max=limits.MAX_SQL_INTEGER,
        help="The rate's bucket: at most N reservations at once after a quiet spell "
        "(default: the rate per period, e.g. 100 for 100/s).")] = None,
    adaptive: Annotated[str | None, typer.Option(
        "--adaptive", metavar="MIN:MAX",
        help="Make the concurrency limit adaptive: cut (x0.9 by default, see --adaptive-decrease) when a handler "
        "reports backpressure, never below MIN; one more after as many acks as the limit, never above MAX. "
        "'off': a fixed limit again. With --partition: that partition's own bounds.")] = None,
    adaptive_decrease: Annotated[str | None, typer.Option(
        "--adaptive-decrease", metavar="F",
        help="What one backpressure report multiplies the queue's adaptive limits by (its own and its "
        "partitions'), above 0 and below 1 (default 0.9; 0.5 halves).")] = None,
    per_partition_adaptive: Annotated[str | None, typer.Option(
        "--per-partition-adaptive", metavar="MIN:MAX",
        help="Make each partition's concurrency limit adaptive: its jobs' backpressure cuts it, their acks "
        "grow it (starting at --per-partition-concurrency, else MIN). 'off': the per-partition value again.")
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove every limit (with --partition: its override).")
                     ] = False,
    per_partition_concurrency: Annotated[int | None, typer.Option(
        "--per-partition-concurrency", metavar="N", max=limits.MAX_SQL_INTEGER,
        help="At most N jobs of each partition reserved at once.")] = None,
    per_partition_rate: Annotated[str | None, typer.Option(
        "--per-partition-rate", metavar="RATE", help="At most this many reservations of each partition per period.")
    ] = None,
    per_partition_burst: Annotated[int | None, typer.Option(
        "--per-partition-burst", metavar="N", max=limits.MAX_SQL_INTEGER,
        help="Each partition's rate bucket (default: the rate per period).")] = None,
    fair: Annotated[bool | None, typer.Option(
        "--fair/--no-fair",
        help="Serve the queue's partitions in turn, by weight (without: due order within the limits).")] = None,
    partition: Annotated[str | None, typer.Option(
        "--partition", metavar="NAME", help="Set this partition's override instead: --concurrency, --rate, --burst "
        "and --weight apply to it alone (what is not given: the queue's per-partition value).")] = None,
    weight: Annotated[int | None, typer.Option(
        "--weight", metavar="N", help="With --partition: its fair share weight, 1 to 1000 (default 1).")] = None,
    aging: Annotated[str | None, typer.Option(
        "--aging", metavar="SECONDS", help="Priority aging: a ready job counts one priority level higher per "
        "SECONDS waited (never above the queue's top level), so low priorities run eventually. 'off': strict "
        "priorities. Not changed by --clear.")] = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Set the global limits of a queue, enforced by the database for every worker on every
    host, changed live. A limit not given keeps its current value; --clear removes them all.
    The --per-partition-* limits apply to each partition of the queue on its own (jobs dispatched
    with a partition); --partition NAME sets one partition's override; --aging sets the queue's
    priority aging. Without options, shows the current limits."""
    options = partitions.PartitionOptions(partition, per_partition_concurrency, per_partition_rate,
                                          per_partition_burst, fair, weight, per_partition_adaptive)
    if clear and (concurrency is not None or rate is not None or burst is not None or options.queue_wide()
                  or weight is not None or adaptive is not None or adaptive_decrease is not None
                  or aging is not None):
        fail("--clear removes the limits: give it alone (or with --partition)", EXIT_CONFIG)
    bounds = None if adaptive == "off" else _parsed("--adaptive", pgqueue.parse_adaptive, adaptive)
    if options.per_partition_adaptive not in (None, "off"):
        _parsed("--per-partition-adaptive", pgqueue.parse_adaptive, options.per_partition_adaptive)
    if partition is not None:
        if adaptive_decrease is not None:
            fail("--adaptive-decrease applies to the whole queue (its limits and its partitions'): not with "
                 "--partition", EXIT_CONFIG)
        if aging is not None:
            fail("--aging applies to the whole queue's priorities: not with --partition", EXIT_CONFIG)
        _partition_limit(queue, options, concurrency, rate, burst, clear, dsn, bounds,
                         adaptive_given=adaptive is not None)
        return
    rate_limit = _parsed("--rate", pgqueue.parse_rate, rate)
    factor = _parsed("--adaptive-decrease", pgqueue.parse_decrease, adaptive_decrease)
    aging_seconds = None if aging in (None, "off") else _parsed("--aging", pgqueue.parse_aging, aging)
    found = target(dsn)

    async def limit() -> pgqueue.QueueControl | None:
        async with found.client() as q:
            name = found.connection.name
            current = {c.queue: c for c in await q.controls(name)}.get(queue)
            if clear or concurrency is not None or rate_limit is not None or burst is not None \
                    or adaptive is not None or factor is not None:
                # A limit not given keeps its current value.
                keep = current.concurrency if current else None
                count, period = rate_limit or ((current.rate_limit, current.rate_period) if current else (None, None))
                bucket = current.burst if current else None
                held = _adaptive_of(current)
                cut = current.adaptive_decrease if current else None
                if clear:
                    keep, count, period, bucket, held, cut = None, None, None, None, None, None
                await q.set_limits(queue, concurrency=keep if concurrency is None else concurrency,
                                   rate_limit=count, rate_period=period, burst=bucket if burst is None else burst,
                                   adaptive=held if adaptive is None else bounds,
                                   adaptive_decrease=cut if factor is None else factor, connection=name,
                                   fair=False if clear else None)
                current = {c.queue: c for c in await q.controls(name)}.get(queue)
            if options.queue_wide():
                await partitions.set_queue_wide(q, queue, options, current, name)
                current = {c.queue: c for c in await q.controls(name)}.get(queue)
            if aging is not None:
                await q.set_aging(queue, aging_seconds, connection=name)
                current = {c.queue: c for c in await q.controls(name)}.get(queue)
            return current

    control = asyncio.run(limit())
    typer.echo(render.limits(queue, control) + render.partition_limits(control) + render.aging(control))


def _partition_limit(queue: str, options: partitions.PartitionOptions, concurrency: int | None,  # noqa: PLR0913
                     rate: str | None, burst: int | None, clear: bool, dsn: str | None,
                     bounds: tuple[int, int] | None, *, adaptive_given: bool) -> None:
    """``queue:limit QUEUE --partition NAME ...``: set (or, with --clear, remove) one partition's override."""
    if options.queue_wide():
        fail("--partition sets one partition's override: give --concurrency, --rate, --burst, --weight or "
             "--adaptive, not the --per-partition-* options or --fair", EXIT_CONFIG)
    found = target(dsn)

    async def limit() -> None:
        async with found.client() as q:
            assert options.partition is not None
            await q.set_partition_limit(queue, options.partition, concurrency=concurrency, rate=rate, burst=burst,
                                        weight=options.weight, adaptive=bounds, connection=found.connection.name)

    if not clear and concurrency is None and rate is None and burst is None and options.weight is None \
            and not adaptive_given:
        fail("--partition: give --concurrency, --rate, --burst, --weight or --adaptive (or --clear to remove its "
             "override)", EXIT_CONFIG)
    if clear and adaptive_given:
        fail("--clear removes the partition's override and its adaptive bounds: give it alone", EXIT_CONFIG)
    asyncio.run(limit())
    shown_bounds = None if not adaptive_given else "off" if bounds is None else f"{bounds[0]}:{bounds[1]}"
    what = "removed" if clear else ", ".join(f"{k} {v}" for k, v in (
        ("concurrency", concurrency), ("rate", rate), ("burst", burst), ("weight", options.weight),
        ("adaptive", shown_bounds)) if v is not None)
    typer.echo(f"partition {options.partition!r} of queue {queue!r}: override {what}")


_Parsed = TypeVar("_Parsed")


def _parsed(option: str, parse: Callable[[str], _Parsed], text: str | None) -> _Parsed | None:
    """``parse(text)`` (None when the option was not given); a refusal exits naming the option."""
    try:
        return None if text is None else parse(text)
    except pgqueue.QueueConfigurationError as exc:
        fail(f"{option}: {exc}", EXIT_CONFIG)


def _adaptive_of(control: pgqueue.QueueControl | None) -> tuple[int, int] | None:
    """The adaptive bounds a queue has now (None: a fixed limit, or none)."""
    if control is None or control.adaptive_min is None or control.adaptive_max is None:
        return None
    return control.adaptive_min, control.adaptive_max


@app.command("queue:status", short_help="Job counts and throughput per queue.")
@reports_errors
def queue_status(
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until interrupted.")] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes with --watch.")] = 2.0,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table (with --watch: one line each).")
                       ] = False,
    by_partition: Annotated[bool, typer.Option(
        "--partitions", help="Per partition instead: running, waiting, delayed, its limits and weight.")] = False,
    queue: Annotated[str | None, typer.Option("--queue", metavar="QUEUE", help="With --partitions: only this queue.")
                     ] = None,
    top: Annotated[int, typer.Option("--top", metavar="N", help="With --partitions: the N busiest of each queue.")
                   ] = 50,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Per queue: ready, delayed, blocked (waiting for parents or a batch), reserved, expired leases,
    failed, age of the oldest ready job, and the jobs finished over the last 1, 5 and 15 minutes
    (from pgqueue.job_stats), and the live workflows by state (at most 10,001 read). With --partitions: per
    partition of each queue (pgqueue.partition_status)."""
    if not interval > 0:
        fail(f"--interval must be > 0 seconds, got {interval:g}", EXIT_CONFIG)
    found = target(dsn)
    if by_partition:
        _partition_status(found, queue, top, as_json)
        return
    try:
        asyncio.run(_status(found, watch, interval, as_json))
    except KeyboardInterrupt:
        if not watch:
            raise


def _partition_status(found: Target, queue: str | None, top: int, as_json: bool) -> None:
    async def read() -> str:
        async with found.client() as client:
            name = found.connection.name
            if not as_json:
                return await partitions.status(client, name, queue, top)
            names = [queue] if queue is not None else sorted({s.queue for s in await client.stats(name)})
            return json.dumps({n: [dataclasses.asdict(p) for p in await client.partitions(n, limit=top,
                                                                                         connection=name)]
                               for n in names}, indent=2)

    typer.echo(asyncio.run(read()))


async def _status(found: Target, watch: bool, interval: float, as_json: bool) -> None:
    tty = sys.stdout.isatty()
    async with found.client() as client:
        while True:
            if as_json:
                data = await render.status_data(client, found.connection.name)
                # --watch: JSON Lines, one document per refresh.
                typer.echo(json.dumps(data) if watch else json.dumps(data, indent=2))
            else:
                text = await render.status(client, found.connection.name)
                if watch:
                    if tty:
                        typer.echo("\x1b[2J\x1b[H", nl=False)
                    typer.echo(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {describe_dsn(found.dsn)}  "
                               f"(every {interval:g}s)")
                typer.echo(text)
            if not watch:
                return
            sys.stdout.flush()
            await asyncio.sleep(interval)


@app.command("queue:workers", short_help="The running workers: host, pid, queues, heartbeat, jobs.")
@reports_errors
def queue_workers(
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """The workers registered in pgqueue.workers: host, pid, queues, concurrency, prefetch, version, start,
    last heartbeat, and the jobs each holds (running or prefetched) with how long since they were reserved.
    A worker without a heartbeat for three heartbeat periods is shown as gone (killed or cut off)."""
    found = target(dsn)

    async def read() -> list[pgqueue.RegisteredWorker]:
        async with found.client() as client:
            return await client.workers(found.connection.name)

    workers = asyncio.run(read())
    if as_json:
        typer.echo(json.dumps([w.to_data() for w in workers], indent=2))
    else:
        typer.echo(render.workers_table(workers))


@app.command("queue:history", short_help="Per-minute outcomes and timings (pgqueue.job_stats).")
@reports_errors
def queue_history(
    queue: QueueFilter = None,
    name: Annotated[str | None, typer.Option("--job", metavar="NAME", help="Only this job name.")] = None,
    minutes: Annotated[int, typer.Option("--minutes", help="How far back to look, in minutes.")] = 60,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Per minute, queue and job name: succeeded, failed, retried, cancelled, handler run time and queue
    latency (average and maximum), oldest first."""
    if not 1 <= minutes <= 10_000_000:
        fail(f"--minutes must be from 1 to 10000000, got {minutes}", EXIT_CONFIG)
    found = target(dsn)

    async def read() -> list[pgqueue.JobStatsRow]:
        async with found.client() as client:
            since = datetime.now(UTC) - timedelta(minutes=minutes)
            return await client.history(queue=queue, name=name, since=since, connection=found.connection.name)

    rows = asyncio.run(read())
    if as_json:
        typer.echo(json.dumps([r.to_data() for r in rows], indent=2))
    else:
        typer.echo(render.history_table(rows))


@app.command("queue:dispatch", short_help="Dispatch one job by its registered name.")
@reports_errors
def queue_dispatch(  # noqa: PLR0913  # a typer command: one parameter per option
    job_name: Annotated[str, typer.Argument(
        metavar="JOB", help="The registered job name, e.g. myapp.jobs:SendReport.")],
    args: Annotated[str, typer.Option("--args", metavar="JSON", help="The job's args as a JSON object.")] = "{}",
    delay: Annotated[float, typer.Option("--delay", help="Seconds before the job becomes available.")] = 0.0,
    queue: Annotated[str | None, typer.Option(
        "--queue", "-q", metavar="QUEUE", help="Queue (default: the job's, else the connection's).",
        callback=queue_name)] = None,
    priority: Annotated[int | None, typer.Option(
        "--priority", min=-32768, max=32767, help="Priority within the queue (higher first).")] = None,
    connection: Annotated[str | None, typer.Option(
        "--connection", metavar="NAME", help="Named connection (default: the job's, else the default one).")] = None,
    unique_key: Annotated[str | None, typer.Option(
        "--unique-key", metavar="KEY", callback=_unique_key,
        help="Dispatch only if no job holds KEY (see --unique-scope); a duplicate prints the holder's id.")] = None,
    unique_scope: Annotated[str, typer.Option(
        "--unique-scope", metavar="SCOPE", help="queued (default), active or period.",
        callback=_unique_scope)] = "queued",
    unique_period: Annotated[float | None, typer.Option(
        "--unique-period", metavar="SECONDS", help="With --unique-scope period: how long the key is held.",
        callback=_unique_period)] = None,
    debounce: Annotated[float | None, typer.Option(
        "--debounce", metavar="SECONDS", callback=_debounce_seconds,
        help="Debounce by --debounce-key: dispatches of the key coalesce into one job, run SECONDS after "
             "the last of them, with the latest args.")] = None,
    debounce_key: Annotated[str | None, typer.Option(
        "--debounce-key", metavar="KEY", callback=_debounce_key, help="The debounce key (with --debounce).")] = None,
    debounce_max_wait: Annotated[float | None, typer.Option(
        "--debounce-max-wait", metavar="SECONDS", callback=_debounce_seconds,
        help="With --debounce: run at the latest SECONDS after the window's first dispatch.")] = None,
    apps: Apps = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Dispatch one job by its registered name (ad-hoc jobs, testing).

    The module defining the job must be imported: pass it with --app (or set
    [tool.pgqueue] app).
    """
    settings = pgqueue.load_settings(dsn=dsn, dsn_source="--dsn")
    import_apps(app_modules(apps, settings))
    job_type = pgqueue.registered_jobs().get(job_name)
    if job_type is None:
        known = sorted(pgqueue.registered_jobs())
        close = difflib.get_close_matches(job_name, known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        listing = f" (registered: {', '.join(known[:10])}{', ...' if len(known) > 10 else ''})" if known else \
            " (no jobs are registered: pass the module that defines it with --app)"
        fail(f"unknown job {job_name!r}{hint}{listing}", EXIT_CONFIG)
    try:
        values = json.loads(args)
    except json.JSONDecodeError as exc:
        fail(f"--args is not valid JSON: {exc}", EXIT_CONFIG)
    if not isinstance(values, dict):
        fail(f"--args must be a JSON object of the job's fields, got {type(values).__name__}", EXIT_CONFIG)
    try:
        # The args as a worker will read them: checked against the job's annotations, so
        # '{"order_id": "x"}' for an `order_id: int` is refused now, not by the handler later.
        instance = job_type.from_args(values)
    except (pgqueue.QueuePayloadError, TypeError, ValueError) as exc:
        fail(f"--args do not fit job {job_name!r}: {exc}", EXIT_CONFIG)
    _dispatch_options(delay, unique_key, unique_scope, unique_period, debounce, debounce_key, debounce_max_wait)
    try:
        # The envelope as dispatch will store it, before any database is touched: a NUL or an
        # unpaired surrogate in the args, or an envelope over max_payload_bytes, is a bad --args.
        envelope, config = pgqueue.Client(settings=settings).envelope(
            instance, queue=queue, priority=priority, connection=connection or job_type.connection)
        envelope.encode(config.max_payload_bytes)
    except pgqueue.QueuePayloadError as exc:
        fail(f"--args: {exc}", EXIT_CONFIG)
    found = target(dsn, connection or job_type.connection)

    async def dispatch() -> tuple[uuid.UUID, str, bool]:
        async with found.client() as client:
            envelope, _ = client.envelope(instance, queue=queue, priority=priority,
                                          connection=found.connection.name)
            if debounce is not None and debounce_key is not None:
                debounced = await client.dispatch_debounced(instance, debounce_key, debounce,
                                                            max_wait=debounce_max_wait, queue=queue,
                                                            priority=priority, connection=found.connection.name)
                typer.echo(f"dispatched {job_name} as job {debounced.id} to queue {envelope.queue!r}, debounced by "
                           f"key {limits.shown(debounce_key)} ("
                           f"{'joined an open window' if debounced.coalesced else 'a new window'}), due at "
                           f"{debounced.available_at.isoformat()}")
                return debounced.id, envelope.queue, False
            if unique_key is None:
                job_id = await client.dispatch(instance, delay=delay, queue=queue, priority=priority,
                                               connection=found.connection.name)
                return job_id, envelope.queue, False
            done = await client.dispatch_unique(instance, unique_key, scope=unique_scope, period=unique_period,
                                                delay=delay, queue=queue, priority=priority,
                                                connection=found.connection.name)
            return done.id, envelope.queue, done.duplicate

    job_id, queue_name, duplicate = asyncio.run(dispatch())
    if debounce is not None:
        return
    if duplicate:
        typer.echo(f"not dispatched: job {job_id} already holds unique key {unique_key!r}")
        return
    when = f", available in {delay:g}s" if delay else ""
    typer.echo(f"dispatched {job_name} as job {job_id} to queue {queue_name!r}{when}")


# ------------------------------------------------------------------ issue 26: results
def _job_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        fail(f"{text!r} is not a job id (a UUID, as dispatch returned it)", EXIT_CONFIG)


def _status_text(status: pgqueue.JobStatus) -> str:
    """A job's status for people: its state, then what is known of it, then its failed attempts."""
    lines = [f"job {status.id}: {status.state}"]
    for label, value in (("name", status.name), ("queue", status.queue),
                         ("attempts", None if status.attempts is None else
                          f"{status.attempts}" + (f" of {status.tries}" if status.tries else "")),
                         ("created", status.created_at), ("due / lease ends", status.available_at),
                         ("reserved", status.reserved_at), ("finished", status.finished_at),
                         ("result", json.dumps(status.result) if status.has_result else None),
                         ("result kept until", status.result_expires_at), ("failure", status.failure_id),
                         ("reason", status.reason), ("message", status.message),
                         ("progress", None if status.progress is None else json.dumps(status.progress)),
                         ("waits for (parents)", ", ".join(map(str, status.parents)) or None),
                         ("waited for by (children)", ", ".join(map(str, status.children)) or None),
                         ("batch", status.batch_id)):
        if value is not None:
            lines.append(f"  {label}: {value}")
    if status.errors:
        lines.append(f"  failed attempts ({len(status.errors)}):")
        for e in status.errors:
            took = "" if e.duration is None else f" after {e.duration:.3g}s"
            where = "" if e.worker is None else f" on {e.worker}"
            lines.append(f"    {e.attempt}. {e.failed_at} [{e.reason}]{where}{took}: "
                         f"{e.exception + ': ' if e.exception else ''}{e.message}")
    if status.state == "unknown":
        lines.append("  pgqueue holds nothing of it: never dispatched, or it succeeded keeping no result")
    return "\n".join(lines)


@app.command("job:show", short_help="A job's state, result and failed attempts.")
@reports_errors
def job_show(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job id (as dispatch returned it).")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of text.")] = False,
    redact: Redact = None,
    apps: Annotated[list[str] | None, typer.Option(
        "--app", metavar="MODULE",
        help="Module that defines jobs, imported so their `redact` fields are known (repeatable; also "
             "[tool.pgqueue] app).")] = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Show where a job is (waiting, blocked, delayed, running, succeeded, failed, cancelled; unknown
    when pgqueue holds nothing of it), its times, its result when kept, every failed attempt, the
    jobs it waits for, the jobs still waiting for it and its batch (pgqueue.job_state).

    Args a job declares secret (its class's `redact`, known for the --app modules, and --redact
    fields) are masked in its failure message and in every attempt's exception, message, traceback
    and worker, as `queue:failed` and the dashboard mask them.
    """
    wanted = _job_id(job_id)
    import_apps(app_modules(apps, pgqueue.load_settings(dsn=dsn, dsn_source="--dsn")))
    found = target(dsn)

    async def show() -> pgqueue.JobStatus:
        async with found.client() as client:
            return await client.job(wanted).status(redact=redact or ())

    status = asyncio.run(show())
    typer.echo(json.dumps(status.to_data(), indent=2) if as_json else _status_text(status))


@app.command("job:wait", short_help="Wait for a job to end; print its result.")
@reports_errors
def job_wait(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job id (as dispatch returned it).")],
    timeout: Annotated[float, typer.Option("--timeout", min=0, help="Seconds to wait at most.")] = 60.0,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Wait (woken by the database's notification, no polling) until the job ends, then print its
    result as JSON. Exits non-zero if it failed or was cancelled (its failure on stderr), keeps no
    result, or did not end within --timeout."""
    wanted = _job_id(job_id)
    found = target(dsn)

    async def wait() -> object:
        async with found.client() as client:
            return await client.job(wanted).result(timeout=timeout)

    try:
        value = asyncio.run(wait())
    except pgqueue.JobResultTimeout as exc:
        fail(str(exc))
    typer.echo(json.dumps(value))


# ------------------------------------------------------------------ issue 27: workflows
@app.command("workflow:signal", short_help="Send a signal to a workflow (its wait_for consumes it).")
@reports_errors
def workflow_signal(
    workflow_id: Annotated[str, typer.Argument(metavar="ID", help="The workflow's id (as dispatch returned it).")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="The signal's name (what context.wait_for awaits).")],
    payload: Annotated[str | None, typer.Option("--payload", metavar="JSON", help="The signal's payload, JSON.")]
    = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Send signal NAME to a workflow (pgqueue.signal): kept until its wait_for(NAME) consumes it, and
    the workflow is due at once if it waits for NAME. Prints 'woken' or 'delivered'. An unknown,
    finished or failed workflow, a job that is no workflow, a bad name or payload: an error, nothing sent."""
    wanted = _job_id(workflow_id)
    try:
        value = None if payload is None else json.loads(payload)
    except ValueError as exc:
        fail(f"--payload is not JSON: {exc}; no signal was sent", EXIT_CONFIG)
    found = target(dsn)

    async def send() -> str:
        async with found.client() as client:
            return await client.signal(wanted, name, value)

    typer.echo(asyncio.run(send()))


@app.command("workflow:show", short_help="A workflow's steps: state, runs, duration, result or error.")
@reports_errors
def workflow_show(
    workflow_id: Annotated[str, typer.Argument(metavar="ID", help="The workflow's id (as dispatch returned it).")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of text.")] = False,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Show a workflow's checkpoints in order (pgqueue.workflow_steps_of): each step's seq, name, kind
    (step, transaction, sleep, signal, child), state, runs, duration and result or error; what a
    waiting step awaits. The workflow's own state and result: job:show ID."""
    wanted = _job_id(workflow_id)
    found = target(dsn)

    async def show() -> list[dict[str, Any]]:
        async with found.client() as client:
            return await client.workflow_steps(wanted)

    steps = asyncio.run(show())
    typer.echo(json.dumps(workflows.steps_data(steps), indent=2) if as_json
               else workflows.steps_text(str(wanted), steps))


@app.command("workflow:list", short_help="Live workflows: state, current step, wake time, what each awaits.")
@reports_errors
def workflow_list(
    state: Annotated[str | None, typer.Option(
        "--state", help="Only this state: waiting, delayed, running, sleeping, waiting_signal, waiting_child.")]
    = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many (oldest first).")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """List live workflows (the view pgqueue.workflows), oldest first: id, name, state, the step each is
    at, its wake time and the signal or child job it awaits. Ended workflows: job:show, queue:failed."""
    found = target(dsn)

    async def listed() -> list[dict[str, Any]]:
        async with found.client() as client:
            return await client.workflows(state, limit=limit)

    rows = asyncio.run(listed())
    typer.echo(json.dumps(workflows.list_data(rows), indent=2) if as_json else workflows.list_text(rows))


@app.command("schedule:list", short_help="Periodic jobs: expression, timezone, last and next tick.")
@reports_errors
def schedule_list(
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    connection: Annotated[str | None, typer.Option(
        "--connection", metavar="NAME", help="Named connection (default: the default one).")] = None,
    apps: Apps = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """List the periodic jobs the --app modules declare, with the last tick enqueued (from
    pgqueue.schedule_ticks) and the next one, by the database clock."""
    settings = pgqueue.load_settings(dsn=dsn, dsn_source="--dsn")
    import_apps(app_modules(apps, settings))
    found = target(dsn, connection)

    async def read() -> list[pgqueue.ScheduleInfo]:
        async with found.client() as q:
            return await q.schedules(found.connection.name)

    schedules = asyncio.run(read())
    if as_json:
        # A schedule's args are a job's args: masked like everywhere else.
        typer.echo(json.dumps([{**s.to_data(), "args": Redactor().args(s.name, s.args)[0]} for s in schedules],
                              indent=2))
        return
    if not schedules:
        typer.echo("no periodic jobs declared (pass the module that defines them with --app)")
        return
    typer.echo(render.schedule_table(schedules))


@app.command("schedule:sync", short_help="Register the periodic jobs of --app (a deploy step for least privilege).")
@reports_errors
def schedule_sync(
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    connection: Annotated[str | None, typer.Option(
        "--connection", metavar="NAME", help="Named connection (default: the default one).")] = None,
    apps: Apps = None,
    dsn: Dsn = None,
    debug: Debug = False,
) -> None:
    """Register the periodic jobs the --app modules declare, with the envelope of their jobs, in
    pgqueue.schedules; workers then tick them as registered. Workers whose role may register do
    it when they start; run this, as a role that may enqueue (pgqueue_producer, or the owner),
    after each deploy that adds or changes a schedule when workers run as pgqueue_worker."""
    settings = pgqueue.load_settings(dsn=dsn, dsn_source="--dsn")
    import_apps(app_modules(apps, settings))
    found = target(dsn, connection)

    async def register() -> list[pgqueue.ScheduleInfo]:
        async with found.client() as q:
            return await q.sync_schedules(found.connection.name)

    schedules = asyncio.run(register())
    if as_json:
        typer.echo(json.dumps([s.to_data() for s in schedules], indent=2))
        return
    if not schedules:
        typer.echo("no periodic jobs declared (pass the module that defines them with --app)")
        return
    typer.echo(render.schedule_table(schedules))
    typer.echo(f"registered {len(schedules)} schedule{'s' if len(schedules) != 1 else ''}")


# ------------------------------------------------------------------------ embedded
@embedded_app.command("status")
@reports_errors
def embedded_status(
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of text.")] = False,
    debug: Debug = False,
) -> None:
    """Whether the embedded server runs, where its data lives, its DSN. Exit 3 if it is not running."""
    server = EmbeddedPostgres()
    pid = server.pid()
    if as_json:
        typer.echo(json.dumps({"running": pid is not None, "pid": pid, "data_dir": str(server.data_dir),
                               "dsn": None if pid is None else server.dsn()}, indent=2))
        if pid is None:
            raise typer.Exit(3)
        return
    if pid is None:
        typer.echo(f"embedded PostgreSQL: not running (data in {server.data_dir})")
        raise typer.Exit(3)
    typer.echo(f"embedded PostgreSQL: running (pid {pid}), data in {server.data_dir}\ndsn: {server.dsn()}")


@embedded_app.command("start")
@reports_errors
def embedded_start(debug: Debug = False) -> None:
    """Start the embedded server (initialising and migrating it on first use); prints its DSN."""
    from pgqueue import migrate as migrations  # noqa: PLC0415  # alembic is slow to import: only here

    require_wheel("pgqueue embedded start")  # asked for by name: not "no database is configured"
    server = EmbeddedPostgres()
    dsn = server.start()
    migrations.upgrade(dsn)
    err(f"pgqueue: embedded PostgreSQL running (pid {server.pid()}), data in {server.data_dir}")
    typer.echo(dsn)


@embedded_app.command("stop")
@reports_errors
def embedded_stop(debug: Debug = False) -> None:
    """Stop the embedded server (its data stays)."""
    server = EmbeddedPostgres()
    pid = server.pid()
    if pid is None:
        typer.echo(f"embedded PostgreSQL: not running (data in {server.data_dir})")
        return
    server.stop()
    typer.echo(f"embedded PostgreSQL: stopped (pid {pid}); data kept in {server.data_dir}")


# ---------------------------------------------------------------------------- demo
@app.command("demo", short_help="The quickstart: a mixed workload, run end to end.")
@reports_errors
def demo_command(dsn: Dsn = None, debug: Debug = False) -> None:
    """The quickstart: dispatch a mixed workload, run a worker until it is done, show the results.

    Quick jobs, delayed jobs, jobs that fail once and succeed on the retry, and one that
    ends in failed_jobs, on queues demo-high and demo (emptied first). With no database
    configured it uses the embedded PostgreSQL, which keeps running afterwards.
    """
    from pgqueue_cli.demo import run_demo  # noqa: PLC0415  # rich is imported only for the demo

    found = target(dsn)
    if not asyncio.run(run_demo(found)):
        raise typer.Exit(EXIT_FAILURE)


app.command("dashboard", short_help="Serve the web dashboard (pgqueue-py[dashboard]).")(dashboard_command)


def main() -> None:
    """Run the CLI. A usage error (unknown option, bad value) is one line, ``pgqueue: error: ...``,
    and exit code 2, like every other error, instead of click's usage box."""
    try:
        code = app(prog_name="pgqueue", standalone_mode=False)
    except NoArgsIsHelpError as exc:  # bare `pgqueue`: the help is the answer
        exc.show()
        sys.exit(exc.exit_code)
    except UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        err(f"pgqueue: error: {one_line(exc.format_message())}{hint}")
        sys.exit(EXIT_CONFIG)
    except ClickException as exc:
        err(f"pgqueue: error: {one_line(exc.format_message())}")
        sys.exit(exc.exit_code)
    except typer.Abort:
        err("pgqueue: aborted; nothing was changed")
        sys.exit(EXIT_FAILURE)
    sys.exit(code if isinstance(code, int) else 0)
