"""What a stored envelope may contain, from the worker's side (issue 11, items 1 and 5).

Envelopes here are inserted straight into ``pgqueue.jobs`` as the table owner, the way a
producer calling ``pgqueue.enqueue`` directly (or an old or buggy one) could store them: no
check of dispatch's stands in the way. Whatever one row holds fails that job alone, as
``payload_invalid`` (or ``unknown_job``) on its first attempt; the rest of its batch runs and
the worker keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgqueue import Client, Envelope, Job, JobContext, QueuePayloadError
from pgqueue.limits import MAX_ARGS_DEPTH
from tests.worker_jobs import HOOKS, Probe
from tests.worker_support import client, finish, hooks, rows, scalar, settings_for

__all__ = ["client", "hooks"]

PROBE = "tests.worker:probe"


def good_envelope(**changes: Any) -> dict[str, Any]:
    """A valid envelope of a Probe job running the ``count`` hook, with ``changes`` applied."""
    data: dict[str, Any] = {
        "id": str(uuid.uuid4()), "name": PROBE, "args": {"hook": "count", "n": -1}, "connection": "database",
        "queue": "default", "priority": 0, "tries": 3, "timeout": 30.0,
        "backoff": {"kind": "fixed", "delays": [0.0]}, "retry_until": None, "version": 1,
    }
    data.update(changes)
    return data


def insert_sql(conn: psycopg.Connection[Any], text: str) -> uuid.UUID:
    """Insert one job row from envelope JSON text, as ``pgqueue.enqueue`` would fill the columns
    (its id, tries and priority where they are usable, else fixed ones), but with no check."""
    job_id = uuid.uuid4()
    conn.execute(
        "insert into pgqueue.jobs (id, queue, priority, envelope, max_tries) values (%s, 'default', 0, %s::jsonb, 3)",
        (job_id, text))
    return job_id


def insert(dsn: str, envelopes: list[str]) -> list[uuid.UUID]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [insert_sql(conn, text) for text in envelopes]


async def drain(client: Client, **options: Any) -> int:
    """One polling worker, run until nothing is ready; every job of the tests fits in one batch."""
    worker = await client.worker(listen=False, concurrency=32, maintenance_interval=None, **options)
    processed: int = await finish(worker.run(stop_when_empty=True), "the worker to drain the queue")
    return processed


async def failures(dsn: str) -> list[dict[str, Any]]:
    """The failure records, without their envelopes (which the test's own json could not read)."""
    return await rows(dsn, "select job_id, reason, attempts, message, traceback from pgqueue.failed_jobs"
                           " order by failed_at, id")


async def live_jobs(dsn: str) -> int:
    return int(await scalar(dsn, "select count(*) from pgqueue.jobs"))


def counting(ran: Counter[int]) -> Any:
    async def count(job: Probe, context: JobContext) -> None:
        ran[job.n] += 1
    return count


# ------------------------------------------------------------ item 1: the reproduction
async def test_a_1100_deep_envelope_fails_alone_and_its_batch_runs(client: Client, hooks: Any, dsn: str) -> None:
    ran: Counter[int] = Counter()
    hooks("count", counting(ran))
    await client.dispatch_many([Probe(hook="count", n=n) for n in range(3)])
    deep = ('{"id":"' + str(uuid.uuid4()) + '","name":"x:Y","args":{"a":' + "[" * 1100 + "1" + "]" * 1100
            + '},"connection":"database","queue":"default","priority":0,"tries":3,"timeout":2,'
              '"backoff":{"kind":"fixed","delays":[1]},"retry_until":null,"version":1}')
    [deep_id] = insert(dsn, [deep])
    await client.dispatch_many([Probe(hook="count", n=n) for n in range(3, 6)])

    assert await drain(client) == 7

    assert ran == Counter(range(6))
    assert await live_jobs(dsn) == 0
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["reason"], failure["attempts"]) == (deep_id, "payload_invalid", 1)
    assert "deep" in failure["message"]


async def test_the_worker_keeps_serving_after_a_deep_envelope(client: Client, hooks: Any, dsn: str) -> None:
    ran: Counter[int] = Counter()
    hooks("count", counting(ran))
    worker = await client.worker(listen=False, concurrency=4, poll_interval=0.05, maintenance_interval=None)
    task = asyncio.create_task(worker.run(max_jobs=2))
    insert(dsn, [render(good_envelope(args={"hook": "count", "n": 0, "x": Raw.deep(2000)}))])
    await client.dispatch(Probe(hook="count", n=1))

    assert await finish(task, "the worker to take both jobs") == 2
    assert ran == Counter({1: 1})
    assert [f["reason"] for f in await failures(dsn)] == ["payload_invalid"]


def nested(depth: int) -> Any:
    """1 inside ``depth`` arrays (for depths ``json.dumps`` can write; deeper: :meth:`Raw.deep`)."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


class Raw:
    """JSON text put as is where this object stands in :func:`render`'s output: for values
    Python's ``json`` cannot write (thousands of levels deep, numbers of thousands of digits)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.key = f"raw-{uuid.uuid4().hex}"

    @classmethod
    def deep(cls, depth: int) -> Raw:
        return cls("[" * depth + "1" + "]" * depth)

    def __repr__(self) -> str:
        return f"Raw({self.text[:20]!r}...)"


def render(data: Any) -> str:
    """``json.dumps(data)``, with each :class:`Raw` replaced by its text."""
    raws: list[Raw] = []

    def placeholder(value: object) -> str:
        assert isinstance(value, Raw)
        raws.append(value)
        return value.key

    text = json.dumps(data, default=placeholder)
    for raw in raws:
        text = text.replace(json.dumps(raw.key), raw.text)
    return text


# ----------------------------------------------------- item 5: every field, first attempt
@pytest.mark.parametrize(("changes", "field"), [
    ({"timeout": 0}, "'timeout'"),
    ({"timeout": -5}, "'timeout'"),
    ({"timeout": 1e300}, "'timeout'"),
    ({"timeout": True}, "'timeout'"),
    ({"tries": 0}, "'tries'"),
    ({"tries": 2.5}, "'tries'"),
    ({"priority": 40000}, "'priority'"),
    ({"priority": "high"}, "'priority'"),
    ({"queue": "a,b"}, "'queue'"),
    ({"queue": " padded"}, "'queue'"),
    ({"queue": "x" * 201}, "'queue'"),
    ({"connection": ""}, "'connection'"),
    ({"name": ""}, "'name'"),
    ({"version": 2}, "'version'"),
    ({"retry_until": "tomorrow"}, "'retry_until'"),
    ({"retry_until": Raw("1e400")}, "'retry_until'"),
    ({"timeout": Raw("1e400")}, "'timeout'"),
    ({"backoff": {"kind": "fixed", "delays": [1e12]}}, "'backoff'"),
    ({"backoff": {"kind": "exponential", "base": 1, "factor": 0.5, "max": 10}}, "backoff"),
    ({"args": {"hook": "count", "n": 1, "deep": nested(MAX_ARGS_DEPTH)}}, "'args'"),
    ({"args": {"hook": "count", "n": 1, "deep": Raw.deep(900)}}, "'args'"),
    ({"args": {"hook": "count", "n": 1, "deep": Raw.deep(1100)}}, "deep"),
    ({"args": [1]}, "'args'"),
    ({"id": 5}, "'id'"),
], ids=lambda v: str(v)[:40])
async def test_an_invalid_field_fails_the_first_attempt_naming_the_field(
        client: Client, hooks: Any, dsn: str, changes: dict[str, Any], field: str) -> None:
    ran: Counter[int] = Counter()
    hooks("count", counting(ran))
    [job_id] = insert(dsn, [render(good_envelope(**changes))])

    assert await drain(client) == 1

    assert ran == Counter()
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["reason"], failure["attempts"]) == (job_id, "payload_invalid", 1)
    assert field in failure["message"]
    assert await live_jobs(dsn) == 0


class Holder(Job):
    """Keeps whatever JSON it is given."""

    name = "tests.worker:holder"
    data: Any = None

    async def handle(self, context: JobContext) -> None:
        HELD.append(self.data)


HELD: list[Any] = []


async def test_args_at_the_depth_limit_still_run(client: Client, dsn: str) -> None:
    HELD.clear()
    # The args object is level 1, so a value nested MAX_ARGS_DEPTH - 1 levels fills it exactly.
    insert(dsn, [json.dumps(good_envelope(name=Holder.name, args={"data": nested(MAX_ARGS_DEPTH - 1)}))])

    assert await drain(client) == 1

    assert [nested(MAX_ARGS_DEPTH - 1)] == HELD
    assert await failures(dsn) == []


def test_decode_raises_only_payload_errors() -> None:
    for text in ("[" * 5000 + "]" * 5000, '{"a": ' * 3000 + "1" + "}" * 3000, "1" * 5000, "nope", b"\xff",
                 "NaN", '{"a": 1e400}', '{"a": "\\ud800"}', '{"a": 1', ""):
        with pytest.raises(QueuePayloadError):
            Envelope.decode(text)
    assert Envelope.decode(json.dumps(good_envelope(priority=-32768))).priority == -32768


# ------------------------------------------- item 1: the property over malformed envelopes
# Text PostgreSQL can store in jsonb: no NUL, no lone surrogate (the table would refuse the row).
STORABLE = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
WRONG_TYPES = st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=False,
                        allow_infinity=False), st.text(STORABLE, max_size=20), st.lists(st.integers(), max_size=3),
                        st.dictionaries(st.text(STORABLE, max_size=5), st.integers(), max_size=3))
HUGE_NUMBERS = st.sampled_from([Raw("1e400"), Raw("-1e400"), Raw("1" + "0" * 5000), 1e308, -1e308])


def _not(kind: type | tuple[type, ...], values: st.SearchStrategy[Any] = WRONG_TYPES) -> st.SearchStrategy[Any]:
    return values.filter(lambda v: isinstance(v, bool) or not isinstance(v, kind))


_MISSING = object()

#: Per field, values that make an envelope invalid (``_MISSING``: the field is removed).
BAD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "id": st.one_of(st.just(_MISSING), _not(str), st.text(STORABLE, max_size=40)),
    "name": st.one_of(st.just(_MISSING), _not(str), st.just(""),
                      st.text(STORABLE, min_size=1, max_size=30).map(lambda s: "unknown:" + s), st.just("x" * 100_000)),
    "args": st.one_of(st.just(_MISSING), _not(dict), st.integers(MAX_ARGS_DEPTH, 3000).map(
        lambda d: {"hook": "count", "n": -1, "deep": Raw.deep(d)}),
        st.just({"hook": "count", "n": -1, "surplus": 1})),
    "connection": st.one_of(st.just(_MISSING), _not(str), st.just("")),
    "queue": st.one_of(st.just(_MISSING), _not(str), st.sampled_from(["", "a,b", " x", "x ", "t\tab", "\x01",
                                                                      "q" * 201])),
    "priority": st.one_of(_not(int), st.integers(32768, 10**6), st.integers(-(10**6), -32769), HUGE_NUMBERS),
    "tries": st.one_of(st.just(_MISSING), _not(int), st.integers(-(10**6), 0), st.just(2**31), HUGE_NUMBERS),
    "timeout": st.one_of(st.just(_MISSING), _not((int, float)), st.floats(-1e9, 0.0), HUGE_NUMBERS),
    "backoff": st.one_of(st.just(_MISSING), _not(dict), st.sampled_from([
        {"kind": "fixed", "delays": []}, {"kind": "fixed", "delays": [-1]}, {"kind": "fixed", "delays": ["1"]},
        {"kind": "fixed", "delays": [1e12]}, {"kind": "fixed"}, {"kind": "fibonacci"}, {},
        {"kind": "exponential", "base": 1, "factor": 2}, {"kind": "exponential", "base": 1, "factor": 0.5, "max": 9},
        {"kind": "exponential", "base": 1, "factor": 2, "max": 9, "jitter": 2},
        {"kind": "exponential", "base": Raw("1e400"), "factor": 2, "max": 9}])),
    "retry_until": st.one_of(_not((int, float), WRONG_TYPES.filter(lambda v: v is not None)), HUGE_NUMBERS),
    "version": st.one_of(st.integers(2, 10**6), st.integers(-(10**6), 0), st.sampled_from(["1", 1.5, None, True])),
}


@st.composite
def bad_envelope(draw: st.DrawFn) -> str:
    """The JSON text of an envelope with one to three fields wrong, or not an object at all."""
    if draw(st.integers(0, 9)) == 0:
        return render(draw(st.one_of(st.lists(st.integers(), max_size=3), st.text(STORABLE, max_size=10), st.none(),
                                         st.integers(), st.booleans())))
    data = good_envelope()
    for field in draw(st.lists(st.sampled_from(sorted(BAD_VALUES)), min_size=1, max_size=3, unique=True)):
        value = draw(BAD_VALUES[field])
        if value is _MISSING:
            del data[field]
        else:
            data[field] = value
    return render(data)


batches = st.lists(st.one_of(st.just(None), bad_envelope()), min_size=1, max_size=12).filter(
    lambda batch: any(item is not None for item in batch))


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(batch=batches)
def test_malformed_envelopes_fail_alone_and_good_jobs_run_once(dsn: str, batch: list[str | None]) -> None:
    """A batch of good jobs (None) and malformed envelopes, stored in that order, drained by one
    worker: it survives, every good job runs exactly once, every bad one is in failed_jobs with
    a reason after one attempt, and nothing is left."""
    asyncio.run(_malformed_batch(dsn, batch))


async def _malformed_batch(dsn: str, batch: list[str | None]) -> None:
    ran: Counter[int] = Counter()
    HOOKS["count"] = counting(ran)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("delete from pgqueue.failed_jobs")
            good: list[int] = []
            bad: list[uuid.UUID] = []
            for n, text in enumerate(batch):
                if text is None:
                    insert_sql(conn, json.dumps(good_envelope(args={"hook": "count", "n": n})))
                    good.append(n)
                else:
                    bad.append(insert_sql(conn, text))
        async with Client(settings=settings_for(dsn)) as client:
            assert await drain(client) == len(batch)
        assert ran == Counter(good), "every good job runs exactly once"
        assert await live_jobs(dsn) == 0
        failed = await failures(dsn)
        assert sorted(f["job_id"] for f in failed) == sorted(bad)
        for failure in failed:
            assert failure["reason"] in ("payload_invalid", "unknown_job"), failure
            assert failure["attempts"] == 1 and failure["message"], failure
    finally:
        HOOKS.pop("count", None)
