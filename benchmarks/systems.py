"""The three systems behind one small interface: install, enqueue (single, bulk, delayed), verify.

Each adapter uses its system's public API with the defaults its documentation shows;
only concurrency is set by the benchmark. The worker side lives in benchmarks/worker.py.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import psycopg

from benchmarks.common import asyncpg_dsn, fetch_value, sql
from benchmarks.recorder import RECORDER

SYSTEMS = ("pgqueue", "procrastinate", "pgqueuer")
LABELS = {"pgqueue": "pgqueue", "procrastinate": "procrastinate", "pgqueuer": "PgQueuer"}


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


# ------------------------------------------------------------------ producers
class Producer(Protocol):
    async def single(self, seq: int) -> float:
        """Enqueue one job in its own transaction; return time.time() once the commit returned."""

    async def bulk(self, seqs: list[int]) -> None:
        """Enqueue many jobs with the system's fastest documented bulk call."""

    async def delayed(self, seq: int, due_at: float) -> None:
        """Enqueue one job due at epoch ``due_at``."""


class PgqueueProducer:
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


class ProcrastinateProducer:
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


class PgqueuerProducer:
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


@asynccontextmanager
async def producer(system: str, dsn: str, variant: str = "default") -> AsyncIterator[Producer]:
    """An open producer of ``system`` on the database at ``dsn``."""
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
    else:
        raise ValueError(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")


# -------------------------------------------------------------------- schema
async def install(system: str, dsn: str) -> None:
    """Install ``system``'s schema into the empty database at ``dsn`` with its own tooling."""
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
    else:
        raise ValueError(f"unknown system {system!r}")


# ------------------------------------------------------------------ checking
async def verify(system: str, dsn: str, expected: int) -> dict[str, Any]:
    """Check in the database that all ``expected`` jobs completed exactly once."""
    if system == "pgqueue":
        left = await fetch_value(dsn, sql("pgqueue_left"))
        failed = await fetch_value(dsn, sql("pgqueue_failed"))
        ok = left == 0 and failed == 0
        return {"ok": ok, "detail": f"jobs left {left}, failed {failed}"}
    if system == "procrastinate":
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            cur = await conn.execute(sql("procrastinate_check"))
            row = await cur.fetchone()
        assert row is not None
        total, succeeded, started, started_jobs = row
        ok = total == succeeded == started == started_jobs == expected
        return {"ok": ok, "detail": f"jobs {total}, succeeded {succeeded}, started events {started} "
                                    f"on {started_jobs} jobs"}
    if system == "pgqueuer":
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            cur = await conn.execute(sql("pgqueuer_check"))
            row = await cur.fetchone()
        assert row is not None
        left, successful, distinct_jobs = row
        ok = left == 0 and successful == distinct_jobs == expected
        return {"ok": ok, "detail": f"jobs left {left}, successful log rows {successful} on {distinct_jobs} jobs"}
    raise ValueError(f"unknown system {system!r}")
