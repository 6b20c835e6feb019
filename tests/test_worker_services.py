"""Services: a worker's background parts (completer, notifier, cancellations, heartbeat, scheduler,
maintenance, depth sampler) run under one group that starts them and stops them in order."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pgqueue import Client
from pgqueue.worker.services import Services
from tests.worker_support import client, finish, wait_event

__all__ = ["client"]


class Loop:
    """A service that records its start and its stop (it runs until cancelled)."""

    def __init__(self, name: str, log: list[str], *, fails: bool = False) -> None:
        self.name = name
        self.log = log
        self.fails = fails
        self.started = asyncio.Event()

    async def run(self) -> None:
        self.log.append(f"start {self.name}")
        self.started.set()
        if self.fails:
            raise RuntimeError(f"{self.name} broke")
        try:
            await asyncio.Event().wait()
        finally:
            self.log.append(f"stop {self.name}")


async def test_services_stop_in_the_order_asked_then_the_rest_in_reverse() -> None:
    log: list[str] = []
    a, b, c, d = (Loop(n, log) for n in "abcd")
    async with Services() as services:
        services.start(a, None, b, c, d)  # None: a service that is off
        for service in (a, b, c, d):
            await wait_event(service.started, f"service {service.name} to start")
        await services.stop(c, a, None)
        assert log[-2:] == ["stop c", "stop a"]
        assert not services.running(a) and services.running(b)
        await services.stop(a)  # stopped already: nothing happens
    assert log[-2:] == ["stop d", "stop b"]


async def test_a_service_that_fails_is_logged_and_the_others_still_stop(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []
    broken, fine = Loop("broken", log, fails=True), Loop("fine", log)
    with caplog.at_level(logging.ERROR, logger="pgqueue.worker"):
        async with Services() as services:
            services.start(broken, fine)
            await wait_event(broken.started, "the broken service to start")
            await wait_event(fine.started, "the fine service to start")
    assert log[-1] == "stop fine"
    [record] = caplog.records
    assert "pgqueue-loop ended with an error" in record.getMessage() and record.exc_info is not None


def service_tasks() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks() if task.get_name().startswith("pgqueue-")
            and not task.done()}


async def test_a_worker_runs_its_services_and_leaves_none_behind(client: Client) -> None:
    worker = await client.worker(listen=True, poll_interval=600, maintenance_interval=600)
    before = service_tasks()
    running = asyncio.create_task(worker.run())
    assert worker.notifier is not None
    await wait_event(worker.notifier.connected, "the worker to listen")
    # (The scheduler has nothing scheduled here: its run() ends at once.)
    assert {"pgqueue-completer", "pgqueue-notifier", "pgqueue-cancellations", "pgqueue-heartbeat",
            "pgqueue-maintenance"} <= service_tasks() - before
    worker.stop()
    assert await finish(running, "the worker to stop") == 0
    assert service_tasks() == before
