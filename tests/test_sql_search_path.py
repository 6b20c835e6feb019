"""Issue 11, item 3: no stored function can be hijacked through the caller's search_path.

A second role with CREATE on a schema ahead in the caller's path plants look-alikes of every
built-in function, aggregate and operator the stored functions call: same names, argument
types that match the call sites more exactly than the built-ins do (concrete types for
polymorphic parameters, text for literals, one named parameter for a function with defaults).
Each look-alike raises a WARNING naming itself and then does what the built-in does. The
owner (who migrated) then calls every stored function. At revision 0001 look-alikes run with
the owner's rights; at head (every function pins ``search_path = pg_catalog, pg_temp``) none
does.

The list of built-ins is derived from the installed function bodies, not written by hand: a
new call in a function body is covered by the next run, and a kind of built-in the generator
cannot imitate fails the test by name.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from pgqueue import migrate
from tests.helpers import envelope
from tests.sql_calls import Conn, rows, scalar

# Concrete types standing in for polymorphic parameters: every type the functions pass around.
CANDIDATES = ["text", "uuid", "bigint", "integer", "smallint", "double precision", "numeric", "jsonb", "boolean",
              "timestamp with time zone", "interval", "jsonpath"]
FAMILY_A = {"anyelement": "{}", "anynonarray": "{}", "anyarray": "{}[]"}
FAMILY_B = {"anycompatible": "{}", "anycompatiblenonarray": "{}", "anycompatiblearray": "{}[]"}
# How an imitation of a built-in aggregate steps (its state is its result).
AGGREGATE_STEPS = {"array_agg": "pg_catalog.array_append($1, $2)", "max": "greatest($1, $2)",
                   "min": "least($1, $2)", "bool_or": "$1 or $2", "count": "$1 + 1", "sum": "$1 + $2"}
OPERATOR_SYMBOLS = re.compile(r"(?<![-+*/<>=~!@#%^&|`?])([-+*/<>=~!@#%^&|?]+)(?![-+*/<>=~!@#%^&|`?])")
CALLS = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")


@dataclass
class Planted:
    """What the attacker planted: look-alike signatures per built-in name, and the names found."""

    functions: dict[str, list[str]]
    operators: list[str]


def _called_builtins(conn: Conn) -> tuple[list[str], list[str]]:
    """Built-in function/aggregate names and operator symbols that appear in pgqueue's bodies."""
    bodies = " ".join(r["prosrc"] for r in rows(conn, "select prosrc from pg_proc"
                                                      " where pronamespace = 'pgqueue'::regnamespace"))
    words = sorted({m.lower() for m in CALLS.findall(bodies)})
    names = [r["proname"] for r in rows(conn, "select distinct proname from pg_proc"
                                              " where pronamespace = 'pg_catalog'::regnamespace"
                                              " and prokind in ('f', 'a') and proname = any(%s) order by 1",
                                        (words,))]
    symbols = sorted(set(OPERATOR_SYMBOLS.findall(bodies)))
    operators = [r["oprname"] for r in rows(conn, "select distinct oprname from pg_operator"
                                                  " where oprnamespace = 'pg_catalog'::regnamespace"
                                                  " and oprname = any(%s) order by 1", (symbols,))]
    return names, operators


def _substitutions(types: list[str]) -> Iterator[list[str]]:
    """``types`` with each polymorphic family bound to one concrete candidate (all, in turn)."""
    if not any(t in FAMILY_A or t in FAMILY_B for t in types):
        yield types
        return
    for candidate in CANDIDATES:
        yield [(FAMILY_A.get(t) or FAMILY_B.get(t) or "{}").format(candidate)
               if t in FAMILY_A or t in FAMILY_B else t for t in types]


def _plant(conn: Conn, schema: str) -> Planted:
    """Create the look-alikes in ``schema`` (the session runs as the attacker)."""
    names, operators = _called_builtins(conn)
    planted: dict[str, list[str]] = {name: [] for name in names}
    overloads = rows(conn, """
        select p.proname, p.prokind, p.proretset, p.pronargdefaults, p.provariadic::regtype::text as variadic,
               format_type(p.prorettype, null) as returns,
               array(select format_type(t, null) from unnest(p.proargtypes) t) as types,
               coalesce(p.proargnames[1:p.pronargs], array[]::text[]) as arg_names
        from pg_proc p
        where p.pronamespace = 'pg_catalog'::regnamespace and p.proname = any(%s) and p.prokind in ('f', 'a')
        order by p.proname, p.oid
    """, (names,))
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for n, o in enumerate(overloads):
        declared: list[str] = list(o["types"])
        variants: list[tuple[list[str], list[str], list[str]]] = []  # (types, names, casts)
        if o["variadic"] == '"any"':  # format(text, VARIADIC "any"): imitate with each concrete array
            variants += [([*declared[:-1], f"{c}[]"], [], ["", ""]) for c in CANDIDATES]
            variants += [([*declared[:-1], c], [], ["", ""]) for c in CANDIDATES]
        else:
            for types in _substitutions(declared):
                casts = [f"::{d}" if d == t else "" for d, t in zip(declared, types, strict=True)]
                variants.append((types, [], casts))
                # A literal argument is of unknown type: a text parameter wins over a reg* type.
                for i, t in enumerate(types):
                    if t not in ("text", "unknown") and not t.endswith("[]") and o["prokind"] == "f":
                        variants.append(([*types[:i], "text", *types[i + 1:]], [], casts))
            # Called with named arguments (make_interval(secs => ...)): one parameter, same name.
            if o["pronargdefaults"] and o["arg_names"]:
                variants += [([t], [a], [f"::{t}"]) for t, a in zip(declared, o["arg_names"], strict=True)
                             if t not in FAMILY_A and t not in FAMILY_B]
        for k, (types, arg_names, casts) in enumerate(variants):
            key = (o["proname"], tuple(types))
            if key in seen or any(t.startswith(("any", '"any"')) for t in types):  # anyenum, anyrange, ...
                continue
            seen.add(key)
            if _plant_one(conn, schema, o, types, arg_names, casts, f"{n}_{k}"):
                planted[o["proname"]].append(f"{o['proname']}({', '.join(types)})")
    missing = [name for name, found in planted.items() if not found]
    assert missing == [], f"no look-alike could be planted for built-ins {missing}: teach this test how"
    return Planted(planted, _plant_operators(conn, schema, operators))


def _returns(o: dict[str, object], types: list[str], declared: list[str]) -> str | None:
    returns = str(o["returns"])
    if returns in FAMILY_A or returns in FAMILY_B:
        bound = next((t for t, d in zip(types, declared, strict=False) if d in FAMILY_A or d in FAMILY_B), None)
        if bound is None:
            return None
        base = bound.removesuffix("[]")
        return (FAMILY_A.get(returns) or FAMILY_B.get(returns) or "{}").format(base)
    if returns in ("record", '"any"', "internal", "trigger"):
        return None
    return returns


def _plant_one(conn: Conn, schema: str, o: dict[str, object], types: list[str], arg_names: list[str],
               casts: list[str], suffix: str) -> bool:
    name = str(o["proname"])
    declared = list(o["types"])  # type: ignore[call-overload]
    returns = _returns(o, types, declared)
    if returns is None:
        return False
    label = f"{name}({', '.join(types)})"
    params = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(arg_names[i]) if arg_names else sql.Identifier(f"a{i}"), sql.SQL(t))
        for i, t in enumerate(types))
    warn = sql.SQL("raise warning 'hijacked: %', {};").format(sql.Literal(label))
    if o["prokind"] == "a":
        step = AGGREGATE_STEPS.get(name)
        if step is None:
            return False
        step_fn = sql.Identifier(schema, f"step_{suffix}")
        ddl = sql.SQL("""
            create function {step}(state {returns}, {params}) returns {returns} language plpgsql as $body$
            begin {warn} return {expr}; end $body$;
            create aggregate {agg}({types}) (sfunc = {step}, stype = {returns} {init});
        """).format(step=step_fn, returns=sql.SQL(returns), params=params, warn=warn, expr=sql.SQL(step),
                    agg=sql.Identifier(schema, name), types=sql.SQL(", ").join(sql.SQL(t) for t in types),
                    init=sql.SQL(", initcond = '0'" if name == "count" else ""))
        if not types:  # count(*)
            ddl = sql.SQL("""
                create function {step}(state bigint) returns bigint language plpgsql as $body$
                begin {warn} return state + 1; end $body$;
                create aggregate {agg}(*) (sfunc = {step}, stype = bigint, initcond = '0');
            """).format(step=step_fn, warn=warn, agg=sql.Identifier(schema, name))
    else:
        args = sql.SQL(", ").join(
            sql.SQL("{}{}{}").format(sql.SQL("variadic " if i == len(types) - 1 and o["variadic"] == '"any"'
                                             and t.endswith("[]") else ""),
                                     sql.SQL(f"${i + 1}"), sql.SQL(casts[i] if i < len(casts) else ""))
            for i, t in enumerate(types))
        call = sql.SQL("pg_catalog.{}({})").format(sql.Identifier(name), args)
        if arg_names:
            call = sql.SQL("pg_catalog.{}({} => $1{})").format(sql.Identifier(name), sql.Identifier(arg_names[0]),
                                                              sql.SQL(casts[0]))
        if o["proretset"]:
            body = sql.SQL("return query select * from {};").format(call)
        elif returns == "void":
            body = sql.SQL("perform {}; return;").format(call)
        else:
            body = sql.SQL("return {};").format(call)
        ddl = sql.SQL("""
            create function {fn}({params}) returns {setof}{returns} language plpgsql as $body$
            begin {warn} {body} end $body$
        """).format(fn=sql.Identifier(schema, name), params=params, setof=sql.SQL("setof " if o["proretset"] else ""),
                    returns=sql.SQL(returns), warn=warn, body=body)
    try:
        with conn.transaction():
            conn.execute(ddl)
    except psycopg.errors.DuplicateFunction:
        return True  # the same look-alike, reached through another overload
    except psycopg.Error:
        return False  # not a type combination PostgreSQL can express; the name check above still holds
    return True


def _plant_operators(conn: Conn, schema: str, symbols: list[str]) -> list[str]:
    """Operators for type pairs the built-ins serve only through an implicit cast (float8 = int)."""
    planted: list[str] = []
    for symbol, left, right in itertools.product(symbols, CANDIDATES, CANDIDATES):
        exact = scalar(conn, "select exists (select 1 from pg_operator where oprname = %s"
                             " and oprleft = %s::regtype and oprright = %s::regtype)", (symbol, left, right))
        if exact:
            continue  # same signature: the built-in in pg_catalog (searched first) always wins
        try:
            with conn.transaction():
                result = scalar(conn, sql.SQL("select pg_typeof(null::{} operator(pg_catalog.{}) null::{})::text")
                                .format(sql.SQL(left), sql.SQL(symbol), sql.SQL(right)).as_string(conn))
        except psycopg.Error:
            continue
        fn = sql.Identifier(schema, f"op_{len(planted)}")
        label = f"operator {symbol}({left}, {right})"
        with conn.transaction():
            conn.execute(sql.SQL("""
                create function {fn}({left}, {right}) returns {result} language plpgsql as $body$
                begin raise warning 'hijacked: %', {label}; return $1 operator(pg_catalog.{op}) $2; end $body$;
                create operator {schema}.{op} (leftarg = {left}, rightarg = {right}, function = {fn});
            """).format(fn=fn, left=sql.SQL(left), right=sql.SQL(right), result=sql.SQL(result),
                        label=sql.Literal(label), op=sql.SQL(symbol), schema=sql.Identifier(schema)))
        planted.append(label)
    return planted


@pytest.fixture
def attacker(conn: Conn) -> Iterator[str]:
    """A role owning the schema ``hijack``, which the owner's session puts first in its path."""
    role = f"pgq_attacker_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("create role {} nologin").format(sql.Identifier(role)))
    conn.execute(sql.SQL("create schema hijack authorization {}").format(sql.Identifier(role)))
    try:
        yield role
    finally:
        conn.execute(b"reset role")
        conn.execute(b"drop schema hijack cascade")
        conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def _call_every_function(conn: Conn) -> tuple[list[str], set[str], list[str]]:  # noqa: PLR0912  # revision-gated calls
    """The owner calls every stored function along every path that calls a built-in.

    Returns the hijack warnings seen, the pgqueue functions executed, and errors met.
    """
    warnings: list[str] = []
    errors: list[str] = []
    conn.add_notice_handler(lambda d: warnings.append(d.message_primary or "")
                            if (d.message_primary or "").startswith("hijacked:") else None)
    soon = scalar(conn, "select extract(epoch from now())::double precision + 3600")

    def call(statement: str, params: tuple[object, ...] = (), *, refused: bool = False) -> list[dict[str, object]]:
        try:
            with conn.transaction():
                return rows(conn, statement, params)
        except psycopg.Error as exc:
            if not refused:
                errors.append(f"{statement}: {exc}")
            return []

    with conn.transaction():
        conn.execute(b"set local track_functions = 'all'")
        conn.execute(b"set local search_path = hijack, \"$user\", public")
        call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("q", retry_until=soon)),))
        call("select pgqueue.enqueue(%s, 5)", (Jsonb(envelope("q", priority=2)),))
        call("select pgqueue.enqueue(%s, 0)", (Jsonb({**envelope("q"), "queue": "a,b"}),), refused=True)
        call("select pgqueue.enqueue_many(%s)", (Jsonb([envelope("q"), envelope("r")]),))
        call("select pgqueue.enqueue_many(%s, %s::double precision[])", (Jsonb([envelope("q"), envelope("r")]), [0, 5]))
        call("select pgqueue.enqueue_many(%s, %s::double precision[])", (Jsonb([envelope("q")]), [-1]),
             refused=True)
        call("select pgqueue.enqueue_many(%s)", (Jsonb([envelope("q"), [1]]),), refused=True)
        call("select pgqueue.enqueue_many(%s)", (Jsonb([{**envelope(), "tries": "x"}]),), refused=True)
        if scalar(conn, "select to_regprocedure('pgqueue.queue_name_problem(text)') is not null"):
            call("select pgqueue.queue_name_problem('a,b')")
            call("select pgqueue.envelope_problem('[]')")
        call("select pgqueue.next_due(array['q', 'r'])")
        held = call("select * from pgqueue.reserve(array['q', 'r'], 3, 60)")
        ids, tokens = [r["id"] for r in held], [r["token"] for r in held]
        call("select * from pgqueue.extend(%s, %s, 30)", (ids[0], tokens[0]))
        if scalar(conn, "select to_regprocedure('pgqueue.heartbeat(uuid[], bigint[], double precision)') is not null"):
            call("select * from pgqueue.heartbeat(%s::uuid[], %s::bigint[], 30)", (ids, tokens))
        prefetch = scalar(conn, "select to_regprocedure('pgqueue.mark_started(uuid[], bigint[])') is not null")
        if prefetch:
            call("select pgqueue.mark_started(%s::uuid[], %s::bigint[])", (ids, tokens))
        if scalar(conn, "select to_regprocedure('pgqueue.cancelled(uuid[], bigint[])') is not null"):
            # Revision 0008: a worker checks a cancel notification (a stale token, an unknown job).
            call("select * from pgqueue.cancelled(%s::uuid[], %s::bigint[])", ([ids[0], uuid.uuid4()], [0, 1]))
        call("select pgqueue.release(%s, %s, 0)", (ids[0], tokens[0]))
        call("select * from pgqueue.ack(%s::uuid[], %s::bigint[])", (ids[1:2], tokens[1:2]))
        if scalar(conn, "select to_regprocedure('pgqueue.hand_over(uuid[], uuid[], bigint[])') is not null"):
            # Revision 0013 (issue 28): the acked job's slot to a (here not waiting: refused) job, and a claim.
            call("select * from pgqueue.hand_over(%s::uuid[], %s::uuid[], %s::bigint[])",
                 ([ids[1], None], [ids[2], ids[2]], [tokens[2], tokens[2]]))
        call("select pgqueue.fail(%s, %s, 'app.Boom', 'boom', null, 'exception')", (ids[2], tokens[2]))
        again = call("select * from pgqueue.reserve(array['q'], 1, 60)")
        call("select pgqueue.release(%s, %s, 5)", (again[0]["id"], again[0]["token"]))
        again = call("select * from pgqueue.reserve(array['r'], 1, 60)")
        call("select * from pgqueue.release_unstarted(%s::uuid[], %s::bigint[])",
             ([again[0]["id"]], [again[0]["token"]]))
        if scalar(conn, "select to_regprocedure('pgqueue.release_interrupted(uuid, bigint, double precision,"
                        " double precision)') is not null"):
            # Revision 0008: a forced stop gives the interrupted attempt back.
            again = call("select * from pgqueue.reserve(array['r'], 1, 60)")
            call("select pgqueue.release_interrupted(%s, %s, 0.5, 0.1)", (again[0]["id"], again[0]["token"]))
        # The reservation gives up on doomed candidates: deadline passed, last attempt expired.
        call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("doomed", tries=1, retry_until=1.0)),))
        call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("doomed", tries=1)),))
        # With prefetch (0007): granted unstarted, so the expired tries=1 job gets its attempt back.
        taken = call("select * from pgqueue.reserve(array['doomed'], 5, 60" + (", 0)" if prefetch else ")"))
        conn.execute(b"update pgqueue.jobs set available_at = now() - interval '1 second' where queue = 'doomed'")
        call("select * from pgqueue.reserve(array['doomed'], 5, 60)")
        assert taken or errors
        call("select pgqueue.record_failure(%s, 1, 'app.Boom', 'boom', null, 'exception')", (Jsonb(envelope("q")),))
        failures = {r["reason"]: r["id"] for r in call("select reason, id from pgqueue.failed_jobs")}
        call("select pgqueue.retry_failed(%s)", (failures.get("exception", uuid.uuid4()),))
        call("select pgqueue.retry_failed(%s)", (failures.get("deadline_passed", uuid.uuid4()),), refused=True)
        call("select pgqueue.retry_failed_all(null)")
        call("select pgqueue.forget_failed(%s)", (uuid.uuid4(),))
        call("select pgqueue.flush_failed(null, interval '1 second')")
        if scalar(conn, "select to_regprocedure('pgqueue.cancel(uuid)') is not null"):
            # Queue controls: the limited path of reserve and next_due runs too.
            call("select pgqueue.set_limits('q', 2, 10, 1)")
            call("select pgqueue.pause('r')")
            call("select * from pgqueue.reserve(array['q', 'r'], 3, 60)")
            call("select pgqueue.next_due(array['q', 'r'])")
            call("select pgqueue.resume('r')")
            call("select pgqueue.cancel(%s)", (uuid.uuid4(),))
        call("select pgqueue.clear('q')")
        if scalar(conn, "select to_regprocedure('pgqueue.snooze(uuid, bigint, double precision)') is not null"):
            # Revision 0003: unique keys (a duplicate takes the exception path), the period
            # scope, snooze, a queued-unique job released (its trigger), schedules and ticks.
            for scope, period in (("queued", None), ("queued", None), ("active", None), ("period", 60.0),
                                  ("period", 60.0)):
                call("select * from pgqueue.enqueue_unique(%s, 0, %s, %s, %s)",
                     (Jsonb(envelope("u")), f"key-{scope}", scope, period))
            held = call("select * from pgqueue.reserve(array['u'], 2, 60)")
            call("select pgqueue.snooze(%s, %s, 5)", (held[0]["id"], held[0]["token"]))
            call("select pgqueue.release(%s, %s, 0)", (held[1]["id"], held[1]["token"]))
            # Revision 0008: a schedule registered with its job's template, read back and ticked.
            template = {**{k: v for k, v in envelope("u").items() if k != "id"}, "name": "s"}
            call("select * from pgqueue.schedule_sync(array['s'], array['every 1s'], array['UTC'], array[1], "
                 "array[1]::bigint[], array[%s]::jsonb[])", (Jsonb(template),))
            call("select * from pgqueue.schedule_state(array['s'])")
            call("select pgqueue.enqueue_tick('s', date_trunc('second', clock_timestamp()) + interval '1 second')")
            call("select pgqueue.enqueue_tick('s', now() - interval '1 day')", refused=True)
            call("select * from pgqueue.prune_ticks_and_keys(100)")
        if scalar(conn, "select to_regprocedure('pgqueue.prune_history(double precision, double precision, integer)')"
                        " is not null"):
            # Revision 0005: the history (ack with timings and a kept copy), its pruning.
            call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("h")),))
            held = call("select * from pgqueue.reserve(array['h'], 1, 60)")
            call("select * from pgqueue.ack(%s::uuid[], %s::bigint[], array[0.5], array[0.1], true)",
                 ([held[0]["id"]], [held[0]["token"]]))
            call("select * from pgqueue.prune_history(0, 0, 100)")
        if scalar(conn, "select to_regprocedure('pgqueue.deregister_worker(uuid)') is not null"):
            # Revision 0009 (issue 29): the workers registry, the search and its bulk actions.
            worker = uuid.uuid4()
            call("select pgqueue.register_worker(%s, 'h', 1, array['q'], 1, 0, 'v', 30)", (worker,))
            call("select pgqueue.refresh_worker(%s, array[]::uuid[])", (worker,))
            call("select pgqueue.deregister_worker(%s)", (worker,))
            call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("b")),))
            call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("b")),))
            call("select pgqueue.cancel_matching(null, 'b', null, '{}', null, null, null, 1)")
            call("select pgqueue.delete_matching(null, 'b', null, null, 'ready', null, null, 1)")
            call("select pgqueue.retry_failed_matching('b', null, 'cancelled', null, null, 1)")
            call("select pgqueue.forget_failed_matching('b', null, null, null, null, 10)")
        if scalar(conn, "select to_regprocedure('pgqueue.job_state(uuid)') is not null"):
            # Revision 0009 (issue 26): attempts kept by release and fail, results kept by the
            # ack (one at once, one pending then stored), the state of a job, the pruning.
            for _ in range(3):
                call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("k")),))
            held = call("select * from pgqueue.reserve(array['k'], 3, 60)")
            call("select pgqueue.release(%s, %s, 0, 0.5, 0.1, %s)",
                 (held[0]["id"], held[0]["token"], Jsonb({"exception": "E", "message": "m", "worker": "w"})))
            call("select pgqueue.fail(%s, %s, 'app.Boom', 'boom', null, 'exception', 0.5, 0.1, 'w')",
                 (held[1]["id"], held[1]["token"]))
            again = call("select * from pgqueue.reserve(array['k'], 1, 60)")
            call("select * from pgqueue.ack_results(%s::uuid[], %s::bigint[], null, null, false, "
                 "array['1', null]::jsonb[], array[60, 60])",
                 ([again[0]["id"], held[2]["id"]], [again[0]["token"], held[2]["token"]]))
            call("select pgqueue.store_result(%s, %s, '2')", (held[2]["id"], held[2]["token"]))
            call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("k")),))
            again = call("select * from pgqueue.reserve(array['k'], 1, 60)")
            call("select pgqueue.progress(%s, %s, 0.5, '{\"rows\": 1}')", (again[0]["id"], again[0]["token"]))
            call("select pgqueue.progress(%s, %s, 2, null)", (again[0]["id"], again[0]["token"]), refused=True)
            call("select * from pgqueue.job_state(%s)", (held[0]["id"],))
            call("select * from pgqueue.prune_results(0, 100)")
            _call_dependency_functions(call)  # the same revision
        _call_debounce(conn, call)
        _call_adaptive(conn, call)
        _call_partition_functions(conn, call)
        _call_workflow_functions(conn, call)
        _call_partition_adaptive(conn, call)
        executed = {r["funcname"] for r in rows(conn, "select funcname from pg_stat_xact_user_functions"
                                                      " where schemaname = 'pgqueue' and calls > 0")}
    return warnings, executed, errors


def _call_workflow_functions(conn: Conn, call: Callable[..., list[dict[str, object]]]) -> None:
    """Revision 0010 (issue 27): a workflow's checkpoint, a failed step, a sleep and a signal wait
    (parked, then signalled), a child dispatched and awaited, its steps read, the pruning."""
    if not scalar(conn, "select to_regprocedure('pgqueue.signal(uuid, text, jsonb)') is not null"):
        return
    flow = envelope("wf") | {"workflow": 1}
    call("select pgqueue.enqueue(%s, 0)", (Jsonb(flow),))
    [held] = call("select * from pgqueue.reserve(array['wf'], 1, 60)")
    job, token = held["id"], held["token"]
    call("select pgqueue.workflow_checkpoint(%s, %s, 1, 'a', 'step', '1', 0.5)", (job, token))
    call("select pgqueue.workflow_checkpoint(%s, %s, 1, 'a', 'step', '1', 0.5, '0')", (job, token), refused=True)
    call("select pgqueue.workflow_step_failed(%s, %s, 2, 'b', 'E: boom', 3, 0)", (job, token))
    [held] = call("select * from pgqueue.reserve(array['wf'], 1, 60)")
    call("select * from pgqueue.workflow_wait(%s, %s, 3, 'w', 'signal', 'go', null)", (job, held["token"]))
    call("select pgqueue.signal(%s, 'go', '{\"ok\": true}')", (job,))
    call("select pgqueue.signal(%s, '', null)", (job,), refused=True)
    [held] = call("select * from pgqueue.reserve(array['wf'], 1, 60)")
    call("select * from pgqueue.workflow_child(%s, %s, 4, 'c', %s, 0)", (job, held["token"], Jsonb(envelope("wf"))))
    call("select * from pgqueue.workflow_steps_of(%s)", (job,))
    call("select pgqueue.prune_workflows(100)")


def _call_partition_functions(conn: Conn, call: Callable[..., list[dict[str, object]]]) -> None:
    """Revision 0009 (issue 28): partitioned jobs, per-partition limits, an override, the
    partitioned path of reserve (allowances, buckets, turns) and the status."""
    if not scalar(conn, "select to_regprocedure('pgqueue.partition_status(text)') is not null"):
        return
    for partition in ("a", "b", "a"):
        call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("parts") | {"partition": partition}),))
    call("select pgqueue.enqueue_many(%s)", (Jsonb([envelope("parts") | {"partition": "b"}]),))
    call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("parts") | {"partition": 1}),), refused=True)
    call("select pgqueue.set_partition_limits('parts', 1, 10, 1, 5, true)")
    call("select pgqueue.set_partition_limit('parts', 'b', 2, 20, 1, null, 3)")
    call("select * from pgqueue.reserve(array['parts'], 5, 60)")
    call("select * from pgqueue.partition_status('parts')")
    call("select pgqueue.prune_partitions(100)")
    if not scalar(conn, "select to_regprocedure('pgqueue.set_aging(text, double precision)') is not null"):
        return
    # Revision 0010 (issue 28): fair shares alone (the turns taken k at a time) and priority aging.
    for partition, priority in (("a", 0), ("b", 5), ("c", 0)):
        job = envelope("fair") | {"partition": partition, "priority": priority}
        call("select pgqueue.enqueue(%s, 0)", (Jsonb(job),))
    call("select pgqueue.set_partition_limits('fair', null, null, null, null, true)")
    call("select pgqueue.set_aging('fair', 0.5)")
    call("select pgqueue.set_aging('fair', 0)", refused=True)
    call("select * from pgqueue.reserve(array['fair'], 5, 60)")
    # Revision 0010: reserve_partitions reads the limits itself; partition_allowance is kept for psql.
    call("select * from pgqueue.partition_allowance((select q from pgqueue.queues q where q.name = 'parts'), "
         "'a', 5, now())")


def _call_partition_adaptive(conn: Conn, call: Callable[..., list[dict[str, object]]]) -> None:
    """Revision 0010 (issue 28): adaptive limits per partition: the queue's bounds for every partition
    and one partition's own (and refused), the cut's factor, an ack growing a partition's limit, a
    backpressure cutting it, and the per-partition metrics."""
    if not scalar(conn, "select to_regprocedure('pgqueue.partition_depths(integer)') is not null"):
        return
    call("select pgqueue.set_partition_adaptive_limit('pad', null, 1, 4)")
    call("select pgqueue.set_partition_adaptive_limit('pad', 'big', 2, 8)")
    call("select pgqueue.set_partition_adaptive_limit('pad', 'big', 9, 8)", refused=True)
    call("select pgqueue.set_adaptive_decrease('pad', 0.5)")
    call("select pgqueue.set_adaptive_decrease('pad', 1.5)", refused=True)
    for _ in range(3):
        call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("pad") | {"partition": "t1"}),))
    held = call("select * from pgqueue.reserve(array['pad'], 1, 60)")
    call("select * from pgqueue.ack(%s::uuid[], %s::bigint[])", ([held[0]["id"]], [held[0]["token"]]))
    held = call("select * from pgqueue.reserve(array['pad'], 1, 60)")
    call("select pgqueue.backpressure(%s, %s, 5)", (held[0]["id"], held[0]["token"]))
    call("select * from pgqueue.partition_depths(10)")


def _call_debounce(conn: Conn, call: Callable[..., list[dict[str, object]]]) -> None:
    """Revision 0009 (issue 28): debounce: a window opened, joined, closed and a new one opened (the
    closed holder drops its key), then reserved (its trigger drops the key)."""
    if not scalar(conn, "select to_regprocedure('pgqueue.enqueue_debounced(jsonb, text, double precision,"
                        " double precision)') is not null"):
        return
    for _ in range(2):
        call("select * from pgqueue.enqueue_debounced(%s, 'dk', 5, 60)", (Jsonb(envelope("deb")),))
    conn.execute(b"update pgqueue.jobs set available_at = now() - interval '1 second' where queue = 'deb'")
    call("select * from pgqueue.enqueue_debounced(%s, 'dk', 5, null)", (Jsonb(envelope("deb")),))
    call("select * from pgqueue.enqueue_debounced(%s, '', 5, null)", (Jsonb(envelope("deb")),), refused=True)
    conn.execute(b"update pgqueue.jobs set available_at = now() - interval '1 second' where queue = 'deb'")
    call("select * from pgqueue.reserve(array['deb'], 2, 60)")


def _call_dependency_functions(call: Callable[..., list[dict[str, object]]]) -> None:
    """Revision 0009 (issue 26 §2): a child released by its parent's ack, one cancelled by its
    parent's failure (the trigger), a batch counted and its callback released, and the reads."""
    ids = [call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("d")),))[0]["enqueue"] for _ in range(5)]
    call("select pgqueue.add_dependencies(%s::uuid[], %s::uuid[], 'cancel')", ([ids[2]], [ids[0]]))
    call("select pgqueue.add_dependencies(%s::uuid[], %s::uuid[], 'cancel')", ([ids[3]], [ids[1]]))
    call("select pgqueue.add_batch(%s, %s::uuid[], %s)", (uuid.uuid4(), [ids[0], ids[1]], ids[4]))
    tokens = {str(r["id"]): r["token"] for r in call("select * from pgqueue.reserve(array['d'], 2, 60)")}
    call("select * from pgqueue.ack(%s::uuid[], %s::bigint[])", ([ids[0]], [tokens.get(str(ids[0]))]))
    call("select pgqueue.fail(%s, %s, 'app.Boom', 'boom', null, 'exception')", (ids[1], tokens.get(str(ids[1]))))
    call("select * from pgqueue.parent_results(%s)", (ids[2],))
    call("select * from pgqueue.batch_state(%s)", (ids[4],))
    call("select * from pgqueue.batch_results(%s)", (ids[4],))
    call("select * from pgqueue.job_family(%s)", (ids[0],))


def _installed(conn: Conn) -> set[str]:
    found = rows(conn, "select proname from pg_proc where pronamespace = 'pgqueue'::regnamespace")
    return {r["proname"] for r in found}


def _plant_as(conn: Conn, role: str) -> Planted:
    conn.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
    try:
        return _plant(conn, "hijack")
    finally:
        conn.execute(b"reset role")


def test_no_look_alike_runs_when_the_owner_calls_the_functions(conn: Conn, attacker: str) -> None:
    planted = _plant_as(conn, attacker)
    # The issue's three, and a look-alike for every built-in the bodies call.
    assert {"array_position", "cardinality", "nextval", "make_interval", "to_timestamp", "pg_notify", "format",
            "unnest", "jsonb_array_elements", "jsonb_path_exists", "array_agg"} <= set(planted.functions)
    assert "operator <=(double precision, integer)" in planted.operators

    warnings, executed, errors = _call_every_function(conn)
    assert errors == []
    assert executed == _installed(conn)  # every stored function ran
    assert warnings == []


def test_at_revision_0001_the_same_look_alikes_ran_with_the_owners_rights(empty_dsn: str) -> None:
    # The control: the attack is real against functions without a pinned search_path.
    migrate.upgrade(empty_dsn, "pgqueue_0001")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        role = f"pgq_attacker_{uuid.uuid4().hex[:8]}"
        conn.execute(sql.SQL("create role {} nologin").format(sql.Identifier(role)))
        conn.execute(sql.SQL("create schema hijack authorization {}").format(sql.Identifier(role)))
        try:
            _plant_as(conn, role)
            warnings, executed, _ = _call_every_function(conn)
            assert executed == _installed(conn)
            ran = {w.removeprefix("hijacked: ") for w in warnings}
            assert {"array_position(uuid[], uuid)", "cardinality(uuid[])", "nextval(text)"} <= ran, ran
        finally:
            conn.execute(b"drop schema hijack cascade")
            conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def _call_adaptive(conn: Conn, call: Callable[..., list[dict[str, object]]]) -> None:
    """Revision 0009 (issue 28): adaptive limits: bounds set (and refused), an ack growing the limit
    (pgqueue.adaptive_acked), a backpressure cutting it (and refused with a bad delay)."""
    if not scalar(conn, "select to_regprocedure('pgqueue.backpressure(uuid, bigint, double precision)')"
                        " is not null"):
        return
    call("select pgqueue.set_adaptive_limit('ad', 1, 4)")
    call("select pgqueue.set_adaptive_limit('ad', 5, 4)", refused=True)
    for _ in range(3):
        call("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("ad")),))
    held = call("select * from pgqueue.reserve(array['ad'], 1, 60)")
    call("select * from pgqueue.ack(%s::uuid[], %s::bigint[])", ([held[0]["id"]], [held[0]["token"]]))
    held = call("select * from pgqueue.reserve(array['ad'], 1, 60)")
    call("select pgqueue.backpressure(%s, %s, -1)", (held[0]["id"], held[0]["token"]), refused=True)
    call("select pgqueue.backpressure(%s, %s, 5)", (held[0]["id"], held[0]["token"]))
