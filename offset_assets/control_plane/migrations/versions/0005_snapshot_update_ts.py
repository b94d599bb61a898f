"""Snapshots that store each row's update_ts

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26

A snapshot written since this revision carries the update_ts of every row, so a read of
the actual state looks up commit times only for the deltas after it. Snapshots written
before it are marked as not storing it: their reads keep looking up every delta.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("table_snapshot") as batch:
        batch.add_column(sa.Column("stores_update_ts", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("table_snapshot") as batch:
        batch.drop_column("stores_update_ts")
