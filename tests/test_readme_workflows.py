"""The README's "Durable workflows" section: its Python example runs as written (against a worker of the
test's database) and prints what its comment says; its SQL runs."""

from __future__ import annotations

import psycopg

from pgqueue import Client
from tests import workflow_jobs as flows
from tests.readme_support import run_example, section_blocks
from tests.worker_support import Runs, client, finish, runs, scalar, wait_until

__all__ = ["client", "runs"]

TITLE = "Durable workflows: steps that run once, exactly-once effects, durable sleep and signals"


async def test_the_example_runs_as_written(client: Client, runs: Runs, dsn: str) -> None:
    [block] = section_blocks(TITLE, "python")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table stock (sku text primary key, reserved integer not null)")
        conn.execute("insert into stock values ('tea', 0)")
    runs.start(await client.worker(queues=["orders", "default"], concurrency=2))  # ShipJob: the default queue
    namespace, printed = await run_example(block, "readme_workflows", client)
    assert printed == ["label-1 for 42, approved by ann"]
    handle = namespace["handle"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select reserved from stock").fetchone() == (1,)
        [sql] = [b for b in section_blocks(TITLE, "sql") if "pgqueue.signal" in b]
        for statement in sql.strip().splitlines():
            if "pgqueue.signal" in statement:
                continue  # the workflow has ended: a signal to it is refused (tested elsewhere)
            conn.execute(statement.replace("<workflow id>", str(handle)).encode()).fetchall()
        steps = conn.execute("select name, kind, state from pgqueue.workflow_steps_of(%s)", (handle,)).fetchall()
    assert steps == [("charge", "step", "succeeded"), ("reserve-stock", "transaction", "succeeded"),
                     ("wait:approved#3", "signal", "succeeded"), ("sleep#4", "sleep", "succeeded"),
                     ("run:readme_workflows:ShipJob#5", "child", "succeeded")]
    await finish(handle.result(timeout=5), "the result again")


async def test_the_cancel_and_retry_recipe_runs(client: Client, runs: Runs, dsn: str) -> None:
    [recipe] = [b for b in section_blocks(TITLE, "sql") if "cancel_matching" in b]
    runs.start(await client.worker(queues=["wf"], concurrency=1))
    flow = (await client.dispatch(flows.patient_parent(key="recipe"))).id
    await wait_until(lambda: scalar(dsn, "select state = 'waiting_child' from pgqueue.workflows where id = %s",
                                    (flow,)), "the workflow waiting for its child")
    cancel, retry = recipe.strip().splitlines()
    with psycopg.connect(dsn, autocommit=True) as conn:
        run = [line.replace("'orders'", "'wf'").replace("<workflow name>", flows.patient_parent.name)
               for line in (cancel, retry)]
        assert conn.execute(run[0].encode()).fetchone() == (1,)
        assert conn.execute("select count(*) from pgqueue.failed_jobs where reason = 'cancelled'").fetchone() == (2,)
        assert conn.execute(run[1].encode()).fetchone() == (1,)  # the child came back with its parent
        assert conn.execute("select count(*) from pgqueue.failed_jobs").fetchone() == (0,)
