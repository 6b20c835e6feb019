"""pgqueue: history of what was processed (issue 15): job_stats, completed_jobs.

Revision ID: pgqueue_0005
Revises: pgqueue_0004
Create Date: 2026-11-30

sql/revisions/0005/0005_schema.sql adds pgqueue.job_stats (per-minute outcome counts, handler
durations and queue latencies per queue and job name), pgqueue.completed_jobs (acked jobs kept
for audit with keep_completed) and jobs.due_at (where the queue latency starts). New functions:
record_outcomes, prune_history. ack, release and fail get overloads that take the handler's run time (the old
calls keep working and count too); ack, release, fail, cancel and reserve write the history.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0005"
down_revision: str | Sequence[str] | None = "pgqueue_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0005/0005_schema.sql":
        "ac19dfa34cfeac7c3378167e20d9feed09b3fa4327fd3a5c262cc707d953fee0",
    "revisions/0005/functions/record_outcomes.sql":
        "be54d76a471f5f43dbd7bb3d8bd1f79387bda5a23cd4eabbe0ba9e7746889558",
    "revisions/0005/functions/ack.sql":
        "158f3978e445dd2da1e2c4090ffb945fc0ec2fcb77577935b1ad154acc394ebf",
    "revisions/0005/functions/release.sql":
        "ae5b38685634c12bba08c5d69a4204476600297820a203dfe0c92e5255981fd3",
    "revisions/0005/functions/fail.sql":
        "598614ec50534739d1dac7025281e8dd99f304e1f92d678ff1e0020a5aeab21d",
    "revisions/0005/functions/cancel.sql":
        "aac6f329a46e2a7e16ae3eacd210261e5347fa88d759cf9d9a5d2827a87190ff",
    "revisions/0005/functions/prune_history.sql":
        "ec574c80b92c28fb8a37d6f9e06520cf76770cab7aa59a12dc1fbfc55edc43bb",
    "revisions/0005/functions/reserve.sql":
        "42f954ab9f6bb758a0d4119eb8580f74a5baf136478ac42f720e2424bb22d8d1",
}

# The downgrade to 0004: drop what 0005 added, then the frozen functions it replaced again
# (ack, release and fail of 0002; cancel and reserve of 0004).
DOWNGRADE_FILES = {
    "revisions/0005/downgrade.sql":
        "6e1eb20529eab92d754bd675d6db78416b74b358467f219286f52b7dad7e4d6f",
    "revisions/0002/functions/ack.sql":
        "c5109c82f248a074e38a88f5f5eb1d7e87b071efbf030417205548c46cc7ceff",
    "revisions/0002/functions/release.sql":
        "76db8baa2d9db6d24afd4d411617650958131384673b8b1328bc2a90004c9906",
    "revisions/0002/functions/fail.sql":
        "0d4f2153ea211e59e7271b740b5dfaaa259c71d35744fccea6ec76485a662b7e",
    "revisions/0004/functions/cancel.sql":
        "2b66dedbe051bd85e44a12276ac598cbe27ffadaeafdae187dbc938227fef710",
    "revisions/0004/functions/reserve.sql":
        "c52f0fb530833221d0ce2e880eea93e8ead4196af9b5ceec985b6e9fea08baf4",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
