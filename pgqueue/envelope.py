"""The envelope: what dispatch stores for a job and no later setting rewrites."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from pgqueue.backoff import Backoff
from pgqueue.config import MAX_TIMEOUT, ConnectionConfig, check_timeout, check_tries
from pgqueue.errors import QueueConfigurationError, QueuePayloadError
from pgqueue.ids import new_id
from pgqueue.jobs import Job, args_struct, check_args
from pgqueue.jsonvalues import _ENCODER, check_json_safe, dumps_json
from pgqueue.limits import MAX_ARGS_DEPTH, MAX_DELAY_SECONDS, partition_problem, queue_name_problem

ENVELOPE_VERSION = 1

#: The worker reads every envelope: msgspec's decoder takes a quarter of the standard library's
#: time on a typical one. Unlike json.loads it refuses NaN, Infinity and numbers out of a
#: float's range, which no jsonb value holds.
_DECODER = msgspec.json.Decoder()


_SCALAR_TYPES = (str, int, bool, float, type(None))


def _plainly_json(args: dict[str, Any]) -> bool:
    """True when ``args`` is a flat dict of str keys and str/int/bool/None/finite float values: then
    the text checks in :func:`encode_many` catch all that check_json_safe would, and no deep walk is
    needed (the common case pays for one pass over its fields)."""
    for key, value in args.items():
        kind = type(value)
        if type(key) is not str or kind not in _SCALAR_TYPES or (kind is float and not math.isfinite(value)):
            return False
    return True


def _too_large(name: str, size: int, limit: int, connection: str) -> QueuePayloadError:
    return QueuePayloadError(
        f"job {name!r}: the envelope is {size} bytes, over the limit of {limit} bytes "
        f"(connection {connection!r} max_payload_bytes); store large data elsewhere and pass its id"
    )


def _fixed_settings(job_type: type[Job], connection: ConnectionConfig, queue: str | None,
                    priority: int | None) -> tuple[str, int, int, float, Backoff]:
    """The envelope settings that depend on the job class and connection only, validated."""
    # `is None`, not falsiness: an empty queue name is a mistake to report, not a default.
    chosen_queue = queue if queue is not None else (
        job_type.queue if job_type.queue is not None else connection.queue)
    problem = queue_name_problem(chosen_queue)  # NUL and surrogates too: one rule, one message
    if problem is not None:
        raise QueueConfigurationError(f"job {job_type.name!r}: {problem}")
    chosen_priority = job_type.priority if priority is None else priority
    if isinstance(chosen_priority, bool) or not isinstance(chosen_priority, int) \
            or not -32768 <= chosen_priority <= 32767:
        raise QueueConfigurationError(f"job {job_type.name!r}: priority must be an integer from -32768 "
                                      f"to 32767, got {chosen_priority!r}")
    tries = check_tries(job_type.tries if job_type.tries is not None else connection.tries,
                        what=f"job {job_type.name!r} tries")
    timeout = check_timeout(job_type.timeout if job_type.timeout is not None else connection.timeout,
                            connection, what=f"job {job_type.name!r} timeout")
    backoff = Backoff.coerce(job_type.backoff) if job_type.backoff is not None else connection.backoff
    return chosen_queue, chosen_priority, tries, timeout, backoff


def _deadline(job: Job) -> float | None:
    retry_until = job.retry_until()
    if retry_until is not None and (isinstance(retry_until, bool) or not isinstance(retry_until, int | float)
                                    or not math.isfinite(retry_until)):
        raise QueueConfigurationError(f"job {type(job).name!r}: retry_until() must return epoch seconds "
                                      f"or None, got {retry_until!r}")
    return None if retry_until is None else float(retry_until)


@dataclass(frozen=True, slots=True)
class _Layout:
    """The JSON text of one job class's envelopes on one connection, around id, args and deadline."""

    name: str
    connection: str
    limit: int
    middle: str            # '","name":...,"args":'
    tail: str              # ',"connection":...,"retry_until":'
    deadline: str | None   # the deadline's text when the class has no retry_until(), else None
    partitioned: bool      # issue 28: the class derives a partition (partition_by)


def _layout(job_type: type[Job], connection: ConnectionConfig, queue: str | None,
            priority: int | None) -> _Layout:
    chosen_queue, chosen_priority, tries, timeout, backoff = _fixed_settings(job_type, connection, queue, priority)
    dumps = dumps_json
    marker = "" if job_type._workflow_version is None else f',"workflow":{int(job_type._workflow_version)}'
    middle = f'","name":{dumps(job_type.name)}{marker},"args":'
    tail = (f',"connection":{dumps(connection.name)},"queue":{dumps(chosen_queue)},"priority":{int(chosen_priority)},'
            f'"tries":{int(tries)},"timeout":{dumps(timeout)},"backoff":{dumps(backoff.to_data())},"retry_until":')
    deadline = "null" if job_type.retry_until is Job.retry_until else None
    return _Layout(job_type.name, connection.name, connection.max_payload_bytes, middle, tail, deadline,
                   bool(job_type.partition_by))


@dataclass(frozen=True, slots=True)
class EncodedJobs:
    """Envelopes ready for ``pgqueue.enqueue_many``: their ids, names and one JSON array."""

    ids: list[uuid.UUID]
    names: list[str]
    connections: list[ConnectionConfig]
    text: str


def encode_many(jobs: Iterable[Job], connection_of: Callable[[Job], ConnectionConfig], *,
                queue: str | None = None, priority: int | None = None,
                trace: dict[str, str] | None = None, partition: str | None = None) -> EncodedJobs:
    """Fix and encode many envelopes as one JSON array, with the checks of :meth:`Envelope.build`
    and :meth:`Envelope.encode`; the text is what ``Envelope.build(job, ...).encode(limit)``
    would give for each job, joined.

    ``connection_of(job)`` must depend on the job's class only: it is called once per run of
    jobs of one class. Settings that depend on the job class are validated once per class and connection; args go
    through one C JSON encoder; NUL characters and unpaired surrogates are found in the joined
    text, and only then is the offending job looked for with :func:`check_json_safe`. ``trace``
    (a W3C trace context, :mod:`pgqueue.tracing`) goes into every envelope; so does ``partition`` (else
    each job's :meth:`~pgqueue.Job.derived_partition`, issue 28)."""
    closing = f',"version":{ENVELOPE_VERSION}' + ("" if not trace else f',"trace":{dumps_json(trace)}') + "}"
    chosen = None if partition is None else _partition_text(partition, "dispatch_many")
    layouts: dict[tuple[type[Job], str], _Layout] = {}
    ids: list[uuid.UUID] = []
    names: list[str] = []
    connections: list[ConnectionConfig] = []
    texts: list[str] = []
    args_of: list[dict[str, Any]] = []
    make_id = new_id
    last_type: type[Job] | None = None
    config: ConnectionConfig
    layout: _Layout
    struct: type[msgspec.Struct]
    for job in jobs:
        job_type = type(job)
        if job_type is not last_type:
            # A bulk dispatch is mostly runs of one class: the connection and the layout only
            # change with the class.
            config = connection_of(job)
            found = layouts.get((job_type, config.name))
            if found is None:
                found = layouts[job_type, config.name] = _layout(job_type, config, queue, priority)
            layout = found
            struct = args_struct(job_type)
            last_type = job_type
        args = job.args()
        args_text = _args_text(args, job_type, struct, layout.name)
        deadline = layout.deadline
        if deadline is None:
            value = _deadline(job)
            deadline = "null" if value is None else repr(value)
        job_id = make_id()
        text = f'{{"id":"{job_id}{layout.middle}{args_text}{layout.tail}{deadline}{closing}'
        if chosen is not None or layout.partitioned:  # issue 28: a plain job pays this test only
            text = text[:-1] + (chosen or _partition_text(job.derived_partition(), layout.name)) + "}"
        # Characters never outnumber bytes; "surrogatepass": a lone surrogate is refused below, by name.
        if len(text) > layout.limit or (not text.isascii()
                                        and len(text.encode("utf-8", "surrogatepass")) > layout.limit):
            raise _too_large(layout.name, len(text.encode("utf-8", "surrogatepass")), layout.limit, layout.connection)
        ids.append(job_id)
        names.append(layout.name)
        connections.append(config)
        texts.append(text)
        args_of.append(args)
    joined = "[" + ",".join(texts) + "]"
    _check_joined(joined, names, args_of)
    return EncodedJobs(ids, names, connections, joined)


def _partition_text(partition: str | None, name: str) -> str:
    """``,"partition":"..."`` for an envelope, the partition checked (QueueConfigurationError names it)."""
    problem = partition_problem(partition)
    if problem is not None:
        raise QueueConfigurationError(f"job {name!r}: {problem}; the job was not dispatched")
    return f',"partition":{dumps_json(partition)}'


def _args_text(args: dict[str, Any], job_type: type[Job], struct: type[msgspec.Struct], name: str) -> str:
    """One job's args checked against its class and encoded as JSON text."""
    if not _plainly_json(args):
        check_json_safe(args, f"job {name!r} args")
    try:
        msgspec.convert(args, struct, strict=True)
    except msgspec.ValidationError:
        check_args(job_type, args)  # raises, naming field, expected type and given value
        raise
    try:
        return _ENCODER.encode(args).decode()
    except UnicodeEncodeError:  # a lone surrogate: found and named by the full check
        check_json_safe(args, f"job {name!r} args")
        raise


def _check_joined(joined: str, names: list[str], args_of: list[dict[str, Any]]) -> None:
    # JSON escapes a NUL as \u0000, which jsonb refuses; PostgreSQL cannot store a surrogate either.
    if "\\u0000" in joined or not _encodes(joined):
        for name, args in zip(names, args_of, strict=True):
            check_json_safe(args, f"job {name!r} args")
        if not _encodes(joined):
            raise QueuePayloadError("the envelopes contain an unpaired surrogate, which is not valid Unicode")


def _encodes(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Envelope:
    """A job as stored: identity, registry name, JSON args and the settings fixed at dispatch."""

    id: uuid.UUID
    name: str
    args: dict[str, Any]
    connection: str
    queue: str
    priority: int
    tries: int
    timeout: float
    backoff: Backoff
    retry_until: float | None
    version: int = ENVELOPE_VERSION
    #: The W3C trace context of the dispatch (``traceparent``, ``tracestate``), when traced
    #: (:mod:`pgqueue.tracing`); None in envelopes of untraced dispatches and older ones.
    trace: dict[str, str] | None = None
    #: Seconds the job's result is kept, when its dispatch said (``result_ttl=``); None: the job
    #: type's setting or the default decides (:func:`pgqueue.results.result_ttl`). Issue 26.
    result_ttl: float | None = None
    #: Issue 28: the job's partition (``partition=`` of its dispatch, else its job type's
    #: ``partition_by``); None: none. Copied to ``pgqueue.jobs.partition`` by enqueue.
    partition: str | None = None
    #: Issue 27: the version of the workflow this job runs (``@workflow(version=)``); None: a plain job.
    workflow: int | None = None

    @classmethod
    def build(cls, job: Job, connection: ConnectionConfig, *, queue: str | None = None,
              priority: int | None = None, trace: dict[str, str] | None = None,
              partition: str | None = None) -> Envelope:
        """Fix a job's envelope: defaults from the job class, then the connection; ``trace`` is the
        dispatch's trace context (:mod:`pgqueue.tracing`); ``partition`` the job's partition (None:
        its class's ``partition_by``, if any)."""
        job_type = type(job)
        args = job.args()
        check_json_safe(args, f"job {job_type.name!r} args")
        check_args(job_type, args)
        chosen_queue, chosen_priority, tries, timeout, backoff = _fixed_settings(job_type, connection, queue,
                                                                                priority)
        if partition is None:
            partition = job.derived_partition()
        if partition is not None:
            _partition_text(partition, job_type.name)  # refused here, by name, before anything is stored
        return cls(id=new_id(), name=job_type.name, args=args, connection=connection.name,
                   queue=chosen_queue, priority=chosen_priority, tries=tries, timeout=timeout,
                   backoff=backoff, retry_until=_deadline(job), trace=trace, partition=partition,
                   workflow=job_type._workflow_version)

    def to_data(self) -> dict[str, Any]:
        """The JSON object stored in ``pgqueue.jobs.envelope``."""
        data = {
            "id": str(self.id), "name": self.name, "args": self.args, "connection": self.connection,
            "queue": self.queue, "priority": self.priority, "tries": self.tries, "timeout": self.timeout,
            "backoff": self.backoff.to_data(), "retry_until": self.retry_until, "version": self.version,
        }
        if self.trace is not None:
            data["trace"] = self.trace
        if self.result_ttl is not None:
            data["result_ttl"] = self.result_ttl
        if self.partition is not None:
            data["partition"] = self.partition
        if self.workflow is not None:
            data["workflow"] = self.workflow
        return data

    def encode(self, max_bytes: int) -> str:
        """JSON text of the envelope; raises QueuePayloadError when it exceeds ``max_bytes``."""
        if not _plainly_json(self.args):
            check_json_safe(self.args, f"job {self.name!r} args")
        try:
            text = dumps_json(self.to_data())
        except UnicodeEncodeError:
            check_json_safe(self.args, f"job {self.name!r} args")
            raise
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            raise _too_large(self.name, size, max_bytes, self.connection)
        return text

    @classmethod
    def decode(cls, data: object, *, text: bool = True, job_id: uuid.UUID | None = None) -> Envelope:
        """Read and validate a stored envelope; raises QueuePayloadError naming the field at fault.

        ``data`` is JSON text (``str`` or ``bytes``; the worker reads the ``envelope`` column as
        text so that parsing happens here, one row at a time) or, with ``text=False``, the
        parsed value. Every field is checked for type and range (see :func:`envelope_problem`);
        nothing a stored envelope contains raises anything but QueuePayloadError. ``job_id`` is
        the row's id, which spares parsing the envelope's id when they agree.
        """
        try:
            if text and isinstance(data, str | bytes):
                try:
                    data = _DECODER.decode(data)
                except RecursionError:
                    raise QueuePayloadError(
                        "envelope nests too deeply to decode (args may nest at most "
                        f"{MAX_ARGS_DEPTH} levels)") from None
                except (msgspec.DecodeError, ValueError) as exc:
                    raise QueuePayloadError(f"envelope is not JSON: {exc}") from None
            return cls._validated(data, job_id)
        except QueuePayloadError:
            raise
        except RecursionError:
            raise QueuePayloadError(f"envelope nests too deeply to read (args may nest at most "
                                    f"{MAX_ARGS_DEPTH} levels)") from None
        except Exception as exc:  # whatever else one stored row can cause stays with that row
            raise QueuePayloadError(f"envelope is malformed: {type(exc).__name__}: {exc}") from None

    @classmethod
    def _validated(cls, data: object, job_id: uuid.UUID | None) -> Envelope:
        if type(data) is not dict:
            raise QueuePayloadError(f"envelope must be a JSON object, got {_kind(data)}")
        get = data.get
        args = get("args", _MISSING)
        if type(args) is not dict:
            raise QueuePayloadError(f"envelope 'args' must be an object, got {_kind(args)}")
        if not _plainly_json(args):
            depth = args_depth(args)
            if depth > MAX_ARGS_DEPTH:
                raise QueuePayloadError(f"envelope 'args' nest {depth} levels deep, over the limit of "
                                        f"{MAX_ARGS_DEPTH} (pgqueue.limits.MAX_ARGS_DEPTH)")
        the_id = _stored_id(get("id", _MISSING), job_id)
        name = get("name", _MISSING)
        if type(name) is not str or not name:
            raise QueuePayloadError(f"envelope 'name' must be a non-empty string, got {_kind(name)}")
        connection = get("connection", _MISSING)
        if type(connection) is not str or not connection:
            raise QueuePayloadError(f"envelope 'connection' must be a non-empty string, got {_kind(connection)}")
        queue = get("queue", _MISSING)
        if queue not in _GOOD_QUEUES:
            problem = queue_name_problem(queue)
            if problem is not None:
                raise QueuePayloadError(f"envelope 'queue': {problem}")
            if len(_GOOD_QUEUES) < 1024:
                _GOOD_QUEUES.add(queue)
        priority, tries, timeout, backoff, retry_until, version, trace, kept = _settings(data)
        partition = get("partition")
        if partition is not None and type(partition) is not str:
            raise QueuePayloadError(f"envelope 'partition' must be null or a string, got {_kind(partition)}")
        workflow = get("workflow")
        if workflow is not None and type(workflow) is not int:
            raise QueuePayloadError(f"envelope 'workflow' must be null or an integer (a workflow's version), got "
                                    f"{_kind(workflow)}")
        return cls(id=the_id, name=name, args=args, connection=connection, queue=queue, priority=priority,
                   tries=tries, timeout=timeout, backoff=backoff, retry_until=retry_until, version=version,
                   trace=trace, result_ttl=kept, partition=partition, workflow=workflow)


def _stored_id(stored_id: object, job_id: uuid.UUID | None) -> uuid.UUID:
    if job_id is not None and stored_id == str(job_id):
        return job_id
    if type(stored_id) is str:
        try:
            return uuid.UUID(stored_id)
        except ValueError:
            raise QueuePayloadError(f"envelope 'id' is not a UUID: {stored_id[:80]!r}") from None
    raise QueuePayloadError(f"envelope 'id' must be a UUID string, got {_kind(stored_id)}")


def _settings(data: dict[str, Any]) -> tuple[int, int, float, Backoff, float | None, int, dict[str, str] | None,
                                             float | None]:
    """An envelope's priority, tries, timeout, backoff, retry deadline, version, trace context and result
    lifetime, checked."""
    get = data.get
    priority = get("priority", 0)
    if type(priority) is not int or not -32768 <= priority <= 32767:
        raise QueuePayloadError(f"envelope 'priority' must be an integer from -32768 to 32767, "
                                f"got {_kind(priority)}")
    tries = get("tries", _MISSING)
    if type(tries) is not int or not 1 <= tries <= 2_147_483_647:
        raise QueuePayloadError(f"envelope 'tries' must be an integer >= 1, got {_kind(tries)}")
    timeout = get("timeout", _MISSING)
    if type(timeout) not in (int, float) or not 0 < timeout <= _MAX_TIMEOUT:
        raise QueuePayloadError(f"envelope 'timeout' must be a finite number of seconds > 0, "
                                f"got {_kind(timeout)}")
    backoff = Backoff.from_data(get("backoff", _MISSING))
    if max(backoff.delays, default=0.0) > MAX_DELAY_SECONDS or (
            backoff.base is not None and min(backoff.max, backoff.base) > MAX_DELAY_SECONDS):
        raise QueuePayloadError(f"envelope 'backoff' has a delay over {MAX_DELAY_SECONDS:g}s "
                                "(pgqueue.limits.MAX_DELAY_SECONDS)")
    retry_until = get("retry_until")
    if retry_until is not None and (type(retry_until) not in (int, float)
                                    or not _MIN_EPOCH <= retry_until <= _MAX_EPOCH):
        raise QueuePayloadError(f"envelope 'retry_until' must be epoch seconds (years 1 to 9999) or null, "
                                f"got {_kind(retry_until)}")
    version = get("version", ENVELOPE_VERSION)
    if version != ENVELOPE_VERSION or type(version) is not int:
        raise QueuePayloadError(f"envelope 'version' {_kind(version)} is not supported by this worker "
                                f"(it reads version {ENVELOPE_VERSION}); upgrade pgqueue")
    trace = get("trace")
    if trace is not None and (type(trace) is not dict or len(trace) > 8 or any(
            type(k) is not str or type(v) is not str or len(v) > 512 for k, v in trace.items())):
        raise QueuePayloadError(f"envelope 'trace' must be null or an object of at most 8 short strings "
                                f"(a W3C trace context: traceparent, tracestate), got {_kind(trace)}")
    kept = get("result_ttl")
    if kept is not None and (type(kept) not in (int, float) or not 0 <= kept <= 3153600000):
        raise QueuePayloadError(f"envelope 'result_ttl' must be null or seconds from 0 to 3153600000, "
                                f"got {_kind(kept)}")
    return (priority, tries, float(timeout), backoff, None if retry_until is None else float(retry_until), version,
            trace, None if kept is None else float(kept))


class _Missing:
    def __repr__(self) -> str:
        return "missing"


_MISSING: Any = _Missing()

#: Queue names already found valid: most workers see a handful, so the check runs once per name.
_GOOD_QUEUES: set[str] = set()

# The bound dispatch applies (one year): a stored timeout past it was not written by dispatch.
_MAX_TIMEOUT = MAX_TIMEOUT
# Years 1 to 9999: what PostgreSQL's to_timestamp and Python's datetime both read.
_MIN_EPOCH, _MAX_EPOCH = -62_135_596_800, 253_402_300_799


def _kind(value: object) -> str:
    """A short description of a value for an error message: its JSON type and a clipped repr."""
    if value is _MISSING:
        return "nothing (the field is missing)"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"int with {len(str(abs(value)))} digits"
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{_JSON_TYPES.get(type(value), type(value).__name__)} {shown}"


_JSON_TYPES: dict[type, str] = {dict: "object", list: "array", str: "string", int: "integer", float: "number",
                                bool: "boolean", type(None): "null"}


def args_depth(value: object) -> int:
    """How many levels of arrays and objects ``value`` nests (the args object itself is level 1).

    Iterative, so it is safe on any depth; it stops counting one level past
    :data:`~pgqueue.limits.MAX_ARGS_DEPTH`.
    """
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > deepest:
            deepest = depth
            if deepest > MAX_ARGS_DEPTH:
                return deepest
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))
    return deepest
