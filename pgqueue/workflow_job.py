"""The job type of a workflow (issue 27): what ``@workflow`` makes of a function (see
:mod:`pgqueue.workflows` for what its steps do)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pgqueue.backoff import Backoff
from pgqueue.errors import QueueConfigurationError
from pgqueue.jobs import Job, _job_fields
from pgqueue.workflows import run_workflow

if TYPE_CHECKING:
    from pgqueue.job_context import JobContext

__all__ = ["WorkflowFactory", "WorkflowJob", "workflow"]


class WorkflowJob(Job, register=False):
    """A job made from a workflow function by :func:`workflow`: its fields are the function's parameters
    after the context; each attempt runs the function with a :class:`WorkflowContext`."""

    _function: ClassVar[Callable[..., Awaitable[Any]]]

    async def handle(self, context: JobContext) -> Any:  # the function's return value: the workflow's result
        kind = type(self)
        return await run_workflow(kind._function, self.args(), context, kind._workflow_version, kind.name)


class WorkflowFactory(Protocol):
    """What ``@workflow`` makes of a function, as type checkers see it: call it with the workflow's args
    (keywords) to get a dispatchable job. At run time it is a :class:`WorkflowJob` subclass."""

    name: str

    def __call__(self, **args: Any) -> WorkflowJob: ...


def workflow(*, name: str | None = None, queue: str | None = None, connection: str | None = None,  # noqa: PLR0913  # one keyword per Job setting
             tries: int | None = None, timeout: float | None = None,
             backoff: float | Sequence[float] | Backoff | None = None, priority: int = 0,
             redact: Sequence[str] = (), result_ttl: float | None = None,
             version: int = 1) -> Callable[[Callable[..., Any]], WorkflowFactory]:
    """Turn an ``async def f(context: WorkflowContext, **args)`` into a workflow (a job type)::

        @workflow(queue="orders")
        async def fulfil(context: WorkflowContext, order_id: int) -> str: ...

        handle = await client.dispatch(fulfil(order_id=1))

    The settings are a job's (see :func:`pgqueue.job`); ``tries`` counts the attempts that end otherwise
    than by a durable wait or a step's own retry (an exception outside a step, a crash, a lost lease, a
    timeout). ``version`` (an integer, default 1) is stored with each dispatch: a worker whose code has
    another version fails a run that had already recorded steps (see README, Workflows: versions).
    The function must be ``async def``; its parameters after the context are the args (JSON).
    """
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= 2_147_483_647:
        raise QueueConfigurationError(f"@workflow: version must be a positive integer, got {version!r}")

    def decorate(function: Callable[..., Any]) -> WorkflowFactory:
        if not callable(function) or inspect.isclass(function):
            raise QueueConfigurationError(f"@workflow needs an async function, got {function!r}")
        if not inspect.iscoroutinefunction(function):
            raise QueueConfigurationError(
                f"@workflow {function.__qualname__}: a workflow must be an `async def` function (its steps may "
                "call sync functions: context.step runs them in a thread)")
        signature = inspect.signature(function)
        parameters = list(signature.parameters.values())
        if not parameters or parameters[0].kind not in (parameters[0].POSITIONAL_ONLY,
                                                         parameters[0].POSITIONAL_OR_KEYWORD):
            raise QueueConfigurationError(f"@workflow {function.__qualname__}: the first parameter must take the "
                                          "WorkflowContext, e.g. async def f(context: WorkflowContext, ...)")
        annotations, defaults = _job_fields(function, signature.replace(parameters=parameters[1:]))
        namespace: dict[str, Any] = {
            "__annotations__": annotations, "__module__": function.__module__,
            "__qualname__": function.__qualname__, "__doc__": function.__doc__,
            "name": name or f"{function.__module__}:{function.__qualname__}",
            "queue": queue, "connection": connection, "tries": tries, "timeout": timeout, "backoff": backoff,
            "priority": priority, "redact": tuple(redact), "result_ttl": result_ttl,
            "_workflow_version": version, "_function": staticmethod(function), **defaults,
        }
        made: type[WorkflowJob] = type(function.__name__, (WorkflowJob,), namespace)
        return made  # type: ignore[return-value]  # a class satisfies the protocol at run time

    return decorate
