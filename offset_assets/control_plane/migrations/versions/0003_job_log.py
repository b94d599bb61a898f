"""job_log and step_log: log-driven data ranges

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_log",
        # SQLite autoincrements only an INTEGER PRIMARY KEY.
        sa.Column(
            "job_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("workflow_name", sa.String(255), nullable=False),
        sa.Column("job_name", sa.String(255), nullable=False),
        sa.Column("period", sa.Integer, nullable=True),
        sa.Column("data_range_start", sa.Text, nullable=False),
        sa.Column("data_range_end", sa.Text, nullable=True),
        sa.Column("job_start_time", sa.Double, nullable=True),
        sa.Column("job_end_time", sa.Double, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("load_type", sa.String(32), nullable=True),
        sa.Column("log_driven_type", sa.String(32), nullable=True),
        sa.Column("run_id", sa.String(255), nullable=True),
        sa.Column("runtime_args", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("create_time", sa.Double, nullable=False),
        sa.Column("last_update_time", sa.Double, nullable=False),
        sa.Column("heartbeat_at", sa.Double, nullable=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        # One row per range: the insert of a new range is the atomic claim.
        sa.UniqueConstraint("job_name", "data_range_start", name="uq_job_log_range"),
    )
    op.create_index("ix_job_log_job_status", "job_log", ["job_name", "status"])
    op.create_table(
        "step_log",
        sa.Column("job_id", sa.BigInteger, primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("step_id", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("start_time", sa.Double, nullable=False),
        sa.Column("end_time", sa.Double, nullable=True),
        sa.Column("duration", sa.Double, nullable=False),
        sa.Column("output", sa.Text, nullable=False),
        sa.Column("source_count", sa.BigInteger, nullable=True),
        sa.Column("target_count", sa.BigInteger, nullable=True),
        sa.Column("success_count", sa.BigInteger, nullable=True),
        sa.Column("failure_count", sa.BigInteger, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("source_type", sa.String(32), nullable=True),
        sa.Column("target_type", sa.String(32), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("step_log")
    op.drop_index("ix_job_log_job_status", table_name="job_log")
    op.drop_table("job_log")
