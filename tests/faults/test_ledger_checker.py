"""The checker itself: it passes a clean history and names each kind of violation."""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.faults.ledger import check_ledger
from tests.helpers import envelope


def run_once(conn: psycopg.Connection[tuple[object, ...]]) -> tuple[object, object]:
    """Dispatch, reserve, record a handler run and acknowledge one job; returns (id, token)."""
    job_id = conn.execute("select pgqueue.enqueue(%s)", (Jsonb(envelope("checker")),)).fetchone()[0]  # type: ignore[index]
    token, attempts = conn.execute("select token, attempts from pgqueue.reserve(array['checker'], 1, 30)").fetchone()  # type: ignore[misc]
    conn.execute("insert into fault_ledger (job_id, attempt, token, worker_pid) values (%s, %s, %s, %s)",
                 (job_id, attempts, token, os.getpid()))
    conn.execute("select pgqueue.ack(array[%s]::uuid[], array[%s]::bigint[])", (job_id, token))
    return job_id, token


def test_clean_history_passes(ledger_dsn: str) -> None:
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        run_once(conn)
        failing = conn.execute("select pgqueue.enqueue(%s)", (Jsonb(envelope("checker")),)).fetchone()[0]  # type: ignore[index]
        token = conn.execute("select token from pgqueue.reserve(array['checker'], 1, 30)").fetchone()[0]  # type: ignore[index]
        assert conn.execute("select pgqueue.fail(%s, %s, null, 'x', null, 'exception')", (failing, token)).fetchone()
    report = check_ledger(ledger_dsn)
    assert (report.dispatched, report.completed, report.failed, report.lost) == (2, 1, 1, 0)


@pytest.mark.parametrize(("tamper", "words"), [
    ("insert into pgqueue.jobs (id, queue, envelope, max_tries) values (gen_random_uuid(), 'checker', '{}', 1)",
     "still in pgqueue.jobs"),
    ("insert into fault_acks (job_id, token, attempts, kind) select job_id, token, attempts, kind from fault_acks",
     "2 acknowledgements accepted"),
    ("insert into fault_reservations (job_id, token, attempts) select job_id, token + 1000, attempts + 1 "
     "from fault_reservations", "a superseded holder was acknowledged"),
    ("insert into fault_ledger (job_id, attempt, token, worker_pid) select job_id, 7, token + 5000, 1 "
     "from fault_ledger", "but that reservation gave attempts=None"),
    ("insert into fault_dispatched (job_id) values (gen_random_uuid())", "lost"),
])
def test_each_violation_is_named(ledger_dsn: str, tamper: str, words: str) -> None:
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        run_once(conn)
        conn.execute(tamper.encode())
    with pytest.raises(AssertionError, match=words):
        check_ledger(ledger_dsn)
