"""Workflows (issue 27) against hostile use: handlers that raise BaseException subclasses or call
``sys.exit()`` inside a step and inside ``context.transaction()``, databases whose default isolation is
repeatable read or serializable, steps and blocks nested in steps, duplicate names, and empty, huge
and odd (NUL, lone surrogate, 10 KB) step and signal names and payloads. Each ends with a clear error
naming what was wrong (or runs as it should) and nothing lost: every step once, every effect once."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from functools import partial
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgqueue import Client, WorkflowContext, WorkflowError, workflow
from tests import workflow_jobs as flows
from tests.worker_support import Runs, client, finish, rows, runs, scalar, settings_for, wait_until

__all__ = ["client", "runs"]

ODD = "naïve ✓ 🚀 '; drop table x; -- \n\t\\ \"q\""


@pytest.fixture(autouse=True)
def _counted() -> None:
    flows.CALLS.clear()
    flows.FAILURES.clear()
    EXITS.clear()


#: Exits still to raise per (key, where): the step's function raises while its count is above 0.
EXITS: dict[str, int] = {}


class Crash(BaseException):
    """Not an Exception: a handler's ``except Exception`` lets it through."""


def _exit_once(key: str, where: str, how: str) -> None:
    if EXITS.get(f"{key}:{where}", 0) > 0:
        EXITS[f"{key}:{where}"] -= 1
        if how == "exit":
            sys.exit(3)
        raise Crash(f"{where} crashed on purpose")


async def _failure(dsn: str, job_id: object) -> Any:
    found = await rows(dsn, "select reason, exception, message, attempts from pgqueue.failed_jobs where job_id = %s",
                       (job_id,))
    return found[0] if found else None


async def _result(dsn: str, job_id: object) -> Any:
    await wait_until(partial(_gone, dsn, job_id), "the workflow's end")
    return await scalar(dsn, "select result from pgqueue.job_results where job_id = %s", (job_id,))


async def _gone(dsn: str, job_id: object) -> bool:
    return not await scalar(dsn, "select count(*) from pgqueue.jobs where id = %s", (job_id,))


async def _effects(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(flows.EFFECTS_DDL)


# ---------------------------------------------------------------- BaseException and sys.exit()
@workflow(queue="wf", name="tests.workflows_adversarial:exiting", tries=2)
async def exiting(context: WorkflowContext, key: str, how: str) -> int:
    """A sync step (in a thread), an async step and a transaction block, each exiting once."""
    def sync_step() -> int:
        _exit_once(key, "sync", how)
        flows.CALLS[f"{key}:sync"] += 1
        return 1

    async def async_step() -> int:
        _exit_once(key, "async", how)
        flows.CALLS[f"{key}:async"] += 1
        return 2

    total = int(await context.step("sync", sync_step)) + int(await context.step("async", async_step))
    async with context.transaction("block") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'block')", (key,))
        _exit_once(key, "block", how)
    return total


@pytest.mark.parametrize("how", ["exit", "crash"])
@pytest.mark.parametrize("where", ["sync", "async", "block"])
async def test_a_base_exception_in_a_step_spends_a_try_and_the_step_runs_again(client: Client, runs: Runs, dsn: str,
                                                                               how: str, where: str) -> None:
    await _effects(dsn)
    key = f"{how}-{where}"
    EXITS[f"{key}:{where}"] = 1
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(exiting(key=key, how=how))
    # The attempt ends as a handler's SystemExit or BaseException does (a try spent, the worker goes on);
    # the next attempt replays the steps recorded and runs the one that exited again.
    assert await finish(handle.result(timeout=30), "the workflow") == 3
    assert flows.CALLS[f"{key}:sync"] == 1 and flows.CALLS[f"{key}:async"] == 1
    assert await scalar(dsn, "select count(*) from wf_effects where key = %s", (key,)) == 1  # rolled back once
    steps = await rows(dsn, "select name, state from pgqueue.workflow_steps where job_id = %s order by seq",
                       (handle.id,))
    assert [(s["name"], s["state"]) for s in steps] == [("sync", "succeeded"), ("async", "succeeded"),
                                                        ("block", "succeeded")]


async def test_a_base_exception_every_time_fails_the_workflow_naming_it(client: Client, runs: Runs, dsn: str) -> None:
    await _effects(dsn)
    EXITS["always:block"] = 99
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(exiting(key="always", how="crash"))
    failure = await wait_until(partial(_failure, dsn, handle.id), "the workflow's failure")
    assert failure["attempts"] == 2 and "Crash" in (failure["exception"] or "")
    assert "block crashed on purpose" in failure["message"]
    assert await scalar(dsn, "select count(*) from wf_effects") == 0  # every block rolled back
    assert flows.CALLS["always:sync"] == 1  # recorded once, replayed after


# ---------------------------------------------------------------- nesting and names
@workflow(queue="wf", name="tests.workflows_adversarial:block_in_step")
async def block_in_step(context: WorkflowContext, key: str) -> None:
    async def inner() -> int:
        async with context.transaction("inner") as conn:
            await conn.execute("insert into wf_effects (key, step) values (%s, 'inner')", (key,))
        return 1

    await context.step("outer", inner)


@workflow(queue="wf", name="tests.workflows_adversarial:step_in_block")
async def step_in_block(context: WorkflowContext, key: str) -> None:
    async with context.transaction("outer") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'outer')", (key,))
        await context.step("inner", flows.charge, key, 1)


@workflow(queue="wf", name="tests.workflows_adversarial:block_twice")
async def block_twice(context: WorkflowContext, key: str) -> None:
    await context.step("same", flows.charge, key, 1)
    async with context.transaction("same") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'same')", (key,))


@workflow(queue="wf", name="tests.workflows_adversarial:sleep_twice")
async def sleep_twice(context: WorkflowContext, key: str) -> None:
    await context.sleep(0, name="nap")
    await context.wait_for("go", name="nap")


@pytest.mark.parametrize(("flow", "says"), [
    (block_in_step, "step 'inner' was called inside another step"),
    (step_in_block, "step 'inner' was called inside another step or a transaction block"),
    (block_twice, "step name 'same' is used twice"),
    (sleep_twice, "step name 'nap' is used twice"),
])
async def test_nested_and_duplicate_steps_fail_the_workflow_once_and_write_nothing(
        client: Client, runs: Runs, dsn: str, flow: Any, says: str) -> None:
    await _effects(dsn)
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    handle = await client.dispatch(flow(key="nest"))
    failure = await wait_until(partial(_failure, dsn, handle.id), "the workflow's failure")
    assert says in failure["message"] and failure["attempts"] == 1  # no retry: every replay would do the same
    assert await scalar(dsn, "select count(*) from wf_effects") == 0


#: Names no step or signal may have: empty, NUL (PostgreSQL text cannot hold one), lone surrogates (not
#: UTF-8), over 200 characters (10 KB among them). By index: a workflow's args cannot carry a NUL either.
BAD_NAMES = ["", "\x00", "a\x00b", "\ud800", "x" * 201, "x" * 10240, "\udcff tail"]


@workflow(queue="wf", name="tests.workflows_adversarial:odd_named")
async def odd_named(context: WorkflowContext, key: str, which: int) -> Any:
    return await context.step(BAD_NAMES[which], flows.charge, key, 1)


@pytest.mark.parametrize("which", range(len(BAD_NAMES)))
async def test_a_bad_step_name_fails_the_workflow_naming_it(client: Client, runs: Runs, dsn: str, which: int) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    flow = await client.dispatch(odd_named(key="bad", which=which))
    failure = await wait_until(partial(_failure, dsn, flow.id), "the workflow's failure")
    assert failure["exception"] == "pgqueue.errors.WorkflowError", failure
    assert "a step name must be" in failure["message"] and failure["attempts"] == 1  # no retry: it cannot change
    assert flows.CALLS["bad:charge"] == 0
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_steps where job_id = %s", (flow.id,)) == 0


async def test_odd_but_valid_names_and_payloads_are_kept_exactly(client: Client, runs: Runs, dsn: str) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    long_name = "é" * 200  # 200 characters, 400 bytes
    handle = await client.dispatch(odd_valid(key="odd", name=ODD, long_name=long_name))
    await wait_until(lambda: scalar(dsn, "select state = 'waiting_signal' from pgqueue.workflows where id = %s",
                                    (handle.id,)), "the workflow waiting")
    payload = {"text": "x" * 10240, "odd": ODD, "nested": [[[{"k": None}]]], "big": 2**62, "neg": -0.5}
    assert await client.signal(handle.id, ODD, payload) == "woken"
    assert await finish(handle.result(timeout=30), "the workflow") == {"step": 1, "signal": payload}
    names = [r["name"] for r in await rows(dsn, "select name from pgqueue.workflow_steps where job_id = %s "
                                                "order by seq", (handle.id,))]
    assert names == [ODD, long_name, f"wait:{ODD}#3"]


@workflow(queue="wf", name="tests.workflows_adversarial:odd_valid")
async def odd_valid(context: WorkflowContext, key: str, name: str, long_name: str) -> Any:
    step = await context.step(name, flows.charge, key, 1)
    await context.step(long_name, flows.label, key)
    return {"step": step["charged"], "signal": await context.wait_for(name)}


@workflow(queue="wf", name="tests.workflows_adversarial:waits_oddly")
async def waits_oddly(context: WorkflowContext, which: int) -> Any:
    return await context.wait_for(BAD_NAMES[which])


async def test_a_bad_signal_name_in_wait_for_fails_the_workflow_naming_it(client: Client, runs: Runs,
                                                                          dsn: str) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    made = [(await client.dispatch(waits_oddly(which=i))).id for i in range(len(BAD_NAMES))]
    for flow in made:
        failure = await wait_until(partial(_failure, dsn, flow), "the workflow's failure")
        assert "signal name of context.wait_for must be" in failure["message"], failure
        assert failure["attempts"] == 1


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_a_bad_signal_name_is_refused_and_nothing_is_stored(client: Client, dsn: str, name: str) -> None:
    flow = await client.dispatch(flows.approval(key="sig"))
    with pytest.raises(WorkflowError, match="signal name must be"):
        await client.signal(flow.id, name)
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(WorkflowError, match="signal name must be"):
        client.signal_sync(conn, flow.id, name)
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_signals") == 0


@pytest.mark.parametrize(("payload", "says"), [
    ({"a": "\x00"}, "NUL"), ("\ud800", "surrogate"), ({"\x00": 1}, "NUL"), ("x" * 70000, "over the limit"),
    (float("nan"), "NaN"), ({1: "int key"}, "key"),
])
async def test_a_bad_signal_payload_is_refused_and_nothing_is_stored(client: Client, dsn: str, payload: Any,
                                                                     says: str) -> None:
    flow = await client.dispatch(flows.approval(key="sig"))
    with pytest.raises(WorkflowError, match=says):
        await client.signal(flow.id, "approved", payload)
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_signals") == 0


async def test_a_signal_to_an_unknown_ended_or_plain_job_names_it_and_stores_nothing(client: Client, runs: Runs,
                                                                                     dsn: str) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    done = await client.dispatch(flows.two_steps(key="sig"))
    await finish(done.result(timeout=30), "the workflow")
    flows.FAILURES["sigfail:charge"] = 9
    failed = await client.dispatch(flows.doomed(key="sigfail"))
    await wait_until(partial(_failure, dsn, failed.id), "the failed workflow")
    plain = await client.dispatch(flows.Ship(key="plain", fail=False), delay=3600)
    unknown = uuid.uuid4()
    for target, says in ((unknown, "unknown"), (done.id, "has finished"), (failed.id, "failed or was cancelled"),
                         (plain.id, "not a workflow")):
        with pytest.raises(WorkflowError, match=says) as raised:
            await client.signal(target, "approved", {"n": 1})
        assert str(target) in str(raised.value)
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_signals") == 0


# ---------------------------------------------------------------- isolation levels
@workflow(queue="wf", name="tests.workflows_adversarial:everything", tries=3)
async def everything(context: WorkflowContext, key: str) -> Any:
    """A step, a transaction block, a durable sleep, a signal and a child, each once."""
    charged = await context.step("charge", flows.charge, key, 1)
    async with context.transaction("debit") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'debit')", (key,))
    await context.sleep(timedelta(milliseconds=50), name="nap")
    approved = await context.wait_for("approved", timeout=60)
    shipped = await context.run(flows.Ship(key=key), name="ship")
    async with context.transaction("credit") as conn:
        await conn.execute("insert into wf_effects (key, step) values (%s, 'credit')", (key,))
    return [charged, approved, shipped]


@pytest.fixture
async def isolated(request: pytest.FixtureRequest, dsn: str) -> AsyncIterator[tuple[Client, str]]:
    """``default_transaction_isolation`` set as an operator would: for the test's database (``ALTER
    DATABASE``), or for a login role of its own (``ALTER ROLE``; "role <level>"), and a Client whose
    connections are opened after it (as that role for the latter)."""
    asked = str(request.param)
    by_role = asked.startswith("role ")
    level = asked.removeprefix("role ")
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    role = f"pgq_iso_{uuid.uuid4().hex[:8]}"
    target = dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(flows.EFFECTS_DDL)
        if by_role:  # a role of its own that may use what the migration's owner may (its member)
            owner = conn.execute("select current_user").fetchone()
            assert owner is not None
            conn.execute(sql.SQL("create role {} login in role {}").format(sql.Identifier(role),
                                                                            sql.Identifier(owner[0])))
            conn.execute(sql.SQL("alter role {} set default_transaction_isolation = {}").format(
                sql.Identifier(role), sql.Literal(level)))
            target = psycopg.conninfo.make_conninfo(dsn, user=role)
        else:
            conn.execute(sql.SQL("alter database {} set default_transaction_isolation = {}").format(
                sql.Identifier(str(name)), sql.Literal(level)))
    with psycopg.connect(target, autocommit=True) as conn:
        assert conn.execute("show default_transaction_isolation").fetchone() == (level,)
    try:
        async with Client(settings=settings_for(target)) as opened:
            yield opened, asked
    finally:
        if by_role:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where usename = %s", (role,))
                conn.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(role)))


@pytest.mark.parametrize("isolated", ["repeatable read", "serializable", "role serializable"], indirect=True)
async def test_workflows_run_exactly_once_under_a_stricter_default_isolation(isolated: tuple[Client, str], runs: Runs,
                                                                             dsn: str) -> None:
    opened, level = isolated
    runs.start(await opened.worker(queues=["wf"], concurrency=4))
    runs.start(await opened.worker(queues=["wf"], concurrency=4))
    keys = [f"iso{i}" for i in range(12)]
    handles = [await opened.dispatch(everything(key=key)) for key in keys]
    for handle in handles:
        await wait_until(lambda handle=handle: scalar(  # type: ignore[misc]
            dsn, "select state = 'waiting_signal' from pgqueue.workflows where id = %s", (handle.id,)),
            f"workflow {handle.id} waiting for its signal ({level})")
    # Signals sent side by side with the workers' own statements; each consumed once.
    for index, handle in enumerate(handles):
        await opened.signal(handle.id, "approved", {"n": index})
    results = [await finish(handle.result(timeout=60), f"workflow {handle.id} ({level})") for handle in handles]
    assert results == [[{"charged": 1}, {"n": i}, f"shipped-{key}"] for i, key in enumerate(keys)]
    for key in keys:
        assert flows.CALLS[f"{key}:charge"] == 1 and flows.CALLS[f"{key}:ship"] == 1, key
    effects = await rows(dsn, "select key, step, count(*) as n from wf_effects group by key, step")
    assert sorted((e["key"], e["step"], e["n"]) for e in effects) == sorted(
        (key, step, 1) for key in keys for step in ("debit", "credit"))
    assert await scalar(dsn, "select count(*) from pgqueue.failed_jobs") == 0
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_signals where consumed_seq is null") == 0


ODD_RESULTS: list[Any] = [{"a": "\x00"}, "\ud800", {"\x00": 1}, [float("inf")], {1, 2}]


@workflow(queue="wf", name="tests.workflows_adversarial:returns_oddly")
async def returns_oddly(context: WorkflowContext, which: int) -> Any:
    big = await context.step("big", lambda: "x" * 10240)  # 10 KB: kept as it is
    await context.step("odd", lambda: ODD_RESULTS[which])
    return len(big)


@pytest.mark.parametrize("which", range(len(ODD_RESULTS)))
async def test_a_step_result_json_cannot_hold_fails_the_workflow_naming_the_step(client: Client, runs: Runs,
                                                                                  dsn: str, which: int) -> None:
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    flow = await client.dispatch(returns_oddly(which=which))
    failure = await wait_until(partial(_failure, dsn, flow.id), "the workflow's failure")
    assert "the result of step 'odd'" in failure["message"] and failure["attempts"] == 1, failure
    steps = await rows(dsn, "select name, length(result #>> '{}') as n from pgqueue.workflow_steps "
                            "where job_id = %s order by seq", (flow.id,))
    assert [(s["name"], s["n"]) for s in steps] == [("big", 10240)]  # the good step kept, the bad one not
