"""JSON values as pgqueue stores them (args, results, progress notes, errors): the check that a
value can be stored as jsonb and read back equal, and the compact encoder. A room of its own,
below the envelope, the context and the results, which all use it."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from pgqueue.errors import QueuePayloadError
from pgqueue.limits import MAX_ARGS_DEPTH

__all__ = ["check_json_safe", "dumps_json"]

_ENCODER = msgspec.json.Encoder()


def dumps_json(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is. msgspec's encoder is 4x faster than the standard
    library's for small args (bulk dispatch encodes every job's), but writes NaN and infinity as
    ``null`` and encodes more than JSON types: callers pass values :func:`check_json_safe` (or
    :func:`_plainly_json`) accepted."""
    return _ENCODER.encode(value).decode()


def check_json_safe(value: Any, path: str) -> None:
    """Raise QueuePayloadError naming ``path`` if ``value`` cannot be stored as jsonb and read back equal.

    Arrays and objects may nest :data:`~pgqueue.limits.MAX_ARGS_DEPTH` levels deep (``value``
    itself is level 1); a list or dict that contains itself is refused by name.
    """
    _check_json(value, path, 1, set())


def _check_json(value: Any, path: str, depth: int, open_containers: set[int]) -> None:
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QueuePayloadError(f"{path} is {value!r}: NaN and infinity are not JSON")
        return
    if isinstance(value, str):
        _check_text(value, path)
        return
    if isinstance(value, list | tuple | dict):
        if id(value) in open_containers:
            raise QueuePayloadError(f"{path} is a {type(value).__name__} that contains itself; self-referencing "
                                    "data cannot be stored as JSON")
        if depth > MAX_ARGS_DEPTH:
            raise QueuePayloadError(
                f"{path} nests arrays and objects deeper than {MAX_ARGS_DEPTH} levels (the args object is "
                f"level 1), the most a job's args may have; flatten the data, or store it elsewhere and pass its id")
        open_containers.add(id(value))
        _check_items(value, path, depth, open_containers)
        open_containers.discard(id(value))
        return
    raise QueuePayloadError(
        f"{path} is of type {type(value).__module__}.{type(value).__qualname__}, which is not JSON; "
        "pass ids, strings, numbers, lists or dicts (e.g. str(uuid), date.isoformat())"
    )


def _check_text(value: str, path: str) -> None:
    if "\x00" in value:
        raise QueuePayloadError(f"{path} contains a NUL character (\\x00), which PostgreSQL cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise QueuePayloadError(f"{path} contains an unpaired surrogate, which is not valid Unicode") from None


def _check_items(value: list[Any] | tuple[Any, ...] | dict[Any, Any], path: str, depth: int,
                 open_containers: set[int]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise QueuePayloadError(
                    f"{path} has a key {key!r} of type {type(key).__name__}; JSON keys are strings")
            _check_json(key, f"{path} key {key!r}", depth, open_containers)
            _check_json(item, f"{path}[{key!r}]", depth + 1, open_containers)
    else:
        for index, item in enumerate(value):
            _check_json(item, f"{path}[{index}]", depth + 1, open_containers)
