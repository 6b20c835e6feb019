"""FastAPI against real PostgreSQL: the request's AsyncSession transaction carries the job; a lifespan worker."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg

from tests.frameworks.fastapi_app import create_app, handled

Conn = psycopg.Connection[Any]


async def test_dispatch_commits_and_rolls_back_with_the_request(dsn: str, conn: Conn) -> None:
    conn.execute("create table orders (id bigint primary key)")
    app = create_app(dsn, worker=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://shop") as client:
        assert (await client.post("/orders/1")).status_code == 200
        declined = await client.post("/orders/2", params={"decline": "true"})
        assert declined.status_code == 402, declined.text

    assert conn.execute("select id from orders").fetchall() == [(1,)]
    assert conn.execute("select envelope->>'name', envelope->'args' from pgqueue.jobs").fetchall() == [
        ("web:send_receipt", {"order_id": 1})]


async def test_a_worker_in_the_lifespan_runs_the_jobs_and_drains_on_shutdown(dsn: str, conn: Conn) -> None:
    conn.execute("create table orders (id bigint primary key)")
    app = create_app(dsn, worker=True)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://shop") as client:
        assert (await client.post("/orders/7")).status_code == 200
        assert await asyncio.wait_for(handled.get(), 30) == 7
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)


def test_the_recipe_defines_app_before_its_routes_use_it() -> None:
    # docs/fastapi.md used `@app.post` before `app = FastAPI(...)`: a NameError for whoever copies it.
    import ast
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "fastapi.md").read_text()
    first = doc.split("```python\n", 1)[1].split("```", 1)[0]
    defined: set[str] = set()
    for node in ast.parse(first).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                for name in ast.walk(decorator):
                    if isinstance(name, ast.Name) and name.id == "app":
                        assert "app" in defined, f"@app... on {node.name} before `app` is defined"
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    assert "app" in defined
