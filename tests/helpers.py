"""Small helpers shared by the tests."""

from __future__ import annotations

import json
import uuid
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo


def dsn_for_database(dsn: str, dbname: str) -> str:
    """The same server and credentials as ``dsn``, another database."""
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo("", **params)


def envelope(queue: str = "default", *, tries: int = 3, priority: int = 0,
             retry_until: float | None = None, name: str = "tests:noop",
             args: dict[str, Any] | None = None, job_id: uuid.UUID | None = None) -> dict[str, Any]:
    """A minimal envelope, as dispatch would write it, for tests of the stored functions."""
    return {
        "id": str(job_id or uuid.uuid4()),
        "name": name,
        "args": args or {},
        "connection": "database",
        "queue": queue,
        "priority": priority,
        "tries": tries,
        "timeout": 30.0,
        "backoff": {"kind": "fixed", "delays": [0.0]},
        "retry_until": retry_until,
        "version": 1,
    }


def as_json(value: Any) -> str:
    """JSON text for a ::jsonb parameter."""
    return json.dumps(value)
