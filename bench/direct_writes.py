"""Direct writes of a few rows into a small versioned table (`VersionedTable.write_delta`),
as a script, a notebook or a test makes them, in a session with Spark's defaults
(`get_spark_session`, `local[2]`: adaptive execution on, expressions compiled).

Each kind runs in a new Python process, so a new JVM, and writes `--writes` deltas of 10
rows (5 new keys, 5 updated) into one table: the first write (a fresh driver's), the
median of the writes after the fourth, and the Spark jobs of a write. The kinds take
turns, `--rounds` of each:
- `a list`: `spark.createDataFrame(list_of_tuples)`, an RDD of Python rows whose size
  Spark knows only by counting it (a job before the write);
- `local rows, the session's settings`: `local_frame(...)`, a local relation whose row
  count the write reads from its plan (one pass), with the small-write settings off;
- `local rows`: the same, as shipped (a small write runs interpreted, without adaptive
  execution: `offset_assets/versioned/evaluation.py`).

    .venv/bin/python -m bench.direct_writes [--rounds 3] [--writes 12] [--out bench/out/direct_writes.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).parent / "out" / "direct_writes.json"
KINDS = ("a list", "local rows, the session's settings", "local rows")
ROWS_PER_WRITE = 10


def child(kind: str, writes: int) -> None:
    """One fresh driver writing `writes` deltas of `kind`: print each write's seconds and
    Spark jobs as JSON."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from offset_assets.control_plane import connect
    from offset_assets.local_frames import local_frame
    from offset_assets.spark import get_spark_session
    from offset_assets.spark_jobs import count_spark_jobs
    from offset_assets.versioned import VersionedTable, hot_delta

    if kind == "local rows, the session's settings":
        hot_delta.DEFAULT_SMALL_RUN_ROWS_LIMIT = 0
    spark = get_spark_session(master="local[2]", app_name="offset-assets-direct-writes",
                              conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    schema = StructType([StructField("id", LongType(), False), StructField("name", StringType())])
    seconds, jobs = [], []
    with tempfile.TemporaryDirectory(prefix="offset-assets-direct-writes-") as folder:
        table = VersionedTable(spark, connect(f"sqlite:///{folder}/control_plane.db"), "items", ["id"], schema,
                               warehouse=folder)
        for n in range(writes):
            rows = [(key, f"name {key} in write {n}") for key in range(n * 5, n * 5 + ROWS_PER_WRITE)]
            started = time.perf_counter()
            with count_spark_jobs(spark) as counted:
                frame = spark.createDataFrame(rows, schema) if kind == "a list" else local_frame(spark, rows, schema)
                table.write_delta(frame)
            seconds.append(time.perf_counter() - started)
            jobs.append(counted.count)
        actual = table.read_actual().count()
    spark.stop()
    print(json.dumps({"seconds": seconds, "jobs": jobs, "actual_rows": actual}))


def measure(kind: str, writes: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "bench.direct_writes", "--child", kind, "--writes", str(writes)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writes", type=int, default=12)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writes < 6:
        parser.error("--writes must be at least 6 (the median is of the writes after the fourth)")
    if args.child:
        child(args.child, args.writes)
        return
    runs: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for _ in range(args.rounds):
        for kind in KINDS:
            runs[kind].append(measure(kind, args.writes))
    expected_rows = (args.writes - 1) * 5 + ROWS_PER_WRITE
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent.parent,
                            capture_output=True, text=True).stdout.strip() or None
    report = {"commit": commit, "rounds": args.rounds, "writes": args.writes, "rows_per_write": ROWS_PER_WRITE,
              "kinds": {}}
    for kind, measured in runs.items():
        if any(m["actual_rows"] != expected_rows for m in measured):
            raise SystemExit(f"{kind}: the table holds {[m['actual_rows'] for m in measured]} rows, "
                             f"not {expected_rows}")
        first = [m["seconds"][0] for m in measured]
        steady = [statistics.median(m["seconds"][4:]) for m in measured]
        report["kinds"][kind] = {
            "first_write_s": {"median": round(statistics.median(first), 2), "min": round(min(first), 2),
                              "max": round(max(first), 2)},
            "later_write_s": {"median": round(statistics.median(steady), 3), "min": round(min(steady), 3),
                              "max": round(max(steady), 3)},
            "spark_jobs_per_write": sorted({job for m in measured for job in m["jobs"][1:]}),
        }
        print(kind, json.dumps(report["kinds"][kind]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
