"""A small change through a graph of incremental assets costs at most two Spark jobs per
asset, and a run of the graph with nothing to do none, in one Dagster run.

The graph is the graph benchmark's (`bench/graph_workload.py`): two chains of three copy
assets over a SQL source ingested by id ranges, a fan-in of the chains' last assets and a
reference join, eight incremental assets in all. Jobs are counted as the benchmark counts
them: on the suite's local session with `count_spark_jobs` (and per asset from each run's
profile), over a Spark Connect server from the server's own status store (its REST API:
a client cannot count them).
"""

from __future__ import annotations

import json

import pytest

from bench.graph_workload import GraphBench, new_ids
from tests.spark_cluster import run_client

CHAINS, DEPTH, ROWS = 2, 3, 60
ASSETS = CHAINS * DEPTH + 2


def test_a_small_change_through_a_graph_costs_at_most_two_spark_jobs_per_asset(spark, tmp_path):
    bench = GraphBench(tmp_path, CHAINS, DEPTH, ROWS, spark_config={}, server_jobs=None)
    first = bench.scenario([])
    assert first["success"] and first["assets_materialized"] == ASSETS

    ten_rows = bench.scenario(new_ids(ROWS, CHAINS, one_chain=False))

    # Every asset works: a copy costs no Spark job (its changed index, its rows, their
    # classification and write all by the driver, its output a local relation collected
    # without a job); the fan-in collects its union of two local relations with one job,
    # the reference join its join with two (Spark's broadcast of the groups, the collect).
    assert ten_rows["success"] and ten_rows["assets_materialized"] == ASSETS
    copies = {f"chain{c}_{d}": 0 for c in range(CHAINS) for d in range(1, DEPTH + 1)}
    assert ten_rows["jobs_by_asset"] == {**copies, "gathered": 1, "labelled": 2}
    assert ten_rows["spark_jobs"] == sum(ten_rows["jobs_by_asset"].values()) <= 2 * ASSETS

    # A change of chain 0: the other chain's head processes the keys and keeps none of
    # them, its other copies have nothing to do (not materialized), the fan-in still runs,
    # without a job: the other chain holds none of its keys, and Spark drops the empty
    # side of the union, leaving a local relation.
    one_chain = bench.scenario(new_ids(ROWS + 10, CHAINS, one_chain=True))
    assert one_chain["success"] and one_chain["spark_jobs"] <= 2 * ASSETS
    assert one_chain["jobs_by_asset"]["gathered"] == 0 and "chain1_2" not in one_chain["jobs_by_asset"]

    nothing_to_do = bench.scenario([])
    assert nothing_to_do["success"] and nothing_to_do["spark_jobs"] == 0
    assert nothing_to_do["assets_materialized"] == 0


@pytest.mark.slow
def test_a_small_change_through_a_graph_over_spark_connect_costs_at_most_two_spark_jobs_per_asset(
    connect_server, tmp_path
):
    out = tmp_path / "report.json"
    ran = run_client(
        [
            "-m",
            "bench.graph_workload",
            "--chains",
            str(CHAINS),
            "--depth",
            str(DEPTH),
            "--rows",
            str(ROWS),
            "--remote",
            connect_server.url,
            "--server-ui",
            connect_server.ui,
            "--out",
            str(out),
        ],
        connect_server,
        env={},
        timeout=1800,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    scenarios = json.loads(out.read_text())["scenarios"]

    assert all(figures["success"] for figures in scenarios.values())
    assert scenarios["ten_rows"]["assets_materialized"] == ASSETS
    assert scenarios["ten_rows"]["spark_jobs"] <= 2 * ASSETS
    assert scenarios["one_chain"]["spark_jobs"] <= 2 * ASSETS
    assert scenarios["nothing_to_do"]["spark_jobs"] == 0
