"""One system's workflow process for benchmarks/workflows.py: ``python -m benchmarks.workflow_worker``.

    python -m benchmarks.workflow_worker SYSTEM DSN MODE [--concurrency N] [--workflows N] ...

SYSTEM is ``pgqueue`` or ``dbos``; MODE one of

- ``install`` — the system's schema, with its own tooling (DBOS: ``DBOS.launch()``'s migration
  and ``SQLAlchemyDatasource.create``; pgqueue: ``pgqueue.migrate.upgrade``);
- ``enqueue`` — N five-step workflows, one per transaction, from the system's client (DBOS:
  ``DBOSClient.enqueue``; pgqueue: ``client.dispatch``), timed;
- ``drain`` — a worker at ``--concurrency`` until every workflow of the database has finished
  (checked in the database), timed from the worker's start; ``--expect`` (default N) is how many
  workflow bodies must return in this process before the database is asked;
- ``serve`` — a worker until SIGTERM (the signal and sleep phases: the harness dispatches).

The same workflows in both systems (the harness checks the effects table afterwards):

- **five**: five steps, each one insert into ``bench_effects`` in the step's own transaction
  (DBOS: a ``SQLAlchemyDatasource.transaction`` step, whose checkpoint commits with the insert;
  pgqueue: ``context.transaction(step)``);
- **signalled**: a step that prints ``waiting SEQ MONOTONIC``, a wait for the signal ``approved``, then a
  step that prints ``resumed SEQ MONOTONIC`` (when the step after the wait starts running);
- **sleeper**: a step that prints ``asleep SEQ MONOTONIC``, a durable sleep of the seconds it is
  given, a step that prints ``resumed SEQ MONOTONIC``, then one effect.

Events go to stdout one a line (``ready``, ``waiting``, ``resumed``, ``asleep``, and a final
``result JSON``). ``time.monotonic()`` is CLOCK_MONOTONIC, one clock for every process of the
machine, so the harness compares its send time with the worker's resume time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

from benchmarks.common import asyncpg_dsn, sql
from pgqueue import WorkflowContext  # the workflows' annotations are evaluated in this module's globals

QUEUE = "bench"  # five and signalled
SLEEP_QUEUE = "bench_sleep"  # sleepers: DBOS counts a sleeping workflow against its queue's concurrency
DBOS_POLLING = 0.05  # the measurement; DBOS's default is 1.0 s (DEFAULT_QUEUE_POLLING_INTERVAL_SEC)


class Done:
    """Workflow bodies that returned in this process (DBOS runs them on threads of its own)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def hit(self) -> None:
        with self._lock:
            self.count += 1


DONE = Done()
_OUT = threading.Lock()


def emit(line: str) -> None:
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


# ====================================================================== DBOS
def dbos_url(dsn: str) -> str:
    """The database as the SQLAlchemy URL DBOS takes (its psycopg 3 driver; a Unix socket as ``host=``)."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    host = str(params.get("host", ""))
    if host.startswith("/"):
        return (f"postgresql+psycopg://{quote(str(params.get('user', 'postgres')))}@/"
                f"{quote(str(params.get('dbname', 'postgres')))}?host={quote(host)}&port={params.get('port', 5432)}")
    return asyncpg_dsn(dsn).replace("postgresql://", "postgresql+psycopg://", 1)


def dbos_define(dsn: str) -> tuple[Any, dict[str, Callable[..., Any]]]:
    """DBOS configured on ``dsn`` (system database and datasource in the same database) and the
    benchmark's workflows registered; not launched."""
    from dbos import DBOS, SQLAlchemyDatasource

    url = dbos_url(dsn)
    # Its default pools (system database 20; the datasource's SQLAlchemy engine 5 + 10 overflow), as
    # pgqueue runs on its own default (a client pool of 10): the shared server allows 100 connections.
    DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING"})
    datasource = SQLAlchemyDatasource.create(url)
    effect_statement = sql("workflow_effect")

    @datasource.transaction(name="effect")
    def effect(seq: int, step: int) -> int:
        datasource.sql_session().connection().exec_driver_sql(effect_statement, (seq, step))
        return step

    @DBOS.step(name="announce")
    def announce(seq: int, what: str) -> None:
        emit(f"{what} {seq} {time.monotonic()!r}")

    @DBOS.step(name="resumed")
    def resumed(seq: int) -> None:
        emit(f"resumed {seq} {time.monotonic()!r}")

    @DBOS.workflow(name="bench_five")
    def five(seq: int) -> int:
        for step in range(5):
            effect(seq, step)
        DONE.hit()
        return seq

    @DBOS.workflow(name="bench_signalled")
    def signalled(seq: int) -> int:
        announce(seq, "waiting")
        DBOS.recv("approved", timeout_seconds=600)
        resumed(seq)
        effect(seq, 0)
        return seq

    @DBOS.workflow(name="bench_sleeper")
    def sleeper(seq: int, seconds: float) -> int:
        announce(seq, "asleep")
        DBOS.sleep(seconds)
        resumed(seq)
        effect(seq, 0)
        return seq

    return DBOS, {"five": five, "signalled": signalled, "sleeper": sleeper}


def dbos_main(args: argparse.Namespace) -> dict[str, Any]:
    if args.mode == "enqueue":
        # A producer outside the application: DBOSClient writes the queued workflow rows only.
        from dbos import DBOSClient, EnqueueOptions

        client = DBOSClient(system_database_url=dbos_url(args.dsn))
        try:
            options: EnqueueOptions = {"workflow_name": "bench_five", "queue_name": QUEUE}
            started = time.perf_counter()
            for seq in range(args.workflows):
                client.enqueue(options, seq)
            return {"elapsed": time.perf_counter() - started}
        finally:
            client.destroy()
    dbos, _ = dbos_define(args.dsn)
    started = time.perf_counter()
    dbos.launch()
    dbos.register_queue(QUEUE, worker_concurrency=args.concurrency, polling_interval_sec=DBOS_POLLING)
    # No concurrency limit on the sleepers' queue: a sleeping DBOS workflow keeps its queue slot.
    dbos.register_queue(SLEEP_QUEUE, polling_interval_sec=DBOS_POLLING)
    try:
        if args.mode == "install":
            return {}
        if args.mode == "serve":
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            emit("ready")
            stop.wait()
            return {"done": DONE.count}
        while DONE.count < args.expect:  # DBOS's threads move it
            time.sleep(0.005)
        statement = sql("workflow_dbos_unfinished")
        engine = _engine(args.dsn)
        with engine.connect() as conn:
            while conn.exec_driver_sql(statement).scalar():
                conn.rollback()
                time.sleep(0.02)
        engine.dispose()
        return {"elapsed": time.perf_counter() - started, "done": DONE.count}
    finally:
        dbos.destroy()


def _engine(dsn: str) -> Any:
    import sqlalchemy as sa

    return sa.create_engine(dbos_url(dsn), poolclass=sa.NullPool)


# =================================================================== pgqueue
_PGQUEUE_FLOWS: dict[str, Any] = {}


def pgqueue_workflows() -> dict[str, Any]:
    """pgqueue's benchmark workflows (defined once; the harness's client imports them to dispatch)."""
    if _PGQUEUE_FLOWS:
        return _PGQUEUE_FLOWS
    from pgqueue import workflow

    effect_statement = sql("workflow_effect")

    def announce(seq: int, what: str) -> None:
        emit(f"{what} {seq} {time.monotonic()!r}")

    def resumed(seq: int) -> None:
        emit(f"resumed {seq} {time.monotonic()!r}")

    @workflow(queue=QUEUE, name="bench:five")
    async def five(context: WorkflowContext, seq: int) -> int:
        for step in range(5):
            async with context.transaction(f"effect-{step}") as conn:
                await conn.execute(effect_statement, (seq, step))
        DONE.hit()
        return seq

    @workflow(queue=QUEUE, name="bench:signalled")
    async def signalled(context: WorkflowContext, seq: int) -> int:
        await context.step("announce", announce, seq, "waiting")
        await context.wait_for("approved", timeout=timedelta(minutes=10))
        await context.step("resumed", resumed, seq)
        async with context.transaction("effect-0") as conn:
            await conn.execute(effect_statement, (seq, 0))
        return seq

    @workflow(queue=SLEEP_QUEUE, name="bench:sleeper")
    async def sleeper(context: WorkflowContext, seq: int, seconds: float) -> int:
        await context.step("announce", announce, seq, "asleep")
        await context.sleep(timedelta(seconds=seconds))
        await context.step("resumed", resumed, seq)
        async with context.transaction("effect-0") as conn:
            await conn.execute(effect_statement, (seq, 0))
        return seq

    _PGQUEUE_FLOWS.update(five=five, signalled=signalled, sleeper=sleeper)
    return _PGQUEUE_FLOWS


async def pgqueue_main(args: argparse.Namespace) -> dict[str, Any]:
    from pgqueue import Client

    if args.mode == "install":
        from pgqueue.migrate import upgrade

        await asyncio.to_thread(upgrade, args.dsn)
        return {}
    flows = pgqueue_workflows()
    async with Client(args.dsn, pool_size=args.pool_size) as client:
        if args.mode == "enqueue":
            started = time.perf_counter()
            for seq in range(args.workflows):
                await client.dispatch(flows["five"](seq=seq))
            return {"elapsed": time.perf_counter() - started}
        worker = await client.worker(concurrency=args.concurrency, queues=[QUEUE, SLEEP_QUEUE])
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        started = time.perf_counter()
        running = asyncio.create_task(worker.run())
        try:
            if args.mode == "serve":
                emit("ready")
                await stop.wait()
                return {"done": DONE.count}
            while DONE.count < args.expect:  # noqa: ASYNC110 (a count the workflows move, polled like the DBOS side)
                await asyncio.sleep(0.005)
            async with await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as conn:
                while True:
                    cur = await conn.execute(sql("workflow_pgqueue_unfinished"))
                    row = await cur.fetchone()
                    if not row or not row[0]:
                        break
                    await asyncio.sleep(0.02)
            return {"elapsed": time.perf_counter() - started, "done": DONE.count}
        finally:
            worker.stop()
            await running


# ====================================================================== main
def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workflow_worker")
    parser.add_argument("system", choices=("pgqueue", "dbos"))
    parser.add_argument("dsn")
    parser.add_argument("mode", choices=("install", "enqueue", "drain", "serve"))
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--workflows", type=int, default=1000, help="enqueue: how many; drain: --expect's default")
    parser.add_argument("--pool-size", type=int, default=10, help="pgqueue: the client's pool (default 10, its own)")
    parser.add_argument("--expect", type=int, default=None,
                        help="drain: workflow bodies to see return here before asking the database (default N)")
    args = parser.parse_args()
    if args.expect is None:
        args.expect = args.workflows
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = dbos_main(args) if args.system == "dbos" else asyncio.run(pgqueue_main(args))
    emit("result " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
