"""Reverts: a revert's delta says which delta it set its table back to; a range says which
delta it committed, and which revert undid it

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

`table_delta.reverts_to`: the delta whose state a revert's delta restored (null for every
other delta). `job_log.target_table` and `target_delta_num`: the versioned table and the
delta a successful range committed its rows in, written with its SUCCESS; a revert of
that table to an earlier delta marks the range REVERTED and records its own delta in
`reverted_by_delta`, in the revert's commit. Ranges that succeeded before this revision
take their table and delta from their last attempt's `write` step (its output names both),
so that a revert finds them too.
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("table_delta") as batch:
        batch.add_column(sa.Column("reverts_to", sa.BigInteger, nullable=True))
    with op.batch_alter_table("job_log") as batch:
        batch.add_column(sa.Column("target_table", sa.String(255), nullable=True))
        batch.add_column(sa.Column("target_delta_num", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("reverted_by_delta", sa.BigInteger, nullable=True))
        batch.create_index("ix_job_log_target", ["target_table", "target_delta_num"])
    _record_targets_of_earlier_ranges()


def _record_targets_of_earlier_ranges() -> None:
    job_log = sa.table(
        "job_log",
        sa.column("job_id"),
        sa.column("attempt"),
        sa.column("status"),
        sa.column("target_table"),
        sa.column("target_delta_num"),
    )
    step_log = sa.table(
        "step_log", sa.column("job_id"), sa.column("attempt"), sa.column("step_id"), sa.column("output")
    )
    conn = op.get_bind()
    writes = conn.execute(
        sa.select(job_log.c.job_id, step_log.c.output)
        .join(step_log, sa.and_(step_log.c.job_id == job_log.c.job_id, step_log.c.attempt == job_log.c.attempt))
        .where(job_log.c.status == "SUCCESS", step_log.c.step_id == "write")
    ).all()
    for job_id, output in writes:
        try:
            written = json.loads(output or "{}")
        except ValueError:
            continue  # not a range's write step: nothing to record
        table, delta_num = written.get("table"), written.get("delta_num")
        if isinstance(table, str) and isinstance(delta_num, int):
            conn.execute(
                job_log.update()
                .where(job_log.c.job_id == job_id)
                .values(target_table=table, target_delta_num=delta_num)
            )


def downgrade() -> None:
    # Earlier revisions know no REVERTED range: it was ingested once, as SUCCESS says.
    job_log = sa.table("job_log", sa.column("status"))
    op.get_bind().execute(job_log.update().where(job_log.c.status == "REVERTED").values(status="SUCCESS"))
    with op.batch_alter_table("job_log") as batch:
        batch.drop_index("ix_job_log_target")
        batch.drop_column("reverted_by_delta")
        batch.drop_column("target_delta_num")
        batch.drop_column("target_table")
    with op.batch_alter_table("table_delta") as batch:
        batch.drop_column("reverts_to")
