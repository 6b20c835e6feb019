"""Workflows (issue 27): a ``context.transaction(name)`` block in psycopg's pipeline mode (its BEGIN, its
statements, its checkpoint and its COMMIT in one round trip) and out of it (``pipeline=False``): the
block's writes commit with its checkpoint or not at all, a stale holder's roll back, a failed
statement fails the block."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgqueue import Client, JobContext, QueueLeaseError, WorkflowContext
from pgqueue.workflow_block import _GIVING_BACK, BlockConnection, _given_back
from tests import workflow_jobs as flows
from tests.worker_support import Runs, client, finish, rows, runs, scalar, wait_until

__all__ = ["client", "runs"]


async def _failure(client: Client, job_id: object) -> Any:
    found = [f for f in await (await client.failed()).all() if f.job_id == job_id]
    return found[0] if found else None


async def _effects(dsn: str, key: str) -> list[str]:
    return [r["step"] for r in await rows(dsn, "select step from wf_effects where key = %s order by step", (key,))]


@pytest.fixture
async def effects(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(flows.EFFECTS_DDL)


async def test_pipelined_and_plain_blocks_commit_once_and_are_skipped_on_replay(client: Client, runs: Runs,
                                                                                dsn: str, effects: None) -> None:
    flows.FAILURES["blocks:charge"] = 2  # the step after the blocks fails twice: three runs, two replays
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.three_blocks(key="blocks"))
    assert await finish(handle.result(timeout=30), "the workflow") == 3
    # the read block saw the first block's row (committed before it began), the COPY ran out of pipeline mode
    assert await _effects(dsn, "blocks") == ["copied", "first", "read-1"]
    steps = await rows(dsn, "select seq, name, kind, state from pgqueue.workflow_steps order by seq")
    assert [(s["seq"], s["name"], s["kind"], s["state"]) for s in steps] == [
        (1, "first", "transaction", "succeeded"), (2, "read", "transaction", "succeeded"),
        (3, "copied", "transaction", "succeeded"), (4, "notify", "step", "succeeded")]
    assert flows.CALLS["blocks:charge"] == 3


async def test_a_failed_statement_of_a_pipelined_block_fails_it_at_its_end(client: Client, runs: Runs, dsn: str,
                                                                          effects: None) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.failing_block(key="broken"))
    failure = await wait_until(lambda: _failure(client, handle), "the workflow's failure")
    assert "wf_no_such_table" in failure.message
    assert flows.CALLS["broken:after"] == 1  # pipelined: execute did not raise, the block's end did
    assert await _effects(dsn, "broken") == ["first"]  # nothing of the failed block committed
    assert await scalar(dsn, "select string_agg(name, ',') from pgqueue.workflow_steps") == "first"


async def test_a_pipelined_block_that_went_on_after_a_failed_statement_commits_nothing(
        client: Client, runs: Runs, dsn: str, effects: None) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.going_on(key="careless"))
    failure = await wait_until(lambda: _failure(client, handle), "the workflow's failure")
    assert "failed and the handler went on" in failure.message
    assert flows.CALLS["careless:caught"] == 1
    assert await _effects(dsn, "careless") == ["first"]
    assert await scalar(dsn, "select string_agg(name, ',') from pgqueue.workflow_steps") == "first"


@pytest.mark.parametrize(("recorded", "refused"), [(1, "read"), (2, "copied")])
async def test_a_stale_holders_later_block_records_nothing_and_its_writes_roll_back(
        client: Client, dsn: str, effects: None, recorded: int, refused: str) -> None:
    """The blocks before ``refused`` were recorded (replayed: skipped); ``refused`` (pipelined: read; out
    of pipeline mode: copied) runs under a token that another reservation made stale."""
    handle = await client.dispatch(flows.three_blocks(key=f"stale-{recorded}"))
    for seq, name in enumerate(("first", "read")[:recorded], start=1):
        await rows(dsn, "insert into pgqueue.workflow_steps (job_id, seq, name, kind, state, result) "
                        "values (%s, %s, %s, 'transaction', 'succeeded', null) returning seq", (handle, seq, name))
    [first] = await rows(dsn, "select * from pgqueue.reserve(array['wf'], 1, 60)")
    await rows(dsn, "update pgqueue.jobs set available_at = now() - interval '1 second' where id = %s "
                    "returning id", (handle,))
    [second] = await rows(dsn, "select * from pgqueue.reserve(array['wf'], 1, 60)")
    assert first["token"] != second["token"]
    async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, open=False) as pool:
        context = JobContext(job_id=handle, token=first["token"], attempts=1, tries=3, queue="wf",
                             connection="database", lease_seconds_left=60, decisions=None,  # type: ignore[arg-type]
                             name=flows.three_blocks.name)
        context._pool = pool  # as the executor sets it
        context.workflow_version = 1
        with pytest.raises(QueueLeaseError, match=f"commit transaction '{refused}' refused"):
            await flows.three_blocks(key=f"stale-{recorded}").handle(context)
    assert await _effects(dsn, f"stale-{recorded}") == []
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_steps") == recorded


@pytest.mark.parametrize("keep", [False, True])
async def test_an_attempts_blocks_give_their_connection_back_on_every_way_out(
        client: Client, runs: Runs, dsn: str, effects: None, keep: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # keep: the blocks of an attempt share one connection (off by default: Python work between two
    # blocks would hold it; see WorkflowContext._keep_connection).
    monkeypatch.setattr(WorkflowContext, "_keep_connection", keep)
    flows.PIDS.clear()
    flows.FAILURES["shared:outside"] = 1  # the attempt ends by an error holding the blocks' connection
    flows.FAILURES["shared:four"] = 1  # the last block fails once: its attempt ends by its error
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.shared_connection(key="shared"))
    assert await finish(handle.result(timeout=30), "the workflow") == "done"
    # Back to back: one connection, kept or not (without keep, given back at the loop's next turn).
    assert flows.PIDS["shared:one"] == flows.PIDS["shared:two"]
    assert flows.PIDS["shared:three"] == flows.PIDS["shared:four"][:1]  # after the sleep: again one
    assert await _effects(dsn, "shared") == ["four", "one", "three", "two"]  # each once
    await runs.close()
    pool = await client.pool()
    stats = pool.get_stats()  # every connection is back: an error, a park, a failed block, a success
    assert stats["pool_size"] - stats["pool_available"] == 0 and stats.get("requests_waiting", 0) == 0


@pytest.mark.parametrize("keep", [False, True])
async def test_blocks_back_to_back_share_a_connection_given_back_once_the_code_awaits_anything_else(
        dsn: str, keep: bool) -> None:
    """Without keep the blocks' connection is held only while the attempt's code runs on without awaiting
    (no other task could use it meanwhile): given back at the event loop's next turn."""
    async with AsyncConnectionPool(dsn, min_size=2, max_size=2, kwargs={"autocommit": True}, open=False) as pool:
        await pool.wait()
        job = JobContext(job_id=None, token=1, attempts=1, tries=3, queue="wf",  # type: ignore[arg-type]
                         connection="database", lease_seconds_left=60, decisions=None)  # type: ignore[arg-type]
        job._pool = pool  # as the executor sets it
        held = BlockConnection(job, keep)
        first = await held.take()
        held.block_ended()
        assert await held.take() is first  # the next block at once: no checkout
        held.block_ended()
        assert pool.get_stats()["pool_available"] == 1
        await asyncio.sleep(0)  # the code awaits something else: the loop turns
        await asyncio.gather(*_GIVING_BACK)
        assert pool.get_stats()["pool_available"] == (1 if keep else 2)
        again = await held.take()  # a block after the await
        assert keep == (again is first)
        held.block_ended()
        await held.release()  # the attempt's end gives it back at once; a later turn changes nothing
        await asyncio.sleep(0)
        await asyncio.gather(*_GIVING_BACK)
        assert pool.get_stats()["pool_available"] == 2


async def test_a_give_back_that_fails_is_logged_not_left_unretrieved(caplog: pytest.LogCaptureFixture) -> None:
    async def refused() -> None:
        raise psycopg.OperationalError("the pool refused it")

    task = asyncio.get_running_loop().create_task(refused())
    _GIVING_BACK.add(task)
    task.add_done_callback(_given_back)
    with caplog.at_level("WARNING", logger="pgqueue.workflows"):
        await asyncio.gather(task, return_exceptions=True)
    assert task not in _GIVING_BACK
    assert "giving a workflow block's connection back to the pool failed" in caplog.text
