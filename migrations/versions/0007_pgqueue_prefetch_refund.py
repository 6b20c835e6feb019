"""pgqueue: prefetch never makes a job fail unrun (issue 18).

Revision ID: pgqueue_0007
Revises: pgqueue_0006
Create Date: 2026-11-30

sql/revisions/0007/0007_schema.sql adds jobs.prefetched. reserve gains a fourth argument,
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

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0007/0007_schema.sql":
        "bd2be0851d7e0c0f4310c17b493aa3404f9887dbf0ea24e85df89872ea57950f",
    "revisions/0007/functions/reserve.sql":
        "ba73ae38eb9129e5efa6e14b7a11b132f38733fcf3f09134f3a9fb2e223edf06",
    "revisions/0007/functions/mark_started.sql":
        "278cd6ea8f12a69af0375fae35ab9beb3f3fe026a073b13af3370f89c77b9f66",
}

# The downgrade to 0006: drop what 0007 added, then 0006's frozen reserve again.
DOWNGRADE_FILES = {
    "revisions/0007/downgrade.sql":
        "00ea2dabf932544ccbde239af5484c2c59bab98cb5ce605cd3e9338dcfee8a09",
    "revisions/0006/functions/reserve.sql":
        "e16bdaef7dd6628c88d2e4320daf42a37f6c06ae70de42143984b2e3ef4de452",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
