"""The datapipe workload: what an incremental run costs against a full one, up to 10M rows.

A copy transformation over one versioned input `src(id string primary key, v int)` into
one output, run by one `IncrementalEngine` in one warm `local[2]` session. For each N:

- initial run (every row is new);
- a round of M new + M updated rows (two deltas), then an incremental run (v2, offsets),
  R times (BENCH_REPEATS): the report keeps the median run and every run's time;
- another round, then an incremental run with v1 (full comparison);
- a full recompute (`reprocess_all=True`);
- the floor, measured in the same process: read the changed rows of a plain Parquet
  table partitioned by delta (partition pruning) and write them;
- the merge floor: the same changes joined to the output's previous rows by key (a plain
  Parquet table of N rows) and written without those that stay as they were, what a
  run must at least do to skip unchanged rows and know what a changed key replaces;
  R times too, the median kept (each was a single sample before: three merge floors at
  1M took 2.2, 1.8 and 1.7 s).

Each is timed and its Spark jobs counted (`offset_assets.spark_jobs`). Maintenance is on:
after the load and after every run, `maintain` compacts src, the output and the meta by
the default policy (timed apart from the runs). Then the long series: R consecutive
incremental runs of C changes at N_series with maintenance on; the time of the last W
runs against the first W shows whether runs slow down as deltas pile up.

The change-size sweep (`by_m`): at N_m rows, incremental v2 runs of M changed keys
(half new, half updated) for each M, in one world: does a run's cost follow M?

Knobs (environment): BENCH_NS (comma-separated, default 100000,1000000,10000000),
BENCH_M (10000), BENCH_REPEATS (3), BENCH_BY_M_N (1000000), BENCH_MS (100,1000,2500,5000,10000,25000,50000),
BENCH_BY_M_BASELINE (a report of another commit whose sweep the plot draws beside this one),
BENCH_SERIES_N (1000000), BENCH_SERIES_RUNS (500), BENCH_SERIES_CHANGES (100),
BENCH_SERIES_WINDOW (50), BENCH_SHUFFLE_PARTITIONS (4), BENCH_OUT (docs/bench),
BENCH_PARTS (by_n,by_m,series: the parts to run; a part not run keeps what the report
already in BENCH_OUT holds, and every part records the commit it measured),
BENCH_MASTER (local[2]; `spark://host:port` for a running cluster; `standalone` starts a
throwaway standalone cluster from the pyspark wheel, one master and one worker of every
core of the machine and BENCH_WORKER_MEMORY (8g), and stops it at the end: `make
bench-cluster`), BENCH_EXECUTOR_MEMORY (6g, on a cluster), BENCH_DRIVER_MEMORY (4g; `1g`,
Spark's default, shows that a full recompute and an initial run at 10M hold nothing of
the table's size in the driver: they stream through shuffled batches), BENCH_ADAPTIVE
(false; `true` runs under Spark's default adaptive query execution). A quick check
of the harness:

    BENCH_NS=20000 BENCH_M=1000 BENCH_BY_M_N=20000 BENCH_MS=10,100 BENCH_SERIES_N=20000 \\
    BENCH_SERIES_RUNS=20 BENCH_SERIES_WINDOW=5 BENCH_OUT=/tmp/bench .venv/bin/python -m bench.copy_workload
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from bench.standalone_cluster import spark_master
from offset_assets.control_plane import connect, database
from offset_assets.engine import IncrementalEngine, RunResult
from offset_assets.engine.transformation import Transformation, TransformInput, meta_table_name
from offset_assets.spark import get_spark_session
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned import VersionedTable
from offset_assets.versioned.maintenance import MaintenancePolicy, maintain
from offset_assets.versioned.registered import open_registered_table

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = StructType([StructField("id", StringType(), False), StructField("v", IntegerType(), True)])
TRANSFORMATION_ID = "copy_src"
PARTS = ("by_n", "by_m", "series")


def knob(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def git_commit() -> str | None:
    """The commit measured (each part of a report records its own: parts can be re-run apart)."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout.strip() or None


@dataclass(frozen=True)
class Settings:
    ns: list[int]
    m: int
    repeats: int
    by_m_n: int
    ms: list[int]
    series_n: int
    series_runs: int
    series_changes: int
    series_window: int
    shuffle_partitions: int
    out: Path
    parts: frozenset[str]
    master: str
    worker_memory: str
    executor_memory: str
    driver_memory: str
    adaptive: bool = False

    @classmethod
    def from_environment(cls) -> Settings:
        ns = os.environ.get("BENCH_NS", "100000,1000000,10000000")
        settings = cls(
            ns=[int(n) for n in ns.split(",") if n.strip()],
            m=knob("BENCH_M", 10_000),
            repeats=max(1, knob("BENCH_REPEATS", 3)),
            by_m_n=knob("BENCH_BY_M_N", 1_000_000),
            ms=[int(m) for m in os.environ.get("BENCH_MS", "100,1000,2500,5000,10000,25000,50000").split(",")
                if m.strip()],
            series_n=knob("BENCH_SERIES_N", 1_000_000),
            series_runs=knob("BENCH_SERIES_RUNS", 500),
            series_changes=knob("BENCH_SERIES_CHANGES", 100),
            series_window=knob("BENCH_SERIES_WINDOW", 50),
            shuffle_partitions=knob("BENCH_SHUFFLE_PARTITIONS", 4),
            out=Path(os.environ.get("BENCH_OUT", ROOT / "docs" / "bench")),
            parts=frozenset(p.strip() for p in os.environ.get("BENCH_PARTS", ",".join(PARTS)).split(",")),
            master=os.environ.get("BENCH_MASTER", "local[2]"),
            worker_memory=os.environ.get("BENCH_WORKER_MEMORY", "8g"),
            executor_memory=os.environ.get("BENCH_EXECUTOR_MEMORY", "6g"),
            driver_memory=os.environ.get("BENCH_DRIVER_MEMORY", "4g"),
            adaptive=os.environ.get("BENCH_ADAPTIVE", "false").lower() in ("1", "true", "on"),
        )
        if not settings.parts <= set(PARTS):
            raise ValueError(f"BENCH_PARTS={sorted(settings.parts)}: the parts are {', '.join(PARTS)}")
        if 2 * settings.series_window > settings.series_runs:
            raise ValueError(
                f"BENCH_SERIES_WINDOW={settings.series_window} needs at least "
                f"{2 * settings.series_window} runs, BENCH_SERIES_RUNS={settings.series_runs}"
            )
        return settings


@dataclass(frozen=True)
class Measured:
    seconds: float
    spark_jobs: int
    value: Any = None
    jobs: tuple[str, ...] = ()  # one line per Spark job: where a run's fixed cost goes

    def as_dict(self) -> dict[str, Any]:
        """Time and jobs; for an engine run also its profile (the driver's seconds and
        the jobs by phase, each job with its phase)."""
        measured = {"s": round(self.seconds, 3), "spark_jobs": self.spark_jobs, "jobs": list(self.jobs)}
        if isinstance(self.value, RunResult) and self.value.profile is not None:
            measured["profile"] = self.value.profile.as_dict()
        return measured


def measured(spark: SparkSession, action: Callable[[], Any]) -> Measured:
    """Time `action` and count the Spark jobs it starts."""
    with count_spark_jobs(spark) as jobs:
        start = time.perf_counter()
        value = action()
        seconds = time.perf_counter() - start
    return Measured(seconds, jobs.count, value, tuple(str(job) for job in jobs.jobs))


def copy(src: DataFrame) -> DataFrame:
    return src.select("id", "v")


def rows(spark: SparkSession, first: int, count: int, version: int) -> DataFrame:
    """Rows `k{first}`..`k{first + count - 1}` with v derived from `version` (so an
    update really changes v), generated by Spark: 10M rows never pass through Python."""
    return spark.range(first, first + count).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("id"),
        ((F.col("id") + version) % 1_000_003).cast("int").alias("v"),
    )


def round_of_changes(spark: SparkSession, n_before: int, new: int, updated: int, version: int) -> list[DataFrame]:
    """`new` rows after the existing ones, then `updated` existing rows spread over the
    whole key range (so they land in every file, as real updates do)."""
    step = max(1, n_before // max(updated, 1))
    changed = spark.range(0, updated).select(
        F.concat(F.lit("k"), ((F.col("id") * step + version) % n_before).cast("string")).alias("id"),
        ((F.col("id") + version * 7) % 1_000_003).cast("int").alias("v"),
    )
    return [rows(spark, n_before, new, version), changed]


class CopyWorld:
    """src, its copy and the meta, on a control plane and warehouse of their own."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark = spark
        self.url = f"sqlite:///{root / 'control_plane.db'}"
        self.plane = connect(self.url)
        warehouse = str(root / "warehouse")
        self.src = VersionedTable(spark, self.plane, "src", ["id"], SCHEMA, warehouse=warehouse)
        self.dst = VersionedTable(spark, self.plane, "dst", ["id"], SCHEMA, warehouse=warehouse)
        self.engine = IncrementalEngine(spark, self.plane)
        self.t = Transformation(
            transformation_id=TRANSFORMATION_ID,
            inputs=[TransformInput(self.src)],
            transform_keys=["id"],
            outputs=[self.dst],
            func=copy,
        )
        self.meta: VersionedTable | None = None
        self.n = 0
        self.version = 0
        self.maintenance_s: list[float] = []

    def load(self, n: int) -> None:
        self.src.write_delta(rows(self.spark, 0, n, 0))
        self.n = n

    def change(self, new: int, updated: int) -> None:
        self.version += 1
        for frame in round_of_changes(self.spark, self.n, new, updated, self.version):
            self.src.write_delta(frame)
        self.n += new

    def maintain(self) -> None:
        """Compaction by the default policy of src, the output and the meta (timed apart)."""
        start = time.perf_counter()
        for table in self.tables():
            maintain(table, MaintenancePolicy())
        self.maintenance_s.append(time.perf_counter() - start)

    def tables(self) -> list[VersionedTable]:
        """src, the output and the meta (once the first run has registered it)."""
        if self.meta is None:
            self.meta = open_registered_table(self.spark, self.plane, meta_table_name(TRANSFORMATION_ID),
                                              self.src.warehouse)
        return [self.src, self.dst] + ([self.meta] if self.meta is not None else [])

    def run(self, **options: Any) -> Measured:
        result = measured(self.spark, lambda: self.engine.run_full(self.t, **options))
        self.maintain()
        return result

    def close(self) -> None:
        database.forget(self.url)


def floor(spark: SparkSession, root: Path, n: int, m: int) -> Measured:
    """Read the changed rows (two deltas of m rows) of a Parquet table partitioned by delta
    and write them: the least any incremental run of this workload must do."""
    table = str(root / "floor_src")
    rows(spark, 0, n, 0).withColumn("delta", F.lit(0)).write.partitionBy("delta").parquet(table)
    for delta, frame in enumerate(round_of_changes(spark, n, m, m, 1), start=1):
        frame.withColumn("delta", F.lit(delta)).write.mode("append").partitionBy("delta").parquet(table)
    target = str(root / "floor_out")
    return measured(
        spark,
        lambda: spark.read.parquet(table).where(F.col("delta") >= 1).drop("delta")
        .write.mode("overwrite").parquet(target),
    )


def merge_floor(spark: SparkSession, root: Path, n: int, number: int = 0) -> Measured:
    """The floor's changes (written by `floor`), joined to the output's previous rows by key
    and written without the rows that stay as they were: the least a run must do to skip
    unchanged rows and know what each changed key replaces. The output is a plain Parquet
    table of n rows (no catalog, no meta, no versions). Its scan meets the changed keys
    broadcast, as a run's read of the output does when its changes are bounded: left to
    itself Spark planned a sort-merge join that shuffled all n rows (at 10M 6.9 s against
    2.6 s). `number`: how many were measured in `root` before (the first writes the output)."""
    output = str(root / "merge_floor_output")
    if number == 0:
        rows(spark, 0, n, 0).write.parquet(output)
    changes, target = str(root / "floor_src"), str(root / "merge_floor_out")

    def merge() -> None:
        changed = spark.read.parquet(changes).where(F.col("delta") >= 1).drop("delta")
        previous = (spark.read.parquet(output).select("id", F.col("v").alias("previous_v"))
                    .join(F.broadcast(changed.select("id")), on="id", how="left_semi"))
        merged = changed.join(previous, on="id", how="left")
        merged.where(~F.col("v").eqNullSafe(F.col("previous_v"))).write.mode("overwrite").parquet(target)

    return measured(spark, merge)


def median_of(runs: list[Measured]) -> Measured:
    """The run of median time (the lower middle one of an even number)."""
    return sorted(runs, key=lambda run: run.seconds)[(len(runs) - 1) // 2]


def measure_n(spark: SparkSession, n: int, m: int, repeats: int = 1) -> dict[str, Any]:
    """Initial, incremental v2 (`repeats` rounds), incremental v1, full recompute, the
    floor and the merge floor (`repeats` times) at size n."""
    with tempfile.TemporaryDirectory(prefix="bench-copy-") as tmp:
        world = CopyWorld(spark, Path(tmp))
        try:
            load = measured(spark, lambda: world.load(n))
            world.maintain()
            initial = world.run()
            v2_runs = []
            for _ in range(repeats):
                world.change(m, m)
                v2_runs.append(world.run(change_detection="v2"))
            world.change(m, m)
            v1 = world.run(change_detection="v1")
            full = world.run(reprocess_all=True)
            base = floor(spark, Path(tmp), n, m)
            merge_runs = [merge_floor(spark, Path(tmp), n, number) for number in range(repeats)]
        finally:
            world.close()
    v2, merge_base = median_of(v2_runs), median_of(merge_runs)
    report = {
        "commit": git_commit(),
        "n": n,
        "m_new": m,
        "m_updated": m,
        "load_src": load.as_dict(),
        "initial": initial.as_dict() | {"processed_keys": initial.value.processed_keys},
        "incremental_v2": v2.as_dict() | {"processed_keys": v2.value.processed_keys,
                                          "runs_s": [round(run.seconds, 3) for run in v2_runs]},
        "incremental_v1": v1.as_dict() | {"processed_keys": v1.value.processed_keys},
        "full_recompute": full.as_dict() | {"processed_keys": full.value.processed_keys},
        "floor": base.as_dict(),
        "merge_floor": merge_base.as_dict() | {"runs_s": [round(run.seconds, 3) for run in merge_runs]},
        "maintenance_s": [round(s, 3) for s in world.maintenance_s],
    }
    report["ratios"] = {
        "v2_over_floor": round(v2.seconds / base.seconds, 2),
        "v2_over_merge_floor": round(v2.seconds / merge_base.seconds, 2),
        "v1_over_v2": round(v1.seconds / v2.seconds, 2),
        "full_over_v2": round(full.seconds / v2.seconds, 2),
    }
    return report


def by_change_size(spark: SparkSession, n: int, ms: list[int]) -> dict[str, Any]:
    """One world of n rows; for each M an incremental v2 run of M changed keys (M/2 new,
    M/2 updated, two deltas), maintenance after each run as in the sizes."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-by-m-") as tmp:
        world = CopyWorld(spark, Path(tmp))
        try:
            world.load(n)
            world.maintain()
            world.run()
            for m in ms:
                world.change(m - m // 2, m // 2)
                run = world.run(change_detection="v2")
                runs.append(run.as_dict() | {"m": m, "processed_keys": run.value.processed_keys})
                print(f"  M = {m}: {run.seconds:.2f}s, {run.spark_jobs} jobs", flush=True)
        finally:
            world.close()
    return {"commit": git_commit(), "n": n, "runs": runs}


def long_series(spark: SparkSession, settings: Settings,
                progress: Callable[[list[float]], None] = lambda run_s: None) -> dict[str, Any]:
    """R incremental runs of C changes each (half new, half updated, one delta) with
    maintenance after every run: do runs stay as fast as deltas pile up? `progress`
    gets the run times so far every 50 runs."""
    changes = settings.series_changes
    with tempfile.TemporaryDirectory(prefix="bench-series-") as tmp:
        world = CopyWorld(spark, Path(tmp))
        try:
            world.load(settings.series_n)
            world.maintain()
            world.run()
            world.maintenance_s.clear()
            run_s, jobs = [], []
            for number in range(1, settings.series_runs + 1):
                world.version += 1
                new, updated = round_of_changes(spark, world.n, changes - changes // 2, changes // 2, world.version)
                world.src.write_delta(new.unionByName(updated))
                world.n += changes - changes // 2
                result = world.run()
                run_s.append(result.seconds)
                jobs.append(result.spark_jobs)
                if number % 50 == 0 or number == settings.series_runs:
                    print(f"  series run {number}: {result.seconds:.2f}s, {result.spark_jobs} jobs", flush=True)
                    progress(run_s)
            snapshots = len(world.src.catalog.snapshots("src"))
            deltas = world.src.last_committed().delta_num
        finally:
            world.close()
    w = settings.series_window
    first, last = statistics.mean(run_s[:w]), statistics.mean(run_s[-w:])
    return {
        "commit": git_commit(),
        "n": settings.series_n,
        "runs": settings.series_runs,
        "changes_per_run": changes,
        "window": w,
        "first_window_mean_s": round(first, 3),
        "last_window_mean_s": round(last, 3),
        "last_over_first": round(last / first, 3),
        "median_run_s": round(statistics.median(run_s), 3),
        "spark_jobs_median": statistics.median(jobs),
        "maintenance_total_s": round(sum(world.maintenance_s), 1),
        "src_deltas": deltas,
        "src_snapshots": snapshots,
        "run_s": [round(s, 3) for s in run_s],
        "last_run_profile": result.value.profile.as_dict(),
    }


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [part for part in PARTS if report.get(part)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    axis = dict(zip(panels, axes[0], strict=True))
    if "by_n" in axis:
        by_n = axis["by_n"]
        ns = [row["n"] for row in report["by_n"]]
        for key, label in [("initial", "initial run"), ("incremental_v2", "incremental v2"),
                           ("incremental_v1", "incremental v1"), ("full_recompute", "full recompute"),
                           ("floor", "floor (read + write the changes)"),
                           ("merge_floor", "merge floor (+ join to the output's keys)")]:
            if all(key in row for row in report["by_n"]):
                by_n.plot(ns, [row[key]["s"] for row in report["by_n"]], marker="o", label=label)
        by_n.set_xscale("log")
        by_n.set_yscale("log")
        by_n.set_xlabel(f"rows in src (N); each round {report['by_n'][0]['m_new']} new + "
                        f"{report['by_n'][0]['m_updated']} updated")
        by_n.set_ylabel("seconds")
        by_n.legend(fontsize=8)
    if "by_m" in axis:
        by_m = axis["by_m"]
        runs = report["by_m"]["runs"]
        by_m.plot([r["m"] for r in runs], [r["s"] for r in runs], marker="o",
                  label=f"incremental v2 (commit {report['by_m']['commit']})")
        if "by_m_baseline" in report:
            base = report["by_m_baseline"]
            by_m.plot([r["m"] for r in base["runs"]], [r["s"] for r in base["runs"]], marker="o", linestyle="--",
                      label=f"incremental v2 (commit {base['commit']})")
        by_m.set_xscale("log")
        by_m.set_xlabel(f"changed keys per run (M), N = {report['by_m']['n']}")
        by_m.set_ylabel("seconds")
        by_m.set_ylim(bottom=0)
        by_m.legend(fontsize=8)
    if "series" in axis:
        series = axis["series"]
        runs = report["series"]["run_s"]
        series.plot(range(1, len(runs) + 1), runs, linewidth=0.8)
        series.set_xlabel(f"incremental run ({report['series']['changes_per_run']} changes each), "
                          f"N = {report['series']['n']}, maintenance on")
        series.set_ylabel("seconds")
        series.set_ylim(bottom=0)
    against = {"by_n": "against N", "by_m": "against M", "series": "over a long series"}
    fig.suptitle(f"copy transformation, {report['machine']['spark_master']}, "
                 f"{report['machine']['cores']} cores: run time " + ", ".join(against[p] for p in panels), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_table(report: dict[str, Any]) -> None:
    steps = ("initial", "incremental_v2", "incremental_v1", "full_recompute", "floor", "merge_floor")
    print(f"{'N':>10} {'initial':>12} {'v2':>12} {'v1':>12} {'full':>12} {'floor':>12} {'merge floor':>12}"
          "   (seconds / Spark jobs)")
    for row in report["by_n"]:
        cells = [f"{row[k]['s']:.2f}/{row[k]['spark_jobs']}" if k in row else "-" for k in steps]
        print(f"{row['n']:>10} " + " ".join(f"{c:>12}" for c in cells))
    if "by_m" in report:
        print(f"by M at N={report['by_m']['n']}: " + ", ".join(
            f"M={r['m']} {r['s']:.2f}s/{r['spark_jobs']}" for r in report["by_m"]["runs"]))
    if "series" not in report:
        return
    s = report["series"]
    print(f"series: {s['runs']} runs of {s['changes_per_run']} changes at N={s['n']}: first {s['window']} "
          f"{s['first_window_mean_s']:.2f}s, last {s['window']} {s['last_window_mean_s']:.2f}s "
          f"(ratio {s['last_over_first']}), maintenance {s['maintenance_total_s']}s in all")


def save(report: dict[str, Any], out: Path) -> None:
    """Write the report as it stands: a long benchmark that dies keeps what it measured."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "copy_workload.json").write_text(json.dumps(report, indent=2))


def main() -> None:
    settings = Settings.from_environment()
    with spark_master(settings.master, settings.executor_memory, settings.worker_memory) as (master, cluster_conf):
        spark = session(settings, master, cluster_conf)
        try:
            run(settings, spark, cluster_conf)
        finally:
            if not master.startswith("local"):
                spark.stop()  # before its cluster goes; a local session stays warm for `make bench`


def session(settings: Settings, master: str, cluster_conf: dict[str, str]) -> SparkSession:
    spark = get_spark_session(
        master=master,
        app_name="bench-copy-workload",
        conf={
            "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
            "spark.default.parallelism": str(settings.shuffle_partitions),
            "spark.sql.adaptive.enabled": str(settings.adaptive).lower(),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": settings.driver_memory,
            **cluster_conf,
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(settings: Settings, spark: SparkSession, cluster_conf: dict[str, str]) -> None:
    started = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "copy_workload",
        "machine": {"cores": os.cpu_count(), "spark_master": spark.sparkContext.master,
                    "shuffle_partitions": settings.shuffle_partitions, "adaptive": settings.adaptive,
                    "driver_memory": settings.driver_memory, **cluster_conf},
        "by_n": [],
    }
    earlier = settings.out / "copy_workload.json"
    if earlier.exists():
        # Parts not re-run keep what was measured before (each names its commit).
        kept = json.loads(earlier.read_text())
        report.update({part: kept[part] for part in PARTS if part not in settings.parts and part in kept})
        if "by_m" not in settings.parts and "by_m_baseline" in kept:
            report["by_m_baseline"] = kept["by_m_baseline"]
    for n in settings.ns if "by_n" in settings.parts else []:
        print(f"N = {n} ...", flush=True)
        report["by_n"].append(measure_n(spark, n, settings.m, settings.repeats))
        save(report, settings.out)
        print(json.dumps({k: {f: x for f, x in v.items() if f not in ("jobs", "profile")} if isinstance(v, dict) else v
                          for k, v in report["by_n"][-1].items() if k != "maintenance_s"}), flush=True)
    if "by_m" in settings.parts:
        print(f"change sizes at N = {settings.by_m_n} ...", flush=True)
        report["by_m"] = by_change_size(spark, settings.by_m_n, settings.ms)
        if os.environ.get("BENCH_BY_M_BASELINE"):
            # Another commit's sweep (its report), drawn beside this one: what a change did.
            report["by_m_baseline"] = json.loads(Path(os.environ["BENCH_BY_M_BASELINE"]).read_text())["by_m"]
        save(report, settings.out)
    if "series" in settings.parts:
        print(f"long series at N = {settings.series_n} ...", flush=True)

        def progress(run_s: list[float]) -> None:
            report["series_so_far"] = {"runs_done": len(run_s), "run_s": [round(x, 3) for x in run_s]}
            save(report, settings.out)

        report["series"] = long_series(spark, settings, progress)
        report.pop("series_so_far", None)
    report["total_s"] = round(time.perf_counter() - started, 1)
    save(report, settings.out)
    plot(report, settings.out / "copy_workload.png")
    print_table(report)
    print(f"report: {settings.out / 'copy_workload.json'}, plot: {settings.out / 'copy_workload.png'} "
          f"({report['total_s']}s in all)")


if __name__ == "__main__":
    main()
