"""Args at dispatch and in the worker: nesting depth, self-reference, the job's annotations,
delay bounds and the queue-name rule (issue 11, items 1, 7 and 8)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable
from typing import Any, Literal, Protocol, TypedDict

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqueue import Client, Job, JobContext, QueueConfigurationError, QueuePayloadError, job, limits
from pgqueue.config import ConnectionConfig
from tests.api_support import client, failed_rows, job_rows, run_worker
from tests.helpers import envelope

__all__ = ["client"]

RAN: list[Any] = []


class Nested(Job):
    name = "tests.args.nested"

    data: Any = None

    async def handle(self, context: JobContext) -> None:
        RAN.append(("nested", self.data))


class Point(TypedDict):
    x: int
    y: float


class Typed(Job):
    name = "tests.args.typed"

    order_id: int
    amount: float = 0.0
    note: str | None = None
    tags: list[int] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    mode: Literal["fast", "slow"] = "fast"
    point: Point | None = None
    anything: Any = None

    async def handle(self, context: JobContext) -> None:
        RAN.append(("typed", self.order_id, self.amount))


@job(name="tests.args.function")
async def charge(order_id: int, cents: float = 0.0) -> None:
    RAN.append(("charge", order_id, cents))


def nest(levels: int) -> Any:
    """A value that nests ``levels`` arrays: nest(1) == [0]."""
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


class Dispatch(Protocol):
    """One of the ways to dispatch, with the options of Client.dispatch."""

    def __call__(self, target: Client, one: Job, **options: Any) -> Awaitable[Any]: ...


async def via_dispatch(target: Client, one: Job, **options: Any) -> Any:
    return await target.dispatch(one, **options)


async def via_dispatch_sync(target: Client, one: Job, **options: Any) -> Any:
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        return target.dispatch_sync(one, conn=conn, **options)


async def via_dispatch_many(target: Client, one: Job, **options: Any) -> Any:
    return await target.dispatch_many([Typed(order_id=1), one], **options)


DISPATCHES = [via_dispatch, via_dispatch_sync, via_dispatch_many]


# ------------------------------------------------------------------ depth (item 1)
@pytest.mark.parametrize("dispatch", DISPATCHES)
async def test_args_at_the_depth_bound_are_stored(client: Client, dsn: str, dispatch: Dispatch) -> None:
    # args (level 1) -> data (level 2, the outermost list) ... : 63 lists fit under the args object.
    await dispatch(client, Nested(data=nest(limits.MAX_ARGS_DEPTH - 1)))
    stored = [row["envelope"]["args"] for row in job_rows(dsn) if row["envelope"]["name"] == Nested.name]
    assert stored == [{"data": nest(limits.MAX_ARGS_DEPTH - 1)}]


@pytest.mark.parametrize("dispatch", DISPATCHES)
async def test_args_deeper_than_the_bound_are_refused_naming_the_path(client: Client, dsn: str,
                                                                       dispatch: Dispatch) -> None:
    with pytest.raises(QueuePayloadError) as caught:
        await dispatch(client, Nested(data={"a": nest(limits.MAX_ARGS_DEPTH)}))
    message = str(caught.value)
    assert message.startswith("job 'tests.args.nested' args['data']['a'][0][0]")
    assert f"deeper than {limits.MAX_ARGS_DEPTH} levels" in message
    assert job_rows(dsn) == []


@pytest.mark.parametrize("dispatch", DISPATCHES)
async def test_self_referencing_args_are_refused_naming_the_path(client: Client, dsn: str,
                                                                 dispatch: Dispatch) -> None:
    looped: list[Any] = [1]
    looped.append({"again": looped})
    with pytest.raises(QueuePayloadError, match=r"args\['data'\]\[1\]\['again'\] is a list that contains itself"):
        await dispatch(client, Nested(data=looped))
    assert job_rows(dsn) == []


# -------------------------------------------------------------- annotations (item 7)
@pytest.mark.parametrize("dispatch", DISPATCHES)
@pytest.mark.parametrize(("fields", "message"), [
    ({"order_id": "x"}, r"args\['order_id'\] must be int, given str 'x'"),
    ({"order_id": 1.5}, r"args\['order_id'\] must be int, given float 1.5"),
    ({"order_id": True}, r"args\['order_id'\] must be int, given bool True"),
    ({"order_id": 1, "amount": "2"}, r"args\['amount'\] must be float, given str '2'"),
    ({"order_id": 1, "tags": [1, "2"]}, r"args\['tags'\] must be list\[int\], given list \[1, '2'\] .* at \[1\]"),
    ({"order_id": 1, "mode": "turbo"}, r"args\['mode'\] must be Literal\['fast', 'slow'\], given str 'turbo'"),
    ({"order_id": 1, "point": {"x": 1.5, "y": 2}}, r"args\['point'\] must be .*Point.*given dict .* at \.x"),
    ({"order_id": 1, "extra": {"k": 1}, "note": 3}, r"args\['note'\] must be str \| None, given int 3"),
])
async def test_args_of_the_wrong_type_are_refused_naming_field_expected_and_given(
        client: Client, dsn: str, dispatch: Dispatch, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(QueuePayloadError, match=message) as caught:
        await dispatch(client, Typed(**fields))
    assert str(caught.value).startswith("job 'tests.args.typed' args[")
    assert job_rows(dsn) == []


@pytest.mark.parametrize("dispatch", DISPATCHES)
async def test_args_that_fit_the_annotations_are_stored_as_given(client: Client, dsn: str, dispatch: Dispatch) -> None:
    fitting = Typed(order_id=7, amount=2, note=None, tags=[1, 2], extra={"any": [None, {"x": 1.5}]}, mode="slow",
                    point={"x": 1, "y": 2}, anything={"whatever": ["json"]})
    await dispatch(client, fitting)
    stored = [row["envelope"]["args"] for row in job_rows(dsn)]
    assert stored[-1] == fitting.args()


@pytest.mark.parametrize("dispatch", DISPATCHES)
async def test_job_function_args_are_checked_against_the_parameters(client: Client, dsn: str,
                                                                   dispatch: Dispatch) -> None:
    with pytest.raises(QueuePayloadError, match=r"job 'tests.args.function' args\['order_id'\] must be int"):
        await dispatch(client, charge(order_id="42"))
    assert job_rows(dsn) == []
    await dispatch(client, charge(order_id=42, cents=1))
    assert [row["envelope"]["args"] for row in job_rows(dsn)][-1] == {"order_id": 42, "cents": 1}


def test_from_args_builds_the_job_converting_json_numbers() -> None:
    built = Typed.from_args({"order_id": 3, "amount": 2, "point": {"x": 1, "y": 2}})
    assert isinstance(built, Typed)
    assert (built.order_id, built.amount, built.tags, built.mode) == (3, 2.0, [], "fast")
    assert isinstance(built.amount, float) and built.point == {"x": 1, "y": 2.0}
    assert charge.from_args({"order_id": 5}).args() == {"order_id": 5, "cents": 0.0}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("args", "message"), [
    ({}, r"job 'tests.args.typed' args: missing required field 'order_id' \(int\)"),
    ({"order_id": 1, "orderid": 2}, r"args: unknown field 'orderid' \(given int 2\); the job's fields are order_id, "),
    ({"order_id": "1"}, r"args\['order_id'\] must be int, given str '1'"),
    ({"order_id": None}, r"args\['order_id'\] must be int, given NoneType None"),
])
def test_from_args_refuses_what_does_not_fit(args: dict[str, Any], message: str) -> None:
    with pytest.raises(QueuePayloadError, match=message):
        Typed.from_args(args)


def test_an_annotation_that_cannot_be_resolved_is_not_checked_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    class Unresolved(Job):
        name = "tests.args.unresolved"

        order: NotDefinedAnywhere  # type: ignore[name-defined]  # noqa: F821
        count: int = 0

    with caplog.at_level("WARNING", logger="pgqueue"):
        built = Unresolved.from_args({"order": {"any": "json"}})
        Unresolved.from_args({"order": 1})
        with pytest.raises(QueuePayloadError, match=r"args\['count'\] must be int"):
            Unresolved.from_args({"order": 1, "count": "x"})
    assert built.order == {"any": "json"}
    warnings = [r.getMessage() for r in caplog.records if "is not checked" in r.getMessage()]
    assert len(warnings) == 1 and "'NotDefinedAnywhere' of field 'order'" in warnings[0]


async def test_a_worker_fails_stored_args_that_no_longer_fit_as_payload_invalid(client: Client, dsn: str) -> None:
    # As after a deploy that changed order_id from str to int: the stored args are refused by
    # name before the handler runs, and the good job next to it runs.
    RAN.clear()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for args in ({"order_id": "A-17"}, {"order_id": 18, "amount": 1}):
            conn.execute("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope(name=Typed.name, args=args, tries=3)),))
    await run_worker(client)
    assert RAN == [("typed", 18, 1.0)]
    [failure] = failed_rows(dsn)
    assert failure["reason"] == "payload_invalid" and failure["attempts"] == 1
    assert "args['order_id'] must be int, given str 'A-17'" in failure["message"]
    assert job_rows(dsn) == []


# ------------------------------------------------------------------- delay (item 8)
@pytest.mark.parametrize("dispatch", DISPATCHES)
@pytest.mark.parametrize("delay", [limits.MAX_DELAY_SECONDS + 1, 1e12, -1.0, float("inf")])
async def test_a_delay_outside_zero_to_ten_years_is_refused(client: Client, dsn: str, dispatch: Dispatch,
                                                           delay: float) -> None:
    with pytest.raises(QueueConfigurationError, match=r"delay must be a finite number of seconds >= 0 and at most "
                                                      r"315360000 \(10 years\)"):
        await dispatch(client, Nested(data=1), delay=delay)
    assert job_rows(dsn) == []


@pytest.mark.parametrize("dispatch", DISPATCHES)
async def test_the_longest_delay_is_stored(client: Client, dsn: str, dispatch: Dispatch) -> None:
    await dispatch(client, Nested(data=1), delay=limits.MAX_DELAY_SECONDS)
    assert max(row["due_in"] for row in job_rows(dsn)) > limits.MAX_DELAY_SECONDS - 60


# -------------------------------------------------------------- queue names (item 8)
BAD_QUEUE_NAMES = ["a,b", " leading", "trailing ", "tab\tinside", "bell\x07", "x" * 201, ""]


@pytest.mark.parametrize("dispatch", DISPATCHES)
@pytest.mark.parametrize("name", BAD_QUEUE_NAMES)
async def test_a_bad_queue_name_is_refused_at_dispatch(client: Client, dsn: str, dispatch: Dispatch,
                                                      name: str) -> None:
    with pytest.raises(QueueConfigurationError, match="queue name") as caught:
        await dispatch(client, Nested(data=1), queue=name)
    assert str(caught.value).endswith(f"': {limits.queue_name_problem(name)}")
    assert job_rows(dsn) == []


@pytest.mark.parametrize("dispatch", DISPATCHES)
@pytest.mark.parametrize("name", ["nul\x00", "surrogate\udcff"])
async def test_a_nul_or_surrogate_in_a_queue_name_is_refused_by_the_one_rule(client: Client, dsn: str,
                                                                            dispatch: Dispatch, name: str) -> None:
    # Issue 24: one rule, one message (it was a payload error of its own).
    with pytest.raises(QueueConfigurationError, match="queue name") as caught:
        await dispatch(client, Nested(data=1), queue=name)
    assert str(caught.value).endswith(f"': {limits.queue_name_problem(name)}")
    assert job_rows(dsn) == []


@pytest.mark.parametrize("name", BAD_QUEUE_NAMES)
async def test_a_bad_queue_name_of_a_job_class_or_function_or_connection_is_refused(client: Client, dsn: str,
                                                                                   name: str) -> None:
    on_class = type("OnClass", (Nested,), {"name": f"tests.args.queue.{uuid.uuid4()}", "queue": name,
                                          "__annotations__": {}})
    on_function = job(name=f"tests.args.queue.{uuid.uuid4()}", queue=name)(charge._function)  # type: ignore[attr-defined]
    for bad in (on_class(data=1), on_function(order_id=1)):
        with pytest.raises(QueueConfigurationError, match="queue name"):
            await client.dispatch(bad)
    for on_connection in (name, "nul\x00"):
        with pytest.raises(QueueConfigurationError, match=r"connection 'database': queue: .*queue name"):
            ConnectionConfig(name="database", queue=on_connection)
    assert job_rows(dsn) == []


@pytest.mark.parametrize("name", BAD_QUEUE_NAMES)
async def test_a_worker_for_a_bad_queue_name_is_refused(client: Client, name: str) -> None:
    with pytest.raises(QueueConfigurationError, match=r"worker of connection 'database': .*queue name"):
        await client.worker(queues=["default", name])


async def test_queue_names_with_inner_spaces_and_unicode_are_dispatched_and_served(client: Client, dsn: str) -> None:
    RAN.clear()
    names = ("emails high", "émails-ünïcode-日本", "x" * 200)
    for name in names:
        await client.dispatch(Nested(data=name), queue=name)
    assert sorted(row["queue"] for row in job_rows(dsn)) == sorted(names)
    await run_worker(client, queues=names)
    assert sorted(data for _, data in RAN) == sorted(names)
    assert job_rows(dsn) == []
