"""offset updated_at, delta catalog, commit clock, run leases

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import time

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Offsets written before updated_at existed count as updated now: their true age is unknown.
    with op.batch_alter_table("transform_input_offset") as batch:
        batch.add_column(sa.Column("updated_at", sa.Double, nullable=False, server_default=sa.text(repr(time.time()))))
    with op.batch_alter_table("transform_input_offset") as batch:
        batch.alter_column("updated_at", server_default=None)

    op.create_table(
        "commit_clock",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("last_commit_ts", sa.Double, nullable=False),
    )
    op.execute("INSERT INTO commit_clock (id, last_commit_ts) VALUES (1, 0)")
    op.create_table(
        "versioned_table",
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("primary_key", sa.Text, nullable=False),
        sa.Column("schema_json", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_table(
        "table_delta",
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("delta_num", sa.BigInteger, primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("data_path", sa.Text, nullable=False),
        sa.Column("holder", sa.String(255), nullable=True),
        sa.Column("run_id", sa.String(255), nullable=True),
        sa.Column("opened_at", sa.Double, nullable=False),
        sa.Column("commit_ts", sa.Double, nullable=True),
        sa.Column("rows_upserted", sa.BigInteger, nullable=True),
        sa.Column("rows_deleted", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_table_delta_commit_ts", "table_delta", ["table_name", "commit_ts"])
    # At most one hot delta per table, enforced by the database itself (partial unique index).
    op.create_index(
        "ux_table_delta_one_hot",
        "table_delta",
        ["table_name"],
        unique=True,
        sqlite_where=sa.text("status = 'hot'"),
        postgresql_where=sa.text("status = 'hot'"),
    )
    op.create_table(
        "table_snapshot",
        sa.Column("table_name", sa.String(255), primary_key=True),
        sa.Column("delta_num", sa.BigInteger, primary_key=True),
        sa.Column("data_path", sa.Text, nullable=False),
        sa.Column("row_count", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_table(
        "run_lease",
        sa.Column("transformation_id", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("acquired_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_lease")
    op.drop_table("table_snapshot")
    op.drop_index("ux_table_delta_one_hot", table_name="table_delta")
    op.drop_index("ix_table_delta_commit_ts", table_name="table_delta")
    op.drop_table("table_delta")
    op.drop_table("versioned_table")
    op.drop_table("commit_clock")
    with op.batch_alter_table("transform_input_offset") as batch:
        batch.drop_column("updated_at")
