"""A worker on a connection behind a transaction-mode pooler never LISTENs through it."""

from __future__ import annotations

import logging

import pytest

from pgqueue import Client
from tests.worker_support import settings_for


async def test_pooler_without_listen_dsn_polls_and_says_so(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    async with Client(settings=settings_for(dsn, transaction_pooler=True)) as client:
        with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
            worker = await client.worker(poll_interval=0.5)
        assert worker.listen is False
        assert worker.notifier is None
        assert "transaction pooler" in caplog.text and "listen_dsn" in caplog.text
        pool = await client.pool()
        assert pool.kwargs["prepare_threshold"] is None  # type: ignore[index]  # a dict here, not a callable


async def test_pooler_with_listen_dsn_listens_directly(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    async with Client(settings=settings_for(dsn, transaction_pooler=True, listen_dsn=dsn)) as client:
        with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
            worker = await client.worker()
        assert worker.listen is True
        assert worker.listen_dsn == dsn
        assert "transaction pooler" not in caplog.text
