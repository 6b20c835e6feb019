"""The reservation stays an index range at a 1,000,000-row backlog.

Two checks per backlog shape:
- EXPLAIN of ``sql/queries/explain_reservation.sql`` (the reservation's candidate select,
  with the function's variables as parameters);
- the plans of the statements the real ``pgqueue.reserve`` runs, captured with
  auto_explain while it reserves, both as custom and as generic (cached) plans: PL/pgSQL
  switches to the generic plan after a few calls, and that is the plan a worker lives on.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from pgqueue.resources import function_path, query, sql_file
from tests.helpers import dsn_for_database
from tests.sql_calls import Conn, reserve, scalar

pytestmark = pytest.mark.slow

BACKLOG = 1_000_000


def _fill(conn: Conn, rows: int, *, delayed: bool, first: int = 1) -> None:
    # Row by row through enqueue would take minutes; the planner only needs the shape.
    # Ids count up (first, first + 1, ...) so the primary key is built append-only: random
    # uuids cost a third more time here and change nothing in the reservation's plan.
    conn.execute(
        b"""
        insert into pgqueue.jobs (id, queue, priority, envelope, max_tries, available_at, created_at)
        select ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'default', 0,
               jsonb_build_object('name', 'bench:noop', 'args', jsonb_build_object('n', g), 'tries', 3),
               3,
               case when %(delayed)s then now() + interval '1 hour' + g * interval '1 millisecond'
                    else now() - interval '1 hour' + g * interval '1 microsecond' end,
               now()
        from generate_series(%(first)s::bigint, %(last)s::bigint) g
        """,
        {"first": first, "last": first + rows - 1, "delayed": delayed},
    )


@contextlib.contextmanager
def _backlog_database(admin_dsn: str, template: str, fill: Callable[[Conn], None]) -> Iterator[str]:
    """A migrated database of this module's own, filled once: tests only read it or roll back."""
    name = f"pgqueue_backlog_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'create database "{name}" template "{template}"'.encode())
    try:
        dsn = dsn_for_database(admin_dsn, name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            fill(conn)
            conn.execute(b"analyze pgqueue.jobs")
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)'.encode())


def _ready(conn: Conn) -> None:
    _fill(conn, BACKLOG, delayed=False)
    # A few other queues, so the queue column is not a constant the planner can ignore.
    conn.execute(b"""
        insert into pgqueue.jobs (id, queue, priority, envelope, max_tries)
        select gen_random_uuid(), q, 0, '{}'::jsonb, 3
        from unnest(array['high', 'low']) q, generate_series(1, 1000)
    """)


def _delayed(conn: Conn) -> None:
    _fill(conn, BACKLOG, delayed=True)
    _fill(conn, 10_000, delayed=False, first=BACKLOG + 1)


@pytest.fixture(scope="module")
def ready_backlog(pg_admin_dsn: str, template_database: str) -> Iterator[str]:
    """A million ready jobs in one queue (plus two small queues), analyzed."""
    with _backlog_database(pg_admin_dsn, template_database, _ready) as dsn:
        yield dsn


@pytest.fixture(scope="module")
def delayed_backlog(pg_admin_dsn: str, template_database: str) -> Iterator[str]:
    """A million delayed jobs in front of ten thousand ready ones in the same queue, analyzed."""
    with _backlog_database(pg_admin_dsn, template_database, _delayed) as dsn:
        yield dsn


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _explain_candidates(dsn: str, limit: int) -> list[dict[str, Any]]:
    statement = b"explain (format json) " + query("explain_reservation")
    with psycopg.connect(dsn) as conn:
        now = scalar(conn, "select clock_timestamp()")
        [[document]] = conn.execute(statement, {"queue": "default", "priority": 0, "now": now,
                                                "limit": limit}).fetchall()
        conn.rollback()
    plan = document[0]["Plan"] if isinstance(document, list) else json.loads(document)[0]["Plan"]
    return list(_nodes(plan))


def _assert_index_range(nodes: list[dict[str, Any]]) -> None:
    scans_of_jobs = [n for n in nodes if n.get("Relation Name") == "jobs"]
    assert scans_of_jobs, nodes
    assert all(n["Node Type"] != "Seq Scan" for n in scans_of_jobs), scans_of_jobs
    assert all(n.get("Index Name") == "jobs_reservation_idx" for n in scans_of_jobs), scans_of_jobs
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], nodes


@pytest.mark.parametrize("limit", [1, 50, 1000])
def test_candidate_select_uses_the_reservation_index_at_a_million_ready_jobs(
    ready_backlog: str, limit: int
) -> None:
    _assert_index_range(_explain_candidates(ready_backlog, limit))


def test_candidate_select_skips_a_million_delayed_jobs_by_index(delayed_backlog: str) -> None:
    nodes = _explain_candidates(delayed_backlog, 50)
    _assert_index_range(nodes)
    [scan] = [n for n in nodes if n.get("Relation Name") == "jobs"]
    # The due-time bound is part of the index condition, not a filter applied row by row.
    assert "available_at" in scan["Index Cond"]
    assert "Filter" not in scan


def _reserve_plans(dsn: str, plan_cache_mode: str, calls: int) -> list[str]:
    """The plans auto_explain logged for every statement the reserve function ran."""
    plans: list[str] = []
    with psycopg.connect(dsn) as conn:
        conn.add_notice_handler(
            lambda d: plans.append(d.message_primary or "") if d.severity_nonlocalized == "LOG" else None
        )
        conn.execute(b"load 'auto_explain'")
        for setting, value in [("auto_explain.log_min_duration", "0"),
                               ("auto_explain.log_nested_statements", "on"),
                               ("auto_explain.log_format", "json"),
                               ("client_min_messages", "log"),
                               ("plan_cache_mode", plan_cache_mode)]:
            conn.execute(b"select set_config(%s, %s, false)", (setting, value))
        granted = 0
        for _ in range(calls):
            granted += len(reserve(conn, ["high", "default"], 50, 60))
        conn.rollback()  # leave the backlog as it was
    assert granted == 50 * calls
    return plans


def _statement_plans(logged: list[str]) -> list[list[dict[str, Any]]]:
    """Node lists of the logged plans that read pgqueue.jobs, from inside the function."""
    found = []
    for message in logged:
        start = message.find("{")
        if start < 0:
            continue
        document = json.loads(message[start:])
        nodes = list(_nodes(document["Plan"]))
        if any(n.get("Relation Name") == "jobs" for n in nodes):
            found.append(nodes)
    return found


@pytest.mark.parametrize("plan_cache_mode", ["auto", "force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("backlog", ["ready_backlog", "delayed_backlog"])
def test_reserve_function_plans_use_the_index(request: pytest.FixtureRequest, backlog: str,
                                              plan_cache_mode: str) -> None:
    dsn = request.getfixturevalue(backlog)
    plans = _statement_plans(_reserve_plans(dsn, plan_cache_mode, calls=7))
    # Per call: the max(priority) probes and the reservation statement itself.
    assert len(plans) >= 7 * 2, plans
    for nodes in plans:
        scans_of_jobs = [n for n in nodes if n.get("Relation Name") == "jobs"]
        assert all(n["Node Type"] != "Seq Scan" for n in scans_of_jobs), nodes
        # Index scans of jobs read the reservation index, except the primary-key lookups
        # the update/delete of the reserved rows make by id.
        for n in scans_of_jobs:
            assert n["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan", "ModifyTable"), n
        # Each statement reads jobs through the reservation index (the candidate select, the
        # priority probes) or through the primary key (the grant and the doomed delete by id).
        assert any(n.get("Index Name") in ("jobs_reservation_idx", "jobs_pkey") for n in nodes), nodes
    with_reservation_index = [p for p in plans if any(n.get("Index Name") == "jobs_reservation_idx" for n in p)]
    assert len(with_reservation_index) >= 7, plans


def test_the_explained_query_is_the_reservations_candidate_select() -> None:
    """sql/queries/explain_reservation.sql must stay a copy of the candidate CTE of reserve's newest version."""

    def words(text: str) -> str:
        return " ".join(text.split())

    body = sql_file(function_path("reserve"))
    candidate = re.search(r"from \((\s*select j\.id.*?for update skip locked)\s*\) c;", body, re.S)
    assert candidate is not None, "reserve.sql no longer has its candidate subquery"
    in_function = words(candidate.group(1))
    for variable, placeholder in [("v_queue", "%(queue)s"), ("v_priority", "%(priority)s"),
                                  ("v_now", "%(now)s"), ("v_take", "%(limit)s"),
                                  # 0010: due by v_ready_by, which is v_now unless priority aging serves an older level
                                  ("v_ready_by", "%(now)s")]:
        in_function = in_function.replace(variable, placeholder)
    assert words(query("explain_reservation").decode()) == in_function
