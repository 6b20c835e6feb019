"""The WAL a workflow writes (issue 27: at most half of DBOS Transact's per workflow): a reservation
rewrites its job's row on the row's own page (so the WAL leaves the envelope out), and a step's
checkpoint writes its row and one index entry, no more."""

from __future__ import annotations

import psycopg

from tests.helpers import envelope
from tests.sql_calls import enqueue, reserve


def _pages(conn: psycopg.Connection[tuple[object, ...]]) -> dict[object, object]:
    return dict(conn.execute("select id, (ctid::text::point)[0] from pgqueue.jobs").fetchall())


def test_a_reservation_rewrites_each_job_on_its_own_page(dsn: str) -> None:
    # A new row version on the old one's page is logged as the bytes that changed; on another page,
    # as the whole row (the envelope, here ~400 bytes, with it). Half of each page is kept for them.
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in range(60):
            enqueue(conn, envelope("paged", args={"n": n, "payload": "x" * 300}))
        before = _pages(conn)
        assert len(set(before.values())) >= 3  # the jobs fill several pages
        assert len(reserve(conn, ["paged"], 60)) == 60
        assert conn.execute("select count(*) from pgqueue.jobs where token is not null").fetchone() == (60,)
        assert _pages(conn) == before
