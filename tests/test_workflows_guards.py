"""Workflows (issue 27): exactly-once effects under a replay and a stale holder, the determinism guard,
versions, and bad input (clear errors, nothing lost)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from pgqueue import Client, JobContext, QueueConfigurationError, QueueLeaseError, WorkflowError
from pgqueue.resources import sql_dir
from pgqueue.store import Store
from tests import workflow_jobs as flows
from tests.worker_support import Runs, client, finish, rows, runs, scalar, settings_for, wait_until

__all__ = ["client", "runs"]


async def _failure(client: Client, job_id: object) -> Any:
    found = [f for f in await (await client.failed()).all() if f.job_id == job_id]
    return found[0] if found else None


async def _effects(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(flows.EFFECTS_DDL)


async def test_a_transaction_commits_once_and_is_skipped_on_replay(client: Client, runs: Runs, dsn: str) -> None:
    await _effects(dsn)
    flows.FAILURES["tx:charge"] = 2  # the step after the block fails twice: the workflow runs 3 times
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.transfer(key="tx"))
    assert await finish(handle.result(timeout=30), "the transfer") == 1
    assert await scalar(dsn, "select count(*) from wf_effects where key = 'tx'") == 1
    assert flows.CALLS["tx:charge"] == 3


async def test_a_first_block_reads_the_steps_with_its_begin_and_is_skipped_on_replay(client: Client, runs: Runs,
                                                                                     dsn: str) -> None:
    await _effects(dsn)
    flows.FAILURES["peek:charge"] = 1  # the step after the block fails once: the workflow runs twice
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.peeking(key="peek"))
    assert await finish(handle.result(timeout=30), "the workflow") == 1
    assert await scalar(dsn, "select count(*) from wf_effects where key = 'peek'") == 1
    first_before, first_after, second_before, second_after = flows.REPLAYING["peek"]
    for before in (first_before, second_before):  # before the first step, the steps are not read yet
        assert isinstance(before, str) and "known once the attempt's first step" in before
    # after the block: notify not recorded on the first run; recorded (as failed) on the second
    assert (first_after, second_after) == (False, True)
    # the replay's block read the recorded steps, found its own and ran nothing (one effect)
    steps = await rows(dsn, "select seq, name, kind, state from pgqueue.workflow_steps order by seq")
    assert [(s["seq"], s["name"], s["kind"], s["state"]) for s in steps] == [
        (1, "debit", "transaction", "succeeded"), (2, "notify", "step", "succeeded")]


async def test_a_first_block_whose_place_another_step_holds_fails_and_writes_nothing(client: Client, runs: Runs,
                                                                                    dsn: str) -> None:
    await _effects(dsn)
    handle = await client.dispatch(flows.peeking(key="moved"))
    await rows(dsn, "insert into pgqueue.workflow_steps (job_id, seq, name, kind, state, result) "
                    "values (%s, 1, 'old-debit', 'step', 'succeeded', '1') returning seq", (handle,))
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    failure = await wait_until(lambda: _failure(client, handle), "the workflow's failure")
    assert failure.exception == "pgqueue.errors.WorkflowDeterminismError"
    assert "'debit'" in failure.message and "'old-debit'" in failure.message
    assert await scalar(dsn, "select count(*) from wf_effects where key = 'moved'") == 0


async def test_a_stale_holder_records_nothing_and_its_writes_roll_back(client: Client, dsn: str) -> None:
    await _effects(dsn)
    handle = await client.dispatch(flows.transfer(key="stale"))
    [first] = await rows(dsn, "select * from pgqueue.reserve(array['wf'], 1, 60)")
    await rows(dsn, "update pgqueue.jobs set available_at = now() - interval '1 second' where id = %s "
                    "returning id", (handle,))
    [second] = await rows(dsn, "select * from pgqueue.reserve(array['wf'], 1, 60)")
    assert first["token"] != second["token"]
    async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, open=False) as pool:
        context = JobContext(job_id=handle, token=first["token"], attempts=1, tries=3, queue="wf",
                             connection="database", lease_seconds_left=60, decisions=None,  # type: ignore[arg-type]
                             name=flows.transfer.name)
        context._pool = pool  # as the executor sets it
        context.workflow_version = 1
        with pytest.raises(QueueLeaseError, match="lease was lost"):
            await flows.transfer(key="stale").handle(context)
        # the step checkpoint of a plain step is refused the same way
        assert await Store(pool).workflow_checkpoint(handle, first["token"], 2, "notify", "1", 0) == "not_yours"
    assert await scalar(dsn, "select count(*) from wf_effects") == 0
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_steps") == 0


async def test_a_step_recorded_under_another_name_fails_the_workflow(client: Client, runs: Runs, dsn: str) -> None:
    handle = await client.dispatch(flows.two_steps(key="drift"))
    await rows(dsn, "insert into pgqueue.workflow_steps (job_id, seq, name, kind, state, result) "
                    "values (%s, 1, 'old-charge', 'step', 'succeeded', '1') returning seq", (handle,))
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    failure = await wait_until(lambda: _failure(client, handle), "the workflow's failure")
    assert failure.exception == "pgqueue.errors.WorkflowDeterminismError"
    assert "'charge'" in failure.message and "'old-charge'" in failure.message
    assert flows.CALLS["drift:charge"] == 0


async def test_a_run_started_at_another_version_fails_clearly(client: Client, runs: Runs, dsn: str) -> None:
    handle = await client.dispatch(flows.versioned(key="ver"))
    await rows(dsn, "update pgqueue.jobs set envelope = jsonb_set(envelope, '{workflow}', '1') where id = %s "
                    "returning id", (handle,))
    await rows(dsn, "insert into pgqueue.workflow_steps (job_id, seq, name, kind, state, result) "
                    "values (%s, 1, 'charge', 'step', 'succeeded', '1') returning seq", (handle,))
    fresh = await client.dispatch(flows.versioned(key="fresh"))  # no steps yet: runs at version 2
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    assert await finish(fresh.result(timeout=30), "the fresh run") == "v2"
    failure = await wait_until(lambda: _failure(client, handle), "the old run's failure")
    assert "started at version 1" in failure.message and "runs version 2" in failure.message


@pytest.mark.parametrize(("factory", "message"), [
    (flows.bad_result, "result of step 'odd'"),
    (flows.nested, "step 'inner' was called inside another step"),
    (flows.step_in_block, "step 'inside' was called inside another step or a transaction block"),
    (flows.twice, "step name 'same' is used twice"),
    (flows.doomed, "step 'flaky' failed 2 time(s)"),
])
async def test_misuse_fails_the_workflow_naming_the_step(client: Client, runs: Runs, factory: Any,
                                                        message: str) -> None:
    key = f"misuse-{uuid.uuid4().hex[:6]}"
    if factory is flows.doomed:
        flows.FAILURES[f"{key}:charge"] = 5
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(factory(key=key))
    failure = await wait_until(lambda: _failure(client, handle), "the workflow's failure")
    assert message in failure.message, failure.message
    assert failure.reason == "failed_by_handler"


async def test_signals_refused_store_nothing(client: Client, dsn: str) -> None:
    plain = await client.dispatch(flows.Ship(key="plain"))
    flow = await client.dispatch(flows.approval(key="sig"))
    with pytest.raises(WorkflowError, match="is not a workflow"):
        await client.signal(plain, "approved")
    with pytest.raises(WorkflowError, match="is unknown"):
        await client.signal(uuid.uuid4(), "approved")
    with pytest.raises(WorkflowError, match="signal name"):
        await client.signal(flow, "")
    with pytest.raises(WorkflowError, match="signal name"):
        await client.signal(flow, "x" * 201)
    with pytest.raises(WorkflowError, match="over the limit"):
        await client.signal(flow, "approved", "x" * 70000)
    with pytest.raises(WorkflowError, match=r"not JSON|JSON"):
        await client.signal(flow, "approved", {1, 2})
    with pytest.raises(WorkflowError, match="not a workflow id"):
        await client.signal("nope", "approved")
    await client.cancel(flow)
    with pytest.raises(WorkflowError, match="failed or was cancelled"):
        await client.signal(flow, "approved")
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_signals") == 0
    # SQL gives the same refusal
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("select pgqueue.signal(%s, 'approved', null)", (plain,))
    with psycopg.connect(dsn, autocommit=True) as conn:
        flow2 = await client.dispatch(flows.approval(key="sql"))
        assert conn.execute("select pgqueue.signal(%s, 'approved', '{\"ok\": 1}')", (flow2,)).fetchone() == (
            "delivered",)
        assert client.signal_sync(conn, flow2, "approved", [1]) == "delivered"


def test_a_workflow_must_be_async_and_take_its_context() -> None:
    from pgqueue import workflow

    with pytest.raises(QueueConfigurationError, match="async def"):
        workflow()(lambda context: None)
    with pytest.raises(QueueConfigurationError, match="first parameter"):
        async def no_context() -> None: ...
        workflow()(no_context)


async def test_cancelling_a_workflow_cancels_the_child_it_waits_for(client: Client, runs: Runs, dsn: str) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.patient_parent(key="cancelled"))
    [child] = await wait_until(lambda: rows(dsn, "select child_id from pgqueue.workflow_steps where job_id = %s "
                                                 "and state = 'waiting'", (handle,)), "the child dispatched")
    assert await wait_until(lambda: scalar(dsn, "select state = 'waiting_child' from pgqueue.workflows "
                                                "where id = %s", (handle,)), "the parent parked")
    assert await client.cancel(handle) == "cancelled"
    reasons = await rows(dsn, "select job_id, reason from pgqueue.failed_jobs order by failed_at")
    assert [(r["job_id"], r["reason"]) for r in reasons] == [(handle, "cancelled"), (child["child_id"], "cancelled")]
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


async def test_the_steps_of_a_workflow_that_is_gone_are_pruned(client: Client, runs: Runs, dsn: str) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.two_steps(key="pruned"))
    await finish(handle.result(timeout=30), "the workflow")
    # kept with its result; gone once the result is
    assert await scalar(dsn, "select pgqueue.prune_workflows(100)") == 0
    await rows(dsn, "delete from pgqueue.job_results where job_id = %s returning job_id", (handle,))
    assert await scalar(dsn, "select pgqueue.prune_workflows(100)") == 1
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_steps") == 0


@pytest.fixture
def least_privilege(dsn: str) -> Iterator[tuple[str, str]]:
    """The least-privilege script applied to the test's database: DSNs of a login role in pgqueue_worker
    (which may also write the effects table, as an application's worker would) and one in pgqueue_producer."""
    suffix = uuid.uuid4().hex[:8]
    worker, producer = f"pgq_wf_w_{suffix}", f"pgq_wf_p_{suffix}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((sql_dir() / "roles" / "least_privilege.sql").read_bytes())
        conn.execute(flows.EFFECTS_DDL)
        conn.execute(sql.SQL("create role {} login in role pgqueue_worker").format(sql.Identifier(worker)))
        conn.execute(sql.SQL("create role {} login in role pgqueue_producer").format(sql.Identifier(producer)))
        conn.execute(sql.SQL("grant insert on wf_effects to {}").format(sql.Identifier(worker)))
    try:
        yield make_conninfo(dsn, user=worker), make_conninfo(dsn, user=producer)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for role in (worker, producer):
                conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where usename = %s", (role,))
                conn.execute(sql.SQL("drop owned by {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(role)))


async def test_a_least_privilege_worker_runs_every_kind_of_step(least_privilege: tuple[str, str], runs: Runs,
                                                                dsn: str) -> None:
    worker_dsn, producer_dsn = least_privilege
    async with Client(settings=settings_for(worker_dsn)) as as_worker, \
            Client(settings=settings_for(producer_dsn)) as as_producer:
        runs.start(await as_worker.worker(queues=["wf"], concurrency=2))
        moved = await as_producer.dispatch(flows.transfer(key="least"))
        asked = await as_producer.dispatch(flows.approval(key="least"))
        parented = await as_producer.dispatch(flows.parent(key="least"))
        napped = await as_producer.dispatch(flows.sleeper(key="least", seconds=0.1))
        assert await as_producer.signal(asked, "approved", {"ok": True}) in ("woken", "delivered")
        assert await finish(moved.result(timeout=30), "the transfer") == 1
        assert await finish(asked.result(timeout=30), "the approval") == {"ok": True}
        assert await finish(parented.result(timeout=30), "the parent") == "got shipped-least"
        assert await finish(napped.result(timeout=30), "the sleeper") == "rested"
        assert len(await as_producer.workflow_steps(moved)) == 2
    assert await scalar(dsn, "select count(*) from wf_effects where key = 'least'") == 1


async def test_a_step_called_outside_its_workflow_run_is_refused(client: Client, runs: Runs) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.leaky(key="leak"))
    assert await finish(handle.result(timeout=30), "the workflow") == 1
    with pytest.raises(WorkflowError, match="called after its attempt ended"):
        await flows.KEPT["leak"].step("late", flows.charge, "leak", 1)
    assert flows.CALLS["leak:charge"] == 0


async def test_the_inline_mode_refuses_a_workflow_clearly(dsn: str) -> None:
    async with Client(settings=settings_for(dsn), inline=True) as inline:
        with pytest.raises(QueueConfigurationError, match="cannot run inline"):
            await inline.dispatch(flows.two_steps(key="inline"))


async def test_a_block_whose_transaction_was_ended_records_no_checkpoint(client: Client, runs: Runs,
                                                                        dsn: str) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.self_committing(key="commit"))
    failure = await wait_until(lambda: _failure(client, handle), "the workflow's failure")
    assert "was ended inside the block" in failure.message
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_steps") == 0
