"""The actual rows of a table as of each delta

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28

A delta committed since this revision records the table's actual rows once it is
committed (the previous delta's count, plus the keys its write inserted, minus those it
deleted), so a table's row count is one catalog read, not a Spark job over the table.
Deltas committed before it have no count: the row count of such a table stays unknown,
and is counted by Spark where it is asked for.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("table_delta") as batch:
        batch.add_column(sa.Column("actual_rows", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("table_delta") as batch:
        batch.drop_column("actual_rows")
