"""Issue 28: a job's partition (dispatch ``partition=``, a job type's ``partition_by``), and the
per-partition limits and fair shares that ``pgqueue.reserve`` decides, in process against the real
database (the check across worker processes is in tests/faults/test_control.py)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any

import psycopg
import pytest

from pgqueue import Client, Job, JobContext, QueueConfigurationError
from pgqueue.limits import partition_problem
from tests.worker_jobs import Once, Probe
from tests.worker_support import client, rows, scalar

__all__ = ["client"]


class TenantJob(Job):
    """Partitioned by its tenant."""

    name = "tests.partitions:tenant"
    partition_by = ("region", "tenant_id")
    region: str
    tenant_id: int

    async def handle(self, context: JobContext) -> None:
        """Nothing: these jobs are only reserved."""


class LooseTenantJob(Job):
    """Partitioned by an arg of any JSON type."""

    name = "tests.partitions:loose"
    partition_by = ("tenant",)
    tenant: Any

    async def handle(self, context: JobContext) -> None:
        """Nothing: these jobs are only reserved."""


def reserve(dsn: str, queue: str, count: int) -> list[str | None]:
    """The partitions of the jobs one reservation of ``count`` grants (in grant order)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [row[0] for row in conn.execute(
            "select j.partition from pgqueue.reserve(array[%s], %s, 60) r join pgqueue.jobs j using (id) "
            "order by r.lease_expires_at, array_position(array(select x.id from pgqueue.jobs x), r.id)",
            (queue, count)).fetchall()]


def allowance(dsn: str, queue: str, partition: str) -> int:
    """What pgqueue.partition_allowance says ``partition`` may still get now (of 50)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(b"select allowance from pgqueue.partition_allowance("
                           b"(select q from pgqueue.queues q where q.name = %s), %s, 50, clock_timestamp())",
                           (queue, partition)).fetchone()
    assert row is not None
    return int(row[0])


def granted(dsn: str, queue: str, count: int) -> Counter[str | None]:
    """How many jobs of each partition one reservation of ``count`` grants."""
    return Counter(reserve(dsn, queue, count))


# ----------------------------------------------------------------- the partition key
async def test_a_partition_given_or_derived_is_stored_queryable_and_kept_by_failures(client: Client, dsn: str) -> None:
    given = await client.dispatch(Probe(hook="never"), partition="tenant:42")
    derived = await client.dispatch(TenantJob(region="eu", tenant_id=7))
    plain = await client.dispatch(Probe(hook="never"))
    many = await client.dispatch_many([Probe(hook="never", n=i) for i in range(3)], partition="tenant:9")
    mixed = await client.dispatch_many([TenantJob(region="us", tenant_id=1), Probe(hook="never")])
    keyed = await client.dispatch_many([Probe(hook="never", n=9)], unique_keys=["k9"], partition="tenant:u")
    unique = await client.dispatch(Probe(hook="never", n=8), unique_key="k8", partition="tenant:u")
    found = {r["id"]: r for r in await rows(dsn, "select id, partition, envelope->>'partition' as kept "
                                                 "from pgqueue.jobs")}
    assert (found[given]["partition"], found[derived]["partition"], found[plain]["partition"]) == ("tenant:42", "eu:7",
                                                                                                 None)
    assert [found[h]["partition"] for h in many] == ["tenant:9"] * 3
    assert [found[h]["partition"] for h in mixed] == ["us:1", None]
    assert [found[h]["partition"] for h in (*keyed, unique)] == ["tenant:u", "tenant:u"]
    assert all(r["partition"] == r["kept"] for r in found.values())
    stored = await rows(dsn, "select envelope from pgqueue.jobs where id = %s", (plain,))
    assert "partition" not in stored[0]["envelope"]  # a plain job's envelope is as before

    # A failure keeps it (failed_jobs.partition), and a retry puts the job back in it.
    failing = await client.dispatch(Once(hook="never"), partition="tenant:42")
    with psycopg.connect(dsn, autocommit=True) as conn:
        token = conn.execute("select token from pgqueue.reserve(array['default'], 100, 60) where id = %s",
                             (failing,)).fetchone()
        assert token is not None
        conn.execute("select pgqueue.fail(%s, %s, 'E', 'boom', 'tb', 'exception')", (failing, token[0]))
    failure = (await rows(dsn, "select id, partition from pgqueue.failed_jobs where job_id = %s", (failing,)))[0]
    assert failure["partition"] == "tenant:42"
    await client.retry_failed(failure["id"])
    assert await scalar(dsn, "select partition from pgqueue.jobs where id = %s", (failing,)) == "tenant:42"


@pytest.mark.parametrize(("partition", "message"), [
    ("", "a partition must be 1 to 200 characters, got 0"),
    ("x" * 201, "a partition must be 1 to 200 characters, got 201"),
    ("a\u202eb", r"partition 'a\\u202eb' is not valid: it contains U\+202E"),
    ("a\x00b", r"partition 'a\\u0000b' is not valid: it contains U\+0000"),
    (42, "a partition must be a string, got int 42"),
])
async def test_a_bad_partition_is_refused_by_name_and_nothing_is_stored(client: Client, dsn: str, partition: Any,
                                                                        message: str) -> None:
    with pytest.raises(QueueConfigurationError, match=message):
        await client.dispatch(Probe(hook="never"), partition=partition)
    with pytest.raises(QueueConfigurationError, match=message):
        await client.dispatch_many([Probe(hook="never"), Probe(hook="never")], partition=partition)
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


async def test_a_derived_partition_of_a_bad_value_is_refused_naming_the_arg(client: Client, dsn: str) -> None:
    with pytest.raises(QueueConfigurationError, match=r"partition_by arg 'tenant' must be a string or an integer, "
                                                      r"got list \[1\]"):
        await client.dispatch(LooseTenantJob(tenant=[1]))
    with pytest.raises(QueueConfigurationError, match="a partition must be 1 to 200 characters, got 201"):
        await client.dispatch_many([TenantJob(region="x" * 199, tenant_id=1)])
    with pytest.raises(QueueConfigurationError, match="partition_by must be a tuple of arg names"):
        type("Bad", (Job,), {"__annotations__": {"a": "int"}, "partition_by": ("b",), "name": "tests.partitions:bad"})
    assert await scalar(dsn, "select count(*) from pgqueue.jobs") == 0


async def test_sql_refuses_a_bad_partition_naming_it(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        envelope = ('{"id": "00000000-0000-4000-8000-000000000001", "name": "x", "args": {}, "queue": "q", '
                    '"tries": 1, "partition": %s}')
        for value, message in [("42", "a partition must be a string, got 42"),
                               ('"a\\u0007b"', r"partition 'a\\u0007b' is not valid")]:
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
                conn.execute("select pgqueue.enqueue(%s::jsonb)", (envelope % value,))
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=f"envelope 1 of 1: .*{message}"):
                conn.execute("select pgqueue.enqueue_many(jsonb_build_array(%s::jsonb))", (envelope % value,))
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_partition"):
            conn.execute("update pgqueue.jobs set partition = ''")  # no row: the CHECK is still there
            conn.execute("insert into pgqueue.jobs (id, queue, envelope, max_tries, partition) "
                         "values (gen_random_uuid(), 'q', '{}', 1, '')")
        assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)


# ----------------------------------------------------------------- per-partition limits
async def test_per_partition_concurrency_caps_each_partition_and_an_override_replaces_it(client: Client,
                                                                                       dsn: str) -> None:
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(30)], queue="orders", partition="tenant:a")
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(30)], queue="orders", partition="tenant:big")
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(3)], queue="orders")  # no partition
    await client.set_limits("orders", per_partition_concurrency=2)
    await client.set_partition_limit("orders", "tenant:big", concurrency=5)
    assert granted(dsn, "orders", 50) == {"tenant:a": 2, "tenant:big": 5, None: 3}
    assert granted(dsn, "orders", 50) == {}  # all at their limit; nothing more until some end
    # An idle worker does not spin on it: the queue is due again a little later, not now.
    assert await scalar(dsn, "select pgqueue.next_due(array['orders']) > clock_timestamp()") is True

    status = {s.partition: s for s in await client.partitions("orders")}
    assert (status["tenant:a"].running, status["tenant:a"].waiting, status["tenant:a"].concurrency) == (2, 28, 2)
    assert (status["tenant:big"].running, status["tenant:big"].concurrency, status["tenant:big"].overridden) == (
        5, 5, True)

    # One ends (acked): exactly one more of that partition may start.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("delete from pgqueue.jobs where id = (select id from pgqueue.jobs where partition = 'tenant:a' "
                     "and token is not null limit 1)")
    # pgqueue.partition_allowance (kept for psql) reads the limits as reserve_partitions does.
    assert (allowance(dsn, "orders", "tenant:a"), allowance(dsn, "orders", "tenant:big")) == (1, 0)
    assert granted(dsn, "orders", 50) == {"tenant:a": 1}

    # Without the override, tenant:big has the queue's 2 (and 5 running already: nothing);
    # cleared per-partition limits leave the queue as it was.
    await client.set_partition_limit("orders", "tenant:big")
    assert granted(dsn, "orders", 50) == {}
    await client.set_limits("orders", per_partition_concurrency=None, fair=False)
    assert (await client.controls())[0].partition_concurrency is None
    assert granted(dsn, "orders", 50) == {"tenant:a": 27, "tenant:big": 23}


async def test_per_partition_rate_gives_each_partition_its_own_bucket(client: Client, dsn: str) -> None:
    for tenant in ("a", "b"):
        await client.dispatch_many([Probe(hook="never", n=i) for i in range(20)], queue="api",
                                   partition=f"tenant:{tenant}")
    # A bucket of 3 per partition, refilled at 3 an hour: no refill within the test.
    await client.set_limits("api", per_partition_rate="3/h")
    await client.set_partition_limit("api", "tenant:b", rate=(5, 3600.0), burst=5)
    # Limits without fair shares: due order (revision 0016), a's first 3 (its bucket), then b's.
    assert granted(dsn, "api", 4) == {"tenant:a": 3, "tenant:b": 1}
    assert granted(dsn, "api", 100) == {"tenant:b": 4}
    assert granted(dsn, "api", 100) == {}
    tokens = {r["partition"]: r["rate_tokens"] for r in await rows(dsn, "select * from pgqueue.partitions")}
    assert {p: round(t) for p, t in tokens.items()} == {"tenant:a": 0, "tenant:b": 0}


async def test_bad_limits_are_refused_by_name_and_change_nothing(client: Client, dsn: str) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"per_partition_concurrency": 0}, "concurrency must be a whole number >= 1"),
        ({"per_partition_rate": "ten a second"}, "is not a rate"),
        ({"per_partition_burst": 3}, "burst 3 needs a rate limit"),
    ]
    for kwargs, message in cases:
        with pytest.raises(QueueConfigurationError, match=message):
            await client.set_limits("orders", **kwargs)
    with pytest.raises(QueueConfigurationError, match="weight must be a whole number from 1 to 1000"):
        await client.set_partition_limit("orders", "tenant:a", weight=0)
    with pytest.raises(QueueConfigurationError, match="a partition must be 1 to 200 characters"):
        await client.set_partition_limit("orders", "", concurrency=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="set_partition_limits: concurrency must be"):
            conn.execute("select pgqueue.set_partition_limits('orders', 0, null, null)")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="set_partition_limit: weight must be from 1"):
            conn.execute("select pgqueue.set_partition_limit('orders', 'p', null, null, null, null, 5000)")
    assert await scalar(dsn, "select count(*) from pgqueue.queues") == 0
    assert await scalar(dsn, "select count(*) from pgqueue.partitions") == 0


# ----------------------------------------------------------------- fair shares
async def test_fair_shares_serve_partitions_in_turn_in_proportion_to_their_weight(client: Client, dsn: str) -> None:
    # A heavy partition first, then two light ones: FIFO would give the heavy one everything.
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(200)], queue="fair", partition="heavy")
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(10)], queue="fair", partition="light")
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(50)], queue="fair", partition="vip")
    await client.set_limits("fair", fair=True)
    await client.set_partition_limit("fair", "vip", weight=3)
    served: Counter[str | None] = Counter()
    for _ in range(5):  # reservations of 5, like a worker with 5 free slots
        served.update(reserve(dsn, "fair", 5))
    # 25 jobs in rounds of heavy 1, light 1, vip 3.
    assert served == {"heavy": 5, "light": 5, "vip": 15}
    # The light partition runs dry; the others go on in proportion.
    for _ in range(10):
        served.update(reserve(dsn, "fair", 5))
    assert served["light"] == 10 and served["heavy"] + served["vip"] == 65
    assert abs(served["vip"] - 3 * served["heavy"]) <= 3  # within one turn of vip's weight


async def test_a_queue_without_partition_settings_keeps_its_order(client: Client, dsn: str) -> None:
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(10)], queue="plain", partition="first")
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(10)], queue="plain", partition="second")
    assert granted(dsn, "plain", 10) == {"first": 10}
    assert await scalar(dsn, "select count(*) from pgqueue.queues") == 0


async def test_maintenance_prunes_the_buckets_no_limit_needs_and_keeps_overrides(client: Client, dsn: str) -> None:
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(4)], queue="api", partition="gone")
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(4)], queue="api", partition="kept")
    await client.set_limits("api", per_partition_rate="2/h")
    await client.set_partition_limit("api", "kept", weight=2)
    assert granted(dsn, "api", 10) == {"gone": 2, "kept": 2}
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Both buckets are empty: nothing to prune yet.
        assert conn.execute("select pgqueue.prune_partitions(100)").fetchone() == (0,)
        # An hour later both are full again: the bucket without an override goes, the override stays.
        conn.execute("update pgqueue.partitions set rate_refilled_at = rate_refilled_at - interval '1 hour'")
        assert conn.execute("select pgqueue.prune_partitions(100)").fetchone() == (1,)
        assert conn.execute("select partition from pgqueue.partitions").fetchall() == [("kept",)]
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="batch must be >= 1, got 0"):
            conn.execute("select pgqueue.prune_partitions(0)")
    # A partition without a row has a full bucket again.
    assert granted(dsn, "api", 10) == {"gone": 2, "kept": 2}


async def test_fair_shares_hold_within_one_turn_across_concurrent_reservations(client: Client, dsn: str) -> None:
    """Four sessions reserving at once take consecutive turns of one round robin: over every prefix
    of the grants (in token order, which is grant order), the jobs each partition got, divided by its
    weight, differ by at most one turn."""
    weights = {"heavy": 1, "light": 1, "vip": 3}
    for partition in weights:
        await client.dispatch_many([Probe(hook="never", n=i) for i in range(400)], queue="fair", partition=partition)
    await client.set_limits("fair", fair=True)
    await client.set_partition_limit("fair", "vip", weight=3)
    start = threading.Barrier(4)

    def session() -> None:
        # Until it was granted 40: a call that finds the queue locked by another session gets nothing.
        with psycopg.connect(dsn, autocommit=True) as conn:
            start.wait()
            got = 0
            while got < 40:
                got += len(conn.execute("select * from pgqueue.reserve(array['fair'], 5, 600, 5)").fetchall())

    threads = [threading.Thread(target=session) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    order = [r["partition"] for r in await rows(
        dsn, "select partition from pgqueue.jobs where token is not null order by token")]
    assert len(order) >= 160
    seen: Counter[str] = Counter()
    for partition in order:
        seen[partition] += 1
        shares = [seen[p] / w for p, w in weights.items()]
        assert max(shares) - min(shares) <= 1, (len(order), dict(seen))


@pytest.mark.parametrize("value", ["ok", "tenant:42, eu", "", "x" * 200, "x" * 201, "a\u202eb", "x\U000e0001",
                                   "tab\there", "\u00e9t\u00e9"])
def test_python_and_sql_refuse_the_same_partitions_with_the_same_words(dsn: str, value: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select pgqueue.partition_problem(to_jsonb(%s::text))", (value,)).fetchone()
    assert row is not None
    assert row[0] == partition_problem(value)


def _locking_scans(plan: dict[str, Any], under_lock: bool = False) -> list[str]:
    """The indexes of the jobs scans below a LockRows node of one logged plan."""
    found = []
    if under_lock and plan.get("Relation Name") == "jobs":
        found.append(plan.get("Index Name", plan["Node Type"]))
    for child in plan.get("Plans", []):
        found += _locking_scans(child, under_lock or plan["Node Type"] == "LockRows")
    return found


@pytest.mark.parametrize("plan_cache_mode", ["auto", "force_generic_plan"])
async def test_after_one_tenants_backlog_was_analyzed_each_partition_is_locked_by_its_own_index(
        client: Client, dsn: str, plan_cache_mode: str) -> None:
    """Statistics taken while one tenant had every job say every job has its partition; the light
    tenants dispatched after it are still locked through jobs_partition_idx, never by scanning the
    queue's order (jobs_reservation_idx) past the heavy backlog for each of them (seconds a call)."""
    await client.dispatch_many([Probe(hook="never", n=i) for i in range(20_000)], queue="iso", partition="heavy")
    await client.set_limits("iso", fair=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("analyze pgqueue.jobs")
    for tenant in range(20):
        await client.dispatch_many([Probe(hook="never", n=i) for i in range(2)], queue="iso",
                                   partition=f"light:{tenant}")
    logged: list[str] = []
    with psycopg.connect(dsn) as conn:
        conn.add_notice_handler(
            lambda d: logged.append(d.message_primary or "") if d.severity_nonlocalized == "LOG" else None)
        conn.execute("load 'auto_explain'")
        for setting, value in [("auto_explain.log_min_duration", "0"), ("auto_explain.log_nested_statements", "on"),
                               ("auto_explain.log_format", "json"), ("client_min_messages", "log"),
                               ("plan_cache_mode", plan_cache_mode)]:
            conn.execute("select set_config(%s, %s, false)", (setting, value))
        granted_partitions = []
        for _ in range(7):  # past plpgsql's five custom plans
            granted_partitions += [r[0] for r in conn.execute(
                "select j.partition from pgqueue.reserve(array['iso'], 30, 60) r join pgqueue.jobs j using (id)")]
        conn.rollback()
    assert {f"light:{t}" for t in range(20)} <= set(granted_partitions)
    scans = [scan for message in logged if "{" in message
             for scan in _locking_scans(json.loads(message[message.find("{"):])["Plan"])]
    assert scans and set(scans) <= {"jobs_partition_idx", "jobs_pkey"}, Counter(scans)
