"""Workflows for the workflow tests (tests/test_workflows*.py), steered through :data:`CALLS` and
:data:`EVENTS` (each test clears what it uses): what each step's function did, and events a test awaits.

Workers in subprocesses can run them too (``--app tests.workflow_jobs``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

from pgqueue import Job, JobContext, WorkflowContext, WorkflowTimeout, workflow
from pgqueue.errors import WorkflowError

#: How many times each (test key, step) function ran in this process.
CALLS: Counter[str] = Counter()
#: Events the workflows set (test key -> event), created by the tests.
EVENTS: dict[str, asyncio.Event] = {}
#: Failures still to raise per (key, step): a step's function raises while its count is above 0.
FAILURES: Counter[str] = Counter()


def _ran(key: str, step: str) -> None:
    CALLS[f"{key}:{step}"] += 1
    if FAILURES[f"{key}:{step}"] > 0:
        FAILURES[f"{key}:{step}"] -= 1
        raise RuntimeError(f"{step} failed on purpose")


async def charge(key: str, amount: int) -> dict[str, Any]:
    _ran(key, "charge")
    return {"charged": amount}


def label(key: str) -> str:  # sync: run in a thread
    _ran(key, "label")
    return f"label-{key}"


def _set(key: str) -> None:
    event = EVENTS.get(key)
    if event is not None:
        event.set()


@workflow(queue="wf", tries=3)
async def two_steps(context: WorkflowContext, key: str, amount: int = 5) -> dict[str, Any]:
    """charge (async), then label (sync, in a thread): both results kept."""
    charged = await context.step("charge", charge, key, amount, backoff=0)
    shipped = await context.step("label", label, key, backoff=0)
    return {"charged": charged, "label": shipped}


@workflow(queue="wf")
async def sleeper(context: WorkflowContext, key: str, seconds: float) -> str:
    await context.step("before", charge, key, 1)
    _set(f"{key}:asleep")
    await context.sleep(timedelta(seconds=seconds))
    _set(f"{key}:awake")
    return "rested"


@workflow(queue="wf")
async def approval(context: WorkflowContext, key: str, within: float | None = None) -> Any:
    await context.step("ask", charge, key, 1)
    _set(f"{key}:waiting")
    try:
        return await context.wait_for("approved", timeout=within)
    except WorkflowTimeout:
        return "timed out"


class Ship(Job):
    """A child job: counts its runs, returns a label."""

    name = "tests.workflows:ship"
    queue = "wf"
    key: str
    fail: bool = False

    async def handle(self, context: JobContext) -> str:
        CALLS[f"{self.key}:ship"] += 1
        if self.fail:
            raise RuntimeError("no courier")
        return f"shipped-{self.key}"


Ship.tries = 1


@workflow(queue="wf")
async def parent(context: WorkflowContext, key: str, fail: bool = False) -> str:
    shipped = await context.run(Ship(key=key, fail=fail), name="ship")
    return f"got {shipped}"


EFFECTS_DDL = "create table if not exists wf_effects (key text not null, step text not null)"


@workflow(queue="wf", tries=3)
async def transfer(context: WorkflowContext, key: str) -> int:
    """One effect row written in the step's own transaction, then a step that may fail (a replay)."""
    async with context.transaction("debit") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'debit')", (key,))
    await context.step("notify", charge, key, 1, backoff=0)
    return 1


def not_json(key: str) -> object:
    _ran(key, "not_json")
    return {1, 2}  # a set is not JSON


@workflow(queue="wf")
async def bad_result(context: WorkflowContext, key: str) -> None:
    await context.step("odd", not_json, key)


@workflow(queue="wf")
async def nested(context: WorkflowContext, key: str) -> None:
    async def inner() -> int:
        return int(await context.step("inner", charge, key, 1) is not None)

    await context.step("outer", inner)


@workflow(queue="wf")
async def twice(context: WorkflowContext, key: str) -> None:
    await context.step("same", charge, key, 1)
    await context.step("same", charge, key, 2)


@workflow(queue="wf")
async def doomed(context: WorkflowContext, key: str) -> None:
    await context.step("flaky", charge, key, 1, tries=2, backoff=0)


@workflow(queue="wf", name="tests.workflows:versioned", version=2)
async def versioned(context: WorkflowContext, key: str) -> str:
    await context.step("charge", charge, key, 1)
    return "v2"


@workflow(queue="wf")
async def patient_parent(context: WorkflowContext, key: str) -> str:
    """Waits for a child due in an hour."""
    return str(await context.run(Ship(key=key), name="ship", delay=3600))


@workflow(queue="wf")
async def step_in_block(context: WorkflowContext, key: str) -> None:
    async with context.transaction("block") as conn:
        await conn.execute("select 1")
        await context.step("inside", charge, key, 1)


#: Contexts a workflow left behind (for the test of a step called after its attempt).
KEPT: dict[str, WorkflowContext] = {}


@workflow(queue="wf")
async def leaky(context: WorkflowContext, key: str) -> int:
    KEPT[key] = context
    return 1


class Packed(Job):
    """A child acked inside its own transaction: its result is written just after the ack."""

    name = "tests.workflows:packed"
    queue = "wf"
    key: str

    async def handle(self, context: JobContext) -> str:
        async with context.transaction() as conn:
            await conn.execute("select 1")
        return f"packed-{self.key}"


@workflow(queue="wf")
async def packing_parent(context: WorkflowContext, key: str) -> str:
    return str(await context.run(Packed(key=key), name="pack"))


@workflow(queue="wf", tries=1)
async def self_committing(context: WorkflowContext, key: str) -> None:
    async with context.transaction("commits") as conn:
        await conn.execute("commit")  # the block's transaction is the block's: refused


#: What ``context.replaying`` said in :func:`peeking` (before its first step, then before its second).
REPLAYING: dict[str, list[object]] = {}


@workflow(queue="wf", tries=2)
async def peeking(context: WorkflowContext, key: str) -> int:
    """A transaction block first (its steps are read with its BEGIN), then a step that may fail."""
    seen = REPLAYING.setdefault(key, [])
    try:
        seen.append(context.replaying)
    except WorkflowError as exc:
        seen.append(str(exc))
    async with context.transaction("debit") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'debit')", (key,))
    seen.append(context.replaying)
    await context.step("notify", charge, key, 1, backoff=0)
    return 1


@workflow(queue="wf", tries=3)
async def three_blocks(context: WorkflowContext, key: str) -> int:
    """Three transaction blocks: the first (pipelined, after the steps' read), one that reads before it
    writes (a fetch in pipeline mode), one out of pipeline mode (COPY); then a step that may fail."""
    async with context.transaction("first") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'first')", (key,))
    async with context.transaction("read") as conn:
        cur = await conn.execute("select count(*) from wf_effects where key = %s", (key,))
        row = await cur.fetchone()
        seen = row[0] if row else -1
        await conn.execute("insert into wf_effects (key, step) values (%s, %s)", (key, f"read-{seen}"))
    async with context.transaction("copied", pipeline=False) as conn, \
            conn.cursor().copy("copy wf_effects (key, step) from stdin") as copy:
        await copy.write_row((key, "copied"))
    await context.step("notify", charge, key, 1, backoff=0)
    return 3


@workflow(queue="wf", tries=1)
async def failing_block(context: WorkflowContext, key: str) -> None:
    """A second block whose second statement fails: in pipeline mode the error is raised as the block
    ends (the code after the statement ran); nothing of the block commits."""
    async with context.transaction("first") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'first')", (key,))
    async with context.transaction("broken") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'broken')", (key,))
        await conn.execute("insert into wf_no_such_table values (1)")
        _ran(key, "after")


@workflow(queue="wf", tries=1)
async def going_on(context: WorkflowContext, key: str) -> None:
    """A second block that catches a failed statement's error (a fetch raises it) and goes on writing."""
    async with context.transaction("first") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'first')", (key,))
    async with context.transaction("careless") as conn:
        try:
            await (await conn.execute("select 1 / 0")).fetchone()
        except Exception:  # what the test is about: a handler that goes on
            _ran(key, "caught")
        await conn.execute("insert into wf_effects (key, step) values (%s, 'careless')", (key,))


#: The backend pid of each block of :func:`shared_connection` (key:block -> pids, one per run).
PIDS: dict[str, list[int]] = {}


@workflow(queue="wf", tries=3)
async def shared_connection(context: WorkflowContext, key: str) -> str:
    """Blocks back to back (one connection), an error outside the steps after two of them (the attempt
    ends holding it), a step and a sleep between them (it goes back to the pool), a block that fails."""
    for name in ("one", "two", "three", "four"):
        if name == "three":
            _ran(key, "outside")
            await context.step("between", _ran, key, "between")
            await context.sleep(0.05)
        async with context.transaction(name) as conn:
            PIDS.setdefault(f"{key}:{name}", []).append(conn.info.backend_pid)
            await conn.execute("insert into wf_effects (key, step) values (%s, %s)", (key, name))
            _ran(key, name)
    return "done"
