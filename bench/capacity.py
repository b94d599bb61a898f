"""Per-unit costs for a capacity model: what one delta, one run and one key cost the
control plane and the warehouse, counted on small data (`docs/scale.md` extrapolates them).

Four parts, each in a throwaway control plane and warehouse:

- `catalog` (no Spark): D deltas committed through the catalog's own API
  (`DeltaCatalog.open_hot` + `commit`, the statements a real commit sends) for D up to
  9,000 (a year of hourly deltas); bytes per delta row in SQLite (`dbstat`: pages of the
  table and its indexes), statements per committed delta, and the time of the catalog
  queries a run makes as D grows (rows fetched are counts, times are timings). Then
  1,000 job_log ranges with their two step_log rows: bytes per range and the rows a
  range planner reads (every range of its job). `--postgres` repeats it on a throwaway
  PostgreSQL server (`bench/postgres_server.py`; needs initdb/pg_ctl).
- `runs` (Spark): a copy transformation over 20,000 rows, 24 incremental runs of 200
  changed keys (one delta each), maintenance by the default policy after every run, as
  in `bench.copy_workload`. Per run: SQL statements by kind, control-plane rows written
  per table, transactions, catalog rows fetched, Spark jobs, the update_ts literal of
  each read (entries), the delta folders each read opens; per key: Parquet bytes of the
  meta per delta and after compaction.
- `growth` (Spark): a tiny copy (1,000 rows) whose output table is padded to 10, 100 and
  1,000 committed deltas (one-row deltas of keys the copy never touches: their files
  written with pyarrow in the storage layout, their catalog rows through the catalog's
  API); at each size 3 incremental runs of 10 changed keys before compacting the output
  and 2 after: how the catalog rows, the literal, the folders opened and the Spark jobs of
  a run grow with D.
- `literal` (Spark): the cost of the update_ts lookup literal alone, for 10 to 20,000
  deltas: its SQL text and the time to build and run a 10-row query with it.

Counts (statements, rows, bytes, jobs, folders, literal entries) are deterministic for a
given commit; the seconds are timings on whatever else runs on the machine: the report
labels them so.

    .venv/bin/python -m bench.capacity                       # every part, bench/out/capacity.json
    .venv/bin/python -m bench.capacity --parts catalog --postgres
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from sqlalchemy import event

from bench.copy_workload import CopyWorld, round_of_changes, rows
from bench.postgres_server import PostgresServer
from offset_assets.control_plane import connect, database
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.delta_catalog import queries as catalog_queries
from offset_assets.control_plane.delta_catalog.records import DeltaInfo
from offset_assets.control_plane.job_log import JobLog, StepRecord
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.spark import LOCAL_TEST_CONF, get_spark_session
from offset_assets.spark_jobs import count_spark_jobs
from offset_assets.versioned.compaction import compact
from offset_assets.versioned.layout import DELTAS_DIR, new_delta_path, table_root, write_path
from offset_assets.versioned.maintenance import DEFAULT_RETENTION_S, MaintenancePolicy, cleanup, maintain
from offset_assets.versioned.reads import TableReader
from offset_assets.versioned.table import VersionedTable

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).parent / "out"
PARTS = ("catalog", "runs", "growth", "literal")

CATALOG_SIZES = (10, 100, 1_000, 9_000)
JOB_RANGES = 1_000
RUNS_N, RUNS_ROUNDS, RUNS_CHANGES = 20_000, 24, 200
GROWTH_N, GROWTH_SIZES, GROWTH_CHANGES = 1_000, (10, 100, 1_000), 10
GROWTH_RUNS_BEFORE, GROWTH_RUNS_AFTER = 3, 2
LITERAL_SIZES = (10, 100, 1_000, 9_000, 20_000)
REPEAT = 5
# A production-like warehouse URI: the catalog stores each delta's folder path.
PRODUCTION_WAREHOUSE = "s3a://analytics-warehouse/offset-assets"
TIMING = "timing on a shared machine under nice -n 19: an indication, not a measurement to compare"


def git_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or None


def median_seconds(action: Callable[[], Any], repeat: int = REPEAT) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 6)


# -- what a block of code asks of the control plane and of the reads ------------------------

DML = re.compile(r'^\s*(INSERT INTO|UPDATE|DELETE FROM)\s+"?(\w+)', re.IGNORECASE)


class Probe:
    """Counts, while `active`: SQL statements by kind, transactions and rows written per
    control-plane table (listeners on each plane's engine); catalog rows turned into
    `DeltaInfo` and the time spent in `DeltaCatalog` methods; for every read, the entries of
    its update_ts literal and the folders it opens (wrappers around `TableReader`)."""

    def __init__(self) -> None:
        self.active = False
        self.reset()
        self._install_wrappers()

    def reset(self) -> None:
        self.statements: Counter[str] = Counter()
        self.rows_written: Counter[str] = Counter()
        self.transactions = 0
        self.catalog_rows = 0
        self.catalog_s = 0.0
        self.literal_entries: list[int] = []
        self.literal_chars: list[int] = []
        self.folders: list[int] = []

    @contextlib.contextmanager
    def counting(self) -> Iterator[Probe]:
        self.reset()
        self.active = True
        try:
            yield self
        finally:
            self.active = False

    def watch(self, engine: sa.Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)
        event.listen(engine, "begin", self._begin)

    def _before(self, _conn, _cursor, statement: str, *_args: object) -> None:  # noqa: ANN001
        if self.active:
            self.statements[statement.lstrip().split(None, 1)[0].upper()] += 1

    def _after(self, _conn, cursor, statement: str, *_args: object) -> None:  # noqa: ANN001
        if self.active:
            found = DML.match(statement)
            if found and cursor.rowcount and cursor.rowcount > 0:
                self.rows_written[found.group(2)] += cursor.rowcount

    def _begin(self, _conn) -> None:  # noqa: ANN001
        if self.active:
            self.transactions += 1

    def _install_wrappers(self) -> None:
        probe = self
        to_info = catalog_queries.delta_info

        def counted_info(row: sa.Row) -> DeltaInfo:
            if probe.active:
                probe.catalog_rows += 1
            return to_info(row)

        catalog_queries.delta_info = counted_info  # every catalog read of delta rows goes through it

        for name in ("committed", "snapshot_state", "last_committed", "hot", "by_num", "by_timestamp",
                     "snapshot_at", "snapshots", "changes_after", "open_hot", "commit", "rollback",
                     "table_spec", "data_paths", "expire_snapshots", "add_snapshot", "last_commit_ts"):
            setattr(DeltaCatalog, name, _timed(getattr(DeltaCatalog, name), probe))

        update_ts_of = TableReader.update_ts_of
        scan = TableReader.scan
        expr = F.expr

        def literal(deltas):  # noqa: ANN001, ANN202
            if probe.active and deltas:
                nums = [d.delta_num for d in deltas]
                probe.literal_entries.append(max(nums) - min(nums) + 1)
            return update_ts_of(deltas)

        def counted_expr(text: str):  # noqa: ANN202
            if probe.active and text.startswith("array("):
                probe.literal_chars.append(len(text))
            return expr(text)

        def counted_scan(reader, paths, with_update_ts=False):  # noqa: ANN001, ANN202
            if probe.active and paths:
                probe.folders.append(len(paths))
            return scan(reader, paths, with_update_ts)

        TableReader.update_ts_of = staticmethod(literal)
        TableReader.scan = counted_scan
        F.expr = counted_expr

    def as_dict(self) -> dict[str, Any]:
        return {
            "sql_statements": sum(self.statements.values()),
            "sql_by_kind": dict(sorted(self.statements.items())),
            "transactions": self.transactions,
            "rows_written": dict(sorted(self.rows_written.items())),
            "catalog_rows_fetched": self.catalog_rows,
            "catalog_s": round(self.catalog_s, 4),
            "update_ts_literals": len(self.literal_entries),
            "literal_entries_max": max(self.literal_entries, default=0),
            "literal_entries_sum": sum(self.literal_entries),
            "literal_chars_max": max(self.literal_chars, default=0),
            "reads": len(self.folders),
            "folders_opened_max": max(self.folders, default=0),
            "folders_opened_sum": sum(self.folders),
        }


def _timed(method: Callable, probe: Probe) -> Callable:
    depth = {"n": 0}

    def timed(*args: object, **kwargs: object) -> object:
        if not probe.active or depth["n"]:
            return method(*args, **kwargs)
        depth["n"] += 1
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            probe.catalog_s += time.perf_counter() - start
            depth["n"] -= 1

    return timed


# -- sizes ------------------------------------------------------------------------------------

def sqlite_bytes(engine: sa.Engine) -> dict[str, dict[str, int]]:
    """Per table of the control plane: rows, and bytes of its pages and of its indexes'
    pages (`dbstat`), and the payload bytes of both."""
    with engine.connect() as conn:
        owners = {row.name: row.tbl_name for row in conn.execute(sa.text(
            "SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')"))}
        stats = conn.execute(sa.text("SELECT name, SUM(pgsize), SUM(payload) FROM dbstat GROUP BY name")).all()
        found: dict[str, dict[str, int]] = {}
        for name, pages, payload in stats:
            table = owners.get(name, name)
            entry = found.setdefault(table, {"rows": 0, "table_bytes": 0, "index_bytes": 0, "payload_bytes": 0})
            entry["table_bytes" if name == table else "index_bytes"] += int(pages)
            entry["payload_bytes"] += int(payload)
        for table, entry in found.items():
            entry["rows"] = conn.execute(sa.text(f'SELECT COUNT(*) FROM "{table}"')).scalar_one()
    return found


def postgres_bytes(engine: sa.Engine, tables: list[str]) -> dict[str, dict[str, int]]:
    """Per table after VACUUM: rows, heap bytes and index bytes (PostgreSQL's own sizes)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        found = {}
        for table in tables:
            conn.execute(sa.text(f'VACUUM ANALYZE "{table}"'))
            found[table] = {
                "rows": conn.execute(sa.text(f'SELECT COUNT(*) FROM "{table}"')).scalar_one(),
                "table_bytes": conn.execute(sa.text(f"SELECT pg_table_size('{table}')")).scalar_one(),
                "index_bytes": conn.execute(sa.text(f"SELECT pg_indexes_size('{table}')")).scalar_one(),
            }
    return found


def folder_bytes(path: str) -> int:
    """Bytes of the Parquet files under a local folder (Spark's .crc and _SUCCESS left out)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(folder, f)) for f in files if f.endswith(".parquet"))
    return total


# -- part catalog: the control plane alone -----------------------------------------------------

def commit_deltas(catalog: DeltaCatalog, table: str, count: int, rows_upserted: int = 1_000_000) -> None:
    """`count` deltas committed as a run commits them (open_hot, then commit with the path)."""
    root = table_root(PRODUCTION_WAREHOUSE, table)
    for _ in range(count):
        hot = catalog.open_hot(table, f"ip-10-0-3-17.ec2.internal:{os.getpid()}", str(uuid.uuid4()),
                               lambda num: new_delta_path(root, num))
        catalog.commit([(table, hot.delta_num, rows_upserted, 1_000, hot.data_path)])


def catalog_part(url: str, probe: Probe, backend: str) -> dict[str, Any]:
    plane = connect(url)
    probe.watch(plane.engine)
    catalog = DeltaCatalog(plane)
    table = "events_hourly"
    catalog.register_table(table, ["event_id"], '{"type":"struct","fields":[]}')
    with probe.counting():
        commit_deltas(catalog, table, 1)
    per_delta = probe.as_dict()
    sizes = []
    committed = 1
    for size in CATALOG_SIZES:
        commit_deltas(catalog, table, size - committed)
        committed = size
        last = catalog.last_committed(table)
        with probe.counting():
            catalog.committed(table)
        listed_rows = probe.catalog_rows
        sizes.append({
            "deltas": size,
            "rows_fetched_full_listing": listed_rows,
            "full_listing_s": median_seconds(lambda: catalog.committed(table)),
            "since_offset_s": median_seconds(lambda last=last: catalog.committed(table, since_ts=last.commit_ts)),
            "snapshot_state_s": median_seconds(lambda: catalog.snapshot_state([table])),
            "open_and_commit_one_delta_s": median_seconds(lambda: commit_deltas(catalog, table, 1), repeat=1),
        })
        committed += 1
    ticks = idle_checks(plane, probe, table)
    bytes_ = sqlite_bytes(plane.engine) if backend == "sqlite" else postgres_bytes(
        plane.engine, ["table_delta", "job_log", "step_log"])
    delta_bytes = bytes_["table_delta"]
    delta_row_bytes = (delta_bytes["table_bytes"] + delta_bytes["index_bytes"]) / delta_bytes["rows"]
    jobs = job_log_part(plane, probe)
    bytes_ = sqlite_bytes(plane.engine) if backend == "sqlite" else postgres_bytes(
        plane.engine, ["table_delta", "job_log", "step_log"])
    database.forget(url)
    return {
        "backend": backend,
        "timings": TIMING,
        "one_committed_delta": per_delta,
        "table_delta": {
            **delta_bytes,
            "bytes_per_delta": round(delta_row_bytes, 1),
            "data_path_example": catalog.last_committed(table).data_path,
        },
        "by_deltas": sizes,
        "idle_checks": ticks,
        "job_log": {
            **jobs,
            "job_log": bytes_["job_log"],
            "step_log": bytes_["step_log"],
            "bytes_per_range": round(sum(bytes_[t]["table_bytes"] + bytes_[t]["index_bytes"]
                                         for t in ("job_log", "step_log")) / bytes_["job_log"]["rows"], 1),
        },
    }


def idle_checks(plane: database.ControlPlane, probe: Probe, table: str) -> dict[str, Any]:
    """What the control plane answers, with thousands of deltas in the input, to the two
    questions asked without Spark: an offset sensor's tick (`new_input_commits`) and a
    Dagster step's "anything to do?" (`current_request`, the request of `pending_work`),
    for a transformation whose offset is one delta behind."""
    from offset_assets.dagster_adapter.incremental.sensors import new_input_commits
    from offset_assets.engine.pending import current_request

    catalog = DeltaCatalog(plane)
    behind = catalog.committed(table)[-2]
    OffsetRepository(plane).update_offsets_bulk({("events_daily", table): behind.commit_ts})
    found = {}
    for name, question in (
        ("offset_sensor_tick", lambda: new_input_commits(plane, "events_daily", [table], {})),
        ("idle_request", lambda: current_request(plane, "events_daily", [table], "v2").deltas_by_name(
            catalog, [table])),
    ):
        with probe.counting():
            question()
        counted = probe.as_dict()
        found[name] = {"sql_statements": counted["sql_statements"], "transactions": counted["transactions"],
                       "catalog_rows_fetched": counted["catalog_rows_fetched"],
                       "seconds": median_seconds(question)}
    return found


def job_log_part(plane: database.ControlPlane, probe: Probe) -> dict[str, Any]:
    """JOB_RANGES hourly ranges as an ingestion records them: claim, two steps, success."""
    log = JobLog(plane)
    name = "events_hourly_ingestion"
    start = 1_700_000_000

    def one_range(hour: int) -> None:
        begin = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + hour * 3600))
        end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + (hour + 1) * 3600))
        claim = log.claim(name, begin, end, run_id=str(uuid.uuid4()), period=60, load_type="time_window",
                          log_driven_type="time_window")
        now = time.time()
        with plane.begin() as conn:
            log.mark_success(claim.job_id, end, conn=conn, run_id=claim.run_id)
            log.record_step(claim.job_id, claim.attempt, StepRecord(
                "read", "SUCCESS", now, now + 2.5, source_count=1_000_000, source_type="sql"), conn=conn)
            log.record_step(claim.job_id, claim.attempt, StepRecord(
                "write", "SUCCESS", now + 2.5, now + 9.0, source_count=1_000_000, target_count=998_000,
                success_count=1_000_000, failure_count=0, source_type="sql", target_type="versioned_table",
                output=json.dumps({"table": "events_hourly", "delta_num": 123456, "rows_unchanged": 2_000})),
                conn=conn)

    with probe.counting():
        one_range(0)
    per_range = probe.as_dict()
    for hour in range(1, JOB_RANGES):
        one_range(hour)
    with probe.counting():
        log.history(name)
    return {
        "ranges": JOB_RANGES,
        "one_range": per_range,
        "planner_rows_fetched": JOB_RANGES,  # history() returns every range of the job
        "planner_history_s": median_seconds(lambda: log.history(name)),
        "planner_sql_statements": probe.as_dict()["sql_statements"],
    }


def postgres_catalog_part(probe: Probe) -> dict[str, Any]:
    server = PostgresServer.start()
    try:
        admin = sa.create_engine(server.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text("CREATE DATABASE capacity"))
        admin.dispose()
        return catalog_part(server.url_for("capacity"), probe, "postgresql")
    finally:
        server.stop()


# -- part runs: a real copy workload -------------------------------------------------------------

def run_once(spark: SparkSession, world: CopyWorld, probe: Probe) -> dict[str, Any]:
    with probe.counting(), count_spark_jobs(spark) as jobs:
        start = time.perf_counter()
        result = world.engine.run_full(world.t)
        seconds = time.perf_counter() - start
    assert result.failed_keys == 0, result.errors
    return {
        "changed_keys": result.changed_keys,
        "spark_jobs": jobs.count,
        "job_seconds": [job.seconds for job in jobs.jobs],
        "profile": result.profile.as_dict(),
        **probe.as_dict(),
        "seconds": round(seconds, 3),
    }


def maintain_once(world: CopyWorld, probe: Probe) -> dict[str, Any]:
    with probe.counting():
        start = time.perf_counter()
        world.maintain()
        seconds = time.perf_counter() - start
    found = probe.as_dict()
    return {key: found[key] for key in ("sql_statements", "rows_written", "catalog_rows_fetched")} | {
        "seconds": round(seconds, 3)}


def change(world: CopyWorld, changes: int) -> None:
    """One delta of `changes` keys: half new, half updated (spread over the key range)."""
    world.version += 1
    new, updated = round_of_changes(world.spark, world.n, changes - changes // 2, changes // 2, world.version)
    world.src.write_delta(new.unionByName(updated))
    world.n += changes - changes // 2


def runs_part(spark: SparkSession, probe: Probe, tmp: Path) -> dict[str, Any]:
    world = CopyWorld(spark, tmp / "runs")
    probe.watch(world.plane.engine)
    try:
        world.load(RUNS_N)
        world.maintain()
        initial = run_once(spark, world, probe)
        world.maintain()
        runs, maintenance = [], []
        for number in range(1, RUNS_ROUNDS + 1):
            change(world, RUNS_CHANGES)
            found = run_once(spark, world, probe)
            found["dst_deltas"] = world.dst.last_committed().delta_num
            runs.append(found)
            maintenance.append(maintain_once(world, probe))
            print(f"  run {number}: {found['changed_keys']} keys, {found['spark_jobs']} jobs, "
                  f"{found['sql_statements']} statements, {found['catalog_rows_fetched']} catalog rows, "
                  f"{found['seconds']} s", flush=True)
        sizes = warehouse_sizes(world)
        sizes["meta_schema_random_long_keys"] = meta_shaped_bytes(spark, tmp / "meta-shaped")
        control_plane = sqlite_bytes(world.plane.engine)
    finally:
        world.close()
    job_seconds = [s for run in runs for s in run["job_seconds"] if s is not None]
    return {
        "n": RUNS_N,
        "changes_per_run": RUNS_CHANGES,
        "rounds": RUNS_ROUNDS,
        "timings": TIMING,
        "initial_run": {k: v for k, v in initial.items() if k != "job_seconds"},
        "runs": [{k: v for k, v in run.items() if k != "job_seconds"} for run in runs],
        "maintenance": maintenance,
        "spark_job_seconds_median": round(statistics.median(job_seconds), 3),
        "spark_job_seconds_p90": round(sorted(job_seconds)[int(0.9 * len(job_seconds))], 3),
        "warehouse": sizes,
        "control_plane": control_plane,
    }


def warehouse_sizes(world: CopyWorld) -> dict[str, Any]:
    """Parquet bytes per version of the deltas the incremental runs wrote, and per key of the
    meta snapshot after compacting it now."""
    meta = world.tables()[2]
    found: dict[str, Any] = {}
    for table in (world.src, world.dst, meta):
        deltas = [d for d in table.catalog.committed(table.name) if d.delta_num > 1 and not d.is_empty]
        versions = sum(d.rows_upserted + d.rows_deleted for d in deltas)
        found[table.name] = {
            "deltas": len(deltas),
            "bytes_per_delta": round(sum(folder_bytes(d.data_path) for d in deltas) / len(deltas)),
            "bytes_per_version": round(sum(folder_bytes(d.data_path) for d in deltas) / versions, 1),
        }
    compact(meta)
    snapshot = meta.catalog.snapshots(meta.name)[-1]
    found[meta.name]["snapshot_rows"] = snapshot.row_count
    found[meta.name]["snapshot_bytes_per_key"] = round(folder_bytes(snapshot.data_path) / snapshot.row_count, 2)
    dst_snapshot = world.dst.catalog.snapshots(world.dst.name)[-1]
    found[world.dst.name]["snapshot_bytes_per_row"] = round(
        folder_bytes(dst_snapshot.data_path) / dst_snapshot.row_count, 2)
    return found


def meta_shaped_bytes(spark: SparkSession, path: Path, keys: int = 100_000) -> dict[str, Any]:
    """Bytes per key of a snapshot of the meta's schema whose keys are random 64-bit
    integers (the copy's keys, `k<number>`, compress better than most real keys), written
    as compaction writes one: range-partitioned and sorted by key; 24 distinct process_ts
    (a day of hourly runs), every key a success, no error text."""
    frame = spark.range(keys).select(
        F.xxhash64("id").alias("key"),
        (F.lit(1_700_000_000.0) + (F.col("id") % 24) * 3600.0).alias("process_ts"),
        F.lit(True).alias("is_success"),
        F.lit(None).cast("string").alias("error"),
        F.lit(0).alias("sys_op"),
        (F.col("id") % 24).cast("long").alias("sys_from"),
    )
    frame.repartitionByRange(1, "key").sortWithinPartitions("key").write.parquet(str(path))
    return {"keys": keys, "bytes_per_key": round(folder_bytes(str(path)) / keys, 2)}


# -- part growth: a run as its output's deltas pile up -----------------------------------------

def pad_deltas(world: CopyWorld, count: int) -> None:
    """`count` one-row deltas of the output, of keys the copy never touches: files in the
    storage layout (written with pyarrow: no Spark job), catalog rows through its API."""
    table, catalog = world.dst, world.dst.catalog
    for _ in range(count):
        hot = catalog.open_hot(table.name, "capacity-padding", None, lambda num: new_delta_path(table.root, num))
        folder = write_path(hot.data_path, 1)
        os.makedirs(folder)
        pq.write_table(pa.table({
            "id": pa.array([f"pad{hot.delta_num}"], pa.string()),
            "v": pa.array([hot.delta_num], pa.int32()),
            "sys_op": pa.array([0], pa.int32()),
            "sys_from": pa.array([hot.delta_num], pa.int64()),
        }), f"{folder}/part-00000.parquet")
        catalog.commit([(table.name, hot.delta_num, 1, 0, hot.data_path)])


def growth_part(spark: SparkSession, probe: Probe, tmp: Path) -> dict[str, Any]:
    world = CopyWorld(spark, tmp / "growth")
    probe.watch(world.plane.engine)
    steps = []
    try:
        world.src.write_delta(rows(spark, 0, GROWTH_N, 0))
        world.n = GROWTH_N
        world.engine.run_full(world.t)
        for size in GROWTH_SIZES:
            pad_deltas(world, size - world.dst.last_committed().delta_num)
            for compacted, count in ((False, GROWTH_RUNS_BEFORE), (True, GROWTH_RUNS_AFTER)):
                if compacted:
                    compact(world.dst)
                for _ in range(count):
                    change(world, GROWTH_CHANGES)
                    deltas = world.dst.last_committed().delta_num
                    found = run_once(spark, world, probe)
                    found.pop("job_seconds")
                    steps.append({"target_deltas": size, "dst_deltas_before_run": deltas,
                                  "dst_compacted": compacted, **found})
                    print(f"  D={deltas} compacted={compacted}: {found['spark_jobs']} jobs, "
                          f"{found['catalog_rows_fetched']} catalog rows, literal {found['literal_entries_max']}, "
                          f"folders {found['folders_opened_max']}, {found['seconds']} s", flush=True)
        upkeep = maintenance_of(world.dst, probe)
    finally:
        world.close()
    return {"n": GROWTH_N, "changes_per_run": GROWTH_CHANGES, "timings": TIMING, "runs": steps,
            "maintenance_of_output": upkeep}


def maintenance_of(table: VersionedTable, probe: Probe) -> dict[str, Any]:
    """What the hourly maintenance asks for one table that is not due: the policy's
    decision (`maintain`) and `cleanup`, which lists every delta folder of the table and
    every path the catalog references for it."""
    found: dict[str, Any] = {"deltas": table.last_committed().delta_num,
                             "folders_listed": len(table.files.list_folders(f"{table.root}/{DELTAS_DIR}"))}
    for name, action in (("maintain", lambda: maintain(table, MaintenancePolicy())),
                         ("cleanup", lambda: cleanup(table, DEFAULT_RETENTION_S))):
        with probe.counting():
            start = time.perf_counter()
            action()
            seconds = time.perf_counter() - start
        counted = probe.as_dict()
        found[name] = {"sql_statements": counted["sql_statements"], "seconds": round(seconds, 4)}
    with probe.counting():
        paths = table.catalog.data_paths(table.name)
    found["catalog_paths_fetched"] = len(paths)
    return found


# -- part literal: the update_ts lookup alone ------------------------------------------------------

def literal_part(spark: SparkSession, probe: Probe) -> dict[str, Any]:
    """For each size: the literal's SQL text, the time to build it (one JVM call that parses
    it) and to run a 10-row query with it, with expressions interpreted (the test
    session's setting) and compiled (Spark's default)."""
    mode_conf = "spark.sql.codegen.factoryMode"
    before = spark.conf.get(mode_conf)
    found: dict[str, list[dict[str, Any]]] = {}
    try:
        for mode in ("NO_CODEGEN", "FALLBACK"):
            spark.conf.set(mode_conf, mode)
            found[mode] = [literal_size(spark, probe, entries) for entries in LITERAL_SIZES]
    finally:
        spark.conf.set(mode_conf, before)
    return {"timings": TIMING, "by_codegen_mode": found}


def literal_size(spark: SparkSession, probe: Probe, entries: int) -> dict[str, Any]:
    deltas = [DeltaInfo("t", n, "committed", "", 1_700_000_000.123456 + n * 3600.000123, None, None, 1, 0)
              for n in range(1, entries + 1)]
    with probe.counting():
        TableReader.update_ts_of(deltas)
    chars = probe.literal_chars[-1]
    frame = spark.range(10).select(F.lit(entries).cast("long").alias("sys_from"))

    def query() -> None:
        frame.withColumn("update_ts", TableReader.update_ts_of(deltas)).collect()

    query()  # warm-up
    found = {
        "entries": entries,
        "sql_chars": chars,
        "build_s": median_seconds(lambda: TableReader.update_ts_of(deltas), repeat=3),
        "query_s": median_seconds(query, repeat=3),
    }
    print(f"  literal of {entries}: {chars} chars, build {found['build_s']} s, query {found['query_s']} s",
          flush=True)
    return found


# -- main --------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--postgres", action="store_true", help="repeat the catalog part on a throwaway PostgreSQL")
    parser.add_argument("--out", default=str(OUT / "capacity.json"))
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {unknown}; parts are {', '.join(PARTS)}")

    out = Path(args.out)
    report: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    report["commit"] = git_commit()
    probe = Probe()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="capacity-", dir=shm) as tmp:
        if "catalog" in parts:
            print("catalog (SQLite)", flush=True)
            report["catalog_sqlite"] = catalog_part(f"sqlite:///{tmp}/catalog.db", probe, "sqlite")
        if "catalog" in parts and args.postgres:
            print("catalog (PostgreSQL)", flush=True)
            report["catalog_postgresql"] = postgres_catalog_part(probe)
        spark_parts = [p for p in parts if p != "catalog"]
        if spark_parts:
            spark = get_spark_session(master="local[2]", app_name="offset-assets-capacity", conf=LOCAL_TEST_CONF)
            spark.sparkContext.setLogLevel("ERROR")
            report["spark_conf"] = "local[2], LOCAL_TEST_CONF (adaptive execution off, no code generation)"
            with tempfile.TemporaryDirectory(prefix="capacity-spark-") as spark_tmp:
                for part, measure in (("runs", runs_part), ("growth", growth_part)):
                    if part in parts:
                        print(part, flush=True)
                        report[part] = measure(spark, probe, Path(spark_tmp))
            if "literal" in parts:
                print("literal", flush=True)
                report["literal"] = literal_part(spark, probe)
            spark.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
