"""Reading the project's tables from its `Definitions`: a script holding them, and a plain
Dagster asset downstream of an incremental one, on the demo's state."""

from __future__ import annotations

import dagster as dg

from assets_defs.definitions import build_definitions
from offset_assets.dagster_adapter import IncrementalEngineResource


def test_the_definitions_engine_reads_a_table_by_name_as_of_a_delta_and_by_sql(spark, demo):
    engine = build_definitions().resources["incremental_engine"]
    renamed, (before, after) = 4, demo.story.renamed[4]

    names = {row.id: row.name for row in engine.read_table("profiles").collect()}
    first = {row.id: row.name for row in engine.read_table(dg.AssetKey("profiles"), as_of_delta=1).collect()}
    changed = engine.tables().changes("profiles", since_delta=1).collect()

    assert (names[renamed], first[renamed]) == (after, before)
    assert [(row.id, row.name, row.sys_from) for row in changed] == [(renamed, after, 2)]
    assert engine.sql("SELECT count(*) AS n FROM profiles FOR SYSTEM_TIME STARTED IN (1, 1)").first().n == len(first)


def test_a_plain_asset_downstream_reads_an_incremental_assets_table(spark, demo):
    engine = build_definitions().resources["incremental_engine"]

    @dg.asset(deps=["enriched_posts"])
    def posts_per_author(incremental_engine: IncrementalEngineResource) -> dg.MaterializeResult:
        counts = incremental_engine.sql(
            "SELECT author, count(*) AS posts FROM enriched_posts GROUP BY author").collect()
        return dg.MaterializeResult(metadata={"authors": len(counts), "posts": sum(row.posts for row in counts)})

    result = dg.materialize([posts_per_author], resources={"incremental_engine": engine})

    assert result.success
    (materialization,) = result.asset_materializations_for_node("posts_per_author")
    assert materialization.metadata["posts"].value == 30 + 3 - 1
    assert materialization.metadata["authors"].value == 6
