"""Fixtures of the fault suite: a database with the ledger, worker processes, the report."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from pgqueue import Client
from tests.faults import fault_jobs
from tests.faults.harness import FaultReport, WorkerFleet, fault_settings, write_pyproject
from tests.faults.ledger import install_ledger

REPORT = FaultReport()


@pytest.fixture
def ledger_dsn(dsn: str) -> str:
    """The test's own migrated database, with the ledger tables and triggers installed."""
    install_ledger(dsn)
    return dsn


@pytest.fixture
def fault_pyproject(tmp_path: Path) -> Path:
    """A pyproject.toml with a 3 s lease, 1 s margin and 1 s job timeout."""
    return write_pyproject(tmp_path)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[WorkerFleet]:
    """Worker subprocesses of this test; those still running at teardown are killed by PID."""
    workers = WorkerFleet(tmp_path)
    try:
        yield workers
    finally:
        workers.close()


@pytest.fixture
async def producer(ledger_dsn: str, fault_pyproject: Path) -> AsyncIterator[Client]:
    """An open Client on the ledger database, configured like the workers."""
    client = Client(settings=fault_settings(ledger_dsn, fault_pyproject))
    await client.open()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def in_process_ledger(ledger_dsn: str) -> AsyncIterator[str]:
    """Handlers run by in-process workers write the ledger of this test's database."""
    fault_jobs.use_ledger(ledger_dsn)
    try:
        yield ledger_dsn
    finally:
        await fault_jobs.close_ledger()
        fault_jobs.use_ledger(None)


@pytest.fixture
def fault_report() -> FaultReport:
    """The suite's report; each fault test adds its row."""
    return REPORT


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the fault table and write it as JSON (benchmarks/out/faults.json)."""
    if not REPORT.rows:
        return
    REPORT.write()
    terminalreporter.write_sep("=", "pgqueue fault report")
    terminalreporter.write_line(REPORT.table())
