"""``sql/queries/explain_reservation.sql`` selects the candidates ``pgqueue.reserve`` takes (issue 12).

The explained query is a hand-kept copy of the reservation's candidate select (its text is
compared in test_sql_explain.py); here both run on the same rows and must agree on which
jobs they pick: ready ones and expired leases of the queue and priority, oldest due first,
never delayed jobs, running leases or other queues.
"""

from __future__ import annotations

import psycopg

from pgqueue.resources import query
from tests.helpers import envelope
from tests.sql_calls import Conn, enqueue, expire_lease, reserve, scalar


def test_explained_candidates_are_the_jobs_reserve_takes(conn: Conn, dsn: str) -> None:
    ready = [enqueue(conn, envelope("default")) for _ in range(5)]
    [enqueue(conn, envelope("default"), delay=3600) for _ in range(2)]
    [enqueue(conn, envelope("other")) for _ in range(2)]
    running, expired = (row["id"] for row in reserve(conn, ["default"], 2, 60.0))
    expire_lease(conn, expired)  # its lease ended: a candidate again, due since a second ago
    eligible = {*ready, expired} - {running}
    limit = len(eligible) - 1  # fewer than eligible: the order decides which are left out

    with psycopg.connect(dsn) as reader:
        now = scalar(reader, "select clock_timestamp()")
        explained = [row[0] for row in reader.execute(
            query("explain_reservation"), {"queue": "default", "priority": 0, "now": now, "limit": limit})]
        reader.rollback()  # FOR UPDATE: let the locks go before reserve runs

    reserved = [row["id"] for row in reserve(conn, ["default"], limit, 60.0)]
    assert len(explained) == limit
    assert set(explained) <= eligible
    assert set(reserved) == set(explained)
