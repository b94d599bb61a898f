"""Benchmark of the incremental engine (DESIGN section 8).

Measures, on a posts/profiles world:
- an incremental (v2) run as the table grows (N) with a fixed change size (M);
- an incremental run as M grows at a fixed N;
- v1 (full comparison) against v2 (offsets) for the changed-index computation;
- a full recompute (reprocess_all) for reference;
- rows read from the reference table by the filtered join against its whole size.

Writes bench/out/engine_scaling.json and bench/out/engine_scaling.png. Not a test:
numbers depend on the machine; the shape (cost follows M, not N) is the claim.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from offset_assets.control_plane import connect
from offset_assets.engine.runner import IncrementalEngine
from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.spark import get_spark_session
from offset_assets.versioned.table import VersionedTable
from tests.engine_story import ENRICHED, POSTS, PROFILES, enrich  # the engine tests' world

OUT = Path(__file__).parent / "out"
SCALE = float(os.environ.get("BENCH_SCALE", "1"))


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def build_world(spark: SparkSession, n_posts: int, root: Path):
    plane = connect(f"sqlite:///{root / 'cp.db'}")
    warehouse = str(root / "warehouse")
    posts = VersionedTable(spark, plane, "posts", ["post_id"], POSTS, warehouse=warehouse)
    profiles = VersionedTable(spark, plane, "profiles", ["id"], PROFILES, warehouse=warehouse)
    enriched = VersionedTable(spark, plane, "enriched_posts", ["post_id"], ENRICHED, warehouse=warehouse)
    users = max(10, n_posts // 10)
    profiles.write_delta(
        spark.range(1, users + 1).select(F.col("id"), F.concat(F.lit("user-"), F.col("id")).alias("name")),
    )
    posts.write_delta(
        spark.range(1, n_posts + 1).select(
            F.col("id").alias("post_id"),
            ((F.col("id") * 7919) % users + 1).alias("user_id"),
            F.concat(F.lit("text "), F.col("id")).alias("text"),
        )
    )
    t = Transformation(
        transformation_id="enrich_posts",
        inputs=[TransformInput(posts), TransformInput(profiles, join_keys={"user_id": "id"})],
        transform_keys=["post_id"],
        outputs=[enriched],
        func=enrich,
    )
    return plane, posts, profiles, t, users


def change_posts(spark: SparkSession, posts: VersionedTable, n_posts: int, m: int, round_no: int) -> None:
    step = max(1, n_posts // m)
    changed = spark.range(0, m).select(
        (F.col("id") * step % n_posts + 1).alias("post_id"),
        F.lit(1).cast("long").alias("user_id"),
        F.concat(F.lit(f"edited-{round_no} "), F.col("id")).alias("text"),
    )
    posts.write_delta(changed)


def measure(spark: SparkSession, n_posts: int, m: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="oa_bench_") as tmp:
        plane, posts, profiles, t, users = build_world(spark, n_posts, Path(tmp))
        engine = IncrementalEngine(spark, plane)
        first, first_s = _timed(lambda: engine.run_full(t))
        change_posts(spark, posts, n_posts, m, 1)
        # Best of two each, so JIT warm-up does not favour whichever runs second.
        v2_index_s = min(_timed(lambda: engine.changed_keys(t, "v2").count())[1],
                         _timed(lambda: engine.changed_keys(t, "v2").count())[1])
        v1_index_s = min(_timed(lambda: engine.changed_keys(t, "v1").count())[1],
                         _timed(lambda: engine.changed_keys(t, "v1").count())[1])
        incremental, incremental_s = _timed(lambda: engine.run_full(t))
        _, full_s = _timed(lambda: engine.run_full(t, reprocess_all=True))
        return {
            "n": n_posts,
            "m": m,
            "first_run_s": round(first_s, 3),
            "incremental_run_s": round(incremental_s, 3),
            "full_recompute_s": round(full_s, 3),
            "v2_changed_index_s": round(v2_index_s, 3),
            "v1_changed_index_s": round(v1_index_s, 3),
            "processed_keys": incremental.processed_keys,
            "reference_rows_read": incremental.rows_read.get("profiles", 0),
            "reference_rows_total": users,
            "first_run_keys": first.processed_keys,
        }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    by_n = report["growing_n"]
    ns = [r["n"] for r in by_n]
    for key, label in [("incremental_run_s", "incremental run (v2)"),
                       ("full_recompute_s", "full recompute"),
                       ("v1_changed_index_s", "changed index v1"),
                       ("v2_changed_index_s", "changed index v2")]:
        axes[0].plot(ns, [r[key] for r in by_n], marker="o", label=label)
    axes[0].set_xscale("log")
    axes[0].set_xlabel(f"table size N (rows), M = {by_n[0]['m']} changes")
    axes[0].set_ylabel("seconds")
    axes[0].legend()
    by_m = report["growing_m"]
    ms = [r["m"] for r in by_m]
    for key, label in [("incremental_run_s", "incremental run (v2)"),
                       ("full_recompute_s", "full recompute")]:
        axes[1].plot(ms, [r[key] for r in by_m], marker="o", label=label)
    axes[1].set_xscale("log")
    axes[1].set_xlabel(f"changes M, N = {by_m[0]['n']}")
    axes[1].legend()
    fig.suptitle("offset-assets engine: run time against table size N and change size M")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    spark = get_spark_session(conf={"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    ns = [int(n * SCALE) for n in (20_000, 100_000, 400_000)]
    ms = [int(m * SCALE) or 1 for m in (100, 1_000, 10_000)]
    fixed_m, fixed_n = ms[1], ns[1]
    report = {
        "machine": {"cores": os.cpu_count(), "spark_master": spark.sparkContext.master},
        "growing_n": [measure(spark, n, fixed_m) for n in ns],
        "growing_m": [measure(spark, fixed_n, m) for m in ms],
    }
    (OUT / "engine_scaling.json").write_text(json.dumps(report, indent=2))
    plot(report, OUT / "engine_scaling.png")
    for section in ("growing_n", "growing_m"):
        for row in report[section]:
            print(section, json.dumps(row))
    print(f"report: {OUT / 'engine_scaling.json'}, plot: {OUT / 'engine_scaling.png'}")


if __name__ == "__main__":
    main()
