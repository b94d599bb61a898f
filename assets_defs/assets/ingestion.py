"""Log-driven ingestion of the source system into versioned tables.

Three jobs, each range recorded in job_log:
- `posts`: new posts by auto-increment id ranges (id, max id]. Dynamic partitions
  `id:<start>-<end>`, added by `posts_ranges_sensor` as rows appear at the source.
- `post_updates`: edits and soft deletes by daily windows of `updated_at`, written into
  the same `posts` table (an id range sees a row once; later changes need the windows);
  built with `ingestion_asset(..., feeds="posts")`, and a dependency of `enriched_posts`
  so the lineage shows the path.
- `profiles`: by daily windows of `updated_at`.

The last partition of `post_updates` and `profiles` is today's window: materializing it
ingests what the source holds so far (again at every run while the day goes on), and
the window is ingested whole once it has closed.

A soft delete at the source (`is_deleted = 1`) is ingested as `sys_op = 1`: the post
leaves the actual state of `posts`, and the transformations delete its outputs. A row
ingested twice (by its id range and by its window) creates one version only.

Windows start at `OFFSET_ASSETS_INGEST_START` (ISO date or time, UTC): the day the source
went live, which production pins so that no window is ever skipped. Without it, a rolling
start two days back keeps the local partition list (and the demo's catch-up) short.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.dagster_adapter import ingestion_asset
from offset_assets.ranges.ingestion import IngestionJob, TargetTable
from offset_assets.ranges.planners import AutoIncrementIdPlanner, TimeWindowPlanner
from offset_assets.ranges.sources import SqlTableSource

ENV_INGEST_START = "OFFSET_ASSETS_INGEST_START"
UPDATE_WINDOW = timedelta(days=1)
ROLLING_START_DAYS = 2
GROUP = "ingestion"

POSTS_SCHEMA = T.StructType([
    T.StructField("post_id", T.LongType(), False),
    T.StructField("user_id", T.LongType(), True),
    T.StructField("text", T.StringType(), True),
    T.StructField("updated_at", T.DoubleType(), True),
])
PROFILES_SCHEMA = T.StructType([
    T.StructField("id", T.LongType(), False),
    T.StructField("name", T.StringType(), True),
    T.StructField("updated_at", T.DoubleType(), True),
])
POST_COLUMNS = ["id", "user_id", "text", "updated_at", "is_deleted"]


def ingest_start(now: datetime | None = None) -> datetime:
    """First window start: `OFFSET_ASSETS_INGEST_START`, else midnight UTC two days ago."""
    text = os.environ.get(ENV_INGEST_START)
    if text:
        try:
            start = datetime.fromisoformat(text)
        except ValueError:
            raise dg.DagsterInvalidDefinitionError(
                f"{ENV_INGEST_START}={text!r} is not an ISO date or time (e.g. 2024-01-01)"
            ) from None
        return start.astimezone(UTC).replace(tzinfo=None) if start.tzinfo else start
    today = (now or datetime.now(UTC)).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    return today - timedelta(days=ROLLING_START_DAYS)


def post_rows(source_rows: DataFrame) -> DataFrame:
    """Source posts as `posts` rows: `id` becomes `post_id`, a soft delete a delete."""
    return source_rows.select(
        F.col("id").alias("post_id"),
        "user_id",
        "text",
        "updated_at",
        F.col("is_deleted").cast("int").alias("sys_op"),
    )


def posts_job(source_url: str) -> IngestionJob:
    return IngestionJob(
        name="posts",
        source=SqlTableSource(source_url, "posts", id_column="id", columns=POST_COLUMNS),
        planner=AutoIncrementIdPlanner(),
        target=TargetTable("posts", ["post_id"], POSTS_SCHEMA),
        workflow_name="source_system",
        transform=post_rows,
    )


def post_updates_job(source_url: str, start: datetime) -> IngestionJob:
    return IngestionJob(
        name="post_updates",
        source=SqlTableSource(source_url, "posts", time_column="updated_at", columns=POST_COLUMNS),
        planner=TimeWindowPlanner(start, UPDATE_WINDOW),
        target=TargetTable("posts", ["post_id"], POSTS_SCHEMA),
        workflow_name="source_system",
        transform=post_rows,
    )


def profiles_job(source_url: str, start: datetime) -> IngestionJob:
    return IngestionJob(
        name="profiles",
        source=SqlTableSource(source_url, "profiles", time_column="updated_at"),
        planner=TimeWindowPlanner(start, UPDATE_WINDOW),
        target=TargetTable("profiles", ["id"], PROFILES_SCHEMA),
        workflow_name="source_system",
    )


@dataclass(frozen=True)
class Ingestion:
    """The ingestion jobs and their assets, built for one source URL and window start."""

    posts_job: IngestionJob
    post_updates_job: IngestionJob
    profiles_job: IngestionJob
    posts: dg.AssetsDefinition
    post_updates: dg.AssetsDefinition
    profiles: dg.AssetsDefinition

    @property
    def jobs(self) -> list[IngestionJob]:
        return [self.posts_job, self.post_updates_job, self.profiles_job]

    @property
    def assets(self) -> list[dg.AssetsDefinition]:
        return [self.posts, self.post_updates, self.profiles]

    def asset_of(self, job: IngestionJob) -> dg.AssetsDefinition:
        return {self.posts_job.name: self.posts, self.post_updates_job.name: self.post_updates,
                self.profiles_job.name: self.profiles}[job.name]


def build_ingestion(source_url: str, start: datetime | None = None) -> Ingestion:
    start = start or ingest_start()
    posts, updates, profiles = posts_job(source_url), post_updates_job(source_url, start), profiles_job(
        source_url, start)
    return Ingestion(
        posts_job=posts,
        post_updates_job=updates,
        profiles_job=profiles,
        posts=ingestion_asset(
            posts, group_name=GROUP,
            description="New posts of the source system by auto-increment id ranges "
                        "(one partition per job_log range), into the versioned table `posts`.",
        ),
        post_updates=ingestion_asset(
            updates, feeds="posts", group_name=GROUP,
            description="Edits and soft deletes of posts by daily windows of `updated_at`, "
                        "into the versioned table `posts` (a soft delete becomes sys_op = 1).",
        ),
        profiles=ingestion_asset(
            profiles, group_name=GROUP,
            description="Profiles of the source system by daily windows of `updated_at`, "
                        "into the versioned table `profiles`.",
        ),
    )
