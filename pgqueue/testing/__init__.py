"""Testing your jobs: the inline mode, :func:`drain`, assertions on what was dispatched, a pytest plugin.

- :func:`inline` (or ``Client(inline=True)``): every job dispatched through a client runs at once, in the
  dispatching call; its exception propagates (Celery's ``task_always_eager``). See
  :mod:`pgqueue.testing.inline`.
- :func:`drain`: run what was stored, with the real worker against the real database, until no job is
  ready; returns what ran and how each attempt ended (River's ``rivertest`` workers, procrastinate's
  ``run_worker(wait=False)``).
- :func:`dispatched` / :func:`assert_dispatched`: read ``pgqueue.jobs`` (River's
  ``rivertest.RequireInserted``).
- :mod:`pgqueue.testing.pytest_plugin` (loaded by pytest through its ``pytest11`` entry point): the
  fixtures ``pgqueue_dsn`` (a migrated database per test) and ``pgqueue_client`` (a client bound to it).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import psycopg

from pgqueue.client import Client, default_client
from pgqueue.jobs import Job
from pgqueue.store import DispatchedJob, dispatched_jobs_on_sync
from pgqueue.worker.outcomes import Ended, Outcome

__all__ = ["DispatchedJob", "Outcome", "Ran", "assert_dispatched", "dispatched", "drain", "inline"]



@contextlib.contextmanager
def inline(client: Client | None = None) -> Iterator[Client]:
    """Within the block, every job dispatched through ``client`` (default: :func:`pgqueue.default_client`)
    runs at once instead of being stored: ``dispatch`` returns once the handler has returned, and what
    the handler raises propagates to the caller. One attempt: no retry, and a delay, ``release()`` or
    ``snooze()`` raise :class:`~pgqueue.QueueDispatchError`. A failure is still recorded in
    ``pgqueue.failed_jobs`` when the client has a configured database. ``conn=`` is not used: the job
    runs whether or not the caller's transaction commits. Yields the client.
    """
    target = client if client is not None else default_client()
    before = target.inline
    target.inline = True
    try:
        yield target
    finally:
        target.inline = before


@dataclass(frozen=True, slots=True)
class Ran:
    """One attempt :func:`drain` ran."""

    id: uuid.UUID
    name: str
    queue: str
    #: Which attempt of the job this was (1: its first run).
    attempt: int
    outcome: Outcome
    #: Why it failed (``exception``, ``failed_by_handler``, ``timeout``, ...), for ``failed`` only.
    reason: str | None = None


def _ran(ended: Ended) -> Ran:
    return Ran(ended.job_id, ended.name, ended.queue, ended.attempts, ended.outcome,
               ended.reason if ended.outcome is Outcome.FAILED else None)


async def drain(client: Client | None = None, *, connection: str | None = None,
                queues: Sequence[str] | None = None, max_jobs: int | None = None,
                concurrency: int = 1, **options: Any) -> list[Ran]:
    """Run the stored jobs with a real worker of ``connection`` until none is ready now; returns the
    attempts it ran, in the order they ended.

    ``queues``: default every queue that has a job. A job a handler dispatches runs too, if it is ready;
    a retried or delayed job stays stored (its attempt says ``retried``; drain again once it is due).
    ``max_jobs`` stops after that many attempts (a handler that keeps dispatching). One handler at a time
    by default (``concurrency``), so the order is the queues' order; ``options`` go to
    :meth:`pgqueue.Client.worker`. The worker does not LISTEN, maintain the table or enqueue schedules.
    """
    target = client if client is not None else default_client()
    if queues is None:
        queues = [row.queue for row in await target.stats(connection)]
        if not queues:
            return []
    settings: dict[str, Any] = {"listen": False, "maintenance_interval": None, "metrics_interval": None,
                                "schedules": False, **options}
    worker = await target.worker(connection, queues=queues, concurrency=concurrency, **settings)
    attempts: list[Ran] = []
    # The worker's one outcome event per attempt (pgqueue.worker.Outcome), by job id.
    worker.outcomes.subscribe(lambda ended: attempts.append(_ran(ended)))
    await worker.run(stop_when_empty=True, max_jobs=max_jobs)
    return attempts


def dispatched(job_type: type[Job] | str | None = None, *, using: Client | None = None,
               **args: Any) -> list[DispatchedJob]:
    """The jobs stored in ``pgqueue.jobs`` (committed), oldest first: of ``job_type`` (a job class or
    its name; default: all) whose args include ``args`` (compared as stored: JSON values, so a datetime
    or UUID is compared by its JSON form). ``using``: the client (default: :func:`pgqueue.default_client`).
    """
    target = using if using is not None else default_client()
    name = _job_name(job_type)
    expected = {key: msgspec.json.decode(msgspec.json.encode(value)) for key, value in args.items()}
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        rows = dispatched_jobs_on_sync(conn, name)
    return [row for row in rows if all(key in row.args and row.args[key] == value for key, value in expected.items())]


def assert_dispatched(job_type: type[Job] | str, *, using: Client | None = None, **args: Any) -> list[DispatchedJob]:
    """Assert that a job of ``job_type`` whose args include ``args`` is stored (see :func:`dispatched`);
    returns the matching jobs. The AssertionError lists the jobs that are stored instead."""
    found = dispatched(job_type, using=using, **args)
    if found:
        return found
    name = _job_name(job_type)
    stored = dispatched(None, using=using)
    wanted = f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
    listing = "\n".join(f"  {job.name} {job.args} on queue {job.queue!r} ({job.state})" for job in stored[:20])
    more = f"\n  ... and {len(stored) - 20} more" if len(stored) > 20 else ""
    raise AssertionError(f"no job {wanted} was dispatched; pgqueue.jobs holds "
                         + (f"{len(stored)} job(s):\n{listing}{more}" if stored else "no job"))


def _job_name(job_type: type[Job] | str | None) -> str | None:
    if job_type is None or isinstance(job_type, str):
        return job_type
    if isinstance(job_type, type) and issubclass(job_type, Job):
        return job_type.name
    raise TypeError(f"job_type must be a Job class or a job name, got {type(job_type).__name__} {job_type!r}")
