"""WorkerOptions: one frozen, validated set of a worker's options, taken by ``Worker``,
``Client.worker`` (as an object or as keywords) and ``queue:work``; and where a worker's own
sessions go behind a transaction pooler, decided once."""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any, get_type_hints

import pytest

from pgqueue import Client, QueueConfigurationError, WorkerOptions
from pgqueue.config import ConnectionConfig
from pgqueue.worker.options import WorkerKeywords, sessions
from tests.worker_support import client, settings_for

__all__ = ["client"]


def test_options_are_frozen_and_normalised_once() -> None:
    options = WorkerOptions(queues=["high", "default", "high"], concurrency=4, maintenance_interval=1)
    assert options.queues == ("high", "default")  # a tuple, duplicates dropped
    assert options.maintenance_interval == 1.0 and isinstance(options.maintenance_interval, float)
    assert options.ahead == 50  # the default prefetch for concurrency 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.concurrency = 8  # type: ignore[misc]
    assert dataclasses.replace(options, concurrency=8).concurrency == 8


@pytest.mark.parametrize(("field", "value", "words"), [
    ("concurrency", 0, "worker concurrency must be an integer >= 1, got 0"),
    ("queues", "default", "worker queues must be a non-empty list of queue names"),
    ("queues", ["ok", ""], "worker queues: a queue name must be 1 to 200 characters"),
    ("poll_interval", 0, "poll_interval must be > 0 seconds and finite, got 0"),
    ("timeout", float("inf"), "timeout must be > 0 seconds and finite, got inf"),
    ("lease", float("nan"), "lease must be from 0.001 to 31536000 seconds"),
    ("drain_timeout", -1, "drain_timeout must be a finite number of seconds >= 0"),
    ("ack_batch_size", 0, "ack_batch_size must be an integer >= 1"),
    ("ack_flush_interval", "5ms", "ack_flush_interval must be a finite number of seconds >= 0"),
    ("threads", 0, "threads must be an integer >= 1"),
    ("metrics_interval", -1, "metrics_interval must be a finite number of seconds >= 0"),
    ("scope", "session", "scope must be a callable"),
])
def test_a_bad_option_is_refused_when_made_naming_its_field(field: str, value: Any, words: str) -> None:
    with pytest.raises(QueueConfigurationError, match=re.escape(words)):
        WorkerOptions(**{field: value})


def test_keywords_are_the_fields_and_an_unknown_one_is_named() -> None:
    # The typed keywords of Client.worker / Worker are WorkerOptions' fields, no more, no fewer.
    assert list(get_type_hints(WorkerKeywords)) == [f.name for f in dataclasses.fields(WorkerOptions)]
    with pytest.raises(QueueConfigurationError, match=r"unknown worker option.*'concurency'"):
        WorkerOptions.of(concurency=4)
    base = WorkerOptions(concurrency=4, poll_interval=2)
    assert WorkerOptions.of(base, concurrency=8) == dataclasses.replace(base, concurrency=8)


async def test_client_worker_takes_options_or_keywords(client: Client) -> None:
    options = WorkerOptions(queues=["a", "b"], concurrency=3, listen=False, prefetch=0, schedules=False)
    worker = await client.worker("database", options)
    assert worker.options is options  # validated once, used as given
    assert (worker.queues, worker.concurrency, worker.prefetch, worker.listen) == (["a", "b"], 3, 0, False)
    varied = await client.worker("database", options, concurrency=5)
    assert (varied.concurrency, varied.queues) == (5, ["a", "b"])
    assert (await client.worker(concurrency=2, listen=False)).options.concurrency == 2
    with pytest.raises(QueueConfigurationError, match="worker of connection 'database': prefetch must be"):
        await client.worker(prefetch=-1)


def test_a_pooler_without_a_direct_dsn_turns_listen_and_vacuum_off_in_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    pooled = ConnectionConfig(name="database", dsn="postgresql://pooler/app", transaction_pooler=True)
    with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
        where = sessions(pooled, WorkerOptions(), "postgresql://default/app")
    assert (where.listen, where.vacuum_dsn, where.direct_dsn) == (False, None, "postgresql://pooler/app")
    [warning] = caplog.records
    assert "transaction pooler" in warning.getMessage() and "listen_dsn" in warning.getMessage()
    assert "LISTEN" in warning.getMessage() and "table maintenance" in warning.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
        quiet = sessions(pooled, WorkerOptions(listen=False, maintenance_interval=None), "postgresql://default/app")
    assert caplog.records == [] and not quiet.listen
    direct = dataclasses.replace(pooled, listen_dsn="postgresql://direct/app")
    assert sessions(direct, WorkerOptions(), "postgresql://default/app") == (
        type(where)(True, "postgresql://direct/app", "postgresql://direct/app"))


async def test_a_worker_behind_a_pooler_warns_once(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    async with Client(settings=settings_for(dsn, transaction_pooler=True)) as pooled:
        with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
            worker = await pooled.worker()
    assert worker.notifier is None and worker.maintenance is not None and worker.maintenance._dsn is None
    assert len([r for r in caplog.records if "transaction pooler" in r.getMessage()]) == 1
