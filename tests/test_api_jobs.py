"""Defining jobs, the registry, backoff policies, args JSON-safety and the envelope (issue 3)."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgqueue
from pgqueue import (
    Backoff,
    Client,
    Envelope,
    Job,
    JobContext,
    QueueConfigurationError,
    QueuePayloadError,
    job,
    registered_jobs,
)
from pgqueue.jobs import lookup
from tests.api_support import client, failed_rows, job_rows, run_worker, settings_for

__all__ = ["client"]  # the fixture, imported for the tests below

SEEN: dict[str, object] = {}


class SendReport(Job):
    """A class-based job with every class-level override."""

    queue = "reports"
    tries = 5
    timeout = 20.0
    backoff = (1.0, 5.0)
    priority = 3

    report_id: int
    recipients: list[str] = dataclasses.field(default_factory=list)

    def retry_until(self) -> float | None:
        return 4102444800.0  # 2100-01-01

    async def handle(self, context: JobContext) -> None:
        SEEN["report"] = (self.report_id, self.recipients, context.attempts, context.queue)


class PlainJob(Job):
    """Defaults everywhere: the connection decides queue, tries, timeout and backoff."""

    n: int

    async def handle(self, context: JobContext) -> None:
        SEEN.setdefault("plain", []).append(self.n)  # type: ignore[attr-defined]


class Renamed(Job):
    name = "billing.charge"

    amount: int

    async def handle(self, context: JobContext) -> None:
        SEEN["renamed"] = self.amount


@job(queue="emails", tries=4, backoff=2.0)
async def send_welcome(user_id: int, greeting: str = "hello") -> None:
    SEEN["welcome"] = (user_id, greeting)


@job(name="tests.with_context")
async def with_context(user_id: int, context: JobContext) -> None:
    SEEN["with_context"] = (user_id, context.id, context.attempts)


# ---------------------------------------------------------------- defining jobs

def test_class_job_is_a_keyword_only_dataclass_with_its_fields_as_args() -> None:
    report = SendReport(report_id=7, recipients=["a@example.com"])
    assert report.args() == {"report_id": 7, "recipients": ["a@example.com"]}
    with pytest.raises(TypeError):
        SendReport(7)  # type: ignore[call-arg]
    assert SendReport(report_id=1).args()["recipients"] == []


async def test_class_level_overrides_and_retry_until_go_into_the_envelope(client: Client, dsn: str) -> None:
    job_id = await SendReport(report_id=7).dispatch(using=client)
    [row] = job_rows(dsn)
    env = row["envelope"]
    assert row["id"] == job_id and env["id"] == str(job_id)
    assert env["name"] == "tests.test_api_jobs:SendReport"
    assert env["args"] == {"report_id": 7, "recipients": []}
    assert (env["queue"], env["tries"], env["timeout"], env["priority"]) == ("reports", 5, 20.0, 3)
    assert env["backoff"] == {"kind": "fixed", "delays": [1.0, 5.0]}
    assert env["retry_until"] == 4102444800.0
    assert (row["queue"], row["priority"], row["max_tries"]) == ("reports", 3, 5)
    with psycopg.connect(dsn) as conn:
        deadline = conn.execute("select extract(epoch from retry_until) from pgqueue.jobs").fetchone()
    assert deadline is not None and float(deadline[0]) == 4102444800.0


async def test_defaults_come_from_the_connection(client: Client, dsn: str) -> None:
    await PlainJob(n=1).dispatch(using=client)
    env = job_rows(dsn)[0]["envelope"]
    config = client.connection("database")
    assert (env["queue"], env["tries"], env["timeout"], env["connection"]) == (
        config.queue, config.tries, config.timeout, "database")
    assert env["backoff"] == config.backoff.to_data()
    assert env["retry_until"] is None and env["version"] == 1


async def test_dispatch_arguments_override_the_class(client: Client, dsn: str) -> None:
    await SendReport(report_id=1).dispatch(using=client, queue="urgent", priority=-5)
    row = job_rows(dsn)[0]
    assert (row["queue"], row["priority"]) == ("urgent", -5)
    assert row["envelope"]["tries"] == 5


async def test_class_job_runs_in_a_worker_with_its_args(client: Client) -> None:
    await SendReport(report_id=9, recipients=["x"]).dispatch(using=client)
    worker = await run_worker(client, queues=("reports",))
    assert worker.stats.acked == 1
    assert SEEN["report"] == (9, ["x"], 1, "reports")


async def test_function_job_without_context(client: Client, dsn: str) -> None:
    assert issubclass(send_welcome, Job)  # type: ignore[arg-type]  # a JobFactory is a class at run time
    assert send_welcome.name == "tests.test_api_jobs:send_welcome"
    assert (send_welcome.queue, send_welcome.tries) == ("emails", 4)  # type: ignore[attr-defined]
    assert send_welcome.backoff == Backoff.fixed(2.0)  # type: ignore[attr-defined]
    await send_welcome(user_id=7).dispatch(using=client)
    assert job_rows(dsn)[0]["envelope"]["args"] == {"user_id": 7, "greeting": "hello"}
    await run_worker(client, queues=("emails",))
    assert SEEN["welcome"] == (7, "hello")


async def test_function_job_with_context(client: Client, dsn: str) -> None:
    assert with_context.name == "tests.with_context"
    job_id = await with_context(user_id=3).dispatch(using=client)
    assert job_rows(dsn)[0]["envelope"]["args"] == {"user_id": 3}  # context is not an arg
    await run_worker(client)
    assert SEEN["with_context"] == (3, job_id, 1)


def test_function_job_must_be_a_function() -> None:
    # Issue 11 item 6: plain functions are accepted now (they run in the worker's thread pool).
    with pytest.raises(QueueConfigurationError, match="needs a function"):
        job()(42)  # type: ignore[arg-type]


def test_function_job_refuses_star_args() -> None:
    async def variadic(*items: int) -> None: ...

    with pytest.raises(QueueConfigurationError, match=r"\*args"):
        job(name="tests.variadic")(variadic)


# ------------------------------------------------------------------- registry

def test_registry_names_default_to_module_and_qualname_and_can_be_overridden() -> None:
    jobs = registered_jobs()
    assert jobs["tests.test_api_jobs:SendReport"] is SendReport
    assert jobs["tests.test_api_jobs:PlainJob"] is PlainJob
    assert jobs["billing.charge"] is Renamed
    assert "tests.test_api_jobs:Renamed" not in jobs
    assert lookup("tests.with_context") is with_context  # type: ignore[comparison-overlap]


def test_a_duplicate_name_is_refused_naming_both_classes() -> None:
    with pytest.raises(QueueConfigurationError, match="registered twice") as caught:
        type("Impostor", (Job,), {"name": "billing.charge", "__annotations__": {}})
    assert "Renamed" in str(caught.value) and "Impostor" in str(caught.value)
    assert lookup("billing.charge") is Renamed


def test_a_duplicate_function_job_name_is_refused() -> None:
    async def other(user_id: int) -> None: ...

    with pytest.raises(QueueConfigurationError, match=r"tests.with_context"):
        job(name="tests.with_context")(other)


def test_an_empty_name_is_refused() -> None:
    with pytest.raises(QueueConfigurationError, match="name must be a non-empty string"):
        type("Nameless", (Job,), {"name": "", "__annotations__": {}})


def test_lookup_of_an_unregistered_name_returns_none_and_imports_nothing(tmp_path: Path) -> None:
    (tmp_path / "pgq_canary_lookup.py").write_text(
        "from pathlib import Path\nPath(__file__).with_suffix('.imported').write_text('yes')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert lookup("pgq_canary_lookup:Anything") is None
        assert lookup("pgq_canary_lookup.Anything") is None
    finally:
        sys.path.remove(str(tmp_path))
    assert "pgq_canary_lookup" not in sys.modules
    assert not (tmp_path / "pgq_canary_lookup.imported").exists()


async def test_a_worker_fails_an_unregistered_name_without_importing_it(
        client: Client, dsn: str, tmp_path: Path) -> None:
    (tmp_path / "pgq_canary_worker.py").write_text(
        "from pathlib import Path\nPath(__file__).with_suffix('.imported').write_text('yes')\n")
    await PlainJob(n=1).dispatch(using=client)
    with psycopg.connect(dsn) as conn:
        conn.execute("update pgqueue.jobs set envelope = jsonb_set(envelope, '{name}', '\"pgq_canary_worker:Job\"')")
    sys.path.insert(0, str(tmp_path))
    try:
        worker = await run_worker(client)
    finally:
        sys.path.remove(str(tmp_path))
    assert worker.stats.failed == 1
    assert "pgq_canary_worker" not in sys.modules
    assert not (tmp_path / "pgq_canary_worker.imported").exists()
    [failure] = failed_rows(dsn)
    assert failure["reason"] == "unknown_job" and "pgq_canary_worker:Job" in failure["message"]


# -------------------------------------------------------------------- backoff

def test_backoff_number_is_one_repeating_delay() -> None:
    policy = Backoff.coerce(7)
    assert [policy.delay(n) for n in (1, 2, 10)] == [7.0, 7.0, 7.0]


def test_backoff_sequence_repeats_its_last_value() -> None:
    policy = Backoff.coerce((1.0, 5.0))
    assert [policy.delay(n) for n in (1, 2, 3, 50)] == [1.0, 5.0, 5.0, 5.0]
    assert Backoff.coerce([0, 2, 4]).delay(2) == 2.0


def test_backoff_exponential_without_jitter_doubles_up_to_the_cap() -> None:
    policy = Backoff.exponential(base=1, factor=2, max=600)
    assert [policy.delay(n) for n in range(1, 12)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600]
    assert policy.delay(10_000) == 600.0


def test_backoff_exponential_jitter_stays_within_its_bounds() -> None:
    policy = Backoff.exponential(base=1, factor=2, max=600, jitter=0.1)
    for attempt in range(1, 15):
        nominal = min(2.0 ** (attempt - 1), 600.0)
        samples = [policy.delay(attempt) for _ in range(200)]
        assert all(nominal * 0.9 - 1e-9 <= s <= min(nominal * 1.1, 600.0) + 1e-9 for s in samples), attempt
    assert len({policy.delay(3) for _ in range(50)}) > 1  # jitter does spread


@pytest.mark.parametrize("bad", [(), [], Backoff.fixed])
def test_an_empty_backoff_is_a_configuration_error(bad: object) -> None:
    with pytest.raises(QueueConfigurationError, match="backoff"):
        if callable(bad):
            bad()
        else:
            Backoff.coerce(bad)


def test_an_empty_backoff_on_a_job_class_is_refused_when_the_class_is_defined() -> None:
    with pytest.raises(QueueConfigurationError, match="backoff needs at least one delay"):
        type("EmptyBackoff", (Job,), {"backoff": (), "__annotations__": {}})


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "5", (1, -2), True])
def test_bad_backoff_values_are_configuration_errors(bad: object) -> None:
    with pytest.raises(QueueConfigurationError, match="backoff"):
        Backoff.coerce(bad)


@pytest.mark.parametrize("kwargs", [{"factor": 0.5}, {"jitter": 1.5}, {"max": -1}, {"base": math.nan}])
def test_bad_exponential_settings_are_configuration_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(QueueConfigurationError, match="backoff"):
        Backoff.exponential(**kwargs)


@pytest.mark.parametrize("policy", [Backoff.fixed(1.0, 5.0), Backoff.fixed(3),
                                    Backoff.exponential(base=0.5, factor=3, max=120, jitter=0.2)])
async def test_backoff_is_stored_in_the_envelope_as_data_and_read_back(
        client: Client, dsn: str, policy: Backoff) -> None:
    await client.dispatch(PlainJob(n=1), delay=0)
    # the class has no backoff: the connection's default is stored; now one per job via a subclass
    custom = type("WithPolicy", (PlainJob,), {"backoff": policy, "name": f"tests.policy.{id(policy)}",
                                              "__annotations__": {}})
    await client.dispatch(custom(n=2))
    rows = job_rows(dsn)
    stored = {r["envelope"]["args"]["n"]: r["envelope"]["backoff"] for r in rows}
    assert Backoff.from_data(stored[1]) == client.connection().backoff
    assert stored[2] == policy.to_data()
    assert Backoff.from_data(stored[2]) == policy
    with psycopg.connect(dsn) as conn:
        kind = conn.execute("select envelope->'backoff'->>'kind' from pgqueue.jobs"
                            " where envelope->'args'->>'n' = '2'").fetchone()
    assert kind is not None and kind[0] == policy.to_data()["kind"]  # SQL can read it


@pytest.mark.parametrize("data", [None, {"kind": "linear"}, {"kind": "fixed", "delays": []},
                                  {"kind": "exponential", "base": 1}])
def test_a_malformed_stored_backoff_is_a_payload_error(data: object) -> None:
    with pytest.raises(QueuePayloadError, match="backoff"):
        Backoff.from_data(data)


# ---------------------------------------------------------- args JSON-safety

class Anything(Job):
    name = "tests.anything"

    value: object = None
    other: object = None


@pytest.mark.parametrize(("value", "type_name"), [
    (time, "module"),
    (b"bytes", "bytes"),
    ({1, 2}, "set"),
    (Path("/tmp"), "PosixPath"),
    (dataclasses.field, "function"),
])
async def test_a_value_that_is_not_json_is_refused_naming_the_field_and_its_type(
        client: Client, dsn: str, value: object, type_name: str) -> None:
    with pytest.raises(QueuePayloadError) as caught:
        await Anything(value=value).dispatch(using=client)
    message = str(caught.value)
    assert "'value'" in message and type_name in message and "tests.anything" in message
    assert job_rows(dsn) == []


async def test_a_nested_non_json_value_is_named_by_its_path(client: Client) -> None:
    import datetime

    with pytest.raises(QueuePayloadError, match=r"\['value'\]\['when'\]\[1\].*datetime.date"):
        await Anything(value={"when": [1, datetime.date(2024, 1, 1)]}).dispatch(using=client)


async def test_a_non_string_dict_key_is_refused(client: Client) -> None:
    with pytest.raises(QueuePayloadError, match="JSON keys are strings"):
        await Anything(value={1: "one"}).dispatch(using=client)


@pytest.mark.parametrize(("value", "what"), [
    ("a\x00b", "NUL"),
    (["ok", "\ud800"], "surrogate"),
    ({"k\x00": 1}, "NUL"),
    (math.nan, "NaN"),
    ([math.inf], "infinity"),
])
async def test_nul_bytes_lone_surrogates_and_nan_are_refused(
        client: Client, dsn: str, value: object, what: str) -> None:
    with pytest.raises(QueuePayloadError, match=what) as caught:
        await client.dispatch(Anything(value=value))
    assert "'value'" in str(caught.value)
    assert job_rows(dsn) == []


async def test_json_args_round_trip_through_the_database(client: Client, dsn: str) -> None:
    value = {"s": "é ☃ \U0001f600", "i": 2**62, "f": 0.1, "b": False, "n": None, "l": [1, [2, {"x": "y"}]]}
    await Anything(value=value, other=(1, 2)).dispatch(using=client)
    env = job_rows(dsn)[0]["envelope"]
    assert env["args"] == {"value": value, "other": [1, 2]}
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select jsonb_typeof(envelope->'args'), envelope->'args'->'value'->>'s'"
                           " from pgqueue.jobs").fetchone()
    assert row == ("object", "é ☃ \U0001f600")


def test_no_pickle_anywhere_in_the_library() -> None:
    root = Path(pgqueue.__file__).parent
    offenders = [str(p) for p in root.rglob("*.py") if "pickle" in p.read_text(encoding="utf-8")]
    assert offenders == []


# ------------------------------------------------------------------ envelope

async def test_the_envelope_is_fixed_at_dispatch(client: Client, dsn: str) -> None:
    class Mutable(Job):
        name = "tests.mutable"
        queue = "before"
        tries = 2
        timeout = 10.0
        backoff = 1.0

        n: int

    job_id = await Mutable(n=1).dispatch(using=client)
    saved = {k: getattr(Mutable, k) for k in ("queue", "tries", "timeout", "backoff")}
    try:
        Mutable.queue, Mutable.tries, Mutable.timeout, Mutable.backoff = "after", 9, 50.0, Backoff.fixed(99)  # type: ignore[assignment]
        [row] = job_rows(dsn)
        env = Envelope.decode(row["envelope"])
        assert (env.id, env.queue, env.tries, env.timeout, env.backoff) == (
            job_id, "before", 2, 10.0, Backoff.fixed(1.0))
        assert (row["queue"], row["max_tries"]) == ("before", 2)
        # a dispatch after the change takes the new values; the old row is untouched
        await Mutable(n=2).dispatch(using=client)
        envelopes = {r["envelope"]["args"]["n"]: r["envelope"] for r in job_rows(dsn)}
        assert (envelopes[1]["queue"], envelopes[1]["tries"]) == ("before", 2)
        assert (envelopes[2]["queue"], envelopes[2]["tries"]) == ("after", 9)
    finally:
        for k, v in saved.items():
            setattr(Mutable, k, v)


def test_each_dispatch_gets_a_fresh_time_ordered_id(client: Client) -> None:
    ids = [client.envelope(PlainJob(n=1))[0].id for _ in range(100)]
    assert len(set(ids)) == 100 and all(i.version == 7 for i in ids) and ids == sorted(ids)


async def test_an_envelope_over_the_size_limit_is_refused_with_its_actual_size(client: Client, dsn: str) -> None:
    big = "x" * (1024 * 1024)
    envelope, config = client.envelope(Anything(value=big))
    actual = len(envelope.encode(10 * 1024 * 1024).encode("utf-8"))
    with pytest.raises(QueuePayloadError) as caught:
        await Anything(value=big).dispatch(using=client)
    message = str(caught.value)
    assert f"{actual} bytes" in message and f"{1024 * 1024} bytes" in message and "max_payload_bytes" in message
    assert config.max_payload_bytes == 1024 * 1024
    assert job_rows(dsn) == []


async def test_the_size_limit_is_configurable(dsn: str, tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.pgqueue.connections.database]\nmax_payload_bytes = 400\n")
    small = Client(settings=pgqueue.load_settings(pyproject, dsn=dsn, environ={}))
    try:
        await small.dispatch(Anything(value="y" * 100))
        with pytest.raises(QueuePayloadError, match=r"over the limit of 400 bytes"):
            await small.dispatch(Anything(value="y" * 400))
        with pytest.raises(QueuePayloadError, match=r"over the limit of 400 bytes"):
            await small.dispatch_many([Anything(value="z"), Anything(value="y" * 400)])
    finally:
        await small.close()
    assert len(job_rows(dsn)) == 1


def test_a_multibyte_payload_is_measured_in_bytes(client: Client) -> None:
    envelope, _ = client.envelope(Anything(value="é" * 1000))
    text = envelope.encode(10_000)
    with pytest.raises(QueuePayloadError, match=f"{len(text.encode('utf-8'))} bytes"):
        envelope.encode(len(text) + 10)  # enough characters, too few bytes


@pytest.mark.parametrize(("attribute", "value", "setting"), [
    ("tries", 0, "tries"),
    ("tries", 1.5, "tries"),
    ("timeout", 4e7, "timeout"),  # over one year (85 s no longer is: the heartbeat renews the lease)
    ("timeout", -1.0, "timeout"),
    ("queue", "", "queue"),
    ("priority", 40000, "priority"),
])
async def test_bad_class_settings_are_refused_at_dispatch_naming_the_setting(
        client: Client, dsn: str, attribute: str, value: object, setting: str) -> None:
    bad = type(f"Bad_{attribute}", (PlainJob,), {attribute: value, "name": f"tests.bad.{attribute}.{value!r}",
                                                 "__annotations__": {}})
    with pytest.raises(QueueConfigurationError, match=setting) as caught:
        await bad(n=1).dispatch(using=client)
    assert "tests.bad." in str(caught.value)
    assert job_rows(dsn) == []


async def test_a_bad_retry_until_is_refused(client: Client) -> None:
    class BadDeadline(Job):
        name = "tests.bad_deadline"

        def retry_until(self) -> float | None:
            return math.nan

    with pytest.raises(QueueConfigurationError, match="retry_until"):
        await BadDeadline().dispatch(using=client)


# ------------------------------------ bulk encoding agrees with single encoding

_json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=8),
    st.sampled_from(["\x00", "a\ud800b", "\\u0000", "é", "\U0001f600"]),
)
_json_values = st.recursive(
    _json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(0, 3)), inner, max_size=4),
    ),
    max_leaves=12,
)


def _single(client: Client, job: Job) -> str | type[Exception]:
    try:
        envelope, config = client.envelope(job)
        return envelope.encode(config.max_payload_bytes).replace(str(envelope.id), "ID")
    except QueuePayloadError:
        return QueuePayloadError


def _bulk(client: Client, job: Job) -> str | type[Exception]:
    try:
        encoded = client.encode_many([job])
    except QueuePayloadError:
        return QueuePayloadError
    return encoded.text[1:-1].replace(str(encoded.ids[0]), "ID")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_json_values, other=_json_values)
def test_bulk_encoding_accepts_refuses_and_writes_exactly_what_single_encoding_does(
        value: object, other: object) -> None:
    job_ = Anything(value=value, other=other)
    for target in (_ROOMY, _TIGHT):
        assert _bulk(target, job_) == _single(target, job_)


_ROOMY = Client(settings=settings_for("postgresql://nowhere/unused"))
_TIGHT = Client(settings=pgqueue.Settings(connections={  # this job's envelope is ~300 bytes with null args
    "database": pgqueue.ConnectionConfig(name="database", dsn="postgresql://nowhere/unused", max_payload_bytes=330)}))
