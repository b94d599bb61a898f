"""Incremental transformations: plain functions of Spark DataFrames.

Each function sees only the actual rows of the keys that changed since its offsets;
the engine replaces those keys' previous output and commits outputs, meta and offsets
together.

- `enriched_posts` (transform key `post_id`): each post with its author's name.
  `profiles` is a reference input (`join_keys={"user_id": "id"}`): it is read only for
  the authors of the posts being processed (filtered join), and a renamed profile
  re-processes every post of that author (reverse join).
- `user_post_stats` (transform key `user_id`, not the key of its input): posts per
  author, read from `enriched_posts`. A changed or deleted post re-computes its
  author's row; so does a rename, through the enriched posts it rewrote.
- `moderated_posts` (transform key `post_id`): one transformation, two output assets,
  `accepted_posts` and `rejected_posts` (`incremental_multi_asset`). A post mentioning
  the banned word goes to `rejected_posts`, any other to `accepted_posts`; an edit that
  adds the word deletes the post from one and writes it to the other in one commit.

All run by declarative automation (`on_input_commits`): once an upstream asset has
materialized and nothing upstream is still running. The Automation page of the UI shows
each evaluation of the sensor `transformations_automation` (running by default); the
offset sensors `*_inputs_changed` (running too) take what it cannot see (`sensors.py`).
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from offset_assets.dagster_adapter import (
    IncrementalOut,
    incremental_asset,
    incremental_multi_asset,
    on_input_commits,
)

GROUP = "transformations"

ENRICHED_POSTS_SCHEMA = T.StructType([
    T.StructField("post_id", T.LongType(), False),
    T.StructField("user_id", T.LongType(), True),
    T.StructField("author", T.StringType(), True),
    T.StructField("text", T.StringType(), True),
    T.StructField("updated_at", T.DoubleType(), True),
])
MODERATED_POSTS_SCHEMA = T.StructType([
    T.StructField("post_id", T.LongType(), False),
    T.StructField("user_id", T.LongType(), True),
    T.StructField("text", T.StringType(), True),
    T.StructField("updated_at", T.DoubleType(), True),
])
BANNED_WORD = "batch"
USER_POST_STATS_SCHEMA = T.StructType([
    T.StructField("user_id", T.LongType(), False),
    T.StructField("author", T.StringType(), True),
    T.StructField("post_count", T.LongType(), False),
    T.StructField("last_post_at", T.DoubleType(), True),
])


@incremental_asset(
    transform_keys=["post_id"],
    primary_key=["post_id"],
    schema=ENRICHED_POSTS_SCHEMA,
    join_keys={"profiles": {"user_id": "id"}},
    # post_updates writes edits into the posts table: lineage and automation follow it too.
    deps=["post_updates"],
    group_name=GROUP,
    automation_condition=on_input_commits(),
)
def enriched_posts(posts: DataFrame, profiles: DataFrame) -> DataFrame:
    """Posts with their author's current name (profiles joined on user_id = id)."""
    authors = profiles.select(F.col("id").alias("user_id"), F.col("name").alias("author"))
    return posts.join(authors, on="user_id", how="left").select(
        "post_id", "user_id", "author", "text", "updated_at"
    )


@incremental_asset(
    transform_keys=["user_id"],
    primary_key=["user_id"],
    schema=USER_POST_STATS_SCHEMA,
    group_name=GROUP,
    automation_condition=on_input_commits(),
)
def user_post_stats(enriched_posts: DataFrame) -> DataFrame:
    """Per author: name, number of live posts and the time of the latest change."""
    return enriched_posts.groupBy("user_id").agg(
        F.max("author").alias("author"),
        F.count("*").alias("post_count"),
        F.max("updated_at").alias("last_post_at"),
    )


@incremental_multi_asset(
    outs={
        "accepted_posts": IncrementalOut(primary_key=["post_id"], schema=MODERATED_POSTS_SCHEMA,
                                         description="Posts without the banned word."),
        "rejected_posts": IncrementalOut(primary_key=["post_id"], schema=MODERATED_POSTS_SCHEMA,
                                         description=f"Posts mentioning the banned word {BANNED_WORD!r}."),
    },
    transform_keys=["post_id"],
    deps=["post_updates"],
    group_name=GROUP,
    automation_condition=on_input_commits(),
)
def moderated_posts(posts: DataFrame) -> dict[str, DataFrame]:
    """Posts split by moderation: rejected when the text holds the banned word."""
    banned = F.array_contains(F.split(F.col("text"), " "), BANNED_WORD)
    rows = posts.select("post_id", "user_id", "text", "updated_at")
    return {"accepted_posts": rows.where(~banned), "rejected_posts": rows.where(banned)}


TRANSFORMATIONS = [enriched_posts, user_post_stats, moderated_posts]
