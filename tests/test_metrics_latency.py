"""The metrics' queue latency counts from the time a job became due, as ``pgqueue.job_stats`` does
(issue 29): ``pgqueue.reserve`` returns each grant's due time, so a delayed job's latency starts
at the end of its delay and a retry's at the end of its backoff, not at the dispatch.
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgqueue import Client, JobContext
from pgqueue.worker.instruments import Recorder
from tests.sql_calls import make_due
from tests.worker_jobs import Probe, Retrying
from tests.worker_support import client, finish, hooks

__all__ = ["client", "hooks"]

#: The resolution of a timestamptz: the history and the reservation's due time are both exact to it.
RESOLUTION = 1e-6


def _history(conn: psycopg.Connection[Any], name: str) -> tuple[int, float]:
    """``(latency_count, latency_sum)`` of one job name in pgqueue.job_stats (every minute summed)."""
    row = conn.execute("select coalesce(sum(latency_count), 0)::int, coalesce(sum(latency_sum), 0)::float8"
                       " from pgqueue.job_stats where name = %s", (name,)).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


async def test_the_metrics_latency_of_delayed_and_retried_jobs_is_the_historys(
        client: Client, hooks: Any, conn: psycopg.Connection[Any]) -> None:
    async def ok(job: Probe, context: JobContext) -> None:
        return None

    async def fails_first(job: Probe, context: JobContext) -> None:
        if context.attempts == 1:
            raise RuntimeError("first attempt fails")

    hooks("ok", ok)
    hooks("fails_first", fails_first)
    delayed = [await client.dispatch(Probe(hook="ok", n=n), delay=3600) for n in range(3)]
    retried = [await client.dispatch(Retrying(hook="fails_first", n=n)) for n in range(2)]
    # The delayed jobs become due after their dispatch (as if the hour had passed).
    assert make_due(conn) == 3
    recorder = Recorder()
    worker = await client.worker(concurrency=2, listen=False, poll_interval=600, instruments=recorder,
                                 metrics_interval=None, keep_completed=3600)
    assert await finish(worker.run(max_jobs=7), "7 reservations") == 7
    await worker.completer.wait_idle()

    # Every attempt whose handler started: 3 delayed jobs, 2 jobs of 2 attempts each.
    for name, attempts in ((Probe.name, 3), (Retrying.name, 4)):
        count, seconds = _history(conn, name)
        observed = recorder.latencies["default", name]
        assert (observed.count, count) == (attempts, attempts)
        # The same figure per attempt (the reservation's due time and the history's are one
        # column): they differ only by the rounding of their sums.
        assert abs(observed.sum - seconds) <= attempts * RESOLUTION, (name, observed.sum, seconds)

    # Counted from the dispatch, as before, the delayed jobs' latency would have been larger by the
    # time from their dispatch to their due time (kept with each completed job).
    since_dispatch = conn.execute(
        "select sum(latency + extract(epoch from due_at - created_at))::float8, min(due_at - created_at) > '0'"
        " from pgqueue.completed_jobs where job_id = any(%s)", (delayed,)).fetchone()
    assert since_dispatch is not None and since_dispatch[1] is True
    assert recorder.latencies["default", Probe.name].sum < since_dispatch[0]
    # A retry's latency starts at its release (backoff 0 s), after its first attempt ran.
    retries = conn.execute("select count(*) from pgqueue.completed_jobs where job_id = any(%s) and attempts = 2"
                           " and due_at > created_at", (retried,)).fetchone()
    assert retries == (2,)
