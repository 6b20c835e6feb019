"""Bad input: each gives a clear error or a clean terminal failure, and nothing else is lost."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from pgqueue import (
    Client,
    Job,
    QueueConfigurationError,
    QueuePayloadError,
    QueueRetryError,
    QueueStorageError,
    Worker,
    load_settings,
)
from tests.faults.fault_jobs import EchoJob, LedgerJob
from tests.faults.harness import FaultReport, fault_settings, scalar, write_pyproject
from tests.faults.ledger import check_ledger
from tests.helpers import envelope


async def drain(client: Client) -> Worker:
    """Run an in-process worker until no job is ready."""
    worker = await client.worker(concurrency=4, listen=False, poll_interval=0.2)
    await worker.run(stop_when_empty=True)
    return worker


def failures(dsn: str) -> dict[uuid.UUID, tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("select job_id, reason, message from pgqueue.failed_jobs").fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


async def test_bad_payloads_in_the_queue_fail_cleanly_and_lose_nothing_else(
        in_process_ledger: str, producer: Client, fault_report: FaultReport) -> None:
    dsn = in_process_ledger
    good = await producer.dispatch_many([LedgerJob(n=i) for i in range(30)])
    unknown = envelope(name="billing:NoSuchJob")
    wrong_args = [envelope(name="faults:ledger", args={"nope": 1}), envelope(name="faults:ledger", args={})]
    by_hand: dict[str, Any] = {  # written straight into pgqueue.jobs, as a careless script might
        "not an object": [1, 2],
        "a bare string": "just text",
        "no name or args": {"garbage": True},
        "args not an object": {**envelope(name="faults:ledger"), "args": [1]},
        "unknown backoff": {**envelope(name="faults:ledger", args={"n": 1}), "backoff": {"kind": "weird"}},
        "tries as text": {**envelope(name="faults:ledger", args={"n": 1}), "tries": "3"},
        "name not a string": {**envelope(args={"n": 1}), "name": 5},
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        unknown_id = conn.execute("select pgqueue.enqueue(%s)", (Jsonb(unknown),)).fetchone()[0]  # type: ignore[index]
        wrong_ids = [conn.execute("select pgqueue.enqueue(%s)", (Jsonb(e),)).fetchone()[0]  # type: ignore[index]
                     for e in wrong_args]
        hand_ids = {}
        for what, body in by_hand.items():
            hand_ids[what] = uuid.uuid4()
            conn.execute("insert into pgqueue.jobs (id, queue, envelope, max_tries) values (%s, 'default', %s, 3)",
                         (hand_ids[what], Jsonb(body)))
    more_good = await producer.dispatch_many([LedgerJob(n=100 + i) for i in range(30)])

    await drain(producer)

    failed = failures(dsn)
    assert failed[unknown_id][0] == "unknown_job" and "'billing:NoSuchJob' is not registered" in failed[unknown_id][1]
    for job_id in wrong_ids:
        assert failed[job_id][0] == "payload_invalid" and "do not fit the job" in failed[job_id][1]
    for what, job_id in hand_ids.items():
        assert failed[job_id][0] == "payload_invalid", (what, failed[job_id])
        assert failed[job_id][1], what  # a message saying what is wrong
    report = check_ledger(dsn)
    assert report.completed == len(good) + len(more_good)
    assert report.failed == 1 + len(wrong_ids) + len(hand_ids)
    assert report.executions == report.completed  # no bad payload reached a handler
    fault_report.add("bad payloads in the queue (unknown name, wrong args, malformed JSON)",
                     report.failed, report)


class ZeroTries(Job, register=False):
    tries = 0


class TooSlow(Job, register=False):
    timeout = 5.0  # the fault connection's lease is 3 s


async def test_refused_dispatches_store_nothing(in_process_ledger: str, producer: Client, tmp_path: Path,
                                                fault_report: FaultReport) -> None:
    dsn = in_process_ledger
    (tmp_path / "small").mkdir()
    small = Client(settings=fault_settings(dsn, write_pyproject(tmp_path / "small", {"max_payload_bytes": 2000})))
    await small.open()
    # Without the lease heartbeat a job's timeout must fit in the lease (issue 11: with it, it need not).
    (tmp_path / "strict").mkdir()
    strict = Client(settings=fault_settings(dsn, write_pyproject(tmp_path / "strict", {"heartbeat": False})))
    await strict.open()
    Case = tuple[str, Callable[[], Coroutine[Any, Any, Any]], type[Exception], str]
    cases: list[Case] = [
        ("envelope over the size limit", lambda: small.dispatch_many([EchoJob(text="ok"), EchoJob(text="x" * 5000)]),
         QueuePayloadError, "over the limit of 2000 bytes"),
        ("NUL in a string arg", lambda: producer.dispatch(EchoJob(text="a\x00b")), QueuePayloadError, "NUL"),
        ("NUL in a dict key", lambda: producer.dispatch(EchoJob(data={"k\x00": 1})), QueuePayloadError, "NUL"),
        ("lone surrogate in an arg", lambda: producer.dispatch(EchoJob(text="\ud800")), QueuePayloadError, "surrogate"),
        ("lone surrogate, bulk", lambda: producer.dispatch_many([EchoJob(), EchoJob(data=["\udfff"])]),
         QueuePayloadError, "surrogate"),
        ("NUL in the queue name", lambda: producer.dispatch(EchoJob(), queue="a\x00b"), QueueConfigurationError,
         "U\\+0000"),
        ("arg that is not JSON", lambda: producer.dispatch(EchoJob(data={1, 2})), QueuePayloadError, "not JSON"),
        ("NaN arg", lambda: producer.dispatch(EchoJob(data=math.nan)), QueuePayloadError, "NaN"),
        ("negative delay", lambda: producer.dispatch(EchoJob(), delay=-1), QueueConfigurationError, "delay"),
        ("NaN delay", lambda: producer.dispatch(EchoJob(), delay=math.nan), QueueConfigurationError, "delay"),
        ("infinite delay", lambda: producer.dispatch(EchoJob(), delay=math.inf), QueueConfigurationError, "delay"),
        ("NaN delay, bulk", lambda: producer.dispatch_many([EchoJob(), EchoJob()], delay=[0, math.nan]),
         QueueConfigurationError, "delay"),
        ("tries=0", lambda: producer.dispatch(ZeroTries()), QueueConfigurationError, "tries"),
        ("timeout >= lease, no heartbeat", lambda: strict.dispatch(TooSlow()), QueueConfigurationError,
         "lease"),
    ]
    try:
        for what, call, kind, words in cases:
            with pytest.raises(kind, match=words):
                await call()
            assert scalar(dsn, "select count(*) from fault_dispatched") == 0, f"{what}: something was stored"
    finally:
        await small.close()
        await strict.close()
    # The database refuses what slips past Python (a hand-written call): named, nothing stored.
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="delay must be a finite number"):
            conn.execute("select pgqueue.enqueue(%s, 'NaN')", (Jsonb(envelope()),))
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_max_tries_positive"):
            conn.execute("select pgqueue.enqueue(%s)", (Jsonb(envelope(tries=0)),))
    assert scalar(dsn, "select count(*) from fault_dispatched") == 0

    await producer.dispatch_many([LedgerJob(n=i) for i in range(10)])
    await drain(producer)
    report = check_ledger(dsn)
    assert (report.dispatched, report.completed) == (10, 10)
    fault_report.add("refused dispatches (size, NUL, surrogates, NaN/negative delay, tries=0, timeout)",
                     len(cases) + 2, report)


def test_bad_definitions_and_settings_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(QueueConfigurationError, match="at least one delay"):
        class EmptyBackoff(Job, register=False):
            backoff = ()
    base: dict[str, object] = {"lease": 10, "lease_margin": 1, "timeout": 1}
    cases: list[tuple[dict[str, object], str]] = [
        ({"backoff": []}, "at least one delay"), ({"tries": 0}, "tries must be an integer >= 1"),
        ({"timeout": 9.5, "heartbeat": False}, "lease"), ({"timeout": 4e7}, "one year"),
        ({"lease": math.inf}, "lease")]
    for table, words in cases:
        folder = tmp_path / uuid.uuid4().hex
        folder.mkdir()
        path = folder / "pyproject.toml"
        lines = [f"{k} = {'inf' if v == math.inf else json.dumps(v)}" for k, v in {**base, **table}.items()]
        path.write_text("[tool.pgqueue.connections.database]\n" + "\n".join(lines) + "\n")
        with pytest.raises(QueueConfigurationError, match=words):
            load_settings(path, environ={})


async def test_dsn_that_does_not_resolve_fails_at_once_by_name() -> None:
    client = Client(settings=load_settings(Path("/nonexistent/pyproject.toml"),
                                         dsn="postgresql://postgres@no-such-host.invalid/app", environ={}))
    with pytest.raises(QueueStorageError, match=r"no-such-host\.invalid"):
        await client.dispatch(LedgerJob(n=1))
    with pytest.raises(QueueStorageError, match=r"no-such-host\.invalid"):
        await client.worker()
    await client.close()


async def test_database_never_migrated_says_run_migrate(empty_dsn: str) -> None:
    client = Client(settings=load_settings(Path("/nonexistent/pyproject.toml"), dsn=empty_dsn, environ={}))
    try:
        with pytest.raises(QueueStorageError, match="pgqueue migrate"):
            await client.dispatch(LedgerJob(n=1))
        with pytest.raises(QueueStorageError, match="pgqueue migrate"):
            await client.retry_failed(uuid.uuid4())
        worker = await client.worker(listen=False)
        with pytest.raises(QueueStorageError, match="pgqueue migrate"):
            await worker.run(stop_when_empty=True)
    finally:
        await client.close()


async def test_retrying_a_failure_that_does_not_exist(in_process_ledger: str, producer: Client) -> None:
    dsn = in_process_ledger
    [kept] = await producer.dispatch_many([EchoJob(text="keep me", fail=True)])
    await drain(producer)
    missing = uuid.uuid4()
    with pytest.raises(QueueRetryError, match=str(missing)):
        await producer.retry_failed(missing)
    with pytest.raises(QueueRetryError, match="'not-a-uuid' is not a failure id"):
        await producer.retry_failed("not-a-uuid")
    # The failure that does exist is untouched.
    assert [r.job_id for r in await (await producer.failed()).all()] == [kept]
    check_ledger(dsn)


def test_cli_retry_of_a_failure_that_does_not_exist(dsn: str) -> None:
    from pgqueue_cli.app import app

    missing = str(uuid.uuid4())
    result = CliRunner().invoke(app, ["queue:retry", missing, "--dsn", dsn])
    assert result.exit_code != 0
    assert missing in result.output, result.output
    assert "Traceback" not in result.output
