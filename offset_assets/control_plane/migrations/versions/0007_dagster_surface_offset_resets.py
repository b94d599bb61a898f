"""Offsets reset outside a run, kept until a run reports them

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29

`offset-assets rescan`, `offset-assets reprocess` and `OffsetStore.reset_offset` delete
offsets between runs; the value each deleted offset had is kept here, so the next run
that completes reports it (`offsets_reset` in its metadata) like a backfill reports the
offsets it reset itself. That run's final commit deletes the rows.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "transform_offset_reset",
        sa.Column("transformation_id", sa.String(255), primary_key=True),
        sa.Column("input_table_name", sa.String(255), primary_key=True),
        sa.Column("update_ts_offset", sa.Double, nullable=False),
        sa.Column("reset_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("transform_offset_reset")
