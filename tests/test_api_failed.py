"""Failed jobs from Python: the repository, retry_failed and retry_failed_all (issue 3)."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

from pgqueue import Client, FailedJob, Job, JobContext, QueueRetryError
from tests.api_support import client, failed_rows, job_rows, run_worker

__all__ = ["client"]

HEALED: set[int] = set()


class Explodes(Job):
    """Fails on its only try unless healed."""

    name = "tests.failed.explodes"
    tries = 1

    n: int
    deadline: float | None = None

    def retry_until(self) -> float | None:
        return self.deadline

    async def handle(self, context: JobContext) -> None:
        if self.n not in HEALED:
            raise LookupError(f"job {self.n} cannot find its order")


async def make_failures(client: Client, dsn: str, spec: list[tuple[int, str]]) -> dict[int, uuid.UUID]:
    """Dispatch and fail jobs (n, queue); failure n is stamped n minutes ago. Returns n -> failure id."""
    for n, name in spec:
        await Explodes(n=n).dispatch(using=client, queue=name)
    await run_worker(client, queues=tuple(dict.fromkeys(name for _, name in spec)))
    with psycopg.connect(dsn) as conn:
        conn.execute("update pgqueue.failed_jobs"
                     " set failed_at = now() - ((envelope->'args'->>'n')::int * interval '1 minute')")
        rows = conn.execute("select (envelope->'args'->>'n')::int, id from pgqueue.failed_jobs").fetchall()
    return {n: failure_id for n, failure_id in rows}


@pytest.fixture(autouse=True)
def _heal_nothing() -> None:
    HEALED.clear()


async def test_all_lists_newest_first_with_paging(client: Client, dsn: str) -> None:
    ids = await make_failures(client, dsn, [(n, "default") for n in range(1, 8)])
    repo = await client.failed()
    everything = await repo.all()
    assert [f.args["n"] for f in everything] == [1, 2, 3, 4, 5, 6, 7]  # n minutes ago: 1 is newest
    pages, before = [], None
    while True:
        page = await repo.all(limit=3, before=before)
        if not page:
            break
        pages.append([f.args["n"] for f in page])
        before = page[-1].failed_at
    assert pages == [[1, 2, 3], [4, 5, 6], [7]]
    assert {f.id for f in everything} == set(ids.values())


async def test_all_filters_by_queue_and_count_agrees(client: Client, dsn: str) -> None:
    await make_failures(client, dsn, [(1, "mail"), (2, "default"), (3, "mail"), (4, "reports")])
    repo = await client.failed()
    assert [f.args["n"] for f in await repo.all(queue="mail")] == [1, 3]
    assert [f.args["n"] for f in await repo.all(queue="reports", limit=1)] == [4]
    assert await repo.all(queue="nothing-here") == []
    assert (await repo.count(), await repo.count("mail"), await repo.count("nothing-here")) == (4, 2, 0)


async def test_a_limit_below_one_is_refused(client: Client) -> None:
    repo = await client.failed()
    with pytest.raises(ValueError, match="limit must be >= 1"):
        await repo.all(limit=0)


async def test_find_returns_the_stored_failure(client: Client, dsn: str) -> None:
    job_id = await Explodes(n=5).dispatch(using=client, queue="orders")
    await run_worker(client, queues=("orders",))
    repo = await client.failed()
    [listed] = await repo.all()
    found = await repo.find(listed.id)
    assert isinstance(found, FailedJob) and found == listed
    assert await repo.find(str(listed.id)) == listed
    assert found.job_id == job_id and found.name == "tests.failed.explodes"
    assert (found.queue, found.connection, found.attempts, found.reason) == ("orders", "database", 1, "exception")
    assert found.exception == "LookupError" and found.message == "job 5 cannot find its order"
    assert found.traceback is not None and "Traceback" in found.traceback and "handle" in found.traceback
    assert found.envelope["id"] == str(job_id) and found.envelope["tries"] == 1 and found.args == {"n": 5,
                                                                                                    "deadline": None}
    assert found.to_data()["failed_at"] == found.failed_at.isoformat()
    assert await repo.find(uuid.uuid4()) is None


async def test_forget_and_flush(client: Client, dsn: str) -> None:
    ids = await make_failures(client, dsn, [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "b")])
    repo = await client.failed()
    assert await repo.forget(ids[1]) is True
    assert await repo.forget(ids[1]) is False
    assert await repo.find(ids[1]) is None
    assert await repo.flush(queue="b", older_than_hours=4 / 60 - 0.001) == 2  # 4 and 5 minutes old
    assert [f.args["n"] for f in await repo.all()] == [2, 3]
    assert await repo.flush() == 2
    assert await repo.count() == 0


async def test_retry_failed_keeps_the_job_id_and_envelope_and_resets_attempts(client: Client, dsn: str) -> None:
    ids = await make_failures(client, dsn, [(1, "mail")])
    repo = await client.failed()
    failure = await repo.find(ids[1])
    assert failure is not None
    job_id = await client.retry_failed(ids[1])
    assert job_id == failure.job_id
    [row] = job_rows(dsn)
    assert row["id"] == failure.job_id and row["envelope"] == failure.envelope
    assert (row["queue"], row["attempts"], row["token"]) == ("mail", 0, None)
    assert row["due_in"] <= 0
    assert await repo.find(ids[1]) is None
    HEALED.add(1)
    worker = await run_worker(client, queues=("mail",))
    assert worker.stats.acked == 1
    assert job_rows(dsn) == [] and failed_rows(dsn) == []


async def test_a_retried_job_that_fails_again_gets_a_new_record(client: Client, dsn: str) -> None:
    ids = await make_failures(client, dsn, [(1, "default")])
    job_id = await client.retry_failed(str(ids[1]))
    await run_worker(client)
    [again] = failed_rows(dsn)
    assert again["job_id"] == job_id and again["id"] != ids[1] and again["attempts"] == 1


async def test_retry_failed_refuses_a_passed_deadline_and_keeps_the_record(client: Client, dsn: str) -> None:
    await Explodes(n=1, deadline=time.time() - 60).dispatch(using=client)
    await run_worker(client)  # the reservation itself moves it to failed_jobs: its deadline passed
    repo = await client.failed()
    [failure] = await repo.all()
    assert failure.reason == "deadline_passed"
    with pytest.raises(QueueRetryError, match="deadline") as caught:
        await client.retry_failed(failure.id)
    assert str(failure.job_id) in str(caught.value)
    assert await repo.find(failure.id) == failure
    assert job_rows(dsn) == []


async def test_retry_failed_with_an_unknown_id_is_refused(client: Client, dsn: str) -> None:
    await make_failures(client, dsn, [(1, "default")])
    unknown = uuid.uuid4()
    with pytest.raises(QueueRetryError, match=str(unknown)):
        await client.retry_failed(unknown)
    assert len(failed_rows(dsn)) == 1 and job_rows(dsn) == []


async def test_retry_failed_refuses_a_job_that_is_queued_again(client: Client, dsn: str) -> None:
    ids = await make_failures(client, dsn, [(1, "default")])
    with psycopg.connect(dsn) as conn:  # a second record of the same job
        conn.execute("insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, reason)"
                     " select job_id, connection, queue, envelope, attempts, reason from pgqueue.failed_jobs")
    await client.retry_failed(ids[1])
    [other] = await (await client.failed()).all()
    with pytest.raises(QueueRetryError, match="already queued"):
        await client.retry_failed(other.id)
    assert len(job_rows(dsn)) == 1 and len(failed_rows(dsn)) == 1


async def test_retry_failed_all_of_one_queue_or_all(client: Client, dsn: str) -> None:
    await make_failures(client, dsn, [(1, "a"), (2, "a"), (3, "b")])
    await Explodes(n=4, deadline=time.time() - 60).dispatch(using=client, queue="b")
    await run_worker(client, queues=("b",))
    assert await client.retry_failed_all("a") == 2
    assert sorted((r["queue"], r["envelope"]["args"]["n"]) for r in job_rows(dsn)) == [("a", 1), ("a", 2)]
    assert await client.retry_failed_all() == 1  # job 3; job 4's deadline passed
    assert [f["envelope"]["args"]["n"] for f in failed_rows(dsn)] == [4]
    assert await client.retry_failed_all() == 0
    assert all(r["attempts"] == 0 for r in job_rows(dsn))
