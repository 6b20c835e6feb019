"""The FastAPI recipe as a test app: dispatch in the request's AsyncSession transaction, a worker in the lifespan."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Request
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from pgqueue import Client, Job, JobContext

# What the lifespan worker ran, for the test to await.
handled: asyncio.Queue[int] = asyncio.Queue()


class SendReceipt(Job):
    """The web app's job."""

    name = "web:send_receipt"
    queue = "web"

    order_id: int

    async def handle(self, context: JobContext) -> None:
        await handled.put(self.order_id)


async def transaction(request: Request) -> AsyncIterator[AsyncSession]:
    """One AsyncSession per request, in a transaction that commits when the endpoint returns
    and rolls back when it raises (HTTPException included)."""
    async with request.app.state.sessions() as session, session.begin():
        yield session


Session = Annotated[AsyncSession, Depends(transaction)]


def create_app(dsn: str, *, worker: bool) -> FastAPI:
    """The app; ``worker=True`` also runs a pgqueue worker inside it (small deployments)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_async_engine("postgresql+psycopg://",
                                     async_creator=lambda: psycopg.AsyncConnection.connect(dsn))
        app.state.sessions = async_sessionmaker(engine, expire_on_commit=False)
        try:
            if not worker:
                yield
                return
            async with Client(dsn=dsn) as client:
                running = await client.worker(queues=["web"], concurrency=4)
                task = asyncio.create_task(running.run())
                try:
                    yield
                finally:
                    running.stop()  # the graceful drain: running handlers finish
                    await task
        finally:
            await engine.dispose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders/{order_id}")
    async def create_order(order_id: int, session: Session, decline: bool = False) -> dict[str, int]:
        await session.execute(text("insert into orders (id) values (:id)"), {"id": order_id})
        await SendReceipt(order_id=order_id).dispatch(session)  # same transaction as the insert
        if decline:
            raise HTTPException(status_code=402, detail="card declined")
        return {"order": order_id}

    return app
