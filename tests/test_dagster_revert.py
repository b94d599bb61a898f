"""The revert job in real Dagster runs: a dry run, then a revert whose undone ranges are
observed on their partitions of the ingestion asset, and their launch once the source is
fixed."""

import contextlib

import dagster as dg
import pytest

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.dagster_adapter import OffsetStore, RevertConfig, revert_job
from offset_assets.dagster_adapter.ingestion.assets import ingestion_asset
from tests.dagster_resources import engine_resources
from tests.test_ingestion_dagster import add_customer, daily_job, execute, table_state


@pytest.fixture
def instance():
    with contextlib.ExitStack() as stack:
        yield stack.enter_context(dg.instance_for_test())


def revert_run(defs: dg.Definitions, instance: dg.DagsterInstance, **config) -> dg.ExecuteInProcessResult:
    RevertConfig(**config)  # the launchpad's config, as the job takes it
    return defs.resolve_job_def("revert_table").execute_in_process(
        instance=instance, run_config={"ops": {"revert": {"config": config}}}, raise_on_error=False
    )


def output_metadata(result: dg.ExecuteInProcessResult) -> dict:
    [output] = [e for e in result.events_for_node("revert") if e.is_successful_output]
    return {name: value.value for name, value in output.step_output_data.metadata.items()}


def test_the_revert_job_undoes_a_bad_window_observes_its_partition_reverted_and_a_launch_reloads_it(
    spark, sqlite_url, warehouse, source_url, instance
):
    add_customer(source_url, "ann", "Oslo", 1)
    add_customer(source_url, "bob", "ROME??", 2)
    asset = ingestion_asset(daily_job(source_url))
    defs = dg.Definitions(
        assets=[asset],
        jobs=[revert_job([asset])],
        resources=engine_resources(OffsetStore(db_url=sqlite_url), warehouse),
    )
    for day in ("2022-01-01", "2022-01-02"):  # deltas 1 and 2: the second window is the bad load
        assert (
            defs.resolve_implicit_global_asset_job_def()
            .execute_in_process(instance=instance, partition_key=day)
            .success
        )

    dry = revert_run(defs, instance, table="daily_customers", to_delta=1, dry_run=True)
    assert dry.success
    planned = output_metadata(dry)
    assert (planned["keys_deleted"], planned["keys_upserted_back"], planned["dry_run"]) == (1, 0, True)
    assert planned["ranges_to_revert"] == [
        {"job": "daily_customers", "start": "20220102000000", "end": "20220103000000", "delta": 2}
    ]
    assert table_state(spark, sqlite_url, warehouse, "daily_customers")[1] == 2  # nothing written

    reverted = revert_run(defs, instance, table="daily_customers", to_delta=1)

    assert reverted.success
    done = output_metadata(reverted)
    assert (done["delta"], done["keys_deleted"], done["dry_run"]) == (3, 1, False)
    assert table_state(spark, sqlite_url, warehouse, "daily_customers") == ([(1, "ann", "Oslo")], 3)
    [observed] = reverted.asset_observations_for_node("revert")
    assert (observed.asset_key, observed.partition) == (asset.key, "2022-01-02")
    assert {name: value.value for name, value in observed.metadata.items()} == {
        "job_log_status": "REVERTED",
        "table": "daily_customers",
        "range_delta": 2,
        "revert_delta": 3,
    }
    assert observed.description == (
        "revert delta 3 of 'daily_customers': range undone: launch this partition again once its source is fixed"
    )
    assert JobLog(connect(sqlite_url)).get_range("daily_customers", "20220102000000").status == "REVERTED"

    execute(source_url, "UPDATE customers SET city = 'Rome' WHERE name = 'bob'")  # the source fixed
    reload = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, partition_key="2022-01-02"
    )

    assert reload.success
    assert table_state(spark, sqlite_url, warehouse, "daily_customers") == ([(1, "ann", "Oslo"), (2, "bob", "Rome")], 4)
    [materialized] = reload.asset_materializations_for_node("daily_customers")
    assert (materialized.partition, materialized.metadata["refresh"].value) == ("2022-01-02", True)
    assert JobLog(connect(sqlite_url)).get_range("daily_customers", "20220102000000").status == "SUCCESS"


def test_a_revert_the_job_cannot_do_fails_the_run_in_one_line_and_changes_nothing(
    spark, sqlite_url, warehouse, source_url, instance
):
    add_customer(source_url, "ann", "Oslo", 1)
    asset = ingestion_asset(daily_job(source_url))
    defs = dg.Definitions(
        assets=[asset],
        jobs=[revert_job([asset])],
        resources=engine_resources(OffsetStore(db_url=sqlite_url), warehouse),
    )
    defs.resolve_implicit_global_asset_job_def().execute_in_process(instance=instance, partition_key="2022-01-01")

    for config, message in [
        (
            {"table": "daily_customers", "to_delta": 5},
            "table 'daily_customers': cannot revert to delta 5: it does not exist (last committed: 1)",
        ),
        ({"table": "daily_customer", "to_delta": 0}, "no versioned table 'daily_customer' in the delta catalog"),
    ]:
        failed = revert_run(defs, instance, **config)
        assert not failed.success
        assert failed.get_step_failure_events()[0].step_failure_data.error.message.strip().endswith(message)
    assert table_state(spark, sqlite_url, warehouse, "daily_customers") == ([(1, "ann", "Oslo")], 1)
