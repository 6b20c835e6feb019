"""Defining jobs: the :class:`Job` base class, the ``@job`` decorator and the registry.

A job type registers under a stable name (default ``module:QualName``) when its class is
created. Workers run only registered names: a payload never makes pgqueue import anything.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import sys
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, dataclass_transform
from uuid import UUID

import msgspec

from pgqueue.args_errors import args_error
from pgqueue.backoff import Backoff
from pgqueue.errors import QueueConfigurationError
from pgqueue.schedules import schedule_of

if TYPE_CHECKING:
    from pgqueue.job_context import JobContext

_REGISTRY: dict[str, type[Job]] = {}

logger = logging.getLogger("pgqueue")


class Dispatcher(Protocol):
    """What :meth:`Job.dispatch` hands a job to: a client that stores it (:class:`pgqueue.Client`).

    Defined here, beside :class:`Job`, so that jobs need not import the client (which imports
    the envelope, which imports jobs): the client's module registers its default with
    :func:`set_default_dispatcher`.
    """

    async def dispatch(self, job: Job, *, conn: Any = None, delay: float = 0.0, queue: str | None = None,  # noqa: PLR0913  # the protocol of Client.dispatch
                   priority: int | None = None, connection: str | None = None,
                   unique_key: str | None = None, unique_scope: str = "queued",
                   unique_for: float | None = None, debounce: float | None = None, key: str | None = None,
                   max_wait: float | None = None, partition: str | None = None) -> UUID:
        """Enqueue one job; returns its id (with a unique key: the id of the job holding it; debounced:
        the id of the job of the key's open window)."""
        ...

    def dispatch_sync(self, job: Job, *, conn: Any, delay: float = 0.0, queue: str | None = None,  # noqa: PLR0913  # the protocol of Client.dispatch_sync
                  priority: int | None = None, connection: str | None = None, debounce: float | None = None,
                  key: str | None = None, max_wait: float | None = None) -> UUID:
        """Enqueue one job on the caller's synchronous connection; returns its id."""
        ...


_default_dispatcher: Callable[[], Dispatcher] | None = None


def set_default_dispatcher(factory: Callable[[], Dispatcher]) -> None:
    """Register what :meth:`Job.dispatch` uses when no ``using=`` is given (``pgqueue.client`` does, on import)."""
    global _default_dispatcher  # noqa: PLW0603
    _default_dispatcher = factory


def _dispatcher(using: Dispatcher | None) -> Dispatcher:
    if using is not None:
        return using
    if _default_dispatcher is None:
        raise QueueConfigurationError(
            "no default client to dispatch with: import pgqueue (which registers pgqueue.default_client) "
            "or pass using=<a pgqueue.Client>"
        )
    return _default_dispatcher()


def registered_jobs() -> dict[str, type[Job]]:
    """A copy of the registry: job name -> job class."""
    return dict(_REGISTRY)


def lookup(name: str) -> type[Job] | None:
    """The job class registered under ``name``, or None."""
    return _REGISTRY.get(name)


_SYNC_HANDLES: dict[type[Job], bool] = {}


def has_sync_handle(job_type: type[Job]) -> bool:
    """Whether the job's ``handle`` is a plain function (run in a thread with a
    :class:`~pgqueue.context.SyncJobContext`) rather than a coroutine function. Cached per class:
    the worker asks for every job it runs."""
    found = _SYNC_HANDLES.get(job_type)
    if found is None:
        found = _SYNC_HANDLES[job_type] = not inspect.iscoroutinefunction(job_type.handle)
    return found


#: The longest a result may be kept (100 years, the bound pgqueue.ack_results accepts).
MAX_RESULT_TTL = 3153600000.0


def check_result_ttl(value: object, what: str) -> float:
    """``value`` as a result_ttl (seconds, 0 keeps none); raises QueueConfigurationError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 <= value <= MAX_RESULT_TTL:
        raise QueueConfigurationError(f"{what}: result_ttl must be a number of seconds from 0 (keep no result) "
                                      f"to {MAX_RESULT_TTL:.0f} (100 years), got {value!r}")
    return float(value)


@dataclass_transform(kw_only_default=True)
class Job:
    """Base class of class-based jobs.

    Declare the args as annotated fields and implement ``handle``::

        class SendReport(Job):
            queue = "reports"
            tries = 5
            backoff = (1.0, 5.0)

            report_id: int

            async def handle(self, context: JobContext) -> None:
                ...

    Class-level settings (all optional; defaults come from the connection): ``name``,
    ``queue``, ``connection``, ``tries``, ``timeout``, ``backoff``, ``priority``; and
    ``retry_until()`` returning absolute epoch seconds (or None) for a deadline.
    Field values must be JSON: they are stored as the job's args, checked against the fields'
    annotations at dispatch and again when a worker builds the job (:meth:`from_args`).

    ``redact`` names args (at any depth of the JSON) that pgqueue masks wherever it shows or
    logs the job (the dashboard, ``queue:failed``, the worker's log lines; see
    :mod:`pgqueue.redaction`), e.g. ``redact = ("password", "card_number")``. The database still
    stores them as given: redaction is about display, not storage.

    A plain ``def handle`` (sync) runs in the worker's thread pool and receives a
    :class:`~pgqueue.context.SyncJobContext`.
    """

    name: ClassVar[str]
    queue: ClassVar[str | None] = None
    connection: ClassVar[str | None] = None
    tries: ClassVar[int | None] = None
    timeout: ClassVar[float | None] = None
    backoff: ClassVar[float | Sequence[float] | Backoff | None] = None
    priority: ClassVar[int] = 0
    redact: ClassVar[tuple[str, ...]] = ()
    #: Periodic job: a 5-field cron expression or a timedelta (see :mod:`pgqueue.schedules`).
    schedule: ClassVar[str | timedelta | None] = None
    #: IANA timezone the cron expression is read in.
    schedule_timezone: ClassVar[str] = "UTC"
    #: Args of each periodic dispatch.
    schedule_args: ClassVar[Mapping[str, Any]] = {}
    #: Missed ticks enqueued after downtime (the most recent ones), 1 to 1000.
    schedule_catch_up: ClassVar[int] = 1
    #: Unique jobs: arg names whose values make the key of every dispatch of this class
    #: (``"<job name>:<args as JSON>"``), e.g. ``unique_by = ("invoice_id",)``; empty: no key.
    unique_by: ClassVar[tuple[str, ...]] = ()
    #: Issue 28: arg names whose values make the partition of every dispatch of this class (joined
    #: by ":", e.g. ``partition_by = ("tenant_id",)`` gives ``"42"``); empty: none (see ``partition=``).
    partition_by: ClassVar[tuple[str, ...]] = ()
    #: The scope of the derived key: "queued", "active" or "period" (with ``unique_period``).
    unique_scope: ClassVar[str] = "queued"
    #: Seconds the derived key holds in the "period" scope.
    unique_period: ClassVar[float | None] = None
    #: Seconds the handler's return value is kept (``pgqueue.job_results``; 0: none). None: a day
    #: when ``handle`` declares a return type other than None, else 0 (see :mod:`pgqueue.results`).
    result_ttl: ClassVar[float | None] = None
    _workflow_version: ClassVar[int | None] = None  # issue 27: set by @workflow (None: a plain job)
    # The dataclass field names, in order: args() reads them without dataclasses.fields() per call.
    _arg_names: ClassVar[tuple[str, ...]] = ()
    # The args' types as one msgspec struct, built on first use (annotations may name types
    # defined after the class); see _ArgsType.
    _args_type: ClassVar[_ArgsType | None] = None

    def __init_subclass__(cls, *, register: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(cls, kw_only=True)
        cls._arg_names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        cls._args_type = None
        if "name" not in cls.__dict__:
            cls.name = f"{cls.__module__}:{cls.__qualname__}"
        if not isinstance(cls.name, str) or not cls.name:
            raise QueueConfigurationError(f"job {cls.__qualname__}: name must be a non-empty string")
        if cls.backoff is not None:
            cls.backoff = Backoff.coerce(cls.backoff)
        # A bare string would be read letter by letter: ("password") is a string, not a tuple.
        if isinstance(cls.redact, str) or not all(isinstance(n, str) and n for n in cls.redact):
            raise QueueConfigurationError(
                f"job {cls.name!r}: redact must be a tuple of arg names, e.g. redact = ('password',); "
                f"got {cls.redact!r}"
            )
        cls.redact = tuple(cls.redact)
        for setting in ("unique_by", "partition_by"):
            names = getattr(cls, setting)
            if isinstance(names, str) or any(n not in cls._arg_names for n in names):
                raise QueueConfigurationError(
                    f"job {cls.name!r}: {setting} must be a tuple of arg names (of {cls._arg_names}), got {names!r}")
            setattr(cls, setting, tuple(names))
        if cls.result_ttl is not None:
            cls.result_ttl = check_result_ttl(cls.result_ttl, f"job {cls.name!r}")
        if cls.schedule is not None:
            # A bad expression, timezone or schedule_args field fails at import, not in the worker.
            schedule_of(cls)
            if cls.retry_until is not Job.retry_until:
                raise QueueConfigurationError(
                    f"job {cls.name!r}: a periodic job cannot define retry_until(): the envelope of its ticks is "
                    "registered once with its schedule, so a deadline computed per dispatch would be frozen at "
                    "registration; bound its runs with timeout and tries instead")
        if register:
            existing = _REGISTRY.get(cls.name)
            if existing is not None and existing.__qualname__ != cls.__qualname__:
                raise QueueConfigurationError(
                    f"job name {cls.name!r} is registered twice ({existing.__module__}.{existing.__qualname__} "
                    f"and {cls.__module__}.{cls.__qualname__}); give one of them another `name`"
                )
            _REGISTRY[cls.name] = cls

    async def handle(self, context: JobContext) -> Any:
        """Run the job. Return to acknowledge it; raise to have it retried (see ``tries``). What it
        returns is the job's result, kept when it declares a return type other than None (or with
        ``result_ttl``): see :mod:`pgqueue.results`."""
        raise NotImplementedError(f"job {type(self).name!r} does not implement handle()")

    def retry_until(self) -> float | None:
        """An absolute deadline (epoch seconds) after which the job is not retried, or None."""
        return None

    def derived_unique_key(self) -> str | None:
        """The unique key ``unique_by`` derives from this job's args (None without ``unique_by``)."""
        names = type(self).unique_by
        if not names:
            return None
        values = {name: getattr(self, name) for name in names}
        return f"{type(self).name}:{json.dumps(values, sort_keys=True, separators=(',', ':'), default=str)}"

    def derived_partition(self) -> str | None:
        """The partition ``partition_by`` derives from this job's args: their values (str or int) joined
        by ":" (None without ``partition_by``); QueueConfigurationError names a value of another type."""
        names = type(self).partition_by
        if not names:
            return None
        values = [getattr(self, name) for name in names]
        for name, value in zip(names, values, strict=True):
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise QueueConfigurationError(
                    f"job {type(self).name!r}: partition_by arg {name!r} must be a string or an integer, got "
                    f"{type(value).__name__} {repr(value)[:100]}; the job was not dispatched")
        return ":".join(str(value) for value in values)

    def args(self) -> dict[str, Any]:
        """The job's fields as a dict: what is stored as the envelope's args."""
        return {name: getattr(self, name) for name in self._arg_names}

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        """Build the job from stored args, checked against its fields' annotations.

        Raises :class:`~pgqueue.QueuePayloadError` naming the field, the expected type and the
        given value for a missing required field, an unknown field or a value of the wrong
        type (e.g. after a deploy changed a field's type). A ``float`` field given a JSON
        integer gets a float; unannotated (``Any``) fields take any JSON value.
        """
        converted = check_args(cls, args)
        return cls(**{name: getattr(converted, name) for name in cls._arg_names})

    async def dispatch(self, conn: Any = None, *, delay: float = 0.0, queue: str | None = None,  # noqa: PLR0913  # the public API, as Client.dispatch
                       priority: int | None = None, connection: str | None = None,
                       using: Dispatcher | None = None, unique_key: str | None = None,
                       unique_scope: str = "queued", unique_for: float | None = None,
                       debounce: float | None = None, key: str | None = None, max_wait: float | None = None,
                       partition: str | None = None) -> UUID:
        """Enqueue this job; returns its id.

        With ``conn`` (a psycopg or SQLAlchemy connection or session) the job is inserted in
        the caller's transaction and commits or rolls back with it. Without, the queue's own
        pool is used (autocommit). ``using`` picks the :class:`~pgqueue.Client` (default:
        :func:`pgqueue.default_client`). ``unique_key`` (or the class's ``unique_by``): no new
        job while one holds the key in ``unique_scope``; the holder's id is returned
        (see :meth:`pgqueue.Client.dispatch_unique`). ``debounce=<seconds>`` with ``key=`` (and
        ``max_wait=``): the dispatches of the key coalesce into one job, run once they stop for that
        long; the latest args win (see :meth:`pgqueue.Client.dispatch_debounced`). ``partition`` (or
        the class's ``partition_by``): the job's partition, for per-partition limits and fair shares.
        """
        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        if debounce is not None or key is not None or max_wait is not None:
            return await _dispatcher(using).dispatch(self, conn=conn, delay=delay, queue=queue, priority=priority,
                                                 connection=connection, unique_key=unique_key, debounce=debounce,
                                                 key=key, max_wait=max_wait, **extra)
        if unique_key is None:
            return await _dispatcher(using).dispatch(self, conn=conn, delay=delay, queue=queue, priority=priority,
                                                 connection=connection, **extra)
        return await _dispatcher(using).dispatch(self, conn=conn, delay=delay, queue=queue, priority=priority,
                                             connection=connection, unique_key=unique_key,
                                             unique_scope=unique_scope, unique_for=unique_for, **extra)

    def dispatch_sync(self, conn: Any, *, delay: float = 0.0, queue: str | None = None,  # noqa: PLR0913  # the public API, as dispatch
                      priority: int | None = None, connection: str | None = None,
                      using: Dispatcher | None = None, debounce: float | None = None, key: str | None = None,
                      max_wait: float | None = None) -> UUID:
        """Like :meth:`dispatch`, for synchronous code: ``conn`` is a psycopg ``Connection`` or a
        SQLAlchemy ``Session``/``Connection``; the job joins its transaction (debounced too)."""
        if debounce is not None or key is not None or max_wait is not None:
            return _dispatcher(using).dispatch_sync(self, conn=conn, delay=delay, queue=queue, priority=priority,
                                                connection=connection, debounce=debounce, key=key, max_wait=max_wait)
        return _dispatcher(using).dispatch_sync(self, conn=conn, delay=delay, queue=queue, priority=priority,
                                            connection=connection)


class FunctionJob(Job, register=False):
    """A job made from a function by :func:`job`; its fields are the function's parameters."""

    _function: ClassVar[Callable[..., Awaitable[Any]]]
    _wants_context: ClassVar[bool]

    async def handle(self, context: JobContext) -> Any:  # the function's return value: its result
        kwargs = self.args()
        if self._wants_context:
            kwargs["context"] = context
        return await type(self)._function(**kwargs)


class SyncFunctionJob(FunctionJob, register=False):
    """A job made from a plain (sync) function by :func:`job`: workers run it in their thread pool,
    with a :class:`~pgqueue.context.SyncJobContext` as ``context``."""

    _sync_function: ClassVar[Callable[..., Any]]

    def handle(self, context: Any) -> Any:  # sync: run in a thread
        kwargs = self.args()
        if self._wants_context:
            kwargs["context"] = context
        return type(self)._sync_function(**kwargs)


class JobFactory(Protocol):
    """What ``@job`` makes of a function, as type checkers see it: call it with the job's
    args (keywords) to get a dispatchable job. At run time it is a :class:`FunctionJob` subclass."""

    name: str

    def __call__(self, **args: Any) -> FunctionJob: ...


def job(*, name: str | None = None, queue: str | None = None, connection: str | None = None,  # noqa: PLR0913  # the public API: one keyword per Job setting
        tries: int | None = None, timeout: float | None = None,
        backoff: float | Sequence[float] | Backoff | None = None,
        priority: int = 0, redact: Sequence[str] = (), schedule: str | timedelta | None = None,
        schedule_timezone: str = "UTC", schedule_args: Mapping[str, Any] | None = None,
        schedule_catch_up: int = 1, result_ttl: float | None = None) -> Callable[[Callable[..., Any]], JobFactory]:
    """Turn a function into a job type::

        @job(queue="emails", tries=5)
        async def send_welcome(user_id: int, context: JobContext) -> None: ...

        await send_welcome(user_id=7).dispatch(conn)

    A parameter named ``context`` receives the :class:`JobContext`; the others are the args,
    checked against the parameters' annotations (none: any JSON value).
    ``redact`` names args pgqueue masks wherever it shows or logs the job (see :class:`Job`).
    A plain (sync) function runs in the worker's thread pool and its ``context`` is a
    :class:`~pgqueue.context.SyncJobContext` (the same methods, blocking).
    """

    def decorate(function: Callable[..., Any]) -> JobFactory:
        if not callable(function) or inspect.isclass(function):
            raise QueueConfigurationError(f"@job needs a function, got {function!r}")
        is_async = inspect.iscoroutinefunction(function)
        signature = inspect.signature(function)
        annotations, defaults = _job_fields(function, signature)
        namespace: dict[str, Any] = {
            "__annotations__": annotations,
            "__module__": function.__module__,
            "__qualname__": function.__qualname__,
            "__doc__": function.__doc__,
            "name": name or f"{function.__module__}:{function.__qualname__}",
            "queue": queue,
            "connection": connection,
            "tries": tries,
            "timeout": timeout,
            "backoff": backoff,
            "priority": priority,
            "redact": tuple(redact),
            "schedule": schedule,
            "schedule_timezone": schedule_timezone,
            "schedule_args": dict(schedule_args or {}),
            "schedule_catch_up": schedule_catch_up, "result_ttl": result_ttl,
            "_function" if is_async else "_sync_function": staticmethod(function),
            "_wants_context": "context" in signature.parameters,
            **defaults,
        }
        made: type[FunctionJob] = type(function.__name__, (FunctionJob if is_async else SyncFunctionJob,),
                                       namespace)
        return made  # type: ignore[return-value]  # a class satisfies the protocol at run time

    return decorate


# ------------------------------------------------------------------ args validation
class _ArgsType:
    """A job class's field types as one msgspec struct (strict: ``int`` refuses ``"1"`` and
    ``1.5``; ``float`` takes ``1``, as JSON has one number type), and what error messages need."""

    __slots__ = ("annotations", "defaults", "struct")

    def __init__(self, job_type: type[Job]) -> None:
        annotations = _field_types(job_type)
        fields: list[tuple[Any, ...]] = []
        defaults: set[str] = set()
        for field in dataclasses.fields(job_type):  # type: ignore[arg-type]
            kind = annotations.get(field.name, Any)
            if field.default is not dataclasses.MISSING:
                fields.append((field.name, kind, field.default))
                defaults.add(field.name)
            elif field.default_factory is not dataclasses.MISSING:
                fields.append((field.name, kind, msgspec.field(default_factory=field.default_factory)))
                defaults.add(field.name)
            else:
                fields.append((field.name, kind))
        # Required fields first, as msgspec wants; the order of the struct is not the job's.
        fields.sort(key=lambda item: len(item) == 3)
        self.annotations = annotations
        self.defaults = frozenset(defaults)
        self.struct = msgspec.defstruct(f"{job_type.__name__}Args", fields, forbid_unknown_fields=True,
                                        kw_only=True)


def _field_types(job_type: type[Job]) -> dict[str, Any]:
    """The resolved annotation of each field. One that cannot be resolved (a name imported
    only under TYPE_CHECKING) or that msgspec cannot check is not checked, with a warning."""
    module = sys.modules.get(job_type.__module__)
    globalns = dict(vars(module)) if module is not None else {}
    function = job_type.__dict__.get("_function", job_type.__dict__.get("_sync_function"))
    if function is not None:  # @job: the parameters' annotations live in the function's module
        globalns = dict(getattr(function.__func__ if isinstance(function, staticmethod) else function,
                                "__globals__", globalns))
    found: dict[str, Any] = {}
    for field in dataclasses.fields(job_type):  # type: ignore[arg-type]
        try:
            probe = types.SimpleNamespace(__annotations__={field.name: field.type})
            kind = typing.get_type_hints(probe, globalns=globalns, localns=dict(vars(job_type)),
                                         include_extras=True)[field.name]
            msgspec.inspect.type_info(kind)
        except Exception as exc:
            logger.warning("pgqueue: job %r: the annotation %r of field %r is not checked at dispatch: %s: %s",
                           job_type.name, field.type, field.name, type(exc).__name__, exc)
            kind = Any
        found[field.name] = kind
    return found


def _args_type(job_type: type[Job]) -> _ArgsType:
    found = job_type.__dict__.get("_args_type")
    if found is None:
        found = _ArgsType(job_type)
        job_type._args_type = found
    return found


def args_struct(job_type: type[Job]) -> type[msgspec.Struct]:
    """The msgspec struct that checks the job's args: bulk dispatch converts to it directly
    (``msgspec.convert(args, struct, strict=True)``) and calls :func:`check_args` only for the
    message when that fails."""
    return _args_type(job_type).struct


def check_args(job_type: type[Job], args: Mapping[str, Any]) -> Any:
    """Check ``args`` against the job's field annotations; returns them converted (a msgspec
    struct with one attribute per field). Raises QueuePayloadError naming field, expected
    type and given value."""
    checker = _args_type(job_type)
    try:
        return msgspec.convert(args, checker.struct, strict=True)
    except msgspec.ValidationError as exc:
        raise args_error(f"job {job_type.name!r} args", job_type._arg_names, checker.defaults,
                         checker.annotations, args, exc) from None


def _job_fields(function: Callable[..., Any], signature: inspect.Signature) -> tuple[dict[str, Any], dict[str, Any]]:
    """The args of a function job: each parameter's annotation (Any when it has none) and the defaults;
    ``context`` is not an arg."""
    annotations: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.name == "context":
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise QueueConfigurationError(f"@job {function.__qualname__}: *args/**kwargs are not supported")
        annotations[param.name] = param.annotation if param.annotation is not param.empty else Any
        if param.default is not param.empty:
            defaults[param.name] = param.default
    return annotations, defaults
