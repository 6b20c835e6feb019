"""pgqueue: schema, tables, stats view and stored functions.

Revision ID: pgqueue_0001
Revises:
Create Date: 2026-11-29

The revision executes the files in sql/ (the single source of truth). A later change to a
stored function gets its own revision that runs the changed file again.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import drop_schema, run_sql_files

revision: str = "pgqueue_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("pgqueue",)
depends_on: str | Sequence[str] | None = None

FILES = [
    "schema/0001_schema.sql",
    "functions/enqueue.sql",
    "functions/enqueue_many.sql",
    "functions/reserve.sql",
    "functions/ack.sql",
    "functions/release.sql",
    "functions/release_unstarted.sql",
    "functions/extend.sql",
    "functions/fail.sql",
    "functions/record_failure.sql",
    "functions/retry_failed.sql",
    "functions/retry_failed_all.sql",
    "functions/forget_failed.sql",
    "functions/flush_failed.sql",
    "functions/clear.sql",
    "functions/next_due.sql",
    "functions/heartbeat.sql",  # issue 11; the lead moves it into revision 0002
]


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    drop_schema()
