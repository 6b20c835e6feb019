"""The README's "Results and status" section: its Python example runs (against a worker of the
test's database) and prints what its comments say; its SQL runs."""

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
    start = text.index("\n## Results and status\n")
    end = text.find("\n## ", start + 1)
    return re.findall(rf"```{language}\n(.*?)```", text[start:end], flags=re.S)


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
    module = types.ModuleType("readme_results")  # the example's jobs live in a module of their own
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    namespace["client"] = client
    code = compile(block, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        await finish(eval(code, namespace), "the README's example")  # the README's own code
    assert printed.getvalue().splitlines() == _promised(block)

    invoice = await client.dispatch(namespace["Invoice"](order_id=8))
    await finish(invoice.result(timeout=30), "one more invoice")
    [failure] = await (await client.failed()).all()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in _blocks("sql")[0].strip().splitlines():
            found = [conn.execute(statement.replace("<job id>", str(job_id)).encode()).fetchall()
                     for job_id in (invoice, failure.job_id)]
            assert any(found), statement
