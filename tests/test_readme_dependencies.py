"""The README's "Jobs that wait for jobs" section: its Python example runs (against a worker of
the test's database) and prints what its comments say; its SQL runs."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
import types
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import Client
from tests.worker_support import Runs, client, finish, runs

__all__ = ["client", "runs"]

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks(language: str) -> list[str]:
    text = README.read_text()
    start = text.index("\n## Jobs that wait for jobs: dependencies, chains, groups, batches\n")
    end = text.find("\n## ", start + 1)
    return re.findall(rf"```{language}\n(.*?)```", text[start:end], flags=re.S)


def _promised(block: str) -> list[str]:
    """What the example's comments say it prints: the comment after each `print(...)`."""
    return [line.split("# ", 1)[1].strip() for line in block.splitlines()
            if line.startswith("print(") and "# " in line]


async def test_the_python_example_prints_what_it_says(client: Client, runs: Runs, dsn: str) -> None:
    [block] = _blocks("python")
    runs.start(await client.worker(concurrency=4))
    module = types.ModuleType("readme_dependencies")  # the example's jobs live in a module of their own
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    namespace["client"] = client
    code = compile(block, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        await finish(eval(code, namespace), "the README's example")  # the README's own code
    assert printed.getvalue().splitlines() == _promised(block)

    total, batch = namespace["total"], namespace["batch"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in _blocks("sql")[0].strip().splitlines():
            job_id = batch.id if "batch id" in statement else total
            if "job_dependencies" in statement:
                conn.execute(statement.encode()).fetchall()  # nothing waits any more: no row to expect
                continue
            found = conn.execute(statement.replace("<job id>", str(job_id)).replace(
                "<batch id>", str(job_id)).encode()).fetchall()
            assert found, statement
