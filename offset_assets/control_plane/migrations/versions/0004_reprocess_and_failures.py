"""Reprocess requests, the meta deltas that hold failed keys, settled run snapshots

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "transform_reprocess_request",
        sa.Column("transformation_id", sa.String(255), primary_key=True),
        sa.Column("requested_ts", sa.Double, nullable=False),
        sa.Column("requested_at", sa.Double, nullable=False),
    )
    op.create_table(
        "transform_failed_delta",
        sa.Column("transformation_id", sa.String(255), primary_key=True),
        sa.Column("meta_delta_num", sa.BigInteger, primary_key=True),
        sa.Column("failed_keys", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "transform_settled",
        sa.Column("transformation_id", sa.String(255), primary_key=True),
        sa.Column("input_deltas", sa.Text, nullable=False),
        sa.Column("settled_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("transform_settled")
    op.drop_table("transform_failed_delta")
    op.drop_table("transform_reprocess_request")
