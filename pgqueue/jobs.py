"""Defining jobs: the :class:`Job` base class, the ``@job`` decorator and the registry.

A job type registers under a stable name (default ``module:QualName``) when its class is
created. Workers run only registered names: a payload never makes pgqueue import anything.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, dataclass_transform
from uuid import UUID

from pgqueue.backoff import Backoff
from pgqueue.errors import QueueConfigurationError

if TYPE_CHECKING:
    from pgqueue.context import JobContext
    from pgqueue.queue import Queue

_REGISTRY: dict[str, type[Job]] = {}


def registered_jobs() -> dict[str, type[Job]]:
    """A copy of the registry: job name -> job class."""
    return dict(_REGISTRY)


def lookup(name: str) -> type[Job] | None:
    """The job class registered under ``name``, or None."""
    return _REGISTRY.get(name)


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
    Field values must be JSON: they are stored as the job's args. A plain ``def handle``
    (sync) runs in the worker's thread pool and receives a
    :class:`~pgqueue.context.SyncJobContext`.
    """

    name: ClassVar[str]
    queue: ClassVar[str | None] = None
    connection: ClassVar[str | None] = None
    tries: ClassVar[int | None] = None
    timeout: ClassVar[float | None] = None
    backoff: ClassVar[float | Sequence[float] | Backoff | None] = None
    priority: ClassVar[int] = 0
    # The dataclass field names, in order: args() reads them without dataclasses.fields() per call.
    _arg_names: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, *, register: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(cls, kw_only=True)
        cls._arg_names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        if "name" not in cls.__dict__:
            cls.name = f"{cls.__module__}:{cls.__qualname__}"
        if not isinstance(cls.name, str) or not cls.name:
            raise QueueConfigurationError(f"job {cls.__qualname__}: name must be a non-empty string")
        if cls.backoff is not None:
            cls.backoff = Backoff.coerce(cls.backoff)
        if register:
            existing = _REGISTRY.get(cls.name)
            if existing is not None and existing.__qualname__ != cls.__qualname__:
                raise QueueConfigurationError(
                    f"job name {cls.name!r} is registered twice ({existing.__module__}.{existing.__qualname__} "
                    f"and {cls.__module__}.{cls.__qualname__}); give one of them another `name`"
                )
            _REGISTRY[cls.name] = cls

    async def handle(self, context: JobContext) -> None:
        """Run the job. Return to acknowledge it; raise to have it retried (see ``tries``)."""
        raise NotImplementedError(f"job {type(self).name!r} does not implement handle()")

    def retry_until(self) -> float | None:
        """An absolute deadline (epoch seconds) after which the job is not retried, or None."""
        return None

    def args(self) -> dict[str, Any]:
        """The job's fields as a dict: what is stored as the envelope's args."""
        return {name: getattr(self, name) for name in self._arg_names}

    async def dispatch(self, conn: Any = None, *, delay: float = 0.0, queue: str | None = None,
                       priority: int | None = None, connection: str | None = None,
                       using: Queue | None = None) -> UUID:
        """Enqueue this job; returns its id.

        With ``conn`` (a psycopg or SQLAlchemy connection or session) the job is inserted in
        the caller's transaction and commits or rolls back with it. Without, the queue's own
        pool is used (autocommit). ``using`` picks the :class:`~pgqueue.Queue` (default:
        :func:`pgqueue.default_queue`).
        """
        from pgqueue.queue import default_queue

        target = using or default_queue()
        return await target.push(self, conn=conn, delay=delay, queue=queue, priority=priority,
                                 connection=connection)

    def dispatch_sync(self, conn: Any, *, delay: float = 0.0, queue: str | None = None,
                      priority: int | None = None, connection: str | None = None,
                      using: Queue | None = None) -> UUID:
        """Like :meth:`dispatch`, for synchronous code: ``conn`` is a psycopg ``Connection`` or a
        SQLAlchemy ``Session``/``Connection``; the job joins its transaction."""
        from pgqueue.queue import default_queue

        target = using or default_queue()
        return target.push_sync(self, conn=conn, delay=delay, queue=queue, priority=priority,
                                connection=connection)


class FunctionJob(Job, register=False):
    """A job made from a function by :func:`job`; its fields are the function's parameters."""

    _function: ClassVar[Callable[..., Awaitable[Any]]]
    _wants_context: ClassVar[bool]

    async def handle(self, context: JobContext) -> None:
        kwargs = self.args()
        if self._wants_context:
            kwargs["context"] = context
        await type(self)._function(**kwargs)


class SyncFunctionJob(FunctionJob, register=False):
    """A job made from a plain (sync) function by :func:`job`: workers run it in their thread pool,
    with a :class:`~pgqueue.context.SyncJobContext` as ``context``."""

    _sync_function: ClassVar[Callable[..., Any]]

    def handle(self, context: Any) -> None:  # type: ignore[override]  # sync: run in a thread
        kwargs = self.args()
        if self._wants_context:
            kwargs["context"] = context
        type(self)._sync_function(**kwargs)


class JobFactory(Protocol):
    """What ``@job`` makes of a function, as type checkers see it: call it with the job's
    args (keywords) to get a dispatchable job. At run time it is a :class:`FunctionJob` subclass."""

    name: str

    def __call__(self, **args: Any) -> FunctionJob: ...


def job(*, name: str | None = None, queue: str | None = None, connection: str | None = None,
        tries: int | None = None, timeout: float | None = None,
        backoff: float | Sequence[float] | Backoff | None = None,
        priority: int = 0) -> Callable[[Callable[..., Any]], JobFactory]:
    """Turn a function into a job type::

        @job(queue="emails", tries=5)
        async def send_welcome(user_id: int, context: JobContext) -> None: ...

        await send_welcome(user_id=7).dispatch(conn)

    A parameter named ``context`` receives the :class:`JobContext`; the others are the args.
    A plain (sync) function runs in the worker's thread pool and its ``context`` is a
    :class:`~pgqueue.context.SyncJobContext` (the same methods, blocking).
    """

    def decorate(function: Callable[..., Any]) -> JobFactory:
        if not callable(function) or inspect.isclass(function):
            raise QueueConfigurationError(f"@job needs a function, got {function!r}")
        is_async = inspect.iscoroutinefunction(function)
        signature = inspect.signature(function)
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
            "_function" if is_async else "_sync_function": staticmethod(function),
            "_wants_context": "context" in signature.parameters,
            **defaults,
        }
        made: type[FunctionJob] = type(function.__name__, (FunctionJob if is_async else SyncFunctionJob,),
                                       namespace)
        return made  # type: ignore[return-value]  # a class satisfies the protocol at run time

    return decorate
