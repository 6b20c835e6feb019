"""Workflows (issue 27) under the operator's bulk actions: a bulk cancel (``pgqueue.cancel_matching``, the
dashboard's "all matching") cancels a workflow's children as ``pgqueue.cancel`` does, and a retried
workflow (``retry_failed``, ``retry_failed_all``, ``retry_failed_matching``) resumes where it stopped,
with the child its last step waited for or failed on retried too."""

from __future__ import annotations

import re
import uuid
from functools import partial
from typing import Any

import httpx
import pytest

from pgqueue import Client, Job, JobContext, WorkflowContext, workflow
from pgqueue.dashboard import create_app
from tests import workflow_jobs as flows
from tests.worker_support import Runs, client, rows, runs, scalar, wait_until

__all__ = ["client", "runs"]

CHILD_OF = "select child_id from pgqueue.workflow_steps where job_id = %s and kind = 'child'"


@pytest.fixture(autouse=True)
def _counted() -> None:
    flows.CALLS.clear()
    flows.FAILURES.clear()


class Flaky(Job):
    """A child that fails while ``flows.FAILURES[key:flaky]`` is above 0 (one try: a failure ends it)."""

    name = "tests.workflows_operations:flaky"
    queue = "wf"
    tries = 1
    key: str

    async def handle(self, context: JobContext) -> str:
        flows.CALLS[f"{self.key}:flaky"] += 1
        if flows.FAILURES[f"{self.key}:flaky"] > 0:
            flows.FAILURES[f"{self.key}:flaky"] -= 1
            raise RuntimeError("flaky child failed on purpose")
        return f"flaky-{self.key}"


@workflow(queue="wf", name="tests.workflows_operations:leaning")
async def leaning(context: WorkflowContext, key: str) -> str:
    """One step, then a child that may fail; the child's failure is not caught (the workflow fails)."""
    await context.step("before", flows.charge, key, 1)
    got = await context.run(Flaky(key=key), name="flaky")
    return f"got {got}"


async def _parked(dsn: str, job_id: object, state: str) -> bool:
    return bool(await scalar(dsn, "select state from pgqueue.workflows where id = %s", (job_id,)) == state)


async def _waiting_for_child(client: Client, runs: Runs, dsn: str, count: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """``count`` workflows parked on a child due in an hour: (workflow, child) each."""
    runs.start(await client.worker(queues=["wf"], concurrency=2))
    made = [(await client.dispatch(flows.patient_parent(key=f"bulk{i}"))).id for i in range(count)]
    for flow in made:
        await wait_until(partial(_parked, dsn, flow, "waiting_child"), "the parent parked")
    return [(flow, await scalar(dsn, CHILD_OF, (flow,))) for flow in made]


async def _reasons(dsn: str) -> set[tuple[uuid.UUID, str]]:
    return {(r["job_id"], r["reason"]) for r in await rows(dsn, "select job_id, reason from pgqueue.failed_jobs")}


async def test_a_bulk_cancel_cancels_the_workflows_children(client: Client, runs: Runs, dsn: str) -> None:
    pairs = await _waiting_for_child(client, runs, dsn, 3)
    name = flows.patient_parent.name
    # Only the workflows match (by name); their children follow, each once.
    assert await scalar(dsn, "select pgqueue.cancel_matching(null, null, %s, null, null, null, null, 2)",
                        (name,)) == 2
    assert await scalar(dsn, "select pgqueue.cancel_matching(null, null, %s, null, null, null, null, 2)",
                        (name,)) == 1
    assert await _reasons(dsn) == {(job, "cancelled") for pair in pairs for job in pair}
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0
    # A selection by ids that holds a workflow and its child: each cancelled once, none twice.
    [(flow, child)] = await _waiting_for_child(client, runs, dsn, 1)
    assert await scalar(dsn, "select pgqueue.cancel_matching(%s, null, null, null, null, null, null, 10)",
                        ([flow, child],)) >= 1
    assert await scalar(dsn, "select count(*) from pgqueue.failed_jobs where job_id = any(%s)", ([flow, child],)) == 2


async def test_the_dashboards_bulk_cancel_cancels_the_workflows_children(client: Client, runs: Runs,
                                                                         dsn: str) -> None:
    pairs = await _waiting_for_child(client, runs, dsn, 2)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(client)),
                                 base_url="http://localhost") as web:
        confirm = (await web.get(f"/jobs/bulk?action=cancel&name={flows.patient_parent.name}")).text
        token = re.search(r'name="csrf" value="([^"]+)"', confirm)
        assert token, confirm
        done = await web.post("/jobs/bulk", data={"csrf": token.group(1), "action": "cancel", "next": "/jobs",
                                                  "name": flows.patient_parent.name},
                              headers={"origin": "http://localhost"})
        assert done.status_code == 303 and "cancelled+2+jobs" in done.headers["location"]
    assert await _reasons(dsn) == {(job, "cancelled") for pair in pairs for job in pair}


async def _failure_id(dsn: str, job_id: object) -> Any:
    return await scalar(dsn, "select id from pgqueue.failed_jobs where job_id = %s", (job_id,))


@pytest.mark.parametrize("how", ["one", "all", "matching"])
async def test_a_retried_cancelled_workflow_waits_for_its_child_again(client: Client, runs: Runs, dsn: str,
                                                                      how: str) -> None:
    [(flow, child)] = await _waiting_for_child(client, runs, dsn, 1)
    assert await client.cancel(flow) == "cancelled"
    assert await _reasons(dsn) == {(flow, "cancelled"), (child, "cancelled")}
    if how == "one":
        assert await client.retry_failed(await _failure_id(dsn, flow)) == flow
    elif how == "all":
        # The child is put back by the call itself and by its parent's retry: once.
        assert await client.retry_failed_all("wf") == 2
    else:
        # Both failures match: the child's, put back by its parent's retry, is skipped (not refused).
        retried = await scalar(dsn, "select pgqueue.retry_failed_matching('wf', null, 'cancelled', null, null, 100)")
        assert retried in (1, 2)
    # The child is back (ready now, as a retry puts a job back) and the workflow resumes once it ended.
    assert await scalar(dsn, "select count(*) from pgqueue.failed_jobs") == 0
    assert await _result_of(client, dsn, flow) == "shipped-bulk0"
    assert flows.CALLS["bulk0:ship"] == 1
    assert await scalar(dsn, CHILD_OF, (flow,)) == child  # the same child, not a second one
    assert await scalar(dsn, "select count(*) from pgqueue.failed_jobs") == 0


async def _result_of(client: Client, dsn: str, flow: uuid.UUID) -> Any:
    await wait_until(lambda: scalar(dsn, "select count(*) = 0 from pgqueue.jobs where id = %s", (flow,)),
                     "the workflow's end")
    return await scalar(dsn, "select result from pgqueue.job_results where job_id = %s", (flow,))


async def test_a_retried_workflow_whose_child_failed_runs_the_child_again(client: Client, runs: Runs,
                                                                          dsn: str) -> None:
    flows.FAILURES["lean:flaky"] = 1
    runs.start(await client.worker(queues=["wf"], concurrency=2))
    flow = (await client.dispatch(leaning(key="lean"))).id
    await wait_until(lambda: _failure_id(dsn, flow), "the workflow failed with its child")
    child = await scalar(dsn, CHILD_OF, (flow,))
    assert await _reasons(dsn) == {(flow, "failed_by_handler"), (child, "exception")}
    assert await scalar(dsn, "select state from pgqueue.workflow_steps where job_id = %s and seq = 2",
                        (flow,)) == "failed"
    assert await client.retry_failed(await _failure_id(dsn, flow)) == flow
    assert await _result_of(client, dsn, flow) == "got flaky-lean"
    assert flows.CALLS["lean:flaky"] == 2  # the same child, run again
    assert flows.CALLS["lean:charge"] == 1  # the step before was replayed, not run again
    steps = await rows(dsn, "select seq, state, child_id from pgqueue.workflow_steps where job_id = %s order by seq",
                       (flow,))
    assert [(s["seq"], s["state"]) for s in steps] == [(1, "succeeded"), (2, "succeeded")]
    assert steps[1]["child_id"] == child
    assert await scalar(dsn, "select count(*) from pgqueue.failed_jobs") == 0
