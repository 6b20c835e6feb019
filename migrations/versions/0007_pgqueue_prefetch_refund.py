"""pgqueue: a prefetched job that never started does not lose a try (issue 18).

Revision ID: pgqueue_0007
Revises: pgqueue_0006
Create Date: 2026-11-30

sql/revisions/0007/0007_schema.sql adds jobs.prefetched and jobs.refunded. reserve gains a
fourth argument, run_now: the jobs granted past it are marked prefetched until the worker
reports them started (the new mark_started); an expired lease still marked gives its attempt
back, once per job. The three-argument reserve stays, as a call of the new one that runs
every job at once.
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
        "a93b4da8ccc38f2dc3f8864849b22e03d61327089b6e97076844bc128313caf6",
    "revisions/0007/functions/reserve.sql":
        "deb05c5e6c82ef9715cf1222eb65bd45fbd3051bc24fb861a84ceb78eac643f3",
    "revisions/0007/functions/mark_started.sql":
        "7f4e62a042fadf24da4ee2a8c7a5bd4e2b9803a10a38d45cf20c3c814e1596f6",
}

# The downgrade to 0006: drop what 0007 added, then 0006's frozen reserve again.
DOWNGRADE_FILES = {
    "revisions/0007/downgrade.sql":
        "e425cf47e7f9b36304e7fc2b5db44100c53d181c746c29cd2b0fdee7dc7d663d",
    "revisions/0006/functions/reserve.sql":
        "e16bdaef7dd6628c88d2e4320daf42a37f6c06ae70de42143984b2e3ef4de452",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
