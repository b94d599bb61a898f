"""A small posts/profiles world, plus its from-scratch answer: what the engine tests and the
benchmark's tiny run (`bench.tiny_run`) drive.

`enriched_posts` joins each post with its author's profile (reference input, reverse
and filtered join); `user_post_stats` counts posts per user (transform key user_id, not
part of the posts primary key). A post without a user (user_id NULL) is counted under
the NULL user, as SQL's GROUP BY counts it, and joins no profile, not even one whose id
is NULL, as SQL's join matches it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from offset_assets.engine.transformation import Transformation, TransformInput
from offset_assets.local_frames import local_frame
from offset_assets.versioned.table import VersionedTable

POSTS = StructType([
    StructField("post_id", LongType(), False),
    StructField("user_id", LongType(), True),
    StructField("text", StringType(), True),
])
PROFILES = StructType([
    StructField("id", LongType(), True),
    StructField("name", StringType(), True),
])
ENRICHED = StructType([
    StructField("post_id", LongType(), False),
    StructField("user_id", LongType(), True),
    StructField("text", StringType(), True),
    StructField("author", StringType(), True),
])
STATS = StructType([
    StructField("user_id", LongType(), True),
    StructField("post_count", LongType(), False),
])


def enrich(posts: DataFrame, profiles: DataFrame) -> DataFrame:
    return posts.join(
        profiles.select(F.col("id").alias("user_id"), F.col("name").alias("author")),
        on="user_id", how="left",
    ).select("post_id", "user_id", "text", "author")


def count_posts(posts: DataFrame) -> DataFrame:
    return posts.groupBy("user_id").agg(F.count("*").alias("post_count"))


@dataclass
class World:
    spark: SparkSession
    posts: VersionedTable
    profiles: VersionedTable
    enriched: VersionedTable
    stats: VersionedTable

    def write_posts(self, rows: list[tuple], deletes: list[int] = ()) -> None:
        hot = self.posts.open_delta(holder="test")
        if rows:
            hot.write(local_frame(self.spark, rows, POSTS))
        if deletes:
            hot.delete(local_frame(self.spark, [(d,) for d in deletes], "post_id long"))
        hot.commit()

    def write_profiles(self, rows: list[tuple]) -> None:
        self.profiles.write_delta(local_frame(self.spark, rows, PROFILES), holder="test")

    def enriched_transformation(self, **options) -> Transformation:
        return Transformation(
            transformation_id=options.pop("transformation_id", "enrich_posts"),
            inputs=[TransformInput(self.posts),
                    TransformInput(self.profiles, join_keys={"user_id": "id"})],
            transform_keys=["post_id"],
            outputs=[self.enriched],
            func=options.pop("func", enrich),
            **options,
        )

    def stats_transformation(self, **options) -> Transformation:
        return Transformation(
            transformation_id="post_stats",
            inputs=[TransformInput(self.posts)],
            transform_keys=["user_id"],
            outputs=[self.stats],
            func=options.pop("func", count_posts),
            **options,
        )

    def expected_enriched(self) -> set[tuple]:
        return rows_of(enrich(self.posts.read_actual(), self.profiles.read_actual()))

    def expected_stats(self) -> set[tuple]:
        return rows_of(count_posts(self.posts.read_actual()))


def rows_of(df: DataFrame, columns: list[str] | None = None) -> set[tuple]:
    columns = columns or [c for c in df.columns if c not in ("sys_from", "sys_to", "sys_op", "update_ts")]
    return {tuple(row) for row in df.select(*columns).collect()}


def make_world(spark: SparkSession, plane, warehouse: str) -> World:
    return World(
        spark=spark,
        posts=VersionedTable(spark, plane, "posts", ["post_id"], POSTS, warehouse=warehouse),
        profiles=VersionedTable(spark, plane, "profiles", ["id"], PROFILES, warehouse=warehouse),
        enriched=VersionedTable(spark, plane, "enriched_posts", ["post_id"], ENRICHED, warehouse=warehouse),
        stats=VersionedTable(spark, plane, "user_post_stats", ["user_id"], STATS, warehouse=warehouse),
    )
