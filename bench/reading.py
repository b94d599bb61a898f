"""Reading a versioned table's actual state, against reading the same rows as plain Parquet.

Builds a table of `--rows` new keys over `--deltas` deltas through the real write path
(each delta inserts new keys, updates and deletes existing ones: `bench.versioned_reads`'
generator), writes its actual state once more as one plain Parquet folder (the baseline:
the same rows, no versions, no catalog), then measures it in three states: never compacted
(`--deltas` delta folders), maintained (the same deltas written to a second table with
`maintain(table, MaintenancePolicy())` after each, as the reference project's maintenance
job runs it: a snapshot and the few deltas after it) and after `compact()`:
- through SQL: `VersionedTables.sql("SELECT * FROM orders")` (the catalog pinned, the read
  planned, every row materialised by Spark's no-op sink), against
  `spark.read.parquet(plain)` materialised the same way;
- without a JVM: `read_arrow` in a child process with no Spark (its time, the Arrow
  pool's peak bytes and the process's peak RSS), against `pyarrow.parquet.read_table`
  of the plain folder in another such child.

The machine is shared: run one size at a time (`--rows 10000000` with `--driver-memory
4g` for the large one). Prints a table and writes `bench/out/reading.json` (`--out`).

    .venv/bin/python -m bench.reading                     # 1M rows, 20 deltas
    .venv/bin/python -m bench.reading --rows 10000000 --driver-memory 4g --out bench/out/reading_10m.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.timing import timed

OUT = Path(__file__).parent / "out" / "reading.json"



def child(kind: str, db_url: str, target: str, repeat: int) -> None:
    """One process without a JVM reading the table (`kind` versioned) or the plain folder
    (`plain`) `repeat` times: print its times, rows and peak memory as JSON."""
    import resource

    import pyarrow as pa
    import pyarrow.parquet as pq

    from offset_assets.reading.arrow import ArrowRead, read_arrow

    def read() -> pa.Table:
        if kind == "plain":
            return pq.read_table(target)
        return read_arrow(db_url, target, max_bytes=None)

    rows = read().num_rows
    told = timed(read, repeat)
    told.update(rows=rows, arrow_peak_bytes=pa.default_memory_pool().max_memory(),
                max_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    if kind == "versioned":
        told["bytes_on_disk"] = ArrowRead.plan(db_url, target, max_bytes=None).bytes_on_disk
    print(json.dumps(told))


def without_jvm(kind: str, db_url: str, target: str, repeat: int) -> dict:
    process = subprocess.run([sys.executable, "-m", "bench.reading", "--child", kind, db_url, target, str(repeat)],
                             capture_output=True, text=True, check=False)
    if process.returncode != 0:
        raise SystemExit(f"the {kind} read without a JVM failed:\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def measure(spark, tables, db_url: str, name: str, plain: str, repeat: int) -> dict:
    """The four reads of table `name`'s actual state and of the plain folder."""
    def materialise(frame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    materialise(tables.sql(f"SELECT * FROM {name}"))  # warm: the first read of a plan shape compiles its code
    materialise(spark.read.parquet(plain))
    sql = timed(lambda: materialise(tables.sql(f"SELECT * FROM {name}")), repeat)
    sql_plain = timed(lambda: materialise(spark.read.parquet(plain)), repeat)
    arrow = without_jvm("versioned", db_url, name, repeat)
    arrow_plain = without_jvm("plain", db_url, plain, repeat)
    return {
        "sql": sql, "spark_plain_parquet": sql_plain,
        "sql_ratio": round(sql["median_s"] / sql_plain["median_s"], 2),
        "arrow": arrow, "arrow_plain_parquet": arrow_plain,
        "arrow_ratio": round(arrow["median_s"] / arrow_plain["median_s"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="new keys over all deltas")
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--child", nargs=4, metavar=("KIND", "DB_URL", "TARGET", "REPEAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, db_url, target, repeat = args.child
        child(kind, db_url, target, int(repeat))
        return

    from bench.versioned_reads import SCHEMA, delta_rows
    from offset_assets.control_plane import connect
    from offset_assets.reading.tables import VersionedTables
    from offset_assets.spark import get_spark_session
    from offset_assets.versioned import VersionedTable
    from offset_assets.versioned.compaction import compact
    from offset_assets.versioned.maintenance import MaintenancePolicy, maintain

    spark = get_spark_session(master=args.master, app_name="bench-reading", conf={
        "spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": args.driver_memory})
    spark.sparkContext.setLogLevel("ERROR")
    inserts = args.rows // args.deltas
    updates, deletes = max(1, inserts // 5), max(1, inserts // 100)
    with tempfile.TemporaryDirectory(prefix="bench-reading-") as root:
        db_url = f"sqlite:///{root}/control_plane.db"
        plane = connect(db_url)
        table = VersionedTable(spark, plane, "orders", ["order_id"], SCHEMA, warehouse=f"{root}/warehouse")
        kept = VersionedTable(spark, plane, "orders_maintained", ["order_id"], SCHEMA, warehouse=f"{root}/warehouse")
        started = time.perf_counter()
        compactions = []
        for delta in range(1, args.deltas + 1):
            rows_of_delta = delta_rows(spark, delta, inserts, updates, deletes)
            table.write_delta(rows_of_delta)
            kept.write_delta(rows_of_delta)
            if maintain(kept, MaintenancePolicy()).compacted:
                compactions.append(delta)
        write_s = time.perf_counter() - started
        snapshot = kept.catalog.snapshot_at(kept.name, args.deltas)
        maintained_state = {"compacted_after_deltas": compactions, "snapshot_rows": snapshot.row_count,
                            "deltas_after_snapshot": args.deltas - snapshot.delta_num}
        plain = f"{root}/plain"
        table.read_actual().select(*SCHEMA.fieldNames()).write.parquet(plain)
        tables = VersionedTables(spark, db_url)
        before = measure(spark, tables, db_url, "orders", plain, args.repeat)
        maintained = measure(spark, tables, db_url, "orders_maintained", plain, args.repeat)
        compact(table)
        after = measure(spark, tables, db_url, "orders", plain, args.repeat)
        rows = before["arrow"]["rows"]
        if maintained["arrow"]["rows"] != rows:
            raise SystemExit(f"the maintained table has {maintained['arrow']['rows']} rows, the other {rows}")

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent.parent,
                            capture_output=True, text=True).stdout.strip() or None
    report = {
        "benchmark": "reading", "commit": commit, "master": args.master, "driver_memory": args.driver_memory,
        "deltas": args.deltas,
        "per_delta": {"inserts": inserts, "updates": updates, "deletes": deletes}, "actual_rows": rows,
        "write_s": round(write_s, 1), "before_compaction": before, "maintained": maintained,
        "maintained_state": maintained_state, "after_compaction": after,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\n{rows:,} actual rows over {args.deltas} deltas (both tables written in {write_s:.0f} s), "
          f"median of {args.repeat}; maintained: compacted after deltas {compactions}")
    states = (("never compacted", before), ("maintained", maintained), ("compacted", after))
    print(f"{'read':32}" + "".join(f"{label:>17}" for label, _ in states))
    for name, key in (("SQL (VersionedTables.sql)", "sql"), ("Spark, plain Parquet", "spark_plain_parquet"),
                      ("without a JVM (read_arrow)", "arrow"), ("pyarrow, plain Parquet", "arrow_plain_parquet")):
        print(f"{name:32}" + "".join(f"{part[key]['median_s']:>17.2f}" for _, part in states))
    for name, key in (("ratio SQL / plain", "sql_ratio"), ("ratio without a JVM / plain", "arrow_ratio")):
        print(f"{name:32}" + "".join(f"{part[key]:>17.2f}" for _, part in states))
    for label, part in states:
        arrow = part["arrow"]
        print(f"without a JVM, {label}: {arrow['bytes_on_disk']:,} bytes on disk, Arrow peak "
              f"{arrow['arrow_peak_bytes']:,} bytes, peak RSS {arrow['max_rss_bytes']:,} bytes")
    print(f"report: {args.out}")
    spark.stop()


if __name__ == "__main__":
    main()
