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
        "618ffe00acbc0eef9c69a2f36d333abbfb105a72d5f0fc36e4846ebf92174afd",
    # Queue names and unique keys (issue 24 A): the tightened queue-name rule (shown first: the
    # rule's messages call it), the functions that inline it or take a queue name, and
    # enqueue_unique bounded under REPEATABLE READ / SERIALIZABLE.
    "revisions/0008/functions/shown.sql":
        "91badb3fa29d6e596ad508aaad7cb70f3f52f76034ba457a8bafb65482b3aaa9",
    "revisions/0008/functions/queue_name_problem.sql":
        "e8ffe2dac9c7c6eb005b1682ed2105964b16697ce5789f625fd2e40ac4e8b9f4",
    "revisions/0008/functions/enqueue.sql":
        "a40e23ed88b8ab234b364db1900128576433d6ebbd2f5b578b57e3412b9ff3cf",
    "revisions/0008/functions/enqueue_many.sql":
        "a96b885d5aa40fe8e1591c75f2f9902a4addcf62b1af189231e1196de54487de",
    "revisions/0008/functions/enqueue_unique.sql":
        "7ff6ec7d8ee8fbfe56cd71e5d2d204e3258842ee34d4ab580522a1da369bbbdf",
    "revisions/0008/functions/clear.sql":
        "13a56e5e0a83482777e7cd5ba89dfcf3fd1f17b8e959cbc527f744a060341ad9",
    "revisions/0008/functions/resume.sql":
        "7da11cdba74c54f211a5bd91a5a09e2474c621b93152c92189fc3835dd51e6ee",
    "revisions/0008/functions/retry_failed_all.sql":
        "996416b3652e2a84bbfdc7e2cd54e806361de42e56845d900dee30a83ffff7a0",
    "revisions/0008/functions/flush_failed.sql":
        "69cd16df1e97b9dc69392c7c32f5bca79a38b8356f7c1726d141b1da8a2e4774",
    # Issue 24, item 4: an attempt the worker interrupts is given back, counted as given_back.
    "revisions/0008/functions/record_outcomes.sql":
        "8f2eea824405329e2c5d6f3cc806e41101a4131cea1c28f31946cf0f47fc5c03",
    "revisions/0008/functions/release_interrupted.sql":
        "9ba25f320eb4da9cc927c5607915997cfa3a36f8fdae80a2cf8f985629c86da0",
    # A cancel notification is checked with the database before a worker acts on it (item 8).
    "revisions/0008/functions/cancelled.sql":
        "b3a5090165bc5a53587d6c612f528338d6fee7dafee41e96ebf37d1a45f0e42a",
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
        "894899ba571fc05a43825a1d78437fb7d2cca7f69519912e524e48c1ce4b135f",
    # Queue names and unique keys: the copies 0008 replaced.
    "revisions/0002/functions/queue_name_problem.sql":
        "6c4e2f98389431f32b1c1767ebbd49082eca5d0c5b87bb0483e60b1982c15903",
    "revisions/0002/functions/enqueue.sql":
        "5391e3f727b76646d4b19f7099e1c3264c5d85b74449d508b37f15741aef723d",
    "revisions/0002/functions/enqueue_many.sql":
        "7676f81b5d30f98bb5e4a8e21a9e09c7aa09dbd62b293fdb121e7f607bf24f1a",
    "revisions/0003/functions/enqueue_unique.sql":
        "4a02eca589f4912704b84b8771626971a24a3e2c8fce86c9737d90c26d23b9bb",
    "revisions/0002/functions/clear.sql":
        "a69b597dd833f8470f4cbd2e069d3b04858e77243e58b5b42fd7a3f25b62beb4",
    "revisions/0004/functions/resume.sql":
        "74d3508c3c5e430a0454031838b20d0795e133688a894c14b1c2995a739f89bb",
    "revisions/0002/functions/retry_failed_all.sql":
        "b8be2c08f29fe4cd39a6b01f013df4eee27a5a2aac89e82fb53371ca63fcd2c8",
    "revisions/0002/functions/flush_failed.sql":
        "4233d2a17ba7c1fd5295e073afa71a602bcc117c2c41ad79b5ed0c847a6deb37",
    # Issue 24, item 4.
    "revisions/0005/functions/record_outcomes.sql":
        "be54d76a471f5f43dbd7bb3d8bd1f79387bda5a23cd4eabbe0ba9e7746889558",
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
