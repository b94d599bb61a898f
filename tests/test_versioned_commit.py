"""A commit spanning several tables: all deltas become visible together or none."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect, database
from offset_assets.control_plane.schema import transform_input_offset
from offset_assets.versioned import VersionedTable, commit_deltas
from offset_assets.versioned.errors import DeltaClosedError, VersionedTableError

ORDERS = StructType([StructField("order_id", LongType(), False), StructField("status", StringType())])
META = StructType([StructField("order_id", LongType(), False), StructField("process_ts", LongType())])


def _tables(spark, url, warehouse):
    plane = connect(url)
    return (
        VersionedTable(spark, plane, "orders_out", ["order_id"], ORDERS, warehouse=warehouse),
        VersionedTable(spark, plane, "_meta__orders", ["order_id"], META, warehouse=warehouse),
    )


def _offset_row(conn, ts: float) -> None:
    conn.execute(
        transform_input_offset.insert().values(
            transformation_id="orders", input_table_name="raw", update_ts_offset=ts, updated_at=ts
        )
    )


def test_outputs_meta_and_offsets_commit_together_on_both_backends(spark, db_url, warehouse):
    out, meta = _tables(spark, db_url, warehouse)
    hot_out, hot_meta = out.open_delta(run_id="run-1"), meta.open_delta(run_id="run-1")
    hot_out.write(spark.createDataFrame([(1, "new"), (2, "paid")], ORDERS))
    hot_meta.write(spark.createDataFrame([(1, 100), (2, 100)], META))

    commit_ts = commit_deltas([hot_out, hot_meta], on_commit=_offset_row)

    assert out.last_committed().commit_ts == meta.last_committed().commit_ts == commit_ts
    assert {r.update_ts for r in out.read_actual().collect()} == {commit_ts}
    with connect(db_url).begin() as conn:
        assert conn.execute(sa.select(transform_input_offset.c.update_ts_offset)).scalar_one() == commit_ts
    assert hot_out.info.status == "committed" and hot_out.info.rows_upserted == 2


@pytest.mark.quick
def test_a_failing_on_commit_leaves_every_delta_hot_and_nothing_visible(spark, sqlite_url, warehouse):
    out, meta = _tables(spark, sqlite_url, warehouse)
    out.write_delta(spark.createDataFrame([(1, "new")], ORDERS))
    hot_out, hot_meta = out.open_delta(), meta.open_delta()
    hot_out.write(spark.createDataFrame([(1, "paid"), (2, "new")], ORDERS))
    hot_meta.write(spark.createDataFrame([(1, 100), (2, 100)], META))

    def lease_lost(conn, commit_ts):
        _offset_row(conn, commit_ts)
        raise RuntimeError("lease lost")

    with pytest.raises(RuntimeError, match="lease lost"):
        commit_deltas([hot_out, hot_meta], on_commit=lease_lost)

    assert [(r.order_id, r.status) for r in out.read_actual().collect()] == [(1, "new")]
    assert meta.read_actual().count() == 0 and meta.last_committed() is None
    assert out.hot().delta_num == 2 and meta.hot().delta_num == 1
    with connect(sqlite_url).begin() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(transform_input_offset)).scalar_one() == 0

    # The deltas stay hot: the commit can be retried, or they are rolled back.
    commit_ts = commit_deltas([hot_out, hot_meta])
    assert sorted((r.order_id, r.status) for r in out.read_actual().collect()) == [(1, "paid"), (2, "new")]
    assert meta.last_committed().commit_ts == commit_ts


def test_commit_refuses_closed_deltas_and_different_control_planes(spark, sqlite_url, tmp_path, warehouse, request):
    out, meta = _tables(spark, sqlite_url, warehouse)
    other_url = f"sqlite:///{tmp_path / 'other.db'}"
    request.addfinalizer(lambda: database.forget(other_url))
    elsewhere = VersionedTable(spark, connect(other_url), "x", ["order_id"], ORDERS, warehouse=warehouse)
    hot_out, hot_other = out.open_delta(), elsewhere.open_delta()
    with pytest.raises(VersionedTableError, match="different control planes"):
        commit_deltas([hot_out, hot_other])
    hot_meta = meta.open_delta()
    hot_meta.rollback()
    with pytest.raises(DeltaClosedError, match=r"'_meta__orders': cannot commit delta 1: it is already rolled back"):
        commit_deltas([hot_out, hot_meta])
    assert out.hot().delta_num == 1  # untouched


def test_a_last_write_keeps_no_file_of_unchanged_rows_and_refuses_a_later_write(spark, sqlite_url, warehouse):
    out, _ = _tables(spark, sqlite_url, warehouse)
    out.write_delta(spark.createDataFrame([(1, "new"), (2, "new")], ORDERS))
    hot = out.open_delta()

    stats = hot.write(spark.createDataFrame([(1, "new"), (2, "paid")], ORDERS), last=True)

    assert (stats.rows_upserted, stats.rows_unchanged) == (1, 1)
    assert not out.files.exists(f"{hot.data_path}/_noop")
    with pytest.raises(DeltaClosedError, match="its last write is done"):
        hot.write(spark.createDataFrame([(1, "paid")], ORDERS))
    hot.commit()
    assert {tuple(r) for r in out.read_actual().select("order_id", "status").collect()} == {(1, "new"), (2, "paid")}
