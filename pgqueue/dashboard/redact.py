"""Masking the args a job declares secret (``Job.redact``) before the dashboard shows them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pgqueue import registered_jobs

__all__ = ["MASK", "Redactor"]

MASK = "••••••"
# Secrets shorter than this are not searched for in messages and tracebacks: masking every
# "1" or "ab" in a traceback would hide more than it protects.
_MIN_SECRET_IN_TEXT = 4


class Redactor:
    """Masks arg fields by name: the job class's ``redact`` plus names given for every job."""

    def __init__(self, always: Iterable[str] = ()) -> None:
        self._always = frozenset(always)

    def fields(self, job_name: str | None) -> frozenset[str]:
        """The field names masked for a job (its class's ``redact``, looked up in the registry)."""
        job_class = registered_jobs().get(job_name or "")
        declared = getattr(job_class, "redact", ()) if job_class is not None else ()
        return self._always | frozenset(declared)

    def args(self, job_name: str | None, args: Any) -> tuple[Any, list[str]]:
        """``args`` with masked fields (at any depth) and the string values that were masked."""
        names = self.fields(job_name)
        secrets: list[str] = []
        if not names:
            return args, secrets

        def walk(value: Any) -> Any:
            if isinstance(value, dict):
                out = {}
                for key, inner in value.items():
                    if key in names:
                        secrets.extend(_strings(inner))
                        out[key] = MASK
                    else:
                        out[key] = walk(inner)
                return out
            if isinstance(value, list):
                return [walk(v) for v in value]
            return value

        return walk(args), secrets

    def envelope(self, envelope: Any) -> tuple[Any, list[str]]:
        """A stored envelope with its args masked, and the masked string values."""
        if not isinstance(envelope, dict):
            return envelope, []
        args, secrets = self.args(envelope.get("name"), envelope.get("args"))
        return {**envelope, "args": args}, secrets

    @staticmethod
    def text(text: str | None, secrets: Iterable[str]) -> str | None:
        """``text`` (a message, a traceback) with every occurrence of a masked value replaced."""
        if text is None:
            return None
        for secret in sorted({s for s in secrets if len(s) >= _MIN_SECRET_IN_TEXT}, key=len, reverse=True):
            text = text.replace(secret, MASK)
        return text


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, bool) or value is None:
        return []
    return [str(value)]
