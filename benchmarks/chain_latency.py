"""Issue 26 §3: what waiting for jobs costs in latency, beside doing the same by hand.

    uv run --frozen python -m benchmarks.chain_latency [--dsn ADMIN_DSN] [--rounds 50] [--members 10]

A fresh migrated database (dropped afterwards); one client in this process with an idle worker
LISTENing (concurrency 10, the default ack flush of 5 ms), so every figure is on one clock. Rounds
are interleaved, one at a time, with a random idle gap (so the worker is idle, as in the wake-up
section). Per round, in milliseconds:

- **chain**: ``client.chain([a, b, c])`` returned (committed) -> ``await c.result()`` returned:
  each step released by its parent's ack (``pgqueue.jobs_ended`` in the ack's transaction,
  notifying the worker), reserved and run;
- **by hand**: three plain jobs, each dispatched once ``await result()`` of the previous returned;
- **callback after the last member**: ``client.batch(members, then=cb)``; the last member's
  handler return -> the callback's handler start (the completer's flush and ack, the release, the
  worker's wake-up and reservation); also from the batch's ``finished_at`` (the database's clock,
  the ack's transaction) to the callback's start (this host's wall clock);
- **worker wake-up**: a plain ``client.dispatch`` returned -> its handler start, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from typing import Any

from benchmarks.common import fresh_database, percentile
from benchmarks.systems import install
from pgqueue import Client, Job, JobContext

STARTED: dict[str, float] = {}
RETURNED: dict[str, float] = {}
WALL_STARTED: dict[str, float] = {}


class Step(Job):
    """Notes when it started and when it returned; returns its key (so the result is kept)."""

    name = "bench:chain_step"
    key: str

    async def handle(self, context: JobContext) -> str:
        STARTED[self.key] = time.perf_counter()
        WALL_STARTED[self.key] = time.time()
        RETURNED[self.key] = time.perf_counter()
        return self.key


async def _chain(client: Client, n: int) -> float:
    started = time.perf_counter()
    handles = await client.chain([Step(key=f"c{n}.{i}") for i in range(3)])
    await handles[-1].result(timeout=30)
    return 1000 * (time.perf_counter() - started)


async def _by_hand(client: Client, n: int) -> float:
    started = time.perf_counter()
    for i in range(3):
        await (await client.dispatch(Step(key=f"h{n}.{i}"))).result(timeout=30)
    return 1000 * (time.perf_counter() - started)


async def _callback(client: Client, n: int, members: int) -> tuple[float, float]:
    batch = await client.batch([Step(key=f"b{n}.{i}") for i in range(members)], then=Step(key=f"b{n}.cb"))
    await batch.callback.result(timeout=30)
    last = max(RETURNED[f"b{n}.{i}"] for i in range(members))
    state = await client.batch_state(batch.id)
    assert state is not None and state.finished_at is not None
    return 1000 * (STARTED[f"b{n}.cb"] - last), 1000 * (WALL_STARTED[f"b{n}.cb"] - state.finished_at.timestamp())


async def _wakeup(client: Client, n: int) -> float:
    handle = await client.dispatch(Step(key=f"w{n}"))
    committed = time.perf_counter()
    await handle.result(timeout=30)
    return 1000 * (STARTED[f"w{n}"] - committed)


async def measure(dsn: str, rounds: int, members: int, warmup: int = 3) -> dict[str, list[float]]:
    """Per round (after ``warmup`` rounds not counted), each figure in milliseconds."""
    figures: dict[str, list[float]] = {"chain_ms": [], "by_hand_ms": [], "callback_after_last_return_ms": [],
                                       "callback_after_finished_at_ms": [], "wakeup_ms": []}
    rng = random.Random(26)
    async with Client(dsn) as client:
        worker = await client.worker(concurrency=10, maintenance_interval=None, schedules=False)
        task = asyncio.create_task(worker.run())
        try:
            assert worker.notifier is not None
            await asyncio.wait_for(worker.notifier.connected.wait(), 30)
            for n in range(warmup + rounds):
                one: dict[str, float] = {}
                for way in rng.sample(["chain", "by_hand", "callback", "wakeup"], 4):
                    await asyncio.sleep(0.05 * rng.uniform(0.5, 1.5))
                    if way == "chain":
                        one["chain_ms"] = await _chain(client, n)
                    elif way == "by_hand":
                        one["by_hand_ms"] = await _by_hand(client, n)
                    elif way == "callback":
                        (one["callback_after_last_return_ms"],
                         one["callback_after_finished_at_ms"]) = await _callback(client, n, members)
                    else:
                        one["wakeup_ms"] = await _wakeup(client, n)
                if n >= warmup:
                    for key, value in one.items():
                        figures[key].append(value)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 60)
    return figures


async def run(admin_dsn: str, rounds: int, members: int) -> dict[str, Any]:
    """p50 / p99 / max of each figure over ``rounds`` rounds on a fresh database."""
    async with fresh_database(admin_dsn, "chain") as dsn:
        await install("pgqueue", dsn)
        figures = await measure(dsn, rounds, members)
    out: dict[str, Any] = {"rounds": rounds, "members": members}
    for name, values in figures.items():
        stem = name.removesuffix("_ms")
        out[stem] = {"p50_ms": round(percentile(values, 50), 2), "p99_ms": round(percentile(values, 99), 2),
                     "max_ms": round(max(values), 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--members", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.dsn, args.rounds, args.members)), indent=2))


if __name__ == "__main__":
    main()
