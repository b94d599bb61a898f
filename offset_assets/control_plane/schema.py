"""Control-plane tables (SQLAlchemy Core).

These objects are used to build queries; the schema itself is created and upgraded only
by the Alembic migrations in `migrations/versions/`, which must stay in step with it.
Times are epoch seconds as doubles: the same type as `update_ts`, comparable across
SQLite and PostgreSQL without time-zone surprises.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

metadata = MetaData()

transform_input_offset = Table(
    "transform_input_offset",
    metadata,
    Column("transformation_id", String(255), primary_key=True),
    Column("input_table_name", String(255), primary_key=True),
    Column("update_ts_offset", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
)

# One row: the last commit timestamp handed out. Updating it inside each commit
# transaction serialises commits and makes every commit timestamp strictly greater
# than all earlier ones, even when the wall clock steps back.
commit_clock = Table(
    "commit_clock",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("last_commit_ts", Double, nullable=False),
)

versioned_table = Table(
    "versioned_table",
    metadata,
    Column("table_name", String(255), primary_key=True),
    Column("primary_key", Text, nullable=False),  # JSON list of column names
    Column("schema_json", Text, nullable=False),  # Spark StructType JSON of the data columns
    Column("created_at", Double, nullable=False),
)

# The delta catalog. A hot delta is the row with status 'hot'; its number is
# last committed + 1; the partial unique index allows one hot delta per table.
table_delta = Table(
    "table_delta",
    metadata,
    Column("table_name", String(255), primary_key=True),
    Column("delta_num", BigInteger, primary_key=True),
    Column("status", String(16), nullable=False),  # hot | committed
    Column("data_path", Text, nullable=False),
    Column("holder", String(255), nullable=True),
    Column("run_id", String(255), nullable=True),
    Column("opened_at", Double, nullable=False),
    Column("commit_ts", Double, nullable=True),
    Column("rows_upserted", BigInteger, nullable=True),
    Column("rows_deleted", BigInteger, nullable=True),
    # The table's actual rows once this delta is committed (while hot: as of the last
    # committed delta); null when unknown (deltas before revision 0006, meta writes).
    Column("actual_rows", BigInteger, nullable=True),
    # A revert's delta: the delta whose state it set the table back to (migration 0008);
    # null for every other delta.
    Column("reverts_to", BigInteger, nullable=True),
    Index("ix_table_delta_commit_ts", "table_name", "commit_ts"),
    Index(
        "ux_table_delta_one_hot",
        "table_name",
        unique=True,
        sqlite_where=text("status = 'hot'"),
        postgresql_where=text("status = 'hot'"),
    ),
)

# Compacted actual state of a table as of a committed delta (history stays in the deltas).
table_snapshot = Table(
    "table_snapshot",
    metadata,
    Column("table_name", String(255), primary_key=True),
    Column("delta_num", BigInteger, primary_key=True),
    Column("data_path", Text, nullable=False),
    Column("row_count", BigInteger, nullable=False),
    Column("created_at", Double, nullable=False),
    # True when the snapshot's files hold each row's update_ts (reads then look up commit
    # times only for the deltas after it); false for snapshots written before they did.
    Column("stores_update_ts", Boolean, nullable=False, server_default=false()),
)

run_lease = Table(
    "run_lease",
    metadata,
    Column("transformation_id", String(255), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("acquired_at", Double, nullable=False),
    Column("expires_at", Double, nullable=False),
)

# A pending "process every key again" request of a transformation (a reprocess or an
# interrupted backfill): keys whose meta is older than `requested_ts` are processed by the
# next runs until one completes the whole set and deletes the row in its commit.
transform_reprocess_request = Table(
    "transform_reprocess_request",
    metadata,
    Column("transformation_id", String(255), primary_key=True),
    Column("requested_ts", Double, nullable=False),
    Column("requested_at", Double, nullable=False),
)

# Offsets deleted between runs (a rescan, a reprocess request, `reset_offset`), each with
# the value it had: the next complete run reports them (`offsets_reset`) and deletes them.
transform_offset_reset = Table(
    "transform_offset_reset",
    metadata,
    Column("transformation_id", String(255), primary_key=True),
    Column("input_table_name", String(255), primary_key=True),
    Column("update_ts_offset", Double, nullable=False),
    Column("reset_at", Double, nullable=False),
)

# The meta deltas of a transformation that wrote failed keys not yet retried with success:
# a run reads only these deltas to find its failed keys, never the whole meta.
transform_failed_delta = Table(
    "transform_failed_delta",
    metadata,
    Column("transformation_id", String(255), primary_key=True),
    Column("meta_delta_num", BigInteger, primary_key=True),
    Column("failed_keys", BigInteger, nullable=False),
)

# The input deltas (JSON {input: last committed delta}) that a transformation's last
# complete run had processed entirely: when the inputs still stand there, no offset
# moved back and no key waits, a run has nothing to do and starts no Spark job.
transform_settled = Table(
    "transform_settled",
    metadata,
    Column("transformation_id", String(255), primary_key=True),
    Column("input_deltas", Text, nullable=False),
    Column("settled_at", Double, nullable=False),
)

# The data ranges of log-driven ingestion: one row per (job_name, data_range_start), its
# status and holder; `attempt` counts claims of the row (repository: `job_log/`).
job_log = Table(
    "job_log",
    metadata,
    Column("job_id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True,
           autoincrement=True),
    Column("workflow_name", String(255), nullable=False),
    Column("job_name", String(255), nullable=False),
    Column("period", Integer, nullable=True),  # minutes, time-window ranges only
    Column("data_range_start", Text, nullable=False),
    Column("data_range_end", Text, nullable=True),
    Column("job_start_time", Double, nullable=True),
    Column("job_end_time", Double, nullable=True),
    Column("status", String(16), nullable=False),
    Column("load_type", String(32), nullable=True),
    Column("log_driven_type", String(32), nullable=True),
    Column("run_id", String(255), nullable=True),
    Column("runtime_args", Text, nullable=True),  # JSON object
    Column("error", Text, nullable=True),
    Column("create_time", Double, nullable=False),
    Column("last_update_time", Double, nullable=False),
    Column("heartbeat_at", Double, nullable=True),
    Column("attempt", Integer, nullable=False),
    # The versioned table and the delta a successful range committed its rows in (null:
    # it changed nothing), and, once a revert of that table undid the delta, the revert's
    # own delta (status REVERTED); migration 0008.
    Column("target_table", String(255), nullable=True),
    Column("target_delta_num", BigInteger, nullable=True),
    Column("reverted_by_delta", BigInteger, nullable=True),
    UniqueConstraint("job_name", "data_range_start", name="uq_job_log_range"),
    Index("ix_job_log_job_status", "job_name", "status"),
    Index("ix_job_log_target", "target_table", "target_delta_num"),
)

step_log = Table(
    "step_log",
    metadata,
    Column("job_id", BigInteger, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("step_id", String(64), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("start_time", Double, nullable=False),
    Column("end_time", Double, nullable=True),
    Column("duration", Double, nullable=False),  # seconds
    Column("output", Text, nullable=False),
    Column("source_count", BigInteger, nullable=True),
    Column("target_count", BigInteger, nullable=True),
    Column("success_count", BigInteger, nullable=True),
    Column("failure_count", BigInteger, nullable=True),
    Column("error", Text, nullable=True),
    Column("source_type", String(32), nullable=True),
    Column("target_type", String(32), nullable=True),
)
