"""pgqueue: durable workflows, and what the next features keep in the database.

Revision ID: pgqueue_0010
Revises: pgqueue_0009
Create Date: 2026-12-01

sql/revisions/0010/upgrade.sql (tables) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0010"
down_revision: str | Sequence[str] | None = "pgqueue_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/0010.sql".
UPGRADE = (
    "revisions/0010/upgrade.sql",
    # issue 27: durable workflows
    "functions/workflow_checkpoint/0010.sql",
    "functions/workflow_step_failed/0010.sql",
    "functions/workflow_wait/0010.sql",
    "functions/workflow_child/0010.sql",
    "functions/workflow_steps_of/0010.sql",
    "functions/signal/0010.sql",
    "functions/prune_workflows/0010.sql",
    "functions/cancel/0010.sql",
    "functions/retry_failed_matching/0010.sql",
    # issue 26: blocked jobs in search and bulk actions
    "functions/jobs_matching/0010.sql",
    # issue 26: a retried batch member or parent (batches recounted, dependents back)
    "functions/jobs_requeued/0010.sql",
    "functions/jobs_ended/0010.sql",
    "functions/retry_failed/0010.sql",
    "functions/retry_failed_all/0010.sql",
    # issue 26: no dependencies or batch for a job holding a unique or debounce key
    "functions/add_dependencies/0010.sql",
    "functions/add_batch/0010.sql",
    # issue 26: a chain's line after its jobs ended (index dependent_jobs_parents_idx in upgrade.sql)
    "functions/job_family/0010.sql",
    "functions/job_state/0010.sql",
    # issue 28: adaptive limits per partition, a configurable cut, per-partition metrics
    "functions/set_adaptive_decrease/0010.sql",
    "functions/set_partition_adaptive_limit/0010.sql",
    "functions/backpressure/0010.sql",
    "functions/adaptive_acked/0010.sql",
    "functions/ack/0010.sql",
    "functions/set_partition_limit/0010.sql",
    "functions/set_partition_limits/0010.sql",
    "functions/partition_status/0010.sql",
    "functions/partition_depths/0010.sql",
    "functions/prune_partitions/0010.sql",
    # end issue 28
    # issue 28: the cheaper partitioned reservation, priority aging
    "functions/partition_allowance/0010.sql",
    "functions/reserve_partitions/0010.sql",
    "functions/aged_priority/0010.sql",
    "functions/reserve/0010.sql",
    "functions/set_aging/0010.sql",
)

# The downgrade to pgqueue_0009: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = (
    "revisions/0010/downgrade.sql",
    # issue 27: cancel without the workflow's children
    "functions/cancel/0005.sql",
    "functions/retry_failed_matching/0009.sql",
    # issue 26: blocked jobs in search and bulk actions
    "functions/jobs_matching/0009.sql",
    # issue 26: a retried batch member or parent (jobs_requeued dropped in revisions/0010/downgrade.sql)
    "functions/jobs_ended/0009.sql",
    "functions/retry_failed/0009.sql",
    "functions/retry_failed_all/0009.sql",
    # issue 26: no dependencies or batch for a job holding a unique or debounce key
    "functions/add_dependencies/0009.sql",
    "functions/add_batch/0009.sql",
    # issue 26: a chain's line after its jobs ended
    "functions/job_family/0009.sql",
    "functions/job_state/0009.sql",
    # issue 28: adaptive limits per partition, a configurable cut, per-partition metrics
    "functions/backpressure/0009.sql",
    "functions/adaptive_acked/0009.sql",
    "functions/ack/0009.sql",
    "functions/set_partition_limit/0009.sql",
    "functions/set_partition_limits/0009.sql",
    "functions/partition_status/0009.sql",
    "functions/prune_partitions/0009.sql",
    # end issue 28
    # issue 28: the cheaper partitioned reservation, priority aging
    "functions/partition_allowance/0009.sql",
    "functions/reserve_partitions/0009.sql",
    "functions/reserve/0009.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
