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

#: The largest whole number a stored function takes for a count (a PostgreSQL ``integer``): a
#: queue's concurrency, rate and burst, the jobs one reservation asks for, a page of failures.
MAX_SQL_INTEGER = 2_147_483_647

#: The oldest cut-off for deleting failure records by age (``flush(older_than_hours=)``,
#: ``queue:prune-failed --hours``), in hours: 10 years.
MAX_FLUSH_HOURS = MAX_DELAY_SECONDS / 3600

#: The longest queue name, in characters.
MAX_QUEUE_NAME_LENGTH = 200

#: The code points a queue name may not contain anywhere (inclusive ranges), besides the comma
#: (``--queue a,b`` splits on commas): every character of the Unicode categories Cc (controls,
#: C0 and C1), Cf (format characters: bidi controls such as U+202E, zero-width characters such
#: as U+200B, tags), Zl and Zp (U+2028, U+2029) and Cs (surrogates), and the other default
#: ignorable code points (variation selectors, Hangul fillers, ...), which display as nothing.
#: A name holding one could look like another, or reorder the text around it in a terminal.
#: Frozen here rather than read from :mod:`unicodedata`, whose data moves with the Python
#: version: the rule is the same in every Python and in SQL (``sql/functions/queue_name_problem/``
#: spells out the same ranges; tests/test_queue_names.py and tests/test_sql_hardening.py check
#: both, and that the ranges still cover those categories of the running Python's Unicode data).
QUEUE_NAME_REFUSED: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605),
    (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2),
    (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x2028, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xD800, 0xDFFF), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)

#: White space a queue name may not start or end with (the CLI strips it; inside a name it is
#: allowed): the characters ``str.isspace()`` accepts that :data:`QUEUE_NAME_REFUSED` does not
#: already refuse everywhere, spelled out so the rule does not depend on a locale or a version.
QUEUE_NAME_EDGE_SPACE: tuple[tuple[int, int], ...] = (
    (0x0020, 0x0020), (0x00A0, 0x00A0), (0x1680, 0x1680), (0x2000, 0x200A), (0x202F, 0x202F),
    (0x205F, 0x205F), (0x3000, 0x3000),
)

#: The longest unique key, in bytes of UTF-8: PostgreSQL's unique index entries hold at most
#: about 2,700 bytes, so a bound in characters (3 bytes each for CJK) could not keep keys under it.
MAX_UNIQUE_KEY_BYTES = 1000

#: The longest a unique key of scope ``period`` may be held, in seconds: 10 years, as a delay.
MAX_UNIQUE_PERIOD_SECONDS = MAX_DELAY_SECONDS

#: At most this many characters of a refused value are shown in an error message.
SHOWN_CHARACTERS = 100


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(re.escape(chr(low)) if low == high else f"{re.escape(chr(low))}-{re.escape(chr(high))}"
                   for low, high in ranges)


_FORBIDDEN = re.compile(f"[,{_char_class(QUEUE_NAME_REFUSED)}]")
_EDGE_SPACE = re.compile(f"[{_char_class(QUEUE_NAME_EDGE_SPACE)}]")
# What messages escape: what the rule refuses, and white space other than U+0020.
_ESCAPED = re.compile(f"[{_char_class(QUEUE_NAME_REFUSED)}{_char_class(QUEUE_NAME_EDGE_SPACE[1:])}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def shown(text: str) -> str:
    """``text`` as pgqueue's error messages show it: in single quotes, its first
    :data:`SHOWN_CHARACTERS` characters (then ``...``), every character the queue-name rule
    refuses and every white space but U+0020 written as ``\\uXXXX`` (``\\UXXXXXXXX`` beyond
    U+FFFF), so a control or bidi character in a bad value cannot garble the message.
    ``pgqueue.shown(text)`` in SQL gives the same text."""
    head = _ESCAPED.sub(_escape, text[:SHOWN_CHARACTERS])
    return f"'{head}'" + ("..." if len(text) > SHOWN_CHARACTERS else "")


def _code_point(character: str) -> str:
    return f"U+{ord(character):04X}"


def queue_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid queue name, or None when it is.

    A queue name is 1 to :data:`MAX_QUEUE_NAME_LENGTH` characters, has no comma and no character
    of :data:`QUEUE_NAME_REFUSED`, and neither starts nor ends with white space
    (:data:`QUEUE_NAME_EDGE_SPACE`). ``pgqueue.queue_name_problem(name)`` in SQL applies the same
    rule and gives the same message; the CHECK ``jobs_queue_name`` on ``pgqueue.jobs`` holds it too.
    """
    if not isinstance(name, str):
        return f"a queue name must be a string, got {type(name).__name__} {_clipped_repr(name)}"
    if not 1 <= len(name) <= MAX_QUEUE_NAME_LENGTH:
        return f"a queue name must be 1 to {MAX_QUEUE_NAME_LENGTH} characters, got {len(name)}: {shown(name)}"
    found = _FORBIDDEN.search(name)
    if found is not None:
        return _forbidden_character(name, found.group())
    for edge, where in ((name[0], "starts"), (name[-1], "ends")):
        if _EDGE_SPACE.match(edge):
            return f"queue name {shown(name)} is not valid: it {where} with white space ({_code_point(edge)})"
    return None


def _forbidden_character(name: str, character: str) -> str:
    if character == ",":
        return (f"queue name {shown(name)} is not valid: a queue name may not contain a comma, which "
                "separates queue names (--queue high,default)")
    return (f"queue name {shown(name)} is not valid: it contains {_code_point(character)}, and a queue "
            "name may not contain control, format or other invisible characters, nor line or paragraph "
            "separators")


def unique_key_problem(key: object) -> str | None:
    """Why ``key`` cannot be a unique key, or None when it can: a key is a string of 1 to
    :data:`MAX_UNIQUE_KEY_BYTES` bytes of UTF-8 (PostgreSQL stores no NUL and no unpaired
    surrogate). ``pgqueue.enqueue_unique`` refuses the same keys with the same message."""
    if not isinstance(key, str):
        return f"a unique key must be a string, got {type(key).__name__} {_clipped_repr(key)}"
    if "\x00" in key:
        return f"unique key {shown(key)} contains U+0000 (NUL), which PostgreSQL cannot store"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return (f"unique key {shown(key)} contains {_code_point(key[exc.start])}, an unpaired surrogate, which is "
                "not valid Unicode")
    if not 1 <= size <= MAX_UNIQUE_KEY_BYTES:
        return f"a unique key must be 1 to {MAX_UNIQUE_KEY_BYTES} bytes of UTF-8, got {size}: {shown(key)}"
    return None


def _clipped_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "..."


#: The longest partition (issue 28: ``dispatch(job, partition=...)``, a job type's ``partition_by``),
#: in characters.
MAX_PARTITION_LENGTH = 200

# A partition may hold commas and white space (it is never split), but no character of QUEUE_NAME_REFUSED.
_PARTITION_REFUSED = re.compile(f"[{_char_class(QUEUE_NAME_REFUSED)}]")


def partition_problem(value: object) -> str | None:
    """Why ``value`` cannot be a job's partition, or None when it can: a string of 1 to
    :data:`MAX_PARTITION_LENGTH` characters with no character of :data:`QUEUE_NAME_REFUSED`
    (controls, format and other invisible characters; commas and inner spaces are fine).
    ``pgqueue.partition_problem`` in SQL (and the CHECK on ``pgqueue.jobs.partition``) refuses the same."""
    if not isinstance(value, str):
        return f"a partition must be a string, got {type(value).__name__} {_clipped_repr(value)}"
    if not 1 <= len(value) <= MAX_PARTITION_LENGTH:
        return f"a partition must be 1 to {MAX_PARTITION_LENGTH} characters, got {len(value)}: {shown(value)}"
    found = _PARTITION_REFUSED.search(value)
    if found is not None:
        return (f"partition {shown(value)} is not valid: it contains {_code_point(found.group())}, and a partition "
                "may not contain control, format or other invisible characters")
    return None
