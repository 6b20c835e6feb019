"""Workflows (issue 27) run by a worker of the test's database: steps replay, durable sleep, signals,
children."""

from __future__ import annotations

import asyncio

from pgqueue import Client
from tests import workflow_jobs as flows
from tests.worker_support import Runs, client, finish, rows, runs, wait_event, wait_until

__all__ = ["client", "runs"]


async def test_steps_run_once_and_replay_after_a_failed_step(client: Client, runs: Runs, dsn: str) -> None:
    flows.FAILURES["replay:label"] = 1
    runs.start(await client.worker(queues=["wf"], concurrency=2))
    handle = await client.dispatch(flows.two_steps(key="replay", amount=7))
    assert await finish(handle.result(timeout=30), "the workflow") == {"charged": {"charged": 7},
                                                                     "label": "label-replay"}
    # charge ran once although the workflow ran twice (label failed once, then replayed charge)
    assert flows.CALLS["replay:charge"] == 1 and flows.CALLS["replay:label"] == 2
    steps = await rows(dsn, "select seq, name, kind, state, attempts from pgqueue.workflow_steps order by seq")
    assert [(s["seq"], s["name"], s["kind"], s["state"], s["attempts"]) for s in steps] == [
        (1, "charge", "step", "succeeded", 1), (2, "label", "step", "succeeded", 2)]
    # the step's retry did not use up a try of the workflow
    [done] = await rows(dsn, "select attempts from pgqueue.job_results where job_id = %s", (handle,))
    assert done["attempts"] == 1


async def _parked(dsn: str, job_id: object) -> bool:
    found = await rows(dsn, "select token is null and available_at > now() as parked from pgqueue.jobs "
                            "where id = %s", (job_id,))
    return bool(found and found[0]["parked"])


async def test_a_sleeping_workflow_holds_no_slot_and_wakes_at_its_time(client: Client, runs: Runs,
                                                                       dsn: str) -> None:
    flows.EVENTS["nap:asleep"], flows.EVENTS["nap:awake"] = asyncio.Event(), asyncio.Event()
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    long_nap = await client.dispatch(flows.sleeper(key="long", seconds=3600))
    await wait_until(lambda: _parked(dsn, long_nap), "the long sleeper parked")
    # the one slot is free: a plain job runs, and a second workflow sleeps and wakes meanwhile
    shipped = await client.dispatch(flows.Ship(key="beside"))
    assert await finish(shipped.result(timeout=30), "the plain job") == "shipped-beside"
    nap = await client.dispatch(flows.sleeper(key="nap", seconds=0.3))
    await wait_event(flows.EVENTS["nap:awake"], "the short sleeper woke")
    assert await finish(nap.result(timeout=30), "the sleeper") == "rested"
    [step] = await rows(dsn, "select state, ended_at >= wake_at as after from pgqueue.workflow_steps "
                             "where job_id = %s and kind = 'sleep'", (nap,))
    assert step == {"state": "succeeded", "after": True}
    [parked] = await rows(dsn, "select j.token, j.attempts, w.state from pgqueue.jobs j "
                               "join pgqueue.workflows w using (id) where id = %s", (long_nap,))
    assert parked == {"token": None, "attempts": 0, "state": "sleeping"}  # no lease, no try used


async def test_a_signal_wakes_a_waiting_workflow_and_one_sent_before_is_kept(client: Client, runs: Runs,
                                                                            dsn: str) -> None:
    early = await client.dispatch(flows.approval(key="early"))
    assert await client.signal(early, "approved", {"by": "bob"}) == "delivered"  # before it even ran
    runs.start(await client.worker(queues=["wf"], concurrency=2))
    assert await finish(early.result(timeout=30), "the early approval") == {"by": "bob"}

    late = await client.dispatch(flows.approval(key="late"))
    await wait_until(lambda: _parked(dsn, late), "the workflow parked for its signal")
    [waiting] = await rows(dsn, "select state, awaited_signal, wake_at from pgqueue.workflows where id = %s",
                           (late,))
    assert waiting == {"state": "waiting_signal", "awaited_signal": "approved", "wake_at": None}
    assert await client.signal(late, "approved", {"by": "ann"}) == "woken"
    assert await finish(late.result(timeout=30), "the late approval") == {"by": "ann"}
    [signal] = await rows(dsn, "select consumed_seq from pgqueue.workflow_signals where job_id = %s", (late,))
    assert signal == {"consumed_seq": 2}


async def test_a_wait_times_out_with_a_clear_error(client: Client, runs: Runs) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flows.approval(key="slow", within=0.2))
    assert await finish(handle.result(timeout=30), "the timed-out approval") == "timed out"


async def test_a_child_runs_once_and_its_result_resumes_the_parent(client: Client, runs: Runs, dsn: str) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))  # one slot: the parent must let go of it
    handle = await client.dispatch(flows.parent(key="kid"))
    assert await finish(handle.result(timeout=30), "the parent") == "got shipped-kid"
    assert flows.CALLS["kid:ship"] == 1
    [step] = await rows(dsn, "select kind, state, result, child_id is not null as linked from pgqueue.workflow_steps "
                             "where job_id = %s", (handle,))
    assert step == {"kind": "child", "state": "succeeded", "result": "shipped-kid", "linked": True}


async def test_a_failed_child_fails_the_parent_naming_it(client: Client, runs: Runs) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=2))
    handle = await client.dispatch(flows.parent(key="broke", fail=True))
    await wait_until(lambda: _failed(client, handle), "the parent's failure")
    [failure] = [f for f in await (await client.failed()).all() if f.job_id == handle]
    assert failure.exception == "pgqueue.errors.WorkflowChildError"
    assert "did not succeed" in failure.message and "no courier" in failure.message


async def _failed(client: Client, job_id: object) -> bool:
    return any(f.job_id == job_id for f in await (await client.failed()).all())


async def test_signals_racing_the_waits_are_never_lost(client: Client, runs: Runs) -> None:
    # Each signal is sent while its workflow may be running, parking or parked: whichever comes first,
    # the wait consumes it (the job's row lock orders the signal and the park).
    for _ in range(2):
        runs.start(await client.worker(queues=["wf"], concurrency=4))
    handles = await client.dispatch_many([flows.approval(key=f"race-{n}") for n in range(40)])

    async def send(n: int) -> None:
        await asyncio.sleep(0.005 * (n % 8))  # spread over the workflows' first attempts
        assert await client.signal(handles[n], "approved", {"n": n}) in ("woken", "delivered")

    await finish(asyncio.gather(*(send(n) for n in range(40))), "the signals")
    results = await finish(asyncio.gather(*(h.result(timeout=60) for h in handles)), "the workflows", 90)
    assert results == [{"n": n} for n in range(40)]


async def test_dispatch_many_and_after_work_for_workflows(client: Client, runs: Runs, dsn: str) -> None:
    first, second = await client.dispatch_many([flows.two_steps(key="many-1"), flows.two_steps(key="many-2")])
    later = await client.dispatch(flows.two_steps(key="after"), after=[first, second])
    envelopes = await rows(dsn, "select envelope->'workflow' as version from pgqueue.jobs")
    assert [e["version"] for e in envelopes] == [1, 1, 1]
    runs.start(await client.worker(queues=["wf"], concurrency=2))
    assert (await finish(later.result(timeout=30), "the workflow after the others"))["label"] == "label-after"


async def test_drain_runs_a_workflow_until_it_waits_and_again_once_signalled(client: Client) -> None:
    from pgqueue.testing import drain

    handle = await client.dispatch(flows.approval(key="drained"))
    [first] = await drain(client, queues=["wf"])
    assert (first.id, first.outcome) == (handle, "snoozed")  # parked for its signal
    await client.signal(handle, "approved", "yes")
    [second] = await drain(client, queues=["wf"])
    assert (second.id, second.outcome, second.attempt) == (handle, "acked", 1)  # the wait used no try
    assert await handle.result(timeout=5) == "yes"


async def test_a_child_acked_in_its_transaction_still_gives_its_result(client: Client, runs: Runs) -> None:
    # The child's ack releases the parent before the child's value is written (pending): the parent
    # looks again rather than take a null.
    runs.start(await client.worker(queues=["wf"], concurrency=2))
    handles = await client.dispatch_many([flows.packing_parent(key=f"p{n}") for n in range(5)])
    results = await finish(asyncio.gather(*(h.result(timeout=30) for h in handles)), "the parents")
    assert results == [f"packed-p{n}" for n in range(5)]
