"""Issue 24, items 4-6: an attempt ends as the handler or the worker decided, and is always recorded.

- An attempt the worker itself interrupts (a forced stop) is given back with its try.
- A failure whose text PostgreSQL or UTF-8 refuses (NUL, lone surrogates), or that is huge, is
  stored escaped and bounded, and logged bounded.
- A handler that raises a BaseException (SystemExit, KeyboardInterrupt, CancelledError, ...) fails
  that attempt, recorded with its cause; the worker goes on.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

from pgqueue import Client, JobContext, job
from pgqueue.context import SyncJobContext
from tests.worker_jobs import LEDGER_DDL, Exits, LedgerJob, LedgerOnce, Once, Probe, Retrying, SyncExits
from tests.worker_support import (
    Spawned,
    client,
    failures,
    finish,
    hooks,
    jobs,
    rows,
    runs,
    scalar,
    spawn,
    wait_event,
    wait_until,
)

__all__ = ["client", "hooks", "runs", "spawn"]

Spawn = Callable[..., Awaitable[Spawned]]

#: What the sync handlers below see, per test.
STATE: dict[str, Any] = {}
#: The documented bounds of a stored failure (characters; pgqueue.context.MESSAGE_LIMIT, TRACEBACK_LIMIT).
MESSAGE_LIMIT, TRACEBACK_LIMIT = 16 * 1024, 64 * 1024


async def _history(dsn: str) -> dict[str, int]:
    [row] = await rows(dsn, "select coalesce(sum(retried), 0)::int as retried, coalesce(sum(given_back), 0)::int"
                            " as given_back, coalesce(sum(failed), 0)::int as failed from pgqueue.job_stats")
    return row


# ------------------------------------------------------- item 4: a forced stop gives the try back
class Blocked:
    """A hook whose handler waits until the worker stops it; ``converts`` turns the cancellation
    into an exception of its own, as cleanup code may."""

    def __init__(self, converts: bool = False) -> None:
        self.converts = converts
        self.started = asyncio.Event()

    async def __call__(self, job: Probe, context: JobContext) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.converts:
                raise RuntimeError("cleanup after the cancellation failed") from None
            raise


@pytest.mark.parametrize("converts", [False, True])
async def test_a_drain_timeout_gives_the_interrupted_attempt_back(client: Client, hooks: Any, dsn: str,
                                                                  converts: bool) -> None:
    blocked = Blocked(converts)
    hooks("blocked", blocked)
    job_id = await client.dispatch(Once(hook="blocked"))  # tries=1: a spent try would be its last
    worker = await client.worker(concurrency=1, listen=False, drain_timeout=0.05, maintenance_interval=None)
    task = asyncio.create_task(worker.run())
    await wait_event(blocked.started, "the handler to start")

    worker.stop()  # the handler does not finish: the drain timeout passes and the worker cancels it
    await finish(task, "run() to return after the drain timeout")

    [row] = await jobs(dsn)
    assert row["id"] == job_id and row["token"] is None and row["due_in"] <= 0
    assert row["attempts"] == 0, "the interrupted attempt was spent"
    assert worker.stats.given_back == 1 and worker.stats.retried == 0
    assert await _history(dsn) == {"retried": 0, "given_back": 1, "failed": 0}

    # The next worker runs it (it used to fail it at once: attempts_exhausted, "all 1 tries were used").
    ran = asyncio.Event()

    async def runs_now(job: Probe, context: JobContext) -> None:
        assert context.attempts == 1
        ran.set()

    hooks("blocked", runs_now)
    again = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(again.run(stop_when_empty=True), "the next worker") == 1
    assert ran.is_set() and await jobs(dsn) == [] and await failures(dsn) == []


@job(name="tests.attempt_ends:sync_polls", tries=1)
def sync_polls(context: SyncJobContext) -> None:
    STATE["started"].set()
    while not context.cancelled:
        STATE["tick"].wait(0.01)
    STATE["stopped"].set()


async def test_a_forced_stop_gives_back_async_and_sync_attempts(client: Client, hooks: Any, dsn: str) -> None:
    STATE.update(started=threading.Event(), stopped=threading.Event(), tick=threading.Event())
    blocked = Blocked()
    hooks("blocked", blocked)
    await client.dispatch(Once(hook="blocked"))
    await sync_polls().dispatch(using=client)
    worker = await client.worker(concurrency=2, listen=False, maintenance_interval=None)
    task = asyncio.create_task(worker.run())
    await wait_event(blocked.started, "the async handler to start")
    await wait_until(STATE["started"].is_set, "the sync handler to start")

    worker.stop(cancel_running=True)  # what a second SIGTERM does
    await finish(task, "run() to return after a forced stop")

    left = await jobs(dsn)
    assert len(left) == 2 and all(r["attempts"] == 0 and r["token"] is None for r in left)
    assert worker.stats.given_back == 2
    await wait_until(STATE["stopped"].is_set, "the sync handler to see context.cancelled")


# --------------------------------------------- item 5: every failure is stored, bounded and escaped
@pytest.mark.parametrize(("raised", "stored"), [
    ("bad\x00byte", "bad\\x00byte"),
    ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
    ("both\x00\ud800", "both\\x00\\ud800"),
])
async def test_a_final_exception_message_postgres_refuses_is_stored_escaped(
        client: Client, hooks: Any, dsn: str, raised: str, stored: str) -> None:
    async def boom(job: Probe, context: JobContext) -> None:
        raise RuntimeError(raised)

    hooks("boom", boom)
    job_id = await client.dispatch(Once(hook="boom"))
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the job") == 1

    [failure] = await failures(dsn)  # it used to hold its lease: lease_expired_after_final_attempt, no message
    assert failure["job_id"] == job_id and failure["reason"] == "exception"
    assert failure["exception"] == "RuntimeError" and failure["message"] == stored
    assert stored in failure["traceback"]
    assert await jobs(dsn) == [] and worker.stats.failed == 1


async def test_context_fail_with_a_nul_is_recorded_not_turned_into_retries(client: Client, hooks: Any,
                                                                          dsn: str) -> None:
    async def fails(job: Probe, context: JobContext) -> None:
        await context.fail("cannot\x00go on")

    hooks("fails", fails)
    await client.dispatch(Retrying(hook="fails"))
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the job") == 1

    [failure] = await failures(dsn)
    assert failure["reason"] == "failed_by_handler" and failure["message"] == "cannot\\x00go on"
    assert failure["attempts"] == 1 and await jobs(dsn) == []


async def test_a_huge_message_is_stored_and_logged_bounded_keeping_head_and_tail(
        client: Client, hooks: Any, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    huge = "H" * 1_000_000 + "T" * 1_000_000

    async def boom(job: Probe, context: JobContext) -> None:
        raise ValueError(huge)

    hooks("boom", boom)
    await client.dispatch(Retrying(hook="boom"))  # two retries logged, then the failure
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    with caplog.at_level(logging.WARNING, logger="pgqueue"):
        assert await finish(worker.run(stop_when_empty=True), "the job") == 3

    [failure] = await failures(dsn)
    message, trace = failure["message"], failure["traceback"]
    assert len(message) <= MESSAGE_LIMIT and len(trace) <= TRACEBACK_LIMIT
    assert message.startswith("HHHH") and message.endswith("TTTT") and "pgqueue cut" in message
    assert "2,000,000" in message  # says how long it was
    assert "Traceback" in trace and "pgqueue cut" in trace and trace.rstrip().endswith("TTTT")
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("pgqueue")]
    assert len([m for m in logged if "; retrying in" in m]) == 2
    assert len([m for m in logged if "failed after 3 attempt" in m]) == 1
    assert max(len(m) for m in logged) < MESSAGE_LIMIT + 1000


async def test_an_exception_whose_str_raises_is_still_recorded(client: Client, hooks: Any, dsn: str) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    async def boom(job: Probe, context: JobContext) -> None:
        raise Unprintable

    hooks("boom", boom)
    await client.dispatch(Once(hook="boom"))
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the job") == 1
    [failure] = await failures(dsn)
    assert failure["exception"].endswith("Unprintable") and "could not be read" in failure["message"]


# ------------------------------ items 5 and 6: a BaseException fails the attempt, the worker goes on
class Fatal(BaseException):
    """Neither an Exception nor one of Python's own: a library's 'abort everything'."""


@pytest.mark.parametrize(("raise_it", "exception", "said"), [
    (lambda: SystemExit(3), "SystemExit", "the handler raised SystemExit(3); the worker went on"),
    (lambda: Fatal("abort"), "tests.test_worker_attempt_ends.Fatal",
     "the handler raised Fatal('abort'); the worker went on"),
    (asyncio.CancelledError, "asyncio.exceptions.CancelledError", "although nothing cancelled this execution"),
])
async def test_a_base_exception_from_a_handler_is_retried_then_recorded_and_the_worker_goes_on(
        client: Client, hooks: Any, dsn: str, raise_it: Callable[[], BaseException], exception: str,
        said: str) -> None:
    async def exits(job: Probe, context: JobContext) -> None:
        raise raise_it()

    async def fine(job: Probe, context: JobContext) -> None:
        pass

    hooks("exits", exits)
    hooks("fine", fine)
    job_id = await client.dispatch(Retrying(hook="exits"))  # three tries
    await client.dispatch(Once(hook="fine"))
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)

    assert await finish(worker.run(stop_when_empty=True), "the jobs") == 4  # returned: the worker lived

    [failure] = await failures(dsn)
    assert failure["job_id"] == job_id and failure["attempts"] == 3 and failure["reason"] == "exception"
    assert failure["exception"] == exception and said in failure["message"]
    assert "Traceback" in failure["traceback"]
    assert (worker.stats.retried, worker.stats.failed, worker.stats.acked) == (2, 1, 1)
    assert await jobs(dsn) == []


async def test_sys_exit_in_a_sync_handler_fails_that_attempt_only(client: Client, dsn: str) -> None:
    await client.dispatch(SyncExits())
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the job") == 1
    [failure] = await failures(dsn)
    assert failure["exception"] == "SystemExit" and "SystemExit(4); the worker went on" in failure["message"]


# --------------------------------------------------------------------- the sync driver (inline)
class InlineBoom(Probe):
    name = "tests.attempt_ends:inline_boom"
    connection = "sync"


async def test_the_sync_driver_records_unstorable_and_base_exception_failures(client: Client, hooks: Any,
                                                                             dsn: str) -> None:
    async def nul(job: Probe, context: JobContext) -> None:
        raise ValueError("inline\x00\udc80")

    async def exits(job: Probe, context: JobContext) -> None:
        raise SystemExit(5)

    hooks("nul", nul)
    hooks("exits", exits)
    with pytest.raises(ValueError, match="inline"):
        await client.dispatch(InlineBoom(hook="nul"))
    with pytest.raises(SystemExit):
        await client.dispatch(InlineBoom(hook="exits"))

    recorded = {f["exception"]: f for f in await failures(dsn)}
    assert recorded["ValueError"]["message"] == "inline\\x00\\udc80"
    assert recorded["SystemExit"]["message"] == ("the handler raised SystemExit(5); it propagates to the caller "
                                                 "of dispatch")
    assert {f["connection"] for f in recorded.values()} == {"sync"}


# --------------------------------------------------- a worker in its own process (items 4 and 6)
def _worker_argv(dsn: str, *extra: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "tests.worker_process", "--dsn", dsn, "--concurrency", "1",
            "--poll-interval", "0.2", *extra)


async def test_a_worker_process_survives_handlers_that_exit_and_a_real_sigint_still_stops_it(
        client: Client, spawn: Spawn, dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(LEDGER_DDL)
    await client.dispatch(Exits(how="system_exit"))
    await client.dispatch(Exits(how="keyboard_interrupt"))
    await client.dispatch(Exits(how="cancelled"))
    await client.dispatch(SyncExits())
    await client.dispatch(LedgerJob(dsn=dsn, n=1))
    process = await spawn(*_worker_argv(dsn))

    # Every such handler failed its one try, recorded; the worker went on to the ledger job.
    await wait_until(lambda: scalar(dsn, "select count(*) = 1 from test_ledger where event = 'finished'"),
                     "the worker to run the job after the exits")
    assert process.proc.returncode is None, process.output
    recorded = sorted((f["exception"], f["message"]) for f in await failures(dsn))
    assert recorded == [
        ("KeyboardInterrupt", "the handler raised KeyboardInterrupt(); the worker went on"),
        ("SystemExit", "the handler raised SystemExit(3); the worker went on"),
        ("SystemExit", "the handler raised SystemExit(4); the worker went on"),
        ("asyncio.exceptions.CancelledError", "the handler raised CancelledError() although nothing cancelled "
                                              "this execution (e.g. it awaited a task that was cancelled); the "
                                              "worker went on"),
    ]

    # A real SIGINT reaches the loop's handler: the worker drains and exits 0, as before.
    process.proc.send_signal(signal.SIGINT)
    assert await process.exit_code("the worker to stop on SIGINT") == 0
    assert "SIGINT: finishing" in process.output


async def test_a_second_sigterm_gives_the_running_job_back_with_its_one_try(client: Client, spawn: Spawn,
                                                                            dsn: str) -> None:
    lock = 2404
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as holder:
        await holder.execute(LEDGER_DDL)
        await holder.execute("select pg_advisory_lock(%s)", (lock,))  # the handler waits on it
        job_id = await client.dispatch(LedgerOnce(dsn=dsn, n=7, lock=lock))
        process = await spawn(*_worker_argv(dsn))
        await wait_until(lambda: scalar(dsn, "select count(*) = 1 from test_ledger where event = 'started'"),
                         "the handler to start")

        process.proc.send_signal(signal.SIGTERM)
        await process.wait_for_line("SIGTERM: finishing 1 running handlers", "the first SIGTERM to be taken")
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code("the worker to stop on the second SIGTERM") == 0
        assert "given back with its try" in process.output

        [row] = await jobs(dsn)
        assert row["id"] == job_id and row["attempts"] == 0 and row["token"] is None
        await holder.execute("select pg_advisory_unlock(%s)", (lock,))

    # The next worker runs it to the end (with its one try it used to fail unrun: attempts_exhausted).
    again = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(again.run(stop_when_empty=True), "the next worker") == 1
    assert await jobs(dsn) == [] and await failures(dsn) == []
    finished = await rows(dsn, "select attempt from test_ledger where event = 'finished'")
    assert finished == [{"attempt": 1}]


async def test_without_its_signal_handlers_a_keyboard_interrupt_is_recorded_then_stops_the_process(
        client: Client, spawn: Spawn, dsn: str) -> None:
    # An application that runs a worker without install_signal_handlers leaves SIGINT to Python,
    # so a KeyboardInterrupt in a handler may be a real Ctrl-C: it stops the process, as it did,
    # but the attempt is recorded first (a try used, like any failure).
    job_id = await client.dispatch(Exits(how="keyboard_interrupt"))
    process = await spawn(*_worker_argv(dsn, "--no-signal-handlers"))
    assert await process.exit_code("the worker to stop on the KeyboardInterrupt") != 0
    [failure] = await failures(dsn)
    assert failure["job_id"] == job_id and failure["exception"] == "KeyboardInterrupt"
    assert "may be a Ctrl-C" in failure["message"]


async def test_release_interrupted_is_fenced_by_the_token(client: Client, dsn: str) -> None:
    job_id = await client.dispatch(Once(hook="never"))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        [(token,)] = await (await conn.execute("select token from pgqueue.reserve(array['default'], 1, 60)")).fetchall()
        stale = await conn.execute("select pgqueue.release_interrupted(%s, %s, null, null)", (job_id, token + 1))
        assert await stale.fetchone() == (False,)
        [row] = await jobs(dsn)
        assert row["token"] == token and row["attempts"] == 1  # nothing changed
        assert await _history(dsn) == {"retried": 0, "given_back": 0, "failed": 0}


# --- issue 29: the operator's view ---
class ChargeDeclined(Exception):
    """A handler's own exception: logged by its qualified name."""


async def test_failure_log_lines_carry_the_exception_a_trimmed_traceback_and_the_duration(
        client: Client, hooks: Any, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    def deep(n: int) -> None:
        if n:
            deep(n - 1)
        raise ChargeDeclined("card 4242 declined")

    async def fails(job: Probe, context: JobContext) -> None:
        try:
            raise KeyError("gateway")
        except KeyError as exc:  # a chained traceback, long enough to be trimmed
            try:
                deep(10)
            except ChargeDeclined as declined:
                raise declined from exc

    hooks("declined", fails)
    caplog.set_level(logging.WARNING, logger="pgqueue")
    await client.dispatch(Retrying(hook="declined"))
    worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
    assert await finish(worker.run(stop_when_empty=True), "the job") == 3
    qualified = f"{__name__}.ChargeDeclined"
    retried = [r for r in caplog.records if "; retrying in" in r.getMessage()]
    final = [r for r in caplog.records if "failed after 3 attempt" in r.getMessage()]
    assert len(retried) == 2 and len(final) == 1
    for record in (*retried, *final):
        text = record.getMessage()
        assert f"{qualified}: card 4242 declined" in text
        assert re.search(r"ran \d+\.\d{3}s\)", text)  # the attempt's duration, in seconds
        assert "traceback lines above omitted" in text and "in deep" in text
        assert text.rstrip().endswith(f"{qualified}: card 4242 declined")
        assert len(text.splitlines()) <= 1 + 1 + 8  # the line, the omission note, eight traceback lines
        assert record.error == qualified and isinstance(record.duration, float)  # type: ignore[attr-defined]
