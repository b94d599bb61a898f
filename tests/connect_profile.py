"""One engine run over Spark Connect, its profile printed as JSON, then a small change and
the plans its run asked the server to analyse: run in a child process by
`tests/test_run_profile.py` (a Connect client switches its process's functions to
Connect, and the test process holds a classic session).

Usage: python -m tests.connect_profile CONNECT_URL DB_URL WAREHOUSE
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

from bench.posts_world import make_world
from offset_assets.control_plane import connect
from offset_assets.dagster_adapter.run_report import run_metadata
from offset_assets.engine import IncrementalEngine
from offset_assets.spark import get_spark_session
from tests.remote_story import seed


def main(url: str, db_url: str, warehouse: str) -> None:
    spark = get_spark_session(remote=url)
    world = make_world(spark, connect(db_url), warehouse)
    seed(world)
    engine = IncrementalEngine(spark, world.posts.plane)
    result = engine.run_full(world.enriched_transformation())
    metadata = run_metadata(result, [world.enriched.name])
    # A small change (one post edited, one profile renamed: 3 keys), its run's requests to
    # analyse a plan counted by kind (each a round trip to the server).
    world.write_posts([(11, 1, "b2")])
    world.write_profiles([(3, "cyrus")])
    analysed: Counter[str] = Counter()
    analyse = spark.client._analyze

    def counted(method: str, **kwargs: Any) -> Any:
        analysed[method] += 1
        return analyse(method, **kwargs)

    spark.client._analyze = counted
    small = engine.run_full(world.enriched_transformation())
    spark.client._analyze = analyse
    print(json.dumps({
        "processed_keys": result.processed_keys,
        "duration_s": result.duration_s,
        "spark_jobs": result.spark_jobs,
        "profile": result.profile.as_dict(),
        "metadata": {name: metadata[name].value for name in metadata if name.startswith("profile")},
        "summary": result.summary(),
        "small_change": {"processed_keys": small.processed_keys, "analysed": dict(analysed)},
    }))


if __name__ == "__main__":
    main(*sys.argv[1:])
