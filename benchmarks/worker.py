"""A benchmark process: ``python -m benchmarks.worker SYSTEM DSN MODE CONCURRENCY [options]``.

It runs in the system's own interpreter (benchmarks/peers.py) and prints one line per event on
stdout: ``ready``; ``hit <seq> <time.time()>`` as each handler starts (serve mode); and a final
``result {json}``.

Worker modes (a worker of SYSTEM at CONCURRENCY):

- ``drain``: until the queue is empty (pgqueue ``stop_when_empty``, procrastinate ``wait=False``,
  PgQueuer ``QueueExecutionMode.drain``); awa, chancy and oban have no such mode, so they run until
  ``--expect`` handlers have run and then shut down as they document (acks flushed). The result:
  seconds from the start of the run call to its return, handler calls, distinct jobs, first and last
  handler start;
- ``serve``: until SIGTERM, printing a ``hit`` line per handler start;
- ``run``: until SIGTERM, without per-job output; with ``--counter FILE`` the handler count is kept in
  that file (8 bytes, mmap) for a producer in another process (held-depth scenario).

Producer modes (no worker, unless ``held``):

- ``produce``: for ``--seconds``, keep ``--depth`` jobs queued in batches of ``--batch``, the depth
  being jobs enqueued minus the handler count a ``run`` worker keeps in ``--counter``;
- ``held``: the same producer and a worker in this one process (its handler count read directly);
- ``pace``: enqueue ``--rate`` jobs/s for ``--seconds``, in batches of ``--batch`` on a fixed schedule
  (the result lists each batch's first job and commit time).

Only concurrency (and the named variant) departs from each system's documented configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import mmap
import signal
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.recorder import RECORDER

Stop = asyncio.Event


async def _until(stop: Stop | None, expect: int) -> None:
    """Return when ``stop`` is set (serve) or once ``expect`` handlers ran (drain of a system without one)."""
    if stop is not None:
        await stop.wait()
        return
    while RECORDER.calls < expect:  # noqa: ASYNC110
        # Polled, not an event: awa may run handlers off this event loop's thread.
        await asyncio.sleep(0.005)


# -------------------------------------------------------------------- systems
async def run_pgqueue(dsn: str, concurrency: int, variant: str, stop: Stop | None, expect: int,
                      max_jobs: int | None = None) -> float:
    from benchmarks.systems import pgqueue_job
    from pgqueue import Client

    pgqueue_job()
    async with Client(dsn) as client:
        worker = await client.worker(concurrency=concurrency)
        if stop is not None:
            running = asyncio.create_task(worker.run())
            ready()
            await stop.wait()
            worker.stop()
            await running
            return 0.0
        started = time.perf_counter()
        await worker.run(stop_when_empty=True, max_jobs=max_jobs)
        return time.perf_counter() - started


async def run_procrastinate(dsn: str, concurrency: int, variant: str, stop: Stop | None, expect: int) -> float:
    from benchmarks.systems import procrastinate_app

    app = procrastinate_app(dsn)
    options: dict[str, Any] = {"concurrency": concurrency, "install_signal_handlers": False}
    if variant.startswith("poll"):
        # Documented knob: fetch_job_polling_interval (default 5 s) bounds how late a
        # scheduled job is noticed; NOTIFY wakes the worker for jobs ready now.
        options["fetch_job_polling_interval"] = float(variant[len("poll"):])
    async with app.open_async():
        if stop is not None:
            # procrastinate: cancelling the run_worker_async task stops the worker gracefully.
            running = asyncio.create_task(app.run_worker_async(**options))
            ready()
            await stop.wait()
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            return 0.0
        started = time.perf_counter()
        await app.run_worker_async(wait=False, **options)
        return time.perf_counter() - started


async def run_pgqueuer(dsn: str, concurrency: int, variant: str, stop: Stop | None, expect: int) -> float:
    from pgqueuer import AsyncpgDriver, PgQueuer, PsycopgDriver
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    from benchmarks.common import asyncpg_dsn

    # Driver: PgQueuer's performance guide (docs/guides/performance-tuning.md, "Use a dedicated
    # connection for LISTEN": a direct asyncpg connection for the QueueManager) runs the worker
    # on one asyncpg connection, the default here. Variant "psycopg" (or suffix "+psycopg") runs it on
    # PsycopgDriver, as this harness did before: that driver's notification watcher holds the
    # connection between notifications, so every dequeue waits for it (the ~80 ms wake-up).
    base = variant.removesuffix("psycopg").rstrip("+") or "default"
    if variant.endswith("psycopg"):
        import psycopg

        conn: Any = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        pgq = PgQueuer(PsycopgDriver(conn))
    else:
        import asyncpg

        conn = await asyncpg.connect(asyncpg_dsn(dsn))
        pgq = PgQueuer(AsyncpgDriver(conn))
    # Concurrency: the worker-wide cap max_concurrent_tasks (``pgq run --max-concurrent-tasks``),
    # which PgQueuer requires to be >= 2 x batch_size: batch_size is lowered to fit (c=1 runs
    # with batch_size 1 and a cap of 2, the smallest the API accepts). Variant "unlimited"
    # keeps PgQueuer's defaults (batch_size 10, no cap); variant "limit" uses the entrypoint's
    # concurrency_limit instead.
    run_options: dict[str, Any] = {}
    limit = 0
    if base == "limit":
        limit = concurrency
    elif base != "unlimited":
        batch = max(1, min(10, concurrency // 2))
        run_options = {"batch_size": batch, "max_concurrent_tasks": max(concurrency, 2 * batch)}

    @pgq.entrypoint("bench_noop", concurrency_limit=limit)
    async def noop(job: Job) -> None:
        RECORDER.hit(int(job.payload or b"0"))

    try:
        if stop is not None:
            running = asyncio.create_task(pgq.run(**run_options))
            ready()
            await stop.wait()
            pgq.shutdown.set()
            await running
            return 0.0
        started = time.perf_counter()
        await pgq.run(mode=QueueExecutionMode.drain, **run_options)
        return time.perf_counter() - started
    finally:
        await conn.close()


async def run_awa(dsn: str, concurrency: int, variant: str, stop: Stop | None, expect: int) -> float:
    import awa

    from benchmarks.common import asyncpg_dsn
    from benchmarks.systems import PEER_QUEUE, AwaNoop

    # awa's configuration reference (docs/configuration.md): queues as (name, max_workers) tuples in
    # hard-reserved mode, NOTIFY wake-ups with a 200 ms poll fallback; concurrency = max_workers.
    client = awa.AsyncClient(asyncpg_dsn(dsn))  # awa takes a postgresql:// URL, not key=value

    @client.task(AwaNoop, queue=PEER_QUEUE)
    async def noop(job: Any) -> None:
        RECORDER.hit(int(job.args.seq))

    try:
        started = time.perf_counter()
        await client.start([(PEER_QUEUE, concurrency)])
        if stop is not None:
            ready()
        await _until(stop, expect)
        await client.shutdown()  # waits for running handlers and flushes their completions
        return time.perf_counter() - started
    finally:
        await client.close()


async def run_chancy(dsn: str, concurrency: int, variant: str, stop: Stop | None, expect: int) -> float:
    from chancy import Worker

    from benchmarks.systems import chancy_app, chancy_queue

    async with chancy_app(dsn) as chancy:
        # A queue's concurrency is stored with its declaration: this worker's is declared first.
        await chancy.declare(chancy_queue(concurrency), upsert=True)
        started = time.perf_counter()
        worker = Worker(chancy, register_signal_handlers=False)
        await worker.start()
        if stop is not None:
            ready()
        await _until(stop, expect)
        await worker.stop()
        return time.perf_counter() - started


async def run_oban(dsn: str, concurrency: int, variant: str, stop: Stop | None, expect: int) -> float:
    from oban import Oban

    from benchmarks.systems import PEER_QUEUE, oban_worker

    oban_worker()
    # oban's README: `Oban(pool=pool, queues={"exports": 10})`, the queue's limit = concurrency; the
    # pool (Oban.create_pool, default max 10 connections) grown to the concurrency when above.
    pool = await Oban.create_pool(dsn, max_size=max(10, concurrency))
    try:
        oban = Oban(pool=pool, queues={PEER_QUEUE: concurrency})
        started = time.perf_counter()
        await oban.start()
        if stop is not None:
            ready()
        await _until(stop, expect)
        await oban.stop()  # waits for running jobs, then flushes their acks
        return time.perf_counter() - started
    finally:
        await pool.close()


Runner = Callable[[str, int, str, "Stop | None", int], Awaitable[float]]
RUNNERS: dict[str, Runner] = {
    "pgqueue": run_pgqueue, "pgqueue_base": run_pgqueue, "procrastinate": run_procrastinate,
    "pgqueuer": run_pgqueuer, "awa": run_awa, "chancy": run_chancy, "oban": run_oban,
}


def ready() -> None:
    print("ready", flush=True)


# ------------------------------------------------------------------ producers
class Counter:
    """A handler count shared between processes through an 8-byte file (mmap)."""

    def __init__(self, path: Path, create: bool) -> None:
        if create:
            path.write_bytes(b"\0" * 8)
        self.file = path.open("r+b")
        self.map = mmap.mmap(self.file.fileno(), 8)

    def read(self) -> int:
        return int(struct.unpack_from("q", self.map, 0)[0])


async def hold_depth(p: Any, consumed: Callable[[], int], depth: int, batch: int, seconds: float,
                     warmup: float) -> dict[str, Any]:
    """Keep ``depth`` jobs queued (enqueued minus ``consumed()``) for ``warmup`` + ``seconds``."""
    seq = 0
    while seq < depth:  # the backlog is there before the clock starts
        await p.bulk(list(range(seq, seq + batch)))
        seq += batch
    started = time.monotonic()
    window_start = started + warmup
    end = window_start + seconds
    first: tuple[float, int, int] | None = None
    depths: list[int] = []
    next_sample = window_start
    while (now := time.monotonic()) < end:
        if first is None and now >= window_start:
            first = (now, consumed(), seq)
        if now >= next_sample:
            depths.append(seq - consumed())
            next_sample = now + 0.1
        if seq - consumed() <= depth - batch:
            await p.bulk(list(range(seq, seq + batch)))
            seq += batch
        else:
            await asyncio.sleep(0.0005)
    last = (time.monotonic(), consumed(), seq)
    assert first is not None
    window = last[0] - first[0]
    return {"consumed_per_s": (last[1] - first[1]) / window, "produced_per_s": (last[2] - first[2]) / window,
            "window_s": window, "enqueued": seq, "depth_mean": sum(depths) / max(1, len(depths)),
            "depth_min": min(depths, default=0)}


async def pace(p: Any, rate: float, batch: int, seconds: float) -> dict[str, Any]:
    """Enqueue ``rate`` jobs/s in batches on a fixed schedule (late batches go at once: the rate holds)."""
    interval = batch / rate
    started = time.monotonic()
    commits: list[tuple[int, float]] = []
    seq = 0
    behind = 0.0
    while (now := time.monotonic()) < started + seconds:
        due = started + len(commits) * interval
        if due > now:
            await asyncio.sleep(due - now)
        else:
            behind = max(behind, now - due)
        await p.bulk(list(range(seq, seq + batch)))
        commits.append((seq, time.time()))
        seq += batch
    return {"produced": seq, "batch": batch, "commits": commits, "most_behind_s": behind,
            "seconds": time.monotonic() - started}


# ----------------------------------------------------------------------- main
async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    runner = RUNNERS[args.system]
    if args.mode in ("drain", "serve", "run"):
        stop: Stop | None = None
        if args.mode != "drain":
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        if args.counter:
            RECORDER.counter = Counter(Path(args.counter), create=True).map
        if args.system in ("pgqueue", "pgqueue_base"):
            elapsed = await run_pgqueue(args.dsn, args.concurrency, args.variant, stop, args.expect, args.max_jobs)
        else:
            elapsed = await runner(args.dsn, args.concurrency, args.variant, stop, args.expect)
        return {"elapsed": elapsed, "calls": RECORDER.calls, "distinct": len(RECORDER.seen),
                "first": RECORDER.first, "last": RECORDER.last}
    from benchmarks.systems import local_producer

    async with local_producer(args.system, args.dsn) as p:
        if args.mode == "pace":
            ready()
            return await pace(p, args.rate, args.batch, args.seconds)
        if args.mode == "produce":
            counter = Counter(Path(args.counter), create=False)
            ready()
            return await hold_depth(p, counter.read, args.depth, args.batch, args.seconds, args.warmup)
        # held: the worker in this process, stopped once the producer is done.
        stop = asyncio.Event()
        working: asyncio.Future[float] = asyncio.ensure_future(runner(args.dsn, args.concurrency, args.variant,
                                                                       stop, 0))
        ready()
        try:
            figures = await hold_depth(p, lambda: RECORDER.calls, args.depth, args.batch, args.seconds, args.warmup)
        finally:
            stop.set()
        await working
        return {**figures, "calls": RECORDER.calls, "distinct": len(RECORDER.seen)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker")
    parser.add_argument("system", choices=sorted(RUNNERS))
    parser.add_argument("dsn")
    parser.add_argument("mode", choices=("drain", "serve", "run", "produce", "held", "pace"))
    parser.add_argument("concurrency", type=int)
    parser.add_argument("--variant", default="default")
    parser.add_argument("--expect", type=int, default=0, help="drain: the jobs waiting (awa, chancy, oban stop there)")
    parser.add_argument("--max-jobs", type=int, default=None, help="pgqueue drain: stop after this many jobs")
    parser.add_argument("--counter", help="run: keep the handler count in this file; produce: read it there")
    parser.add_argument("--seconds", type=float, default=10.0, help="produce, held, pace: how long")
    parser.add_argument("--warmup", type=float, default=2.0, help="produce, held: seconds before the window")
    parser.add_argument("--depth", type=int, default=2000, help="produce, held: jobs kept queued")
    parser.add_argument("--batch", type=int, default=128, help="produce, held, pace: jobs per bulk call")
    parser.add_argument("--rate", type=float, default=1000.0, help="pace: jobs per second")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    RECORDER.report_each = args.mode == "serve"
    if args.mode == "drain" and args.system in ("awa", "chancy", "oban") and args.expect <= 0:
        parser.error(f"{args.system} has no drain mode of its own: give --expect N")
    result = asyncio.run(main_async(args))
    print("result " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
