"""A graph of many small incremental assets: what a change costs one Dagster run of all of them.

    .venv/bin/python -m bench.graph_workload [--chains 10] [--depth 10] [--rows 10000]
                                             [--spark local|connect] [--out FILE]

A SQLite source `items(id, grp, v, t)` of `--rows` rows and `groups(id, name)` are
ingested by id ranges (`ingestion_asset`, `AutoIncrementIdPlanner`) into the versioned
tables `items` and `groups`. Downstream, `--chains` chains of `--depth` incremental copy
assets (transform key `id`): the head of chain c copies the items with `id % chains = c`,
each next asset copies the one before. Then `gathered`, a fan-in reading the last asset of
every chain, and `labelled`, the gathered items joined with their group (`groups` a
reference input: reverse and filtered join). Every asset is an `incremental_asset` run by
one in-process Dagster run (`dg.materialize`, a SQLite-backed instance), one Spark session
for all: a local driver (`local[2]`, Spark's defaults: 1g, adaptive execution) or, with
`--spark connect`, a client of a local Spark Connect server started as `make dev` starts
it (`assets_defs/dev.py`).

Scenarios, each one Dagster run of every transformation after its rows were ingested
(the ingestion is timed apart):
- `first`: the first materialization of the graph over the whole source;
- `ten_rows`: 10 new source rows, one per chain: every asset has work;
- `one_chain`: 10 new rows of chain 0 only: every chain head processes them (its function
  keeps only its own chain's), chain 0 copies them on, the other chains have nothing to do;
- `nothing_to_do`: the same run again.

Reported per scenario: the run's wall time (`dg.materialize`, launch to end), per asset;
the Spark jobs (local: counted with `count_spark_jobs`; over Connect: the server's own
status store, through its REST API); the steps' time (Dagster's STEP_START to its end),
the engine's (`RunResult.duration_s`, from each step's metadata) and Dagster's own (the
steps' time outside the engine, and the run's outside its steps); the engine's phases
summed over the assets (driver seconds and Spark jobs, from each run's profile); the
control-plane statements. Writes a JSON report (default `docs/bench/graph_workload.json`,
or `graph_workload_connect.json` over Connect).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bench.dagster_runs import profile_table
from bench.standalone_cluster import spark_ui_in_log
from offset_assets.control_plane import connect
from offset_assets.dagster_adapter import (
    IncrementalEngineResource,
    OffsetIOManager,
    OffsetStore,
    incremental_asset,
    ingestion_asset,
)
from offset_assets.dagster_adapter.ingestion.sensor import plan_range_partitions
from offset_assets.ranges.ingestion import IngestionJob, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner
from offset_assets.ranges.sources import SqlTableSource
from offset_assets.spark import get_spark_session, is_connect_session
from offset_assets.spark_jobs import count_spark_jobs

ROOT = Path(__file__).resolve().parent.parent
ITEMS = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("grp", T.LongType(), True),
        T.StructField("v", T.LongType(), True),
        T.StructField("t", T.StringType(), True),
    ]
)
GROUPS = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("name", T.StringType(), True)])
LABELLED = T.StructType([*ITEMS.fields, T.StructField("group_name", T.StringType(), True)])
GROUP_COUNT = 20
SCENARIOS = ("first", "ten_rows", "one_chain", "nothing_to_do")


def git_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or None


# -- the source system ------------------------------------------------------------------


def add_items(source: Path, ids: list[int]) -> None:
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, grp INTEGER, v INTEGER, t TEXT)")
        conn.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?)", ((i, i % GROUP_COUNT, i * 7, f"item {i}") for i in ids)
        )


def add_groups(source: Path) -> None:
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE groups (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO groups VALUES (?, ?)", ((g, f"group {g}") for g in range(GROUP_COUNT)))


# -- the graph --------------------------------------------------------------------------


def ingestion_jobs(source_url: str) -> list[IngestionJob]:
    return [
        IngestionJob(
            name,
            SqlTableSource(source_url, name, id_column="id"),
            AutoIncrementIdPlanner(),
            TargetTable(name, ["id"], schema),
            workflow_name="graph_source",
        )
        for name, schema in (("items", ITEMS), ("groups", GROUPS))
    ]


def named(name: str, parameters: list[str], body: Callable[..., DataFrame]) -> Callable[..., DataFrame]:
    """`body` as a function called `name` whose parameters (the upstream assets) are `parameters`."""

    def fn(**frames: DataFrame) -> DataFrame:
        return body(**frames)

    fn.__name__ = name
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in parameters]
    )
    return fn


def chain_asset(chain: int, step: int, chains: int) -> dg.AssetsDefinition:
    name = f"chain{chain}_{step}"
    if step == 1:
        upstream = "items"

        def body(items: DataFrame) -> DataFrame:
            return items.where(F.col("id") % chains == chain).select(*ITEMS.names)
    else:
        upstream = f"chain{chain}_{step - 1}"

        def body(**frames: DataFrame) -> DataFrame:
            return frames[upstream].select(*ITEMS.names)

    return incremental_asset(transform_keys=["id"], primary_key=["id"], schema=ITEMS, group_name="chains")(
        named(name, [upstream], body)
    )


def fan_in_asset(chains: int, depth: int) -> dg.AssetsDefinition:
    tails = [f"chain{c}_{depth}" for c in range(chains)]

    def body(**frames: DataFrame) -> DataFrame:
        gathered = frames[tails[0]]
        for tail in tails[1:]:
            gathered = gathered.unionByName(frames[tail])
        return gathered.select(*ITEMS.names)

    return incremental_asset(transform_keys=["id"], primary_key=["id"], schema=ITEMS, group_name="fan_in")(
        named("gathered", tails, body)
    )


def reference_join_asset() -> dg.AssetsDefinition:
    def labelled(gathered: DataFrame, groups: DataFrame) -> DataFrame:
        names = groups.select(F.col("id").alias("grp"), F.col("name").alias("group_name"))
        return gathered.join(names, on="grp", how="left").select(*LABELLED.names)

    return incremental_asset(
        transform_keys=["id"],
        primary_key=["id"],
        schema=LABELLED,
        join_keys={"groups": {"grp": "id"}},
        group_name="fan_in",
    )(labelled)


def transformations(chains: int, depth: int) -> list[dg.AssetsDefinition]:
    steps = [chain_asset(c, d, chains) for c in range(chains) for d in range(1, depth + 1)]
    return [*steps, fan_in_asset(chains, depth), reference_join_asset()]


# -- measuring ----------------------------------------------------------------------------


@contextmanager
def statements_counted(engine: sa.Engine) -> Iterator[Counter[str]]:
    """The SQL statements sent to the control plane in the block."""
    counted: Counter[str] = Counter()

    def count(*_: Any) -> None:
        counted["statements"] += 1

    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        yield counted
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)


class ServerJobs:
    """The Spark jobs a Connect server ran, from its status store (the UI's REST API)."""

    def __init__(self, ui: str) -> None:
        self.ui = ui
        self.app = self._get("/api/v1/applications")[0]["id"]

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.ui}{path}", timeout=30) as response:
            return json.loads(response.read())

    def last_job(self) -> int:
        jobs = self._get(f"/api/v1/applications/{self.app}/jobs")
        return max((job["jobId"] for job in jobs), default=-1)


def step_times(instance: dg.DagsterInstance, run_id: str) -> dict[str, float]:
    """Each step's seconds, STEP_START to its success, failure or skip."""
    started, took = {}, {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type == dg.DagsterEventType.STEP_START:
            started[event.step_key] = entry.timestamp
        elif (
            event.event_type
            in (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.STEP_SKIPPED)
            and event.step_key in started
        ):
            took[event.step_key] = entry.timestamp - started[event.step_key]
    return took


def engine_figures(
    result: dg.ExecuteInProcessResult,
) -> tuple[dict[str, float], dict[str, int], dict[str, dict[str, float]]]:
    """Per asset, the engine's seconds (`duration_s`) and Spark jobs (`profile.spark_jobs`:
    a local session's, counted), and the engine's phases summed over the assets (driver
    seconds and Spark jobs), from what each step reported."""
    seconds: dict[str, float] = {}
    jobs: dict[str, int] = {}
    phases: dict[str, dict[str, float]] = {}
    for event in result.all_events:
        if event.event_type not in (dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_OBSERVATION):
            continue
        data = event.event_specific_data
        record = getattr(data, "materialization", None) or getattr(data, "asset_observation", None)
        metadata = record.metadata
        if "duration_s" in metadata:
            seconds[event.step_key] = float(metadata["duration_s"].value)
        if "profile.spark_jobs" in metadata:
            jobs[event.step_key] = int(metadata["profile.spark_jobs"].value)
        if "profile" in metadata and event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
            for phase, figures in profile_table(metadata["profile"].value).items():
                into = phases.setdefault(phase, {"driver_s": 0.0, "spark_jobs": 0.0})
                into["driver_s"] += figures["driver_s"]
                into["spark_jobs"] += figures["spark_jobs"] or 0
    return seconds, jobs, {phase: {k: round(v, 2) for k, v in figures.items()} for phase, figures in phases.items()}


# -- the benchmark ------------------------------------------------------------------------


class GraphBench:
    def __init__(
        self,
        workdir: Path,
        chains: int,
        depth: int,
        rows: int,
        spark_config: dict[str, str],
        server_jobs: ServerJobs | None,
    ) -> None:
        self.workdir, self.chains, self.depth, self.rows = workdir, chains, depth, rows
        self.source = workdir / "source.db"
        add_items(self.source, list(range(1, rows + 1)))
        add_groups(self.source)
        self.db_url = f"sqlite:///{workdir / 'control_plane.db'}"
        self.plane = connect(self.db_url)
        self.jobs = ingestion_jobs(f"sqlite:///{self.source}")
        self.ingestion = [ingestion_asset(job, group_name="source") for job in self.jobs]
        self.transformations = transformations(chains, depth)
        store = OffsetStore(db_url=self.db_url)
        engine = IncrementalEngineResource(
            offset_store=store,
            spark=LazyPySparkResource(spark_config=spark_config),
            warehouse=str(workdir / "warehouse"),
        )
        self.resources = {
            "offset_store": store,
            "incremental_engine": engine,
            "io_manager": OffsetIOManager(engine=engine),
        }
        (workdir / "dagster_home").mkdir()
        self.instance = dg.DagsterInstance.local_temp(tempdir=str(workdir / "dagster_home"))
        self.server_jobs = server_jobs
        self.spark = engine.spark_session

    def ingest(self) -> dict[str, Any]:
        started = time.perf_counter()
        ranges = 0
        for job, asset in zip(self.jobs, self.ingestion, strict=True):
            for key in plan_range_partitions(job, asset.partitions_def, self.plane, self.instance):
                dg.materialize([asset], partition_key=key, resources=self.resources, instance=self.instance)
                ranges += 1
        return {"ingest_s": round(time.perf_counter() - started, 2), "ranges": ranges}

    def run_graph(self) -> dict[str, Any]:
        """One Dagster run of every transformation, measured."""
        assets = [*self.ingestion, *self.transformations]
        selection = dg.AssetSelection.assets(*self.transformations)
        before = self.server_jobs.last_job() if self.server_jobs else None
        with statements_counted(self.plane.engine) as statements, self._jobs_counted() as local_jobs:
            started = time.perf_counter()
            result = dg.materialize(assets, selection=selection, resources=self.resources, instance=self.instance)
            wall = time.perf_counter() - started
        jobs = (
            local_jobs.count
            if local_jobs is not None
            else (self.server_jobs.last_job() - before if self.server_jobs is not None else None)
        )
        steps = step_times(self.instance, result.run_id)
        engine, jobs_by_asset, phases = engine_figures(result)
        count = len(self.transformations)
        steps_s, engine_s = sum(steps.values()), sum(engine.values())
        return {
            "success": result.success,
            "run_s": round(wall, 2),
            "per_asset_s": round(wall / count, 3),
            "spark_jobs": jobs,
            "jobs_per_asset": None if jobs is None else round(jobs / count, 2),
            "assets_materialized": len(result.get_asset_materialization_events()),
            "steps_s": round(steps_s, 2),
            "engine_s": round(engine_s, 2),
            "dagster_in_steps_s": round(steps_s - engine_s, 2),
            "dagster_outside_steps_s": round(wall - steps_s, 2),
            "control_plane_statements": statements["statements"],
            "statements_per_asset": round(statements["statements"] / count, 1),
            "jobs_by_asset": jobs_by_asset,
            "engine_phases": phases,
        }

    @contextmanager
    def _jobs_counted(self) -> Iterator[Any]:
        if self.server_jobs is not None or is_connect_session(self.spark):
            yield None
            return
        with count_spark_jobs(self.spark) as jobs:
            yield jobs

    def scenario(self, new_ids: list[int]) -> dict[str, Any]:
        if new_ids:
            add_items(self.source, new_ids)
        ingested = self.ingest()
        return {**ingested, **self.run_graph()}


def new_ids(after: int, chains: int, one_chain: bool) -> list[int]:
    """10 new ids: one per chain (`id % chains`), or 10 of chain 0."""
    if one_chain:
        first = after + chains - after % chains
        return [first + chains * i for i in range(10)]
    return list(range(after + 1, after + 11))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def spark_for(
    kind: str, workdir: Path, remote: str | None = None, server_ui: str | None = None
) -> Iterator[tuple[dict[str, str], ServerJobs | None]]:
    """The `LazyPySparkResource` config of one session for the whole benchmark, and how
    to count a Connect server's jobs: a local driver, a Connect server started here as
    `make dev` starts it, or the running one at `remote` (its UI at `server_ui`)."""
    if remote is not None:
        get_spark_session(remote=remote)
        yield {"spark.remote": remote}, ServerJobs(server_ui) if server_ui else None
        return
    if kind == "local":
        get_spark_session(
            master="local[2]",
            app_name="bench-graph",
            conf={
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.ui.retainedJobs": "100000",
            },
        )
        yield {}, None
        return
    os.environ["OFFSET_ASSETS_DEV_CONNECT_PORT"] = str(free_port())
    from assets_defs import dev

    log = workdir / "connect" / "connect-server.log"
    log.parent.mkdir()
    server = dev.start_connect_server(log)
    try:
        ui = spark_ui_in_log(log.read_text())
        deadline = time.monotonic() + 60
        while ui is None and time.monotonic() < deadline:
            time.sleep(0.5)
            ui = spark_ui_in_log(log.read_text())
        if ui is None:
            raise RuntimeError(f"the Connect server's log names no UI: {log}")
        remote = f"sc://127.0.0.1:{dev.CONNECT_PORT}"
        get_spark_session(remote=remote)
        yield {"spark.remote": remote}, ServerJobs(ui)
    finally:
        dev.stop(server)


def run(
    chains: int,
    depth: int,
    rows: int,
    kind: str,
    workdir: Path,
    remote: str | None = None,
    server_ui: str | None = None,
) -> dict[str, Any]:
    with spark_for(kind, workdir, remote, server_ui) as (spark_config, server_jobs):
        bench = GraphBench(workdir, chains, depth, rows, spark_config, server_jobs)
        figures = {"first": bench.scenario([])}
        figures["ten_rows"] = bench.scenario(new_ids(rows, chains, one_chain=False))
        figures["one_chain"] = bench.scenario(new_ids(rows + 10, chains, one_chain=True))
        figures["nothing_to_do"] = bench.scenario([])
        return {
            "spark": kind,
            "chains": chains,
            "depth": depth,
            "rows": rows,
            "assets": len(bench.transformations),
            "scenarios": figures,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=10)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--spark", choices=("local", "connect"), default="local")
    parser.add_argument("--out", default=None)
    parser.add_argument("--remote", help="a running Spark Connect server (sc://host:port) instead of starting one")
    parser.add_argument("--server-ui", help="that server's UI (http://host:port), whose REST API counts its jobs")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    out = Path(
        args.out
        or ROOT / "docs" / "bench" / ("graph_workload.json" if args.spark == "local" else "graph_workload_connect.json")
    )
    with tempfile.TemporaryDirectory(prefix="bench-graph-") as workdir:
        report = {
            "commit": git_commit(),
            "command": " ".join([".venv/bin/python -m bench.graph_workload", *sys.argv[1:]]),
            "cpus": os.cpu_count(),
            **run(args.chains, args.depth, args.rows, args.spark, Path(workdir), args.remote, args.server_ui),
        }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
