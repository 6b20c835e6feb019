"""pgqueue: the surfaces of revisions 0003-0007 hold under adversarial input.

Revision ID: pgqueue_0008
Revises: pgqueue_0007
Create Date: 2026-12-01

sql/revisions/0008/0008_schema.sql and the functions below replace what let odd input loop,
lose a failure or act on a forged request.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0008"
down_revision: str | Sequence[str] | None = "pgqueue_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0008/0008_schema.sql":
        "85819bc783dcdb079b37d0ef28df074432204d2ba64fc14fce1e8fc49fde721e",
    # Periodic jobs: ticks the database decides from the registered schedule (issue 24, part C).
    "revisions/0008/functions/schedule_state.sql":
        "759eb21fdeec04542316a7d510d807b9142fe2229a89037d42c909bc3abb9645",
    "revisions/0008/functions/schedule_sync.sql":
        "2a7b217a6ba5fd2a9cb2b73879fd08a68a278368c9bb84627813e159eba15870",
    "revisions/0008/functions/enqueue_tick.sql":
        "423173d8904102b350d8f4ac0084a81364523e7b1e56fb755bd3c2d1228b2c9a",
    # Schedule ticks and expired unique keys are pruned by the workers' maintenance.
    "revisions/0008/functions/prune_ticks_and_keys.sql":
        "460040336cd770b97c2e31b0361830fa44abc50cbc49decc0d38a05baf28b623",
}

# The downgrade to 0007: drop what 0008 added, then the frozen copies of what it replaced.
DOWNGRADE_FILES = {
    "revisions/0008/downgrade.sql":
        "ba1de6bfa5cd9a2b23f5533ad8b0c254e5345c305f3c6ae1285894edb9dd89e9",
    # Periodic jobs: 0003's schedule_sync and enqueue_tick again.
    "revisions/0003/functions/schedule_sync.sql":
        "a468bb76d40df4da9445cb5245fdfa90bc692ee54a4f3554684dbd695dcc0255",
    "revisions/0003/functions/enqueue_tick.sql":
        "8d1030ad48c89d0eab78783de00d6ff4baa45bb4372970ac79092644241713cc",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
