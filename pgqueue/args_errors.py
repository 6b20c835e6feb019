"""What a job's args check says when the args do not fit the job's fields: the field, the type it
expects and the value given (:func:`pgqueue.jobs.check_args` raises it)."""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from pgqueue.errors import QueuePayloadError

_AT = re.compile(r"^(?P<detail>.*) - at `\$(?P<path>.*)`$", re.DOTALL)


def args_error(what: str, fields: Sequence[str], defaults: frozenset[str], annotations: Mapping[str, Any],
               args: Mapping[str, Any], exc: msgspec.ValidationError) -> QueuePayloadError:
    """The error of args that msgspec refused (``exc``) for a job whose fields are ``fields`` (those in
    ``defaults`` may be left out), naming the field, the type it expects and the value given; ``what``
    names the args (``job 'x' args``)."""
    if not isinstance(args, Mapping):
        return QueuePayloadError(f"{what} must be an object of the job's fields, got {type(args).__name__}")
    unknown = [key for key in args if key not in fields]
    if unknown:
        return QueuePayloadError(
            f"{what}: unknown field {unknown[0]!r} (given {_short(args[unknown[0]])}); the job's fields are "
            f"{', '.join(fields) or 'none'}")
    missing = [name for name in fields if name not in args and name not in defaults]
    if missing:
        return QueuePayloadError(
            f"{what}: missing required field {missing[0]!r} ({_type_name(annotations.get(missing[0]))})")
    match = _AT.match(str(exc))
    detail, path = (match["detail"], match["path"]) if match else (str(exc), "")
    # msgspec's path is `.field` then `[index]`, `.key` or `[...]` (a dict value) segments.
    name = next((field for field in sorted(fields, key=len, reverse=True)
                 if path == f".{field}" or path.startswith((f".{field}.", f".{field}["))), None)
    if name is None:
        return QueuePayloadError(f"{what} do not match the job's fields: {detail}")
    inner = path[len(name) + 1:]
    where = f" at {inner}" if inner else ""
    return QueuePayloadError(
        f"{what}[{name!r}] must be {_type_name(annotations.get(name))}, given {_short(args[name])} "
        f"({detail.replace('`', '')}{where})")


def _type_name(kind: Any) -> str:
    if kind is None or kind is Any:
        return "any JSON value"
    if isinstance(kind, type) and not typing.get_args(kind):
        return kind.__qualname__
    return repr(kind).replace("typing.", "")


def _short(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return f"{type(value).__name__} {text}"
