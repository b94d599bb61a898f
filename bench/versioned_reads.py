"""Cost of reading a versioned table as deltas pile up, before and after compaction.

Builds a table of ~1M actual rows over 100 deltas through the real write path (each
delta inserts new keys, updates and deletes some existing ones), then measures:
- the actual read (every row materialised),
- a filtered actual read (1,000 keys by `where_in`, the engine's filtered join),
- changes-since reads of the last delta and of the last 10 deltas (files opened too),
before and after `compact(table)`. Prints a table and writes `bench/out/versioned_reads.json`.

    .venv/bin/python -m bench.versioned_reads            # 1M rows, 100 deltas
    .venv/bin/python -m bench.versioned_reads --rows 100000 --deltas 20   # quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from bench.timing import timed
from offset_assets.control_plane import connect
from offset_assets.spark import get_spark_session
from offset_assets.versioned import VersionedTable
from offset_assets.versioned.compaction import compact

OUT = Path(__file__).parent / "out"
SCHEMA = StructType(
    [
        StructField("order_id", LongType(), False),
        StructField("customer", StringType()),
        StructField("amount", DoubleType()),
        StructField("status", StringType()),
        StructField("day", IntegerType()),
    ]
)


def delta_rows(spark: SparkSession, delta: int, inserts: int, updates: int, deletes: int) -> DataFrame:
    """Delta `delta`: `inserts` new keys, `updates` existing keys changed, `deletes` removed
    (updated and deleted keys are disjoint blocks, so no key gets two states)."""
    existing = (delta - 1) * inserts

    def rows(start: int, count: int, sys_op: int) -> DataFrame:
        return spark.range(start, start + count).select(
            F.col("id").alias("order_id"),
            F.concat(F.lit("customer-"), (F.col("id") % 5000).cast("string")).alias("customer"),
            (F.col("id") * 0.01 + delta).alias("amount"),
            F.when(F.col("id") % 3 == 0, "paid").otherwise("new").alias("status"),
            F.lit(delta).alias("day"),
            F.lit(sys_op).alias("sys_op"),
        )

    frames = [rows(existing, inserts, 0)]
    if existing >= 2 * (updates + deletes):
        half = existing // 2
        frames.append(rows((delta * 7919) % (half - updates), updates, 0))
        frames.append(rows(half + (delta * 104729) % (half - deletes), deletes, 1))
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result



def materialise(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def measure_reads(table: VersionedTable, repeat: int) -> dict:
    last = table.last_committed().delta_num
    since_1 = table.delta(last).commit_ts
    since_10 = table.delta(max(1, last - 9)).commit_ts
    keys = list(range(0, 1_000_000, 1000))
    results = {
        "actual": timed(lambda: materialise(table.read_actual()), repeat),
        "actual_where_in_1000_keys": timed(lambda: materialise(table.read_actual(where_in={"order_id": keys})), repeat),
        "changes_since_last_1_delta": timed(lambda: materialise(table.read_changes_since(since_1)), repeat),
        "changes_since_last_10_deltas": timed(lambda: materialise(table.read_changes_since(since_10)), repeat),
    }
    results["actual"]["rows"] = table.read_actual().count()
    results["actual"]["files"] = len(table.read_actual().inputFiles())
    for name, since in (("changes_since_last_1_delta", since_1), ("changes_since_last_10_deltas", since_10)):
        changes = table.read_changes_since(since)
        results[name]["rows"] = changes.count()
        results[name]["files"] = len(changes.inputFiles())
        results[name]["all_files"] = len(table.read_changes_since(0).inputFiles())
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="new keys over all deltas")
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    spark = get_spark_session(
        master=args.master,
        app_name="bench-versioned-reads",
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "3g",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    inserts = args.rows // args.deltas
    updates, deletes = max(1, inserts // 5), max(1, inserts // 100)
    with tempfile.TemporaryDirectory(prefix="bench-versioned-") as root:
        plane = connect(f"sqlite:///{root}/control_plane.db")
        table = VersionedTable(spark, plane, "orders", ["order_id"], SCHEMA, warehouse=f"{root}/warehouse")
        write_seconds = []
        for delta in range(1, args.deltas + 1):
            start = time.perf_counter()
            table.write_delta(delta_rows(spark, delta, inserts, updates, deletes))
            write_seconds.append(time.perf_counter() - start)
            if delta % 10 == 0:
                print(f"  delta {delta}: write {write_seconds[-1]:.2f}s", flush=True)

        before = measure_reads(table, args.repeat)
        start = time.perf_counter()
        compact(table)
        compaction_s = time.perf_counter() - start
        after = measure_reads(table, args.repeat)

    report = {
        "benchmark": "versioned_reads",
        "master": args.master,
        "deltas": args.deltas,
        "per_delta": {"inserts": inserts, "updates": updates, "deletes": deletes},
        "actual_rows": before["actual"]["rows"],
        "write_s": {
            "first": round(write_seconds[0], 3),
            "median": round(statistics.median(write_seconds), 3),
            "last": round(write_seconds[-1], 3),
            "total": round(sum(write_seconds), 1),
        },
        "compaction_s": round(compaction_s, 3),
        "before_compaction": before,
        "after_compaction": after,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "versioned_reads.json").write_text(json.dumps(report, indent=2))
    print(f"\n{report['actual_rows']} actual rows over {args.deltas} deltas; compaction {compaction_s:.1f}s")
    print(f"{'read':32} {'before (s)':>11} {'after (s)':>10} {'files before/after':>19}")
    for name in before:
        files = f"{before[name].get('files', '-')}/{after[name].get('files', '-')}"
        print(f"{name:32} {before[name]['median_s']:>11.2f} {after[name]['median_s']:>10.2f} {files:>19}")
    print(f"report: {OUT / 'versioned_reads.json'}")
    spark.stop()


if __name__ == "__main__":
    main()
