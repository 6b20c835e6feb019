"""Retry delays: a fixed sequence or an exponential policy, stored in the envelope as data."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pgqueue.errors import QueueConfigurationError, QueuePayloadError


def _check_seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QueueConfigurationError(f"{what} must be a number of seconds, got {type(value).__name__} {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise QueueConfigurationError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return seconds


@dataclass(frozen=True)
class Backoff:
    """How long to wait before each retry.

    ``Backoff.fixed(1, 5)``: the first retry after 1 s, every later one after 5 s (the last
    value repeats). ``Backoff.exponential(base=1, factor=2, max=600, jitter=0.1)``: 1 s, 2 s,
    4 s, ... capped at 600 s, each spread by up to ±10 %.
    """

    delays: tuple[float, ...] = (0.0,)
    base: float | None = None
    factor: float = 2.0
    max: float = 600.0
    jitter: float = 0.0

    @classmethod
    def fixed(cls, *delays: float) -> Backoff:
        """Retry after these delays in turn; the last one repeats."""
        if not delays:
            raise QueueConfigurationError("backoff needs at least one delay, got an empty sequence")
        return cls(delays=tuple(_check_seconds(d, "backoff delay") for d in delays))

    @classmethod
    def exponential(cls, base: float = 1.0, factor: float = 2.0, max: float = 600.0,
                    jitter: float = 0.0) -> Backoff:
        """Retry after ``base * factor ** (retry - 1)`` seconds, capped at ``max``, spread by ``jitter``."""
        base_s = _check_seconds(base, "backoff base")
        max_s = _check_seconds(max, "backoff max")
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not math.isfinite(factor) \
                or factor < 1:
            raise QueueConfigurationError(f"backoff factor must be a finite number >= 1, got {factor!r}")
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
            raise QueueConfigurationError(f"backoff jitter must be between 0 and 1, got {jitter!r}")
        return cls(delays=(), base=base_s, factor=float(factor), max=max_s, jitter=float(jitter))

    @classmethod
    def coerce(cls, value: object) -> Backoff:
        """A Backoff from what a job class or connection may declare: number, sequence or Backoff."""
        if isinstance(value, Backoff):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return cls.fixed(value)
        if isinstance(value, Sequence) and not isinstance(value, str | bytes):
            return cls.fixed(*value)
        raise QueueConfigurationError(
            f"backoff must be a number, a sequence of numbers or a Backoff, got {type(value).__name__} {value!r}"
        )

    def delay(self, attempt: int) -> float:
        """Seconds to wait before the retry that follows failed attempt ``attempt`` (1-based)."""
        index = max(attempt, 1) - 1
        if self.base is None:
            return self.delays[min(index, len(self.delays) - 1)]
        raw = min(self.base * self.factor ** min(index, 1000), self.max)
        if self.jitter:
            raw *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, min(raw, self.max))

    def to_data(self) -> dict[str, Any]:
        """The JSON form stored in the envelope."""
        if self.base is None:
            return {"kind": "fixed", "delays": list(self.delays)}
        return {"kind": "exponential", "base": self.base, "factor": self.factor, "max": self.max,
                "jitter": self.jitter}

    @classmethod
    def from_data(cls, data: object) -> Backoff:
        """Read the envelope's JSON form back; raises QueuePayloadError when it is malformed.

        Workers read the same few policies over and over: parsed ones are remembered.
        """
        key: tuple[Any, ...] | None = None
        if isinstance(data, dict):
            delays = data.get("delays")
            key = (data.get("kind"), tuple(delays) if isinstance(delays, list) else delays, data.get("base"),
                   data.get("factor"), data.get("max"), data.get("jitter"))
            try:
                cached = _PARSED.get(key)
            except TypeError:  # an unhashable value inside: parse (and fail) the slow way
                key = None
            else:
                if cached is not None:
                    return cached
        parsed = cls._parse(data)
        if key is not None and len(_PARSED) < 1024:
            _PARSED[key] = parsed
        return parsed

    @classmethod
    def _parse(cls, data: object) -> Backoff:
        try:
            if not isinstance(data, Mapping):
                raise TypeError("not an object")
            if data.get("kind") == "fixed":
                return cls.fixed(*data["delays"])
            if data.get("kind") == "exponential":
                return cls.exponential(data["base"], data["factor"], data["max"], data.get("jitter", 0.0))
            raise ValueError(f"unknown kind {data.get('kind')!r}")
        except (TypeError, ValueError, KeyError, QueueConfigurationError) as exc:
            raise QueuePayloadError(f"envelope backoff {data!r} is malformed: {exc}") from None


_PARSED: dict[tuple[Any, ...], Backoff] = {}
