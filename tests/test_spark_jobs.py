"""`count_spark_jobs`: the Spark jobs a block starts, counted exactly (the job budget's yardstick)."""

from __future__ import annotations

import pytest

from offset_assets.spark_jobs import count_spark_jobs


def test_counts_each_action_of_the_block_and_nothing_outside_it(spark):
    df = spark.range(100)
    df.count()
    with count_spark_jobs(spark) as jobs:
        df.collect()
        df.where("id > 50").collect()
    df.collect()

    assert jobs.count == 2, jobs.describe()
    # Each job is named after the action and its call site.
    assert all(job.name.startswith("collect at ") for job in jobs.jobs), jobs.describe()
    # Each job's wall time comes from the status store, and the description shows it.
    assert all(job.seconds is not None and job.seconds >= 0 for job in jobs.jobs)
    assert all(f"({job.seconds:.2f} s)" in str(job) for job in jobs.jobs)


def test_a_block_without_spark_work_counts_zero(spark):
    with count_spark_jobs(spark) as jobs:
        spark.range(10).where("id > 5")  # a plan, no action
    assert jobs.count == 0
    assert jobs.describe() == "no Spark job"


def test_counters_nest_and_the_outer_sees_the_inner_jobs(spark):
    with count_spark_jobs(spark) as outer:
        spark.range(10).collect()
        with count_spark_jobs(spark) as inner:
            spark.range(10).collect()
    assert (outer.count, inner.count) == (2, 1)


def test_the_counter_is_filled_when_the_block_raises(spark):
    with pytest.raises(ValueError), count_spark_jobs(spark) as jobs:
        spark.range(10).collect()
        raise ValueError("boom")
    assert jobs.count == 1
