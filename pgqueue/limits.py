"""The bounds pgqueue enforces on what is stored, in one place.

The stored functions in ``sql/`` enforce the same numbers (a test compares them), so a job
refused here is refused there too, whether it comes through the Python API or straight
from SQL.
"""

from __future__ import annotations

import re

#: A job's args may nest arrays and objects this many levels deep at most; the args
#: object itself is level 1. Deeper data cannot be decoded safely by every client
#: (Python's ``json`` raises ``RecursionError`` near 1,000 levels) and is never needed.
MAX_ARGS_DEPTH = 64

#: The longest a job may be delayed (dispatch ``delay``, ``release`` delay): 10 years.
MAX_DELAY_SECONDS = 315_360_000.0

#: Bounds of a lease renewal (``context.extend``, the heartbeat, a reservation's lease):
#: at least 1 ms (shorter ends the lease at once), at most one year.
MIN_LEASE_SECONDS = 0.001
MAX_LEASE_SECONDS = 31_536_000.0

#: The longest interval of a periodic job declared as a ``datetime.timedelta``: 365 days.
#: Longer periods read better as a cron expression (``"0 3 1 1 *"``: every 1 January).
MAX_SCHEDULE_INTERVAL_SECONDS = 31_536_000

#: The longest period a schedule is registered with (``pgqueue.schedules.period_seconds``, the most
#: seconds between two of its ticks): 100 years. cronsim finds no tick after 50 years without one.
MAX_SCHEDULE_PERIOD_SECONDS = 3_155_760_000

#: The most missed ticks one schedule may enqueue after downtime (``schedule_catch_up``).
MAX_CATCH_UP = 1000

#: The longest queue name, in characters.
MAX_QUEUE_NAME_LENGTH = 200

# A queue name: 1 to 200 characters, no comma (``--queue a,b`` splits on commas), no
# control characters, and no white space at either end (the CLI strips it).
_QUEUE_NAME = re.compile(r"[^,\s\x00-\x1f\x7f](?:[^,\x00-\x1f\x7f]*[^,\s\x00-\x1f\x7f])?")


def queue_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid queue name, or None when it is."""
    if not isinstance(name, str):
        return f"a queue name must be a string, got {type(name).__name__} {name!r}"
    if not 1 <= len(name) <= MAX_QUEUE_NAME_LENGTH:
        return f"a queue name must be 1 to {MAX_QUEUE_NAME_LENGTH} characters, got {len(name)}: {name!r}"
    if _QUEUE_NAME.fullmatch(name) is None:
        return (f"queue name {name!r} is not valid: it may not contain a comma or a control character, "
                "nor start or end with white space")
    return None
