"""Names are checked where tables, transformations and ingestion jobs are defined, and
again at the control plane's own entry points (the offsets), with one rule, the same on
SQLite and PostgreSQL: a bad name is refused with an error naming the rule (or the
limit) and the value, before anything is registered or written.

Table names become catalog keys (String(255)) and folder names (255 bytes per path
component); transformation ids also name their meta table `_meta__<id>`, so they are
kept shorter than table names.
"""

from __future__ import annotations

import os

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.control_plane import connect
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.errors import JobNameError
from offset_assets.control_plane.names import InvalidNameError
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.engine import IncrementalEngine
from offset_assets.engine.errors import TransformationDefinitionError
from offset_assets.engine.transformation import TRANSFORMATION_ID_MAX_LENGTH, Transformation, TransformInput
from offset_assets.ranges.ingestion import IngestionJob, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.versioned import VersionedTable
from offset_assets.versioned.errors import TableDefinitionError
from offset_assets.versioned.table_schema import TABLE_NAME_MAX_LENGTH, validate_table_name

ITEMS = StructType([StructField("id", LongType(), False), StructField("label", StringType(), True)])


def items_table(spark, plane, warehouse, name="items") -> VersionedTable:
    return VersionedTable(spark, plane, name, ["id"], ITEMS, warehouse=warehouse)


def copy_transformation(transformation_id, source, target) -> Transformation:
    return Transformation(transformation_id=transformation_id, inputs=[TransformInput(source)],
                          transform_keys=["id"], outputs=[target], func=lambda **frames: next(iter(frames.values())))


def test_name_limits_leave_room_for_the_meta_table_of_the_longest_transformation_id():
    assert (TABLE_NAME_MAX_LENGTH, TRANSFORMATION_ID_MAX_LENGTH) == (128, 120)
    assert len(f"_meta__{'t' * TRANSFORMATION_ID_MAX_LENGTH}") <= TABLE_NAME_MAX_LENGTH


@pytest.mark.parametrize("name", ["evil\n", "evil\r\n", "\nevil", "bad/name", "..", ".hidden", "", "naïve"],
                         ids=["trailing-newline", "trailing-crlf", "leading-newline", "slash", "dots",
                              "leading-dot", "empty", "non-ascii"])
def test_a_table_name_outside_the_rule_is_refused_before_it_is_registered(spark, db_url, warehouse, name):
    plane = connect(db_url)
    with pytest.raises(TableDefinitionError, match=r"name must be letters, digits, '_', '\.', '-'") as raised:
        items_table(spark, plane, warehouse, name)
    assert repr(name) in str(raised.value)
    assert DeltaCatalog(plane).tables() == []
    assert os.listdir(warehouse) == []


def test_a_table_name_over_the_limit_is_refused_naming_the_limit_and_the_value(spark, db_url, warehouse):
    plane = connect(db_url)
    name = "t" * 500
    with pytest.raises(TableDefinitionError, match=r"name is 500 characters long, the limit is 128") as raised:
        items_table(spark, plane, warehouse, name)
    assert repr(name) in str(raised.value)
    assert DeltaCatalog(plane).tables() == []
    assert os.listdir(warehouse) == []


def test_a_table_name_at_the_limit_is_registered_written_and_read(spark, db_url, warehouse):
    name = "t" * TABLE_NAME_MAX_LENGTH
    table = items_table(spark, connect(db_url), warehouse, name)
    table.write_delta(spark.createDataFrame([(1, "one")], ITEMS))
    assert [tuple(r) for r in table.read_actual().select("id", "label").collect()] == [(1, "one")]
    assert DeltaCatalog(table.plane).tables() == [name]


@pytest.mark.parametrize("name", ["evil\n", "bad/name", ".hidden", "naïve", "t" * 129],
                         ids=["trailing-newline", "slash", "leading-dot", "non-ascii", "129-characters"])
def test_the_offsets_refuse_exactly_the_names_a_table_refuses_with_the_same_rule(db_url, name):
    offsets = OffsetRepository(connect(db_url))
    with pytest.raises(TableDefinitionError) as as_table:
        validate_table_name(name)
    with pytest.raises(InvalidNameError) as as_input:
        offsets.update_offsets_bulk({("copy", name): 1.0})
    with pytest.raises(InvalidNameError) as as_transformation:
        offsets.update_offsets_bulk({(name, "items"): 1.0})
    assert as_input.value.problem == as_transformation.value.problem
    assert as_input.value.problem in str(as_table.value)
    assert offsets.get_statistics() == []


@pytest.mark.parametrize("tid", ["copy\n", "1copy", "_copy", "copy items", ""],
                         ids=["trailing-newline", "leading-digit", "leading-underscore", "space", "empty"])
def test_a_transformation_id_outside_the_rule_is_refused(spark, sqlite_url, warehouse, tid):
    plane = connect(sqlite_url)
    source, target = items_table(spark, plane, warehouse), items_table(spark, plane, warehouse, "items_copy")
    with pytest.raises(TransformationDefinitionError, match="must start with a letter and hold only letters"):
        copy_transformation(tid, source, target)


def test_a_transformation_id_over_the_limit_is_refused_naming_the_limit_and_the_value(spark, sqlite_url, warehouse):
    plane = connect(sqlite_url)
    source, target = items_table(spark, plane, warehouse), items_table(spark, plane, warehouse, "items_copy")
    tid = "c" * (TRANSFORMATION_ID_MAX_LENGTH + 1)
    with pytest.raises(TransformationDefinitionError,
                       match=rf"transformation id is 121 characters long, the limit is 120: '{tid}'"):
        copy_transformation(tid, source, target)


def test_a_transformation_with_an_id_at_the_limit_runs_and_commits_its_meta(spark, db_url, warehouse):
    plane = connect(db_url)
    source, target = items_table(spark, plane, warehouse), items_table(spark, plane, warehouse, "items_copy")
    source.write_delta(spark.createDataFrame([(1, "one"), (2, "two")], ITEMS))
    tid = "c" * TRANSFORMATION_ID_MAX_LENGTH
    result = IncrementalEngine(spark, plane).run_full(copy_transformation(tid, source, target))
    assert (result.processed_keys, result.failed_keys) == (2, 0)
    assert sorted(tuple(r) for r in target.read_actual().select("id", "label").collect()) == [(1, "one"), (2, "two")]
    assert f"_meta__{tid}" in DeltaCatalog(plane).tables()


@pytest.mark.parametrize(("field", "limit"), [("job_name", 255), ("workflow_name", 255), ("load_type", 32)])
def test_a_job_log_name_over_its_column_is_refused_before_a_row_is_written(db_url, field, limit):
    log = JobLog(connect(db_url))
    too_long = "n" * (limit + 1)
    job_name = too_long if field == "job_name" else "orders"
    other_names = {} if field == "job_name" else {field: too_long}
    with pytest.raises(JobNameError, match=rf"{field} is {limit + 1} characters long, the limit is {limit}: 'nnn"):
        log.claim(job_name, "0", None, run_id="run-a", **other_names)
    assert log.jobs() == []


@pytest.mark.parametrize("field", ["job_name", "workflow_name", "load_type"])
def test_a_job_log_name_with_a_newline_is_refused_before_a_row_is_written(db_url, field):
    log = JobLog(connect(db_url))
    names = {"job_name": "orders", "workflow_name": "nightly", "load_type": "full"}
    names[field] = "orders\nSUCCESS"
    with pytest.raises(JobNameError, match=rf"{field} must hold no control characters: 'orders\\nSUCCESS'"):
        log.claim(names.pop("job_name"), "0", None, run_id="run-a", **names)
    assert log.jobs() == []


def test_a_job_name_at_the_limit_is_claimed_and_read_back(db_url):
    log = JobLog(connect(db_url))
    name = "n" * 255
    claim = log.claim(name, "0", None, run_id="run-a")
    assert (claim.job_name, log.job_names()) == (name, [name])


def test_an_ingestion_job_with_a_bad_name_is_refused_where_it_is_defined(source_url):
    source = SqlTableSource(source_url, "customers", id_column="id")
    with pytest.raises(JobNameError, match="job_name is 300 characters long, the limit is 255"):
        IngestionJob("j" * 300, source, AutoIncrementIdPlanner(), TargetTable("raw_customers", ["id"], ITEMS))
    with pytest.raises(TableDefinitionError, match="name must be letters"):
        IngestionJob("raw_customers", source, AutoIncrementIdPlanner(), TargetTable("raw\n", ["id"], ITEMS))
