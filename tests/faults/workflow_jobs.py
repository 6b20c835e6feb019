"""The workflows of the chaos tests (tests/faults/test_workflow_chaos.py), imported by their worker
processes (``worker_main --import tests.faults.workflow_jobs``).

- :func:`five_effects`: records each attempt in the ledger (``fault_ledger``: job, attempt, token,
  worker pid), then five steps, each one row in ``workflow_effects`` written through the step's
  ``context.transaction`` — the row commits with the step's checkpoint, fenced by the token;
- :func:`sleeper`: one durable sleep, then one effect row the same way;
- :func:`ledgered_sleeper`: the same, recording its attempts after the sleep in the ledger.
"""

from __future__ import annotations

import os

from pgqueue import WorkflowContext, workflow
from tests.faults import fault_jobs

STEPS = 5
EFFECTS_DDL = b"""
create table if not exists workflow_effects (
    job_id     uuid        not null,
    n          integer     not null,
    step       integer     not null,
    token      bigint      not null,
    worker_pid integer     not null,
    at         timestamptz not null default clock_timestamp()
)
"""  # no unique key: a step whose effect committed twice shows as two rows
_EFFECT = b"insert into workflow_effects (job_id, n, step, token, worker_pid) values (%s, %s, %s, %s, %s)"


@workflow(name="faults:five-effects", tries=25)
async def five_effects(context: WorkflowContext, n: int) -> int:
    """Five steps, one effect row each, exactly once however often the workflow runs."""
    await fault_jobs.append(context.job)
    for step in range(STEPS):
        async with context.transaction(f"effect-{step}") as conn:
            await conn.execute(_EFFECT, (context.id, n, step, context.job.token, os.getpid()))
    return n


@workflow(name="faults:sleeper", tries=3)
async def sleeper(context: WorkflowContext, n: int, seconds: float) -> int:
    """Asleep for ``seconds`` (no lease, connection or slot held), then one effect row."""
    await context.sleep(seconds)
    async with context.transaction("effect") as conn:
        await conn.execute(_EFFECT, (context.id, n, 0, context.job.token, os.getpid()))
    return n


@workflow(name="faults:ledgered-sleeper", tries=10)
async def ledgered_sleeper(context: WorkflowContext, n: int, seconds: float) -> int:
    """:func:`sleeper` whose attempts after the sleep are in the fault ledger (each run under its token)."""
    await context.sleep(seconds)
    await fault_jobs.append(context.job)
    async with context.transaction("effect") as conn:
        await conn.execute(_EFFECT, (context.id, n, 0, context.job.token, os.getpid()))
    return n
