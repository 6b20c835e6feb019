"""pgqueue: hardening (issue 11): pinned search_path, bounds, envelope checks, queue-name rule.

Revision ID: pgqueue_0002
Revises: pgqueue_0001
Create Date: 2026-11-30

Every stored function is replaced by its copy in sql/revisions/0002/functions/, which pins
``search_path = pg_catalog, pg_temp`` (no object a caller can create in a schema of its
path is ever called by them), bounds delays and lease seconds, and makes enqueue and
enqueue_many refuse a malformed envelope, a bad queue name and args nested deeper than 64
levels by name. New: queue_name_problem and envelope_problem (helpers), and heartbeat (the
worker's lease renewal of all its running handlers in one statement).
sql/revisions/0002/0002_schema.sql puts the queue-name rule on pgqueue.jobs as a CHECK.

To add a function to this revision before it ships: copy sql/functions/<name>.sql to
sql/revisions/0002/functions/, add it to FILES with its checksum
(``python -c "from pgqueue.migration_support import checksum; from pgqueue.resources import
sql_file; print(checksum(sql_file('revisions/0002/functions/<name>.sql')))"``); the downgrade
drops it without further change (it drops every function 0001 did not install).
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0002"
down_revision: str | Sequence[str] | None = "pgqueue_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0002/0002_schema.sql":
        "861294a812c2cd3cafa6085fc1e0f1cca9fa5c9d2cf3f85c331c9c702a67a315",
    "revisions/0002/functions/queue_name_problem.sql":
        "6c4e2f98389431f32b1c1767ebbd49082eca5d0c5b87bb0483e60b1982c15903",
    "revisions/0002/functions/envelope_problem.sql":
        "bda41366eaa163026801a177d28b7ad1bd01fe8ed200c4a878b4715a410d25d6",
    "revisions/0002/functions/enqueue.sql":
        "5391e3f727b76646d4b19f7099e1c3264c5d85b74449d508b37f15741aef723d",
    "revisions/0002/functions/enqueue_many.sql":
        "7676f81b5d30f98bb5e4a8e21a9e09c7aa09dbd62b293fdb121e7f607bf24f1a",
    "revisions/0002/functions/reserve.sql":
        "79d55f27da2e6e04158210534d4af0b94273402157d611ca911a05b835fd0402",
    "revisions/0002/functions/ack.sql":
        "c5109c82f248a074e38a88f5f5eb1d7e87b071efbf030417205548c46cc7ceff",
    "revisions/0002/functions/release.sql":
        "76db8baa2d9db6d24afd4d411617650958131384673b8b1328bc2a90004c9906",
    "revisions/0002/functions/release_unstarted.sql":
        "f72266accaf6afe8c53e6cebf7c7c435e24bdb17d56e4ba0f33966f24b3c3895",
    "revisions/0002/functions/extend.sql":
        "64455e1c87b1236fbbe14966bf2236ace56455e5f731fd227b448dc16ab7f274",
    "revisions/0002/functions/fail.sql":
        "0d4f2153ea211e59e7271b740b5dfaaa259c71d35744fccea6ec76485a662b7e",
    "revisions/0002/functions/record_failure.sql":
        "68f62462065c722b947fc8f577d1faa412a7f8da7204fe82620302775d2f5fec",
    "revisions/0002/functions/retry_failed.sql":
        "43ea209fe921df686df1f2211567507b443bff927db72644038b45828810a9f3",
    "revisions/0002/functions/retry_failed_all.sql":
        "b8be2c08f29fe4cd39a6b01f013df4eee27a5a2aac89e82fb53371ca63fcd2c8",
    "revisions/0002/functions/forget_failed.sql":
        "d7849e9ea3125a1823c136e72ff9d3116658b21ad600b2986ac873b1ce2bef25",
    "revisions/0002/functions/flush_failed.sql":
        "4233d2a17ba7c1fd5295e073afa71a602bcc117c2c41ad79b5ed0c847a6deb37",
    "revisions/0002/functions/clear.sql":
        "a69b597dd833f8470f4cbd2e069d3b04858e77243e58b5b42fd7a3f25b62beb4",
    "revisions/0002/functions/next_due.sql":
        "b8169136d0b521bdae158a9748e6f8d46ca5a04611a28ad7e13fd00b349e1016",
    "revisions/0002/functions/heartbeat.sql":
        "abbce29e87b7ea9a4d262867126e5d6de3247b9c098709558ef01b241fc8a7be",
}

# The downgrade: undo the schema change and drop what 0002 added, then 0001's own function
# files again (the same frozen copies revision 0001 runs), restoring their bodies and settings.
DOWNGRADE_FILES = {
    "revisions/0002/downgrade.sql":
        "b498da7cbd34760fe448b3bb62815919a84937fa5548324b10371ae092d5a4d8",
    "revisions/0001/functions/enqueue.sql":
        "10741439c8c996f1ff22aa602fe2758b832e129105dd28139a2d3aea8259f64a",
    "revisions/0001/functions/enqueue_many.sql":
        "6453c69d062978accf1de29218fefb3bc6830e4dd53b46f3349494ecc93d5842",
    "revisions/0001/functions/reserve.sql":
        "8d7cd56f0f32f0e99b1c781906da2f64f35a4b10d2073751f6f7ab179b5c2a62",
    "revisions/0001/functions/ack.sql":
        "ffd43182b15ef90dcea44817dbba962467962fbe0ad569769b00e75c897ff501",
    "revisions/0001/functions/release.sql":
        "c9ba56d543d36992386d954f721954236d32b59b76422d6c85ec6f21bad0e3b4",
    "revisions/0001/functions/release_unstarted.sql":
        "e9fd272817a89f0b1451a804d16fc26c16172d32182a6966287466167a34630b",
    "revisions/0001/functions/extend.sql":
        "9d0c45fb4c07776b52a35ba3da867aaaf78cc554a0086c5674d34cc80b606b8b",
    "revisions/0001/functions/fail.sql":
        "befa112d21408696b6605f7bd157ea5a139cf7c4cc2ea4031739e7e573944488",
    "revisions/0001/functions/record_failure.sql":
        "b9dc55bf805554d6970a3984e855935598e6081bef539f51ffabb70f044f6e18",
    "revisions/0001/functions/retry_failed.sql":
        "9f3926e36b3b48b0205f281f62f3dccd80980e38e69bc0e089b7a3bdc1a7c79d",
    "revisions/0001/functions/retry_failed_all.sql":
        "04fcdceb46547f0791062756b3374ce95cc230abc0ca2786b342e5ba56e22748",
    "revisions/0001/functions/forget_failed.sql":
        "ee3d73ce0e986b20061a6c88e5bf953c51e65bd5167e3f0fb2e3ecb285ab96c5",
    "revisions/0001/functions/flush_failed.sql":
        "785cbefc71edd45bf55b6f30c5c9dfe6dcc17746c066d5e24a559df8d5cd5818",
    "revisions/0001/functions/clear.sql":
        "0cc2a62cc0a4773c9787039ed4a1d73d6a99004e28e1b4292aa0b6e46330afdc",
    "revisions/0001/functions/next_due.sql":
        "ccab0ae88997dc109d3ebcf7514875d0d324684e054dd6c86327f2590cc535ec",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
