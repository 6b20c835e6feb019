"""The systems behind one small interface: install, enqueue (single, bulk, delayed), verify.

Each adapter uses its system's public API with the configuration its documentation recommends
for the case measured; only concurrency is set by the benchmark. The worker side lives in
benchmarks/worker.py. Two systems run in venvs of their own (benchmarks/peers.py): oban and
pgqueue@<base revision>; their producers run in a subprocess (benchmarks/agent.py) that calls
the same adapters below, and the harness talks to it through a pipe.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import psycopg

from benchmarks.common import asyncpg_dsn, fetch_value, sql
from benchmarks.recorder import RECORDER

# pgqueue_base: this session's base revision of pgqueue, run from a worktree of its own.
SYSTEMS = ("pgqueue", "pgqueue_base", "procrastinate", "pgqueuer", "awa", "chancy", "oban")
# The systems pgqueue is measured against (its own base revision is not a peer).
PEERS = ("procrastinate", "pgqueuer", "awa", "chancy", "oban")
LABELS = {"pgqueue": "pgqueue", "pgqueue_base": "pgqueue@base", "procrastinate": "procrastinate",
          "pgqueuer": "PgQueuer", "awa": "awa", "chancy": "chancy", "oban": "oban"}
# The queue awa, chancy and oban jobs go to (chancy's migration declares no queue of that name).
PEER_QUEUE = "bench"


def code_of(system: str) -> str:
    """The adapter a system runs with: pgqueue@<rev> is pgqueue's adapter on that revision's library."""
    return "pgqueue" if system == "pgqueue_base" else system


# ----------------------------------------------------------------- the jobs
def pgqueue_job() -> Any:
    """The no-op pgqueue job class (defined once, registered as ``bench:noop``)."""
    global _PGQUEUE_NOOP  # noqa: PLW0603
    if _PGQUEUE_NOOP is None:
        from pgqueue import Job, JobContext

        class Noop(Job):
            name = "bench:noop"
            seq: int

            async def handle(self, context: JobContext) -> None:
                RECORDER.hit(self.seq)

        _PGQUEUE_NOOP = Noop
    return _PGQUEUE_NOOP


_PGQUEUE_NOOP: Any = None


def procrastinate_app(dsn: str) -> Any:
    """A procrastinate App on its psycopg connector with the no-op task ``bench_noop``."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="bench_noop")
    async def noop(seq: int) -> None:
        RECORDER.hit(seq)

    return app


@dataclass
class AwaNoop:
    """awa's job arguments (awa derives the job kind, ``awa_noop``, from the class name)."""

    seq: int


async def chancy_noop(seq: int) -> None:
    """chancy's no-op job: chancy imports it by name (``benchmarks.systems.chancy_noop``)."""
    RECORDER.hit(seq)


CHANCY_FUNC = "benchmarks.systems.chancy_noop"


def chancy_job(seq: int, scheduled_at: datetime | None = None) -> Any:
    from chancy import Job

    if scheduled_at is None:
        return Job(func=CHANCY_FUNC, queue=PEER_QUEUE, kwargs={"seq": seq})
    return Job(func=CHANCY_FUNC, queue=PEER_QUEUE, kwargs={"seq": seq}, scheduled_at=scheduled_at)


def chancy_app(dsn: str) -> Any:
    """A Chancy app whose log says only warnings: at its default (INFO) it writes a line per job pulled,
    which no other system here does and which is not what is measured."""
    import logging

    from chancy import Chancy

    quiet = logging.getLogger("benchmarks.chancy")
    quiet.setLevel(logging.WARNING)
    return Chancy(dsn, log=quiet)


def chancy_queue(concurrency: int) -> Any:
    """chancy's queue as its docs recommend for a backlog of async no-op jobs.

    The AsyncExecutor (its docstring: "useful for running large numbers of IO-bound jobs" in the
    worker's event loop; the default ProcessExecutor forks a process per slot) and
    ``eager_polling=True`` (Queue docs: "immediately poll for new jobs after a job completes,
    rather than waiting for the polling interval": without it a backlog drains one fetch per
    5 s polling interval).
    """
    from chancy import Chancy, Queue

    return Queue(name=PEER_QUEUE, concurrency=concurrency, executor=Chancy.Executor.Async, eager_polling=True)


def oban_worker() -> Any:
    """oban's no-op worker class, registered under the stable name ``benchmarks.systems.BenchNoop``."""
    global _OBAN_WORKER  # noqa: PLW0603
    if _OBAN_WORKER is None:
        from oban import worker

        class BenchNoop:
            async def process(self, job: Any) -> None:
                RECORDER.hit(int(job.args["seq"]))

        # oban names a worker by module and qualified name; defined here, it must not carry
        # this function's <locals> in that name, or the worker could not resolve it.
        BenchNoop.__module__ = __name__
        BenchNoop.__qualname__ = "BenchNoop"
        _OBAN_WORKER = worker(queue=PEER_QUEUE)(BenchNoop)
    return _OBAN_WORKER


_OBAN_WORKER: Any = None


# ------------------------------------------------------------------ producers
class Producer(Protocol):
    async def single(self, seq: int) -> float:
        """Enqueue one job in its own transaction; return time.time() once the commit returned."""

    async def bulk(self, seqs: list[int]) -> None:
        """Enqueue many jobs with the system's fastest documented bulk call."""

    async def delayed(self, seq: int, due_at: float) -> None:
        """Enqueue one job due at epoch ``due_at``."""

    async def singles(self, seqs: list[int]) -> float:
        """``single`` for each of ``seqs`` in turn; the seconds it took (timed where the producer runs)."""

    async def bulks(self, chunks: list[list[int]]) -> float:
        """``bulk`` for each chunk in turn; the seconds it took (timed where the producer runs)."""


class LocalProducer:
    """The timed loops of a producer that runs in this process."""

    async def single(self, seq: int) -> float:
        raise NotImplementedError

    async def bulk(self, seqs: list[int]) -> None:
        raise NotImplementedError

    async def delayed(self, seq: int, due_at: float) -> None:
        raise NotImplementedError

    async def singles(self, seqs: list[int]) -> float:
        started = time.perf_counter()
        for seq in seqs:
            await self.single(seq)
        return time.perf_counter() - started

    async def bulks(self, chunks: list[list[int]]) -> float:
        started = time.perf_counter()
        for chunk in chunks:
            await self.bulk(chunk)
        return time.perf_counter() - started


class PgqueueProducer(LocalProducer):
    """pgqueue: ``job.dispatch(conn)`` inside the caller's transaction (variant ``push``: the client's pool)."""

    def __init__(self, client: Any, conn: psycopg.AsyncConnection[Any], variant: str) -> None:
        self.client = client
        self.conn = conn
        self.variant = variant
        self.noop = pgqueue_job()

    async def single(self, seq: int) -> float:
        job = self.noop(seq=seq)
        if self.variant == "push":
            await self.client.dispatch(job)
        else:
            async with self.conn.transaction():
                await job.dispatch(self.conn, using=self.client)
        return time.time()

    async def bulk(self, seqs: list[int]) -> None:
        await self.client.dispatch_many([self.noop(seq=s) for s in seqs])

    async def delayed(self, seq: int, due_at: float) -> None:
        await self.client.dispatch(self.noop(seq=seq), delay=max(0.0, due_at - time.time()))


class ProcrastinateProducer(LocalProducer):
    """procrastinate: ``task.defer_async`` / ``task.batch_defer_async`` / ``configure(schedule_at=...)``."""

    def __init__(self, app: Any) -> None:
        self.task = app.tasks["bench_noop"]

    async def single(self, seq: int) -> float:
        await self.task.defer_async(seq=seq)
        return time.time()

    async def bulk(self, seqs: list[int]) -> None:
        await self.task.batch_defer_async(*({"seq": s} for s in seqs))

    async def delayed(self, seq: int, due_at: float) -> None:
        await self.task.configure(schedule_at=datetime.fromtimestamp(due_at, tz=UTC)).defer_async(seq=seq)


class PgqueuerProducer(LocalProducer):
    """PgQueuer: ``Queries.enqueue`` with scalars (one job) or lists (a batch).

    On an asyncpg pool (``Queries.from_asyncpg_pool``), as PgQueuer's performance guide recommends
    for producers (docs/guides/performance-tuning.md: "Use AsyncpgPoolDriver for producers");
    variant ``psycopg``: on a psycopg autocommit connection (``PsycopgDriver``).
    """

    def __init__(self, queries: Any) -> None:
        self.queries = queries

    async def single(self, seq: int) -> float:
        await self.queries.enqueue("bench_noop", str(seq).encode())
        return time.time()

    async def bulk(self, seqs: list[int]) -> None:
        await self.queries.enqueue(["bench_noop"] * len(seqs), [str(s).encode() for s in seqs], [0] * len(seqs))

    async def delayed(self, seq: int, due_at: float) -> None:
        await self.queries.enqueue("bench_noop", str(seq).encode(),
                                   execute_after=timedelta(seconds=max(0.0, due_at - time.time())))


class AwaProducer(LocalProducer):
    """awa: ``client.insert`` (one job) and ``client.enqueue_many_copy`` (bulk: COPY into its queue storage,
    the README's "COPY ingestion ... for high-volume Python producers")."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def single(self, seq: int) -> float:
        await self.client.insert(AwaNoop(seq=seq), queue=PEER_QUEUE)
        return time.time()

    async def bulk(self, seqs: list[int]) -> None:
        await self.client.enqueue_many_copy([AwaNoop(seq=s) for s in seqs], queue=PEER_QUEUE)

    async def delayed(self, seq: int, due_at: float) -> None:
        await self.client.insert(AwaNoop(seq=seq), queue=PEER_QUEUE,
                                 run_at=datetime.fromtimestamp(due_at, tz=UTC))


class ChancyProducer(LocalProducer):
    """chancy: ``chancy.push(job)`` and ``chancy.push_many(jobs)`` (one transaction per 1,000 jobs)."""

    def __init__(self, chancy: Any) -> None:
        self.chancy = chancy

    async def single(self, seq: int) -> float:
        await self.chancy.push(chancy_job(seq))
        return time.time()

    async def bulk(self, seqs: list[int]) -> None:
        async for _ in self.chancy.push_many([chancy_job(s) for s in seqs]):
            pass

    async def delayed(self, seq: int, due_at: float) -> None:
        await self.chancy.push(chancy_job(seq, datetime.fromtimestamp(due_at, tz=UTC)))


class ObanProducer(LocalProducer):
    """oban (runs only in oban's venv): ``oban.enqueue(job)`` and ``oban.enqueue_many(jobs)`` (one INSERT)."""

    def __init__(self, oban: Any) -> None:
        self.oban = oban
        self.noop = oban_worker()

    async def single(self, seq: int) -> float:
        await self.oban.enqueue(self.noop.new({"seq": seq}))
        return time.time()

    async def bulk(self, seqs: list[int]) -> None:
        await self.oban.enqueue_many([self.noop.new({"seq": s}) for s in seqs])

    async def delayed(self, seq: int, due_at: float) -> None:
        await self.oban.enqueue(self.noop.new({"seq": seq}, scheduled_at=datetime.fromtimestamp(due_at, tz=UTC)))


@asynccontextmanager
async def producer(system: str, dsn: str, variant: str = "default") -> AsyncIterator[Producer]:
    """An open producer of ``system`` on the database at ``dsn`` (in a subprocess for oban and pgqueue@rev)."""
    from benchmarks.peers import FOREIGN

    if system in FOREIGN:
        from benchmarks.agent import AgentProducer

        async with AgentProducer.open(system, dsn, variant) as remote:
            yield remote
    else:
        async with local_producer(system, dsn, variant) as local:
            yield local


@asynccontextmanager
async def local_producer(system: str, dsn: str, variant: str = "default") -> AsyncIterator[LocalProducer]:
    """An open producer of ``system`` that runs in this process (needs the system's package here)."""
    system = code_of(system)
    if system == "pgqueue":
        from pgqueue import Client

        async with Client(dsn) as client, await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            yield PgqueueProducer(client, conn, variant)
    elif system == "procrastinate":
        app = procrastinate_app(dsn)
        async with app.open_async():
            yield ProcrastinateProducer(app)
    elif system == "pgqueuer" and variant.endswith("psycopg"):
        from pgqueuer import Queries

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            yield PgqueuerProducer(Queries.from_psycopg_connection(conn))
    elif system == "pgqueuer":
        import asyncpg
        from pgqueuer import Queries

        async with asyncpg.create_pool(asyncpg_dsn(dsn), min_size=1, max_size=2) as pool:
            yield PgqueuerProducer(Queries.from_asyncpg_pool(pool))
    elif system == "awa":
        import awa

        async with awa.AsyncClient(asyncpg_dsn(dsn)) as client:
            yield AwaProducer(client)
    elif system == "chancy":
        async with chancy_app(dsn) as chancy:
            yield ChancyProducer(chancy)
    elif system == "oban":
        from oban import Oban

        pool = await Oban.create_pool(dsn, min_size=1, max_size=2)
        try:
            async with Oban(pool=pool) as oban:
                yield ObanProducer(oban)
        finally:
            await pool.close()
    else:
        raise ValueError(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")


# -------------------------------------------------------------------- schema
async def install(system: str, dsn: str) -> None:
    """Install ``system``'s schema into the empty database at ``dsn`` with its own tooling."""
    from benchmarks.peers import FOREIGN

    if system in FOREIGN:
        from benchmarks.agent import AgentProducer

        async with AgentProducer.open(system, dsn, "default", install=True):
            return
    await install_local(system, dsn)


async def install_local(system: str, dsn: str) -> None:
    """``install`` with the system's package in this process."""
    system = code_of(system)
    if system == "pgqueue":
        import asyncio

        from pgqueue.migrate import upgrade

        await asyncio.to_thread(upgrade, dsn)
    elif system == "procrastinate":
        app = procrastinate_app(dsn)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
    elif system == "pgqueuer":
        from pgqueuer import Queries

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await Queries.from_psycopg_connection(conn).install()
    elif system == "awa":
        import awa

        # `python -m awa migrate` (its README's "Migrations"), then the queue-storage engine made
        # active, as a fresh install's first worker would: enqueue_many_copy refuses without it.
        async with awa.AsyncClient(asyncpg_dsn(dsn)) as client:
            await client.migrate()
            await client.install_queue_storage()
    elif system == "chancy":
        async with chancy_app(dsn) as chancy:
            await chancy.migrate()
            await chancy.declare(chancy_queue(10))
    elif system == "oban":
        from oban import Oban
        from oban.schema import install as oban_install

        pool = await Oban.create_pool(dsn, min_size=1, max_size=1)
        try:
            await oban_install(pool)  # what `oban install --dsn ...` runs
        finally:
            await pool.close()
    else:
        raise ValueError(f"unknown system {system!r}")


# ------------------------------------------------------------------ checking
async def _row(dsn: str, statement: str) -> tuple[Any, ...]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(statement)
        row = await cur.fetchone()
    assert row is not None
    return tuple(row)


async def verify(system: str, dsn: str, expected: int) -> dict[str, Any]:
    """Check in the database that all ``expected`` jobs completed exactly once."""
    system = code_of(system)
    if system == "pgqueue":
        left = await fetch_value(dsn, sql("pgqueue_left"))
        failed = await fetch_value(dsn, sql("pgqueue_failed"))
        ok = left == 0 and failed == 0
        return {"ok": ok, "detail": f"jobs left {left}, failed {failed}"}
    if system == "procrastinate":
        total, succeeded, started, started_jobs = await _row(dsn, sql("procrastinate_check"))
        ok = total == succeeded == started == started_jobs == expected
        return {"ok": ok, "detail": f"jobs {total}, succeeded {succeeded}, started events {started} "
                                    f"on {started_jobs} jobs"}
    if system == "pgqueuer":
        left, successful, distinct_jobs = await _row(dsn, sql("pgqueuer_check"))
        ok = left == 0 and successful == distinct_jobs == expected
        return {"ok": ok, "detail": f"jobs left {left}, successful log rows {successful} on {distinct_jobs} jobs"}
    if system == "awa":
        import awa

        # awa moves finished jobs out of its queue storage within seconds, so its own counters
        # say what happened: completed in the last hour, and nothing queued, running or failed.
        async with awa.AsyncClient(asyncpg_dsn(dsn)) as client:
            stats = [s for s in await client.queue_stats() if s.queue == PEER_QUEUE]
        completed = sum(s.completed_last_hour for s in stats)
        queued = sum(s.total_queued for s in stats)
        running = sum(s.running for s in stats)
        failed = sum(s.failed for s in stats)
        ok = completed == expected and queued == running == failed == 0
        return {"ok": ok, "detail": f"completed (awa's counters) {completed}, queued {queued}, running {running}, "
                                    f"failed {failed}"}
    if system == "chancy":
        total, succeeded, most = await _row(dsn, sql("chancy_check"))
        ok = total == succeeded == expected and most == 1
        return {"ok": ok, "detail": f"jobs {total}, succeeded {succeeded}, most attempts on a job {most}"}
    if system == "oban":
        total, completed, most = await _row(dsn, sql("oban_check"))
        ok = total == completed == expected and most == 1
        return {"ok": ok, "detail": f"jobs {total}, completed {completed}, most attempts on a job {most}"}
    raise ValueError(f"unknown system {system!r}")
