"""python -m assets_defs.demo [OPTIONS]             the whole story (resets ./state first)
python -m assets_defs.demo traffic [OPTIONS]     one burst of seeded traffic at the source, now
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import click

from assets_defs import source_system
from assets_defs.demo.story import DemoSizes
from offset_assets.errors import OffsetAssetsError

DEFAULTS = DemoSizes()


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


@click.group(invoke_without_command=True)
@click.option("--users", default=DEFAULTS.users, show_default=True, help="Profiles to seed.")
@click.option("--posts", default=DEFAULTS.posts, show_default=True, help="Posts to seed.")
@click.option("--inserts", default=DEFAULTS.inserts, show_default=True, help="Posts the traffic inserts.")
@click.option("--updates", default=DEFAULTS.updates, show_default=True, help="Posts the traffic edits.")
@click.option("--deletes", default=DEFAULTS.deletes, show_default=True, help="Posts the traffic soft-deletes.")
@click.option("--renames", default=DEFAULTS.renames, show_default=True, help="Profiles the traffic renames.")
@click.option("--seed", default=DEFAULTS.traffic_seed, show_default=True, help="Seed of the traffic.")
@click.pass_context
def demo(ctx: click.Context, users: int, posts: int, inserts: int, updates: int, deletes: int,
         renames: int, seed: int) -> None:
    """Reset the demo state, seed the source, materialize everything with Dagster, generate
    traffic, materialize again, and report what each run processed."""
    if ctx.invoked_subcommand is not None:
        return
    sizes = DemoSizes(users=users, posts=posts, inserts=inserts, updates=updates, deletes=deletes,
                      renames=renames, traffic_seed=seed)
    # The instance configured by ./dagster.yaml, as `make dev` opens it.
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(Path.cwd())))
    home.mkdir(parents=True, exist_ok=True)

    import dagster as dg

    from assets_defs.demo.report import render
    from assets_defs.demo.story import run_story
    from assets_defs.resources import resources_for
    from offset_assets.config import ENV_SPARK_REMOTE
    from offset_assets.dagster_adapter import ENGINE_RESOURCE_KEY
    from offset_assets.spark import is_connect_session

    started = time.monotonic()
    try:
        # Started through the project's own Spark resource (checked first, then shared by the story's runs).
        spark = resources_for()[ENGINE_RESOURCE_KEY].spark_session
        if not is_connect_session(spark):  # a Connect server's log level is the server's own
            spark.sparkContext.setLogLevel("ERROR")
        where = os.environ.get(ENV_SPARK_REMOTE) if is_connect_session(spark) else spark.conf.get("spark.master")
        click.echo(f"Spark {spark.version} on {where} "
                   f"(started in {time.monotonic() - started:.0f} s)", err=True)
        with dg.DagsterInstance.get() as instance:
            story = run_story(sizes, instance, progress=lambda line: click.echo(f"... {line}", err=True))
    except OffsetAssetsError as exc:
        _fail(str(exc))
    click.echo(render(story))


@demo.command()
@click.option("--seed", default=DEFAULTS.traffic_seed, show_default=True, help="Seed of the traffic.")
@click.option("--inserts", default=DEFAULTS.inserts, show_default=True)
@click.option("--updates", default=DEFAULTS.updates, show_default=True)
@click.option("--deletes", default=DEFAULTS.deletes, show_default=True)
@click.option("--renames", default=DEFAULTS.renames, show_default=True)
def traffic(seed: int, inserts: int, updates: int, deletes: int, renames: int) -> None:
    """Insert, edit and soft-delete posts and rename profiles at the source, stamped now.

    New posts are picked up by the posts_ranges_sensor; edits, deletes and renames by
    today's window of post_updates and profiles: materialize its partition (today's date)
    now, or let the schedules ingest it once it has closed. Automation then runs the
    transformations."""
    engine = source_system.source_engine()
    with engine.connect() as conn:
        live = conn.execute(source_system.posts.select().limit(1)).first()
    if live is None:
        _fail(f"the source at {source_system.source_url()} is empty: run the demo first (make demo)")
    burst = source_system.generate_traffic(engine, inserts, updates, deletes, renames, seed=seed)
    click.echo(f"traffic (seed {seed}): {burst.describe()}")
    click.echo(f"  inserted posts {burst.inserted_posts}")
    click.echo(f"  updated posts  {burst.updated_posts}")
    click.echo(f"  deleted posts  {burst.deleted_posts}")
    click.echo(f"  renamed users  {burst.renamed_profiles}")
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    click.echo(f"ingest them: partition {today} of post_updates and profiles (Materialize on the "
               "asset page), new posts by posts_ranges_sensor; automation runs the transformations")


if __name__ == "__main__":
    demo()
