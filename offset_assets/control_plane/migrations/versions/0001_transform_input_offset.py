"""transform_input_offset as first released

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "transform_input_offset",
        sa.Column("transformation_id", sa.String(255), primary_key=True),
        sa.Column("input_table_name", sa.String(255), primary_key=True),
        sa.Column("update_ts_offset", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("transform_input_offset")
