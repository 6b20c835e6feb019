"""Job ids: time-ordered UUIDs version 7 (pgqueue/ids.py)."""

from __future__ import annotations

import itertools
import multiprocessing
import time
import uuid

import psycopg
import pytest

from pgqueue import Client, Job, JobContext
from pgqueue.ids import new_id
from tests.api_support import client

__all__ = ["client"]  # the fixture, imported for the tests below


class IdProbe(Job):
    """Never runs: the tests only dispatch it."""

    name = "tests:id_probe"
    n: int

    async def handle(self, context: JobContext) -> None:
        return None


def millis(job_id: uuid.UUID) -> int:
    """The Unix time in milliseconds a version 7 id carries in its first 48 bits."""
    return job_id.int >> 80


def test_ids_are_version_7_and_carry_the_time_they_were_made() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    assert {(i.version, i.variant) for i in ids} == {(7, uuid.RFC_4122)}
    assert all(before <= millis(i) <= after for i in ids)


def test_ids_of_one_process_strictly_increase_and_never_repeat() -> None:
    ids = [new_id() for _ in range(100_000)]  # many per millisecond
    assert all(a < b for a, b in itertools.pairwise(ids))
    assert len(set(ids)) == len(ids)


def test_a_clock_stepping_back_does_not_break_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    last = new_id()
    monkeypatch.setattr(time, "time_ns", lambda: 1_000_000_000)  # 1970: far behind the last id
    following = [new_id() for _ in range(3)]
    assert last < following[0] < following[1] < following[2]
    assert all(i.version == 7 for i in following)


def _ids_in_child(connection: multiprocessing.connection.Connection) -> None:
    connection.send([new_id() for _ in range(50)])
    connection.close()


def test_a_forked_child_does_not_reuse_the_parents_random_bits() -> None:
    new_id()  # the parent has a block of random bits in hand
    context = multiprocessing.get_context("fork")
    parent_end, child_end = context.Pipe(duplex=False)
    child = context.Process(target=_ids_in_child, args=(child_end,))
    child.start()
    child_ids = parent_end.recv()
    child.join()
    parent_ids = [new_id() for _ in range(50)]
    random_bits = (1 << 74) - 1
    assert not {i.int & random_bits for i in child_ids} & {i.int & random_bits for i in parent_ids}


async def test_dispatched_jobs_get_version_7_ids_in_dispatch_order(client: Client, dsn: str) -> None:
    single = [await client.dispatch(IdProbe(n=n)) for n in range(3)]
    bulk = await client.dispatch_many([IdProbe(n=n) for n in range(3, 300)])
    dispatched = single + bulk
    assert {i.version for i in dispatched} == {7}
    with psycopg.connect(dsn) as conn:
        stored = [row[0] for row in conn.execute("select id from pgqueue.jobs order by id")]
    assert stored == dispatched
