"""Issue 28, slot heirs (revision 0014), on the bare stored functions: ``pgqueue.reserve``'s
``p_heirs`` / ``p_heir_tokens`` name slots the caller holds, each by the job whose reservation took it;
beyond a limited queue's free slots it grants waiting jobs as heirs in those slots (``heir_of``). The
limit counts slots: a job and its heirs hold one, from its reservation until the last of them ends,
however each ends, with no write of their own.

Time is simulated by moving ``available_at`` (database clock), never by sleeping.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import psycopg
import pytest

from pgqueue import migrate
from tests.helpers import envelope
from tests.readme_support import section_blocks, sql_statements
from tests.sql_calls import Conn, Row, enqueue, expire_lease, fail, job, release, rows, scalar
from tests.test_slot_handover import acked, limited, run_drainers

#: The slots a queue's concurrency limit counts: those of its live reservations, a job's own or the
#: one its heir_of names (a job granted for hand_over holds none until handed one).
RUNNING = """
    select count(distinct (coalesce(heir_of, id), coalesce(heir_of_token, token))) from pgqueue.jobs
    where queue = %s and token is not null and available_at > clock_timestamp()
      and (not waiting or heir_of is not null)
"""


def reserve(conn: Conn, queue: str, max_jobs: int, heirs: list[Row] | None,
            waiting: list[int] | None = None) -> list[Row]:
    """pgqueue.reserve of ``queue`` (all run now), naming ``heirs`` (grants: id and token) as p_heirs."""
    ids = None if heirs is None else [h["id"] for h in heirs]
    tokens = None if heirs is None else [h["token"] for h in heirs]
    return rows(conn, "select * from pgqueue.reserve(array[%s], %s, 60, %s, %s::integer[], %s::uuid[], %s::bigint[])",
                (queue, max_jobs, max_jobs, waiting, ids, tokens))


def running(conn: Conn, queue: str = "limited") -> int:
    count: int = scalar(conn, RUNNING, (queue,))
    return count


def version(conn: Conn, job_id: uuid.UUID) -> str:
    """The row version of a job (its xmin): changes with every write of the row."""
    found: str = scalar(conn, "select xmin::text from pgqueue.jobs where id = %s", (job_id,))
    return found


# --------------------------------------------------------------------------- reserve


def test_beyond_the_free_slots_the_heirs_go_to_the_slots_named_in_that_order(conn: Conn) -> None:
    due = limited(conn, 8, concurrency=2)
    first = reserve(conn, "limited", 10, None)
    assert [g["id"] for g in first] == due[:2]
    assert [g["heir_of"] for g in first] == [None, None]
    # A slot named twice gets two heirs: they run in it one after the other.
    heirs = reserve(conn, "limited", 10, [first[1], first[0], first[1]])
    assert [g["id"] for g in heirs] == due[2:5]
    assert [(g["waiting"], g["heir_of"]) for g in heirs] == [
        (True, first[1]["id"]), (True, first[0]["id"]), (True, first[1]["id"])]
    stored = job(conn, due[2])
    assert stored is not None and stored["heir_of_token"] == first[1]["token"]
    assert running(conn) == 2
    # No free slot for anyone: the heirs hold none of their own.
    assert reserve(conn, "limited", 10, None) == []
    assert scalar(conn, "select count(*) from pgqueue.jobs where token is not null") == 5


def test_a_slot_passes_to_its_heirs_as_their_jobs_end_with_no_write_of_their_own(conn: Conn) -> None:
    limited(conn, 5, concurrency=1)
    (first,) = reserve(conn, "limited", 10, None)
    (heir,) = reserve(conn, "limited", 10, [first])
    before = version(conn, heir["id"])
    acked(conn, first)
    assert version(conn, heir["id"]) == before  # the slot passed without touching the heir's row
    assert running(conn) == 1
    # The slot is the heir's: nobody gets another; still named by the job that took it, it takes
    # more heirs while one of them holds it.
    assert reserve(conn, "limited", 10, None) == []
    (next_heir,) = reserve(conn, "limited", 1, [first])
    assert next_heir["heir_of"] == first["id"]
    acked(conn, heir)
    assert running(conn) == 1
    acked(conn, next_heir)
    assert running(conn) == 0
    # The slot ended with its last heir: named again it is held no more, and the free slot is granted
    # as any (a slot of its own, no heir).
    (again,) = reserve(conn, "limited", 10, [first])
    assert not again["waiting"] and again["heir_of"] is None


@pytest.mark.parametrize("ending", ["retry", "release", "fail", "lease expired", "cancel"])
def test_an_heir_counts_whichever_way_its_jobs_reservation_ends(conn: Conn, ending: str) -> None:
    limited(conn, 3, concurrency=1)
    (first,) = reserve(conn, "limited", 10, None)
    (heir,) = reserve(conn, "limited", 1, [first])
    assert heir["heir_of"] == first["id"] and running(conn) == 1
    if ending == "retry":
        assert release(conn, first["id"], first["token"], 30.0)
    elif ending == "release":
        assert release(conn, first["id"], first["token"])
    elif ending == "fail":
        assert fail(conn, first["id"], first["token"])
    elif ending == "lease expired":
        expire_lease(conn, first["id"])
    else:
        conn.execute(b"select pgqueue.cancel(%s)", (first["id"],))
    # The heir holds the slot now, whatever became of the job it followed: still one.
    assert running(conn) == 1
    assert reserve(conn, "limited", 10, None) == []


def test_a_job_named_with_the_token_of_an_ended_reservation_gets_no_heir(conn: Conn) -> None:
    limited(conn, 3, concurrency=1)
    (first,) = reserve(conn, "limited", 1, None)
    assert release(conn, first["id"], first["token"])
    (second,) = reserve(conn, "limited", 1, None)  # the slot first left
    assert second["id"] != first["id"]
    # first's old token holds no slot: nothing beyond the limit for it.
    assert reserve(conn, "limited", 10, [first]) == []
    assert running(conn) == 1


def test_only_the_callers_live_slotted_jobs_of_that_queue_get_heirs(conn: Conn) -> None:
    limited(conn, 10, concurrency=3)
    limited(conn, 2, concurrency=5, queue="elsewhere")
    slotted = reserve(conn, "limited", 3, None)
    (other,) = reserve(conn, "elsewhere", 1, None)
    forged = dict(slotted[0]) | {"token": slotted[0]["token"] + 1_000_000}
    unknown = {"id": uuid.uuid4(), "token": 1}
    expire_lease(conn, slotted[1]["id"])  # its lease ended: it holds no slot (the limit has one free)
    granted = reserve(conn, "limited", 10, [forged, unknown, other, slotted[1], slotted[2]])
    # The free slot, then one heir: of the jobs named, only slotted[2] is the caller's, of this queue,
    # live and holding a slot (slotted[0] is named with a forged token).
    assert [(g["waiting"], g["heir_of"]) for g in granted] == [(False, None), (True, slotted[2]["id"])]


def test_a_slot_is_named_by_the_job_that_took_it_only(conn: Conn) -> None:
    limited(conn, 6, concurrency=1)
    (first,) = reserve(conn, "limited", 1, None)
    (heir,) = reserve(conn, "limited", 1, [first])
    # An heir's own id and token name no slot; nor does a job granted for hand_over (no heir_of).
    assert reserve(conn, "limited", 10, [heir]) == []
    (handover,) = reserve(conn, "limited", 1, None, waiting=[1])
    assert handover["waiting"] and handover["heir_of"] is None
    assert reserve(conn, "limited", 10, [handover]) == []
    acked(conn, first)
    (second,) = reserve(conn, "limited", 10, [first])  # held by the heir now
    assert second["heir_of"] == first["id"]
    assert running(conn) == 1


def test_an_heir_that_ends_waiting_passes_nothing_on(conn: Conn) -> None:
    limited(conn, 4, concurrency=1)
    (first,) = reserve(conn, "limited", 1, None)
    heirs = reserve(conn, "limited", 2, [first, first])
    assert [h["heir_of"] for h in heirs] == [first["id"]] * 2
    conn.execute(b"select pgqueue.release_unstarted(%s::uuid[], %s::bigint[])", ([heirs[0]["id"]], [heirs[0]["token"]]))
    assert running(conn) == 1  # first still holds the slot
    acked(conn, first)
    assert running(conn) == 1  # the second heir holds it now
    acked(conn, heirs[1])
    assert running(conn) == 0


def test_heirs_come_before_hand_over_grants_and_both_stop_at_max_jobs(conn: Conn) -> None:
    limited(conn, 10, concurrency=2)
    slotted = reserve(conn, "limited", 2, None)
    granted = reserve(conn, "limited", 3, slotted, waiting=[5])
    assert [(g["waiting"], g["heir_of"]) for g in granted] == [
        (True, slotted[0]["id"]), (True, slotted[1]["id"]), (True, None)]
    assert running(conn) == 2


def test_no_heirs_under_an_adaptive_limit_or_in_a_queue_served_by_partition(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_limits('tenants', 1, null, null)")
    conn.execute(b"select pgqueue.set_partition_limits('tenants', 2, null, null)")
    for tenant in "abab":
        enqueue(conn, envelope("tenants") | {"partition": tenant})
    (first,) = reserve(conn, "tenants", 10, None)
    assert reserve(conn, "tenants", 10, [first]) == []
    limited(conn, 4, concurrency=1, queue="adaptive")
    conn.execute(b"select pgqueue.set_adaptive_limit('adaptive', 1, 4)")
    (one,) = reserve(conn, "adaptive", 10, None)
    assert reserve(conn, "adaptive", 10, [one]) == []


def test_a_queue_without_a_concurrency_limit_ignores_the_heirs(conn: Conn) -> None:
    for _ in range(3):
        enqueue(conn, envelope("free"))
    (first,) = reserve(conn, "free", 1, None)
    assert [(g["waiting"], g["heir_of"]) for g in reserve(conn, "free", 10, [first])] == [(False, None)] * 2


@pytest.mark.parametrize(("ids", "tokens"), [("array[gen_random_uuid()]", "null"),
                                             ("array[gen_random_uuid()]", "array[1, 2]"),
                                             ("array[null]::uuid[]", "array[1]"),
                                             ("array[gen_random_uuid()]", "array[null]::bigint[]")])
def test_heirs_without_one_token_each_are_refused_by_name(conn: Conn, ids: str, tokens: str) -> None:
    limited(conn, 1, concurrency=1)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="heirs and heir_tokens"):
        conn.execute(f"select * from pgqueue.reserve(array['limited'], 1, 60, 1, null, {ids}, {tokens})".encode())
    assert scalar(conn, "select count(*) from pgqueue.jobs where token is not null") == 0


def test_hand_over_refuses_an_heir_it_takes_its_slot_with_no_call(conn: Conn) -> None:
    limited(conn, 4, concurrency=2)
    slotted = reserve(conn, "limited", 2, None)
    (heir,) = reserve(conn, "limited", 1, [slotted[0]])
    with conn.transaction():
        acked(conn, slotted[1])
        handed = rows(conn, "select handed from pgqueue.hand_over(%s::uuid[], %s::uuid[], %s::bigint[])",
                      ([slotted[1]["id"]], [heir["id"]], [heir["token"]]))
    assert [r["handed"] for r in handed] == [False]
    assert running(conn) == 1  # slotted[0]; the heir counts once slotted[0] ends
    acked(conn, slotted[0])
    assert running(conn) == 1


def test_hand_over_counts_heirs_whose_job_ended(conn: Conn) -> None:
    limited(conn, 5, concurrency=2)
    slotted = reserve(conn, "limited", 2, None)
    (heir,) = reserve(conn, "limited", 1, [slotted[0]])
    (claimer,) = reserve(conn, "limited", 1, None, waiting=[1])
    acked(conn, slotted[0])  # the heir holds that slot now; slotted[1] the other: the queue is full
    handed = rows(conn, "select handed from pgqueue.hand_over(array[null]::uuid[], %s::uuid[], %s::bigint[])",
                  ([claimer["id"]], [claimer["token"]]))
    assert [r["handed"] for r in handed] == [False]
    assert running(conn) == 2 and heir["heir_of"] == slotted[0]["id"]


# --------------------------------------------------------------------------- many connections

LIMIT, WORKERS, JOBS = 3, 4, 160


class Ledger:
    """The handlers running across all simulated workers, started after and ended before the database
    counts them: never above the limit if the database never grants more than its slots."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def start(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def end(self) -> None:
        with self.lock:
            self.now -= 1


class HeirDrainer:
    """One connection draining as a worker would: reserve asking for up to two heirs in each slot it
    holds; end the oldest running job (the handler ends, then the ack); start the next heir of its
    slot, if there is one."""

    def __init__(self, dsn: str, ledger: Ledger) -> None:
        self.dsn = dsn
        self.ledger = ledger
        self.acked: list[uuid.UUID] = []
        self.inherited = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.drain(conn)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def drain(self, conn: Conn) -> None:
        running_jobs: list[Row] = []
        slot_of: dict[uuid.UUID, Row] = {}  # running job -> its slot (the reservation that took it)
        queued: dict[uuid.UUID, list[Row]] = {}  # slot id -> its heirs not started, in order

        def start(grant: Row, slot: Row) -> None:
            self.ledger.start()
            running_jobs.append(grant)
            slot_of[grant["id"]] = slot

        while True:
            slots = {slot["id"]: slot for slot in slot_of.values()}
            named = [slot for slot_id, slot in slots.items() for _ in range(2 - len(queued.get(slot_id, [])))]
            for grant in reserve(conn, "limited", 4, named):
                if grant["waiting"]:
                    assert grant["heir_of"] in slots
                    queued.setdefault(grant["heir_of"], []).append(grant)
                else:
                    start(grant, {"id": grant["id"], "token": grant["token"]})
            if not running_jobs:
                assert not any(queued.values())
                if not scalar(conn, "select count(*) from pgqueue.jobs"):
                    return
                continue
            ended = running_jobs.pop(0)
            self.ledger.end()
            acked(conn, ended)
            self.acked.append(ended["id"])
            slot = slot_of.pop(ended["id"])
            waiting = queued.get(slot["id"])
            if waiting:
                self.inherited += 1
                start(waiting.pop(0), slot)


def test_concurrent_heirs_never_exceed_the_limit_and_ack_every_job_once(conn: Conn, dsn: str) -> None:
    ids = limited(conn, JOBS, concurrency=LIMIT)
    ledger = Ledger()
    drainers = [HeirDrainer(dsn, ledger) for _ in range(WORKERS)]
    seen = run_drainers(dsn, drainers, running)
    counts = Counter(i for d in drainers for i in d.acked)
    assert set(counts) == set(ids) and set(counts.values()) == {1}
    assert ledger.peak <= LIMIT
    assert seen and max(seen) <= LIMIT
    assert sum(d.inherited for d in drainers) > 0
    assert scalar(conn, "select count(*) from pgqueue.jobs") == 0


def test_downgrading_0014_counts_every_heir_held_as_running_and_keeps_the_jobs(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        limited(conn, 4, concurrency=1)
        (first,) = reserve(conn, "limited", 1, None)
        assert len(reserve(conn, "limited", 2, [first, first])) == 2
    migrate.downgrade(empty_dsn, "pgqueue_0013")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        # 0013 counts the reserved jobs not waiting: the slot's job and both its heirs (one of which
        # may be running): over the limit, so nothing more is granted until they end.
        assert scalar(conn, "select count(*) from pgqueue.jobs where token is not null and not waiting") == 3
        assert scalar(conn, "select count(*) from pgqueue.jobs") == 4
        assert rows(conn, "select * from pgqueue.reserve(array['limited'], 10, 60, 10)") == []
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert running(conn) == 3


def test_the_readme_query_counts_the_slots_in_use_as_the_limit_does(conn: Conn) -> None:
    [block] = [b for b in section_blocks("Control: cancel, pause, global limits", "sql") if "slots_in_use" in b]
    limited(conn, 6, concurrency=2)
    slotted = reserve(conn, "limited", 2, None)
    assert len(reserve(conn, "limited", 3, [slotted[0], slotted[0], slotted[1]])) == 3
    acked(conn, slotted[0])  # its slot is held by its two heirs now
    [statement] = sql_statements(block)
    assert rows(conn, statement) == [{"queue": "limited", "slots_in_use": 2, "heirs": 3}]
    assert running(conn) == 2
