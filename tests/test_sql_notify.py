"""NOTIFY: at most one wake-up per queue per transaction, and none for delayed jobs.

A listener connection counts what arrives. Notifications are delivered in commit order,
so after the producer's transaction we commit a marker notification on another channel:
when the marker arrives, everything the producer's transaction sent has arrived too.
No sleeping, no guessing how long delivery takes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import psycopg
import pytest

from tests.helpers import envelope
from tests.sql_calls import Conn, enqueue, enqueue_many, reserve

MARKER_CHANNEL = "pgqueue_test_marker"


@pytest.fixture
def listener(dsn: str) -> Iterator[Conn]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(b"listen pgqueue")
        conn.execute(f"listen {MARKER_CHANNEL}".encode())
        yield conn


def notifications_of(listener: Conn, producer: Conn, action: Callable[[], object]) -> Counter[str]:
    """Run ``action`` in one transaction of ``producer``; the pgqueue notifications it sent, by queue."""
    _collect(listener, producer)  # forget what earlier statements sent
    with producer.transaction():
        action()
    return _collect(listener, producer)


def _collect(listener: Conn, producer: Conn) -> Counter[str]:
    """The pgqueue notifications committed so far and not yet read, by queue."""
    producer.execute(b"select pg_notify(%s, 'end')", (MARKER_CHANNEL,))
    seen: Counter[str] = Counter()
    for note in listener.notifies(timeout=60):
        if note.channel == MARKER_CHANNEL:
            return seen
        assert note.channel == "pgqueue"
        seen[note.payload] += 1
    raise AssertionError(f"the marker notification never arrived; got {dict(seen)}")


def test_bulk_enqueue_of_ten_thousand_jobs_notifies_once(listener: Conn, conn: Conn) -> None:
    envelopes = [envelope("bulk") for _ in range(10_000)]
    seen = notifications_of(listener, conn, lambda: enqueue_many(conn, envelopes))
    assert seen == Counter({"bulk": 1})


def test_a_thousand_single_enqueues_in_one_transaction_notify_once(listener: Conn, conn: Conn) -> None:
    def thousand() -> None:
        with conn.cursor() as cur:
            cur.executemany(b"select pgqueue.enqueue(%s::jsonb)",
                            [(psycopg.types.json.Jsonb(envelope("single")),) for _ in range(1000)])

    seen = notifications_of(listener, conn, thousand)
    assert seen == Counter({"single": 1})
    assert conn.execute(b"select count(*) from pgqueue.jobs").fetchone() == (1000,)


def test_one_notification_per_queue(listener: Conn, conn: Conn) -> None:
    envelopes = [envelope(q) for q in ("a", "b", "c") for _ in range(50)]

    def both() -> None:
        enqueue_many(conn, envelopes)
        enqueue(conn, envelope("a"))
        enqueue(conn, envelope("d"))

    seen = notifications_of(listener, conn, both)
    assert seen == Counter({"a": 1, "b": 1, "c": 1, "d": 1})


def test_delayed_jobs_send_nothing(listener: Conn, conn: Conn) -> None:
    def delayed() -> None:
        enqueue(conn, envelope("later"), 60)
        enqueue_many(conn, [envelope("later-too") for _ in range(5)], [30.0] * 5)
        # In a mixed batch only the queue of the ready job is woken.
        enqueue_many(conn, [envelope("mixed-delayed"), envelope("mixed-ready")], [30.0, 0.0])

    seen = notifications_of(listener, conn, delayed)
    assert seen == Counter({"mixed-ready": 1})


def test_a_rolled_back_enqueue_notifies_nobody(listener: Conn, conn: Conn) -> None:
    class Abort(Exception):
        pass

    def rolled_back() -> None:
        with pytest.raises(Abort), conn.transaction():
            enqueue(conn, envelope("ghost"))
            raise Abort

    seen = notifications_of(listener, conn, rolled_back)
    assert seen == Counter()
    assert conn.execute(b"select count(*) from pgqueue.jobs").fetchone() == (0,)


def test_release_now_and_retry_notify_but_a_delayed_release_does_not(listener: Conn, conn: Conn) -> None:
    enqueue_many(conn, [envelope("r") for _ in range(3)])
    held = reserve(conn, ["r"], 3)

    def release_later() -> None:
        conn.execute(b"select pgqueue.release(%s, %s, 30)", (held[0]["id"], held[0]["token"]))

    assert notifications_of(listener, conn, release_later) == Counter()

    def release_now() -> None:
        conn.execute(b"select pgqueue.release(%s, %s, 0)", (held[1]["id"], held[1]["token"]))
        conn.execute(b"select * from pgqueue.release_unstarted(%s::uuid[], %s::bigint[])",
                     ([held[2]["id"]], [held[2]["token"]]))

    assert notifications_of(listener, conn, release_now) == Counter({"r": 1})

    [again] = reserve(conn, ["r"], 1)
    conn.execute(b"select pgqueue.fail(%s, %s, null, 'x', null, 'exception')", (again["id"], again["token"]))

    def retry() -> None:
        conn.execute(b"select pgqueue.retry_failed_all('r')")

    assert notifications_of(listener, conn, retry) == Counter({"r": 1})


def test_each_transaction_notifies_again(listener: Conn, conn: Conn) -> None:
    # The control for the tests above: folding is per transaction, so the counting sees
    # two notifications when two transactions each enqueue into the same queue.
    _collect(listener, conn)
    enqueue(conn, envelope("twice"))
    enqueue(conn, envelope("twice"))
    assert _collect(listener, conn) == Counter({"twice": 2})
