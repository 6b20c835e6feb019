"""The README's "Results and status" section: its Python example runs (against a worker of the
test's database) and prints what its comments say; its SQL runs."""

from __future__ import annotations

import psycopg

from pgqueue import Client
from tests.readme_support import run_example, section_blocks
from tests.worker_support import Runs, client, finish, runs

__all__ = ["client", "runs"]


def _blocks(language: str) -> list[str]:
    return section_blocks("Results and status", language)


def _promised(block: str) -> list[str]:
    """What the example's comments say it prints: `print(...)  # shown` and `# shown` lines."""
    promised = []
    for line in block.splitlines():
        if line.startswith("print(") and "# " in line:
            promised.append(line.split("# ", 1)[1].strip())
        elif line.startswith("# "):
            promised.append(line[2:].strip())
    return promised


async def test_the_python_example_prints_what_it_says(client: Client, runs: Runs, dsn: str) -> None:
    [block] = _blocks("python")
    runs.start(await client.worker(concurrency=2))
    namespace, printed = await run_example(block, "readme_results", client)  # the README's own code
    assert printed == _promised(block)

    invoice = await client.dispatch(namespace["Invoice"](order_id=8))
    await finish(invoice.result(timeout=30), "one more invoice")
    [failure] = await (await client.failed()).all()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in _blocks("sql")[0].strip().splitlines():
            found = [conn.execute(statement.replace("<job id>", str(job_id)).encode()).fetchall()
                     for job_id in (invoice, failure.job_id)]
            assert any(found), statement
