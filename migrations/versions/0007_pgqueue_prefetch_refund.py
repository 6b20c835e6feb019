"""pgqueue: prefetch never makes a job fail unrun.

Revision ID: pgqueue_0007
Revises: pgqueue_0006
Create Date: 2026-11-30

sql/revisions/0007/upgrade.sql adds jobs.prefetched. reserve gains a fourth argument,
run_now: the jobs granted past it on their final try are marked prefetched, and the worker
clears the mark (the new mark_started) before it starts one; an expired lease still marked
belongs to a job that never ran and gives its attempt back. The three-argument reserve stays,
as a call of the new one that runs every job at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0007"
down_revision: str | Sequence[str] | None = "pgqueue_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256).
UPGRADE = (
    "revisions/0007/upgrade.sql",
    "functions/reserve/0007.sql",
    "functions/mark_started/0007.sql",
)

# The downgrade to 0006: drop what 0007 added, then 0006's frozen reserve again.
DOWNGRADE = (
    "revisions/0007/downgrade.sql",
    "functions/reserve/0006.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
