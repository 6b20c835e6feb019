"""The envelope: what dispatch stores for a job and no later setting rewrites."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pgqueue.backoff import Backoff
from pgqueue.config import ConnectionConfig, check_timeout, check_tries
from pgqueue.errors import QueueConfigurationError, QueuePayloadError
from pgqueue.jobs import Job

ENVELOPE_VERSION = 1


def check_json_safe(value: Any, path: str) -> None:
    """Raise QueuePayloadError naming ``path`` if ``value`` cannot be stored as jsonb and read back equal."""
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QueuePayloadError(f"{path} is {value!r}: NaN and infinity are not JSON")
        return
    if isinstance(value, str):
        if "\x00" in value:
            raise QueuePayloadError(f"{path} contains a NUL character (\\x00), which PostgreSQL cannot store")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise QueuePayloadError(f"{path} contains an unpaired surrogate, which is not valid Unicode") from None
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_json_safe(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise QueuePayloadError(f"{path} has a key {key!r} of type {type(key).__name__}; JSON keys are strings")
            check_json_safe(key, f"{path} key {key!r}")
            check_json_safe(item, f"{path}[{key!r}]")
        return
    raise QueuePayloadError(
        f"{path} is of type {type(value).__module__}.{type(value).__qualname__}, which is not JSON; "
        "pass ids, strings, numbers, lists or dicts (e.g. str(uuid), date.isoformat())"
    )


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

    @classmethod
    def build(cls, job: Job, connection: ConnectionConfig, *, queue: str | None = None,
              priority: int | None = None) -> Envelope:
        """Fix a job's envelope: defaults from the job class, then the connection."""
        job_type = type(job)
        args = job.args()
        check_json_safe(args, f"job {job_type.name!r} args")
        chosen_queue = queue or job_type.queue or connection.queue
        if not isinstance(chosen_queue, str) or not 1 <= len(chosen_queue) <= 200:
            raise QueueConfigurationError(f"job {job_type.name!r}: queue must be 1 to 200 characters, "
                                          f"got {chosen_queue!r}")
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
        retry_until = job.retry_until()
        if retry_until is not None and (isinstance(retry_until, bool) or not isinstance(retry_until, int | float)
                                        or not math.isfinite(retry_until)):
            raise QueueConfigurationError(f"job {job_type.name!r}: retry_until() must return epoch seconds "
                                          f"or None, got {retry_until!r}")
        return cls(id=uuid.uuid4(), name=job_type.name, args=args, connection=connection.name,
                   queue=chosen_queue, priority=chosen_priority, tries=tries, timeout=timeout,
                   backoff=backoff, retry_until=None if retry_until is None else float(retry_until))

    def to_data(self) -> dict[str, Any]:
        """The JSON object stored in ``pgqueue.jobs.envelope``."""
        return {
            "id": str(self.id), "name": self.name, "args": self.args, "connection": self.connection,
            "queue": self.queue, "priority": self.priority, "tries": self.tries, "timeout": self.timeout,
            "backoff": self.backoff.to_data(), "retry_until": self.retry_until, "version": self.version,
        }

    def encode(self, max_bytes: int) -> str:
        """JSON text of the envelope; raises QueuePayloadError when it exceeds ``max_bytes``."""
        text = json.dumps(self.to_data(), separators=(",", ":"), ensure_ascii=False)
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            raise QueuePayloadError(
                f"job {self.name!r}: the envelope is {size} bytes, over the limit of {max_bytes} bytes "
                f"(connection {self.connection!r} max_payload_bytes); store large data elsewhere and pass its id"
            )
        return text

    @classmethod
    def decode(cls, data: object) -> Envelope:
        """Read a stored envelope; raises QueuePayloadError naming what is wrong."""
        if isinstance(data, str | bytes):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise QueuePayloadError(f"envelope is not JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise QueuePayloadError(f"envelope must be a JSON object, got {type(data).__name__}")
        try:
            args = data["args"]
            if not isinstance(args, dict):
                raise QueuePayloadError(f"envelope args must be an object, got {type(args).__name__}")
            retry_until = data.get("retry_until")
            return cls(
                id=uuid.UUID(str(data["id"])),
                name=_typed(data, "name", str),
                args=args,
                connection=_typed(data, "connection", str),
                queue=_typed(data, "queue", str),
                priority=int(data.get("priority", 0)),
                tries=_typed(data, "tries", int),
                timeout=float(_typed(data, "timeout", int | float)),
                backoff=Backoff.from_data(data.get("backoff")),
                retry_until=None if retry_until is None else float(retry_until),
                version=int(data.get("version", ENVELOPE_VERSION)),
            )
        except KeyError as exc:
            raise QueuePayloadError(f"envelope has no {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise QueuePayloadError(f"envelope is malformed: {exc}") from None


def _typed(data: Mapping[str, Any], key: str, kind: Any) -> Any:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise QueuePayloadError(f"envelope {key!r} has the wrong type: {type(value).__name__} {value!r}")
    return value
