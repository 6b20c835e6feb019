"""Issue 11 in the stored functions: args depth, bounded delays and leases, the queue-name rule,
and malformed envelopes refused by name. The bounds are the constants of pgqueue/limits.py, so
the SQL and Python checks cannot drift apart."""

from __future__ import annotations

import math
import sys
import uuid
from typing import Any

import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from pgqueue.limits import (
    MAX_ARGS_DEPTH,
    MAX_DELAY_SECONDS,
    MAX_LEASE_SECONDS,
    MAX_QUEUE_NAME_LENGTH,
    MIN_LEASE_SECONDS,
    queue_name_problem,
)
from tests.helpers import envelope
from tests.sql_calls import Conn, enqueue, enqueue_many, extend, job, jobs, release, reserve, rows, scalar


def nested(depth: int, innermost: str = "array") -> dict[str, Any]:
    """Args nesting ``depth`` levels of arrays and objects, the args object itself being level 1."""
    value: Any = [] if innermost == "array" else {}
    for level in range(depth - 2):
        value = [value] if level % 2 else {"k": value}
    return {"a": value} if depth > 1 else {}


def _args_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_args_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_args_depth(v) for v in value), default=0)
    return 0


def test_nested_builds_the_depth_it_says() -> None:
    assert [_args_depth(nested(d, kind)) for d in (1, 2, 3, 64, 65) for kind in ("array", "object")] == [
        1, 1, 2, 2, 3, 3, 64, 64, 65, 65]


# ---------------------------------------------------------------------------- args depth


def test_the_issues_deeply_nested_args_are_refused_by_enqueue(conn: Conn) -> None:
    # The reproduction of issue 11, as a producer role could type it.
    job_id = uuid.uuid4()
    statement = ("select pgqueue.enqueue(('{\"id\":\"" + str(job_id) + "\",\"name\":\"x:Y\",\"args\":{\"a\":'"
                 "||repeat('[',1100)||'1'||repeat(']',1100)||'},\"connection\":\"database\",\"queue\":\"default\","
                 "\"priority\":0,\"tries\":3,\"timeout\":2,\"backoff\":{\"kind\":\"fixed\",\"delays\":[1]},"
                 "\"retry_until\":null,\"version\":1}')::jsonb,0)")
    with pytest.raises(errors.InvalidParameterValue) as caught:
        scalar(conn, statement)
    assert caught.value.sqlstate == "22023"
    message = str(caught.value)
    assert f"job {job_id}" in message and f"deeper than {MAX_ARGS_DEPTH} levels" in message
    assert jobs(conn) == []


@pytest.mark.parametrize("innermost", ["array", "object"])
def test_args_depth_bound_is_max_args_depth_for_enqueue(conn: Conn, innermost: str) -> None:
    deepest = envelope(args=nested(MAX_ARGS_DEPTH, innermost))
    enqueue(conn, deepest)
    too_deep = envelope(args=nested(MAX_ARGS_DEPTH + 1, innermost))
    with pytest.raises(errors.InvalidParameterValue, match=f"job {too_deep['id']}: args nest deeper than 64"):
        enqueue(conn, too_deep)
    assert [j["id"] for j in jobs(conn)] == [uuid.UUID(deepest["id"])]


@pytest.mark.parametrize("innermost", ["array", "object"])
def test_args_depth_bound_is_max_args_depth_for_enqueue_many(conn: Conn, innermost: str) -> None:
    deepest = [envelope(args=nested(MAX_ARGS_DEPTH, innermost)) for _ in range(3)]
    assert enqueue_many(conn, deepest) == 3
    too_deep = envelope(args=nested(MAX_ARGS_DEPTH + 1, innermost))
    with pytest.raises(errors.InvalidParameterValue,
                       match=f"envelope 2 of 3: job {too_deep['id']}: args nest deeper than 64"):
        enqueue_many(conn, [envelope(), too_deep, envelope()])
    assert len(jobs(conn)) == 3  # nothing of the refused call was stored


# ------------------------------------------------------------------------ delays, leases

ABOVE_MAX_DELAY = math.nextafter(MAX_DELAY_SECONDS, math.inf)
BELOW_MIN_LEASE = math.nextafter(MIN_LEASE_SECONDS, 0.0)
ABOVE_MAX_LEASE = math.nextafter(MAX_LEASE_SECONDS, math.inf)


def test_delays_up_to_max_delay_seconds_are_accepted(conn: Conn) -> None:
    enqueue(conn, envelope("a"), MAX_DELAY_SECONDS)
    enqueue_many(conn, [envelope("b")], [MAX_DELAY_SECONDS])
    enqueue(conn, envelope("c"))
    [r] = reserve(conn, ["c"])
    assert release(conn, r["id"], r["token"], MAX_DELAY_SECONDS)
    # Every row stays readable (the issue: 1e12 s stored a timestamp nobody could read back).
    assert len(rows(conn, "select available_at::text from pgqueue.jobs")) == 3


@pytest.mark.parametrize("delay", [ABOVE_MAX_DELAY, 1e12, 1e13, 1e300])
def test_delays_above_max_delay_seconds_are_refused_by_each_function(conn: Conn, delay: float) -> None:
    words = "delay must be a finite number of seconds from 0 to 315360000 \\(10 years\\)"
    with pytest.raises(errors.InvalidParameterValue, match=f"pgqueue.enqueue: {words}"):
        enqueue(conn, envelope(), delay)
    with pytest.raises(errors.InvalidParameterValue, match=f"pgqueue.enqueue_many: every {words}; delay 2 is"):
        enqueue_many(conn, [envelope(), envelope()], [0.0, delay])
    enqueue(conn, envelope())
    [r] = reserve(conn, ["default"])
    with pytest.raises(errors.InvalidParameterValue, match=f"pgqueue.release: {words}"):
        release(conn, r["id"], r["token"], delay)
    stored = job(conn, r["id"])
    assert stored is not None and stored["token"] == r["token"]


def test_lease_seconds_from_min_to_max_are_accepted(conn: Conn) -> None:
    enqueue(conn, envelope())
    [r] = reserve(conn, ["default"], 1, MAX_LEASE_SECONDS)
    assert extend(conn, r["id"], r["token"], MIN_LEASE_SECONDS)["extended"] is True
    assert extend(conn, r["id"], r["token"], MAX_LEASE_SECONDS)["extended"] is True
    enqueue(conn, envelope("short"))
    assert len(reserve(conn, ["short"], 1, MIN_LEASE_SECONDS)) == 1


@pytest.mark.parametrize("seconds", [BELOW_MIN_LEASE, 1e-320, ABOVE_MAX_LEASE, 1e12, 1e13])
def test_lease_seconds_outside_the_bounds_are_refused(conn: Conn, seconds: float) -> None:
    enqueue(conn, envelope())
    [r] = reserve(conn, ["default"])
    words = "must be a finite number from 0.001 to 31536000 \\(1 year\\)"
    with pytest.raises(errors.InvalidParameterValue, match=f"pgqueue.extend: seconds {words}"):
        extend(conn, r["id"], r["token"], seconds)
    # The caller keeps its lease (1e-320 used to end it at once).
    stored = job(conn, r["id"])
    assert stored is not None and stored["available_at"] == r["lease_expires_at"]
    enqueue(conn, envelope("other"))
    with pytest.raises(errors.InvalidParameterValue, match=f"pgqueue.reserve: lease_seconds {words}"):
        reserve(conn, ["other"], 1, seconds)


# --------------------------------------------------------------------------- queue names

_CODE_POINTS = [c for c in range(1, sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]


def _refused_code_points(conn: Conn, expression: str) -> dict[str, list[int]]:
    """Per position (first / middle / last), the code points for which ``expression`` on
    ``queue`` says the name is not valid."""
    found = rows(conn, f"""
        with names as (
            select c, p, case p when 'first' then chr(c) || 'x' when 'middle' then 'x' || chr(c) || 'x'
                                else 'x' || chr(c) end as queue
            from unnest(%s::int[]) as c, unnest(array['first', 'middle', 'last']) as p
        )
        select p, array_agg(c order by c) as refused from names where not ({expression}) group by p
    """, (_CODE_POINTS,))
    return {r["p"]: r["refused"] for r in found}


def test_the_queue_name_rule_in_sql_is_the_python_rule_for_every_character(conn: Conn) -> None:
    expected = {
        "first": [c for c in _CODE_POINTS if queue_name_problem(chr(c) + "x") is not None],
        "middle": [c for c in _CODE_POINTS if queue_name_problem("x" + chr(c) + "x") is not None],
        "last": [c for c in _CODE_POINTS if queue_name_problem("x" + chr(c)) is not None],
    }
    assert 0x20 in expected["first"] and ord(",") in expected["middle"] and 0x3000 in expected["last"]
    assert _refused_code_points(conn, "pgqueue.queue_name_problem(queue) is null") == expected
    # The CHECK constraint on pgqueue.jobs holds the same rule, evaluated as the table does.
    check = scalar(conn, "select pg_get_expr(conbin, conrelid) from pg_constraint"
                         " where conrelid = 'pgqueue.jobs'::regclass and conname = 'jobs_queue_name'")
    assert _refused_code_points(conn, check) == expected


@pytest.mark.parametrize("length", [0, 1, MAX_QUEUE_NAME_LENGTH, MAX_QUEUE_NAME_LENGTH + 1])
def test_the_queue_name_length_bound_is_the_python_one(conn: Conn, length: int) -> None:
    name = "é" * length  # characters, not bytes
    problem = scalar(conn, "select pgqueue.queue_name_problem(%s)", (name,))
    assert (problem is None) == (queue_name_problem(name) is None)


@pytest.mark.parametrize("queue", ["a,b", " leading", "trailing ", "tab\tinside", "trailing\u3000", "", "x" * 201])
def test_enqueue_and_enqueue_many_refuse_a_bad_queue_name_by_name(conn: Conn, queue: str) -> None:
    env = envelope(queue)
    with pytest.raises(errors.InvalidParameterValue, match=f"pgqueue.enqueue: job {env['id']}: .*queue name"):
        enqueue(conn, env)
    with pytest.raises(errors.InvalidParameterValue, match=f"envelope 1 of 1: job {env['id']}: .*queue name"):
        enqueue_many(conn, [env])
    # Straight into the table (an operator's hand-written insert): the CHECK refuses it.
    with pytest.raises(errors.CheckViolation, match="jobs_queue_name"):
        conn.execute(b"insert into pgqueue.jobs (id, queue, envelope, max_tries) values (gen_random_uuid(), %s, "
                     b"'{}', 1)", (queue,))
    assert jobs(conn) == []


# --------------------------------------------------------------------- malformed envelopes

_GOOD = envelope()
# (what, envelope, enqueue's words, what enqueue_many does with it among good ones): "named" is
# the same problem by position; "refused" is the insert's own error (NOT NULL, a cast) -- bulk
# calls skip those checks, which cost a third of the insert; "accepted" is stored as before
# issue 11 (the text of a number is a valid queue name, "3" a valid number of tries).
BAD_ENVELOPES: list[tuple[str, Any, str, str]] = [
    ("array", [_GOOD], "the envelope must be a JSON object, got array", "named"),
    ("string", "x", "the envelope must be a JSON object, got string", "named"),
    ("json null", None, "the envelope must be a JSON object, got null", "named"),
    ("no queue", {k: v for k, v in _GOOD.items() if k != "queue"}, '"queue" must be a string, got none', "named"),
    ("no id", {k: v for k, v in _GOOD.items() if k != "id"}, 'no valid "id" \\(a UUID string\\), got none', "refused"),
    ("id not a uuid", {**_GOOD, "id": "42"}, 'no valid "id" \\(a UUID string\\), got "42"', "refused"),
    ("id a number", {**_GOOD, "id": 42}, 'no valid "id" \\(a UUID string\\), got 42', "refused"),
    ("queue a number", {**_GOOD, "queue": 7}, '"queue" must be a string, got 7', "accepted"),
    ("no tries", {k: v for k, v in _GOOD.items() if k != "tries"}, '"tries" must be an integer, got none', "refused"),
    ("tries a string", {**_GOOD, "tries": "3"}, '"tries" must be an integer, got "3"', "accepted"),
    ("tries a fraction", {**_GOOD, "tries": 1.5}, '"tries" must be an integer, got 1.5', "refused"),
    ("tries too big", {**_GOOD, "tries": 2**31}, '"tries" must be an integer, got 2147483648', "refused"),
    ("priority a string", {**_GOOD, "priority": "high"}, '"priority" must be null or an integer', "refused"),
    ("priority too big", {**_GOOD, "priority": 40000}, '"priority" must be null or an integer', "refused"),
    ("retry_until a string", {**_GOOD, "retry_until": "soon"}, '"retry_until" must be null or epoch seconds',
     "refused"),
]


@pytest.mark.parametrize(("what", "bad", "words", "bulk"), BAD_ENVELOPES, ids=[b[0] for b in BAD_ENVELOPES])
def test_a_malformed_envelope_is_refused_with_its_problem(conn: Conn, what: str, bad: Any, words: str,
                                                          bulk: str) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=f"pgqueue.enqueue: .*{words}"):
        scalar(conn, "select pgqueue.enqueue(%s)", (Jsonb(bad),))
    assert scalar(conn, "select pgqueue.envelope_problem(%s)", (Jsonb(bad),)) is not None
    batch = [envelope(), bad, envelope()]
    if bulk == "named":  # the same problem, by position; none of the batch is stored
        with pytest.raises(errors.InvalidParameterValue, match=f"pgqueue.enqueue_many: envelope 2 of 3: .*{words}"):
            enqueue_many(conn, batch)
    elif bulk == "refused":
        with pytest.raises((errors.DataError, errors.IntegrityError)):  # a cast, or NOT NULL
            enqueue_many(conn, batch)
    else:
        assert enqueue_many(conn, batch) == 3
        conn.execute(b"delete from pgqueue.jobs")
    assert jobs(conn) == []


GOOD_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("as dispatch writes it", envelope()),
    ("no priority", {k: v for k, v in envelope().items() if k != "priority"}),
    ("priority null", {**envelope(), "priority": None}),
    ("priority at the bounds", {**envelope(), "priority": -32768}),
    ("retry_until a number", {**envelope(), "retry_until": 4102444800.5}),
    ("no args", {k: v for k, v in envelope().items() if k != "args"}),
    ("upper-case id without hyphens", {**envelope(), "id": uuid.uuid4().hex.upper()}),
    ("id in braces", {**envelope(), "id": "{" + str(uuid.uuid4()) + "}"}),
    ("tries at the integer bound", {**envelope(), "tries": 2**31 - 1}),
    ("queue with inner spaces and unicode", envelope("reports daily \u2013 日本")),
]


@pytest.mark.parametrize(("what", "good"), GOOD_VARIANTS, ids=[g[0] for g in GOOD_VARIANTS])
def test_enqueue_and_enqueue_many_accept_the_same_envelopes(conn: Conn, what: str, good: dict[str, Any]) -> None:
    # enqueue repeats envelope_problem's rules inline, enqueue_many some of them: all accept these.
    assert scalar(conn, "select pgqueue.envelope_problem(%s)", (Jsonb(good),)) is None
    assert enqueue_many(conn, [good]) == 1
    conn.execute(b"delete from pgqueue.jobs")
    assert enqueue(conn, good) == uuid.UUID(good["id"].strip("{}"))


def test_tries_below_one_is_still_the_constraints_refusal(conn: Conn) -> None:
    with pytest.raises(errors.CheckViolation, match="jobs_max_tries_positive"):
        enqueue(conn, envelope(tries=0))
    with pytest.raises(errors.CheckViolation, match="jobs_max_tries_positive"):
        enqueue_many(conn, [envelope(tries=-1)])
