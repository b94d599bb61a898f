"""`offset-assets init-offsets` and `OffsetStore.initialize_offsets_from_transform_meta`: offsets
from the meta, reported as dates."""

from click.testing import CliRunner

from bench.posts_world import make_world
from offset_assets.cli import main
from offset_assets.cli.offsets import iso_utc
from offset_assets.control_plane import connect
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.dagster_adapter import OffsetStore
from offset_assets.engine import IncrementalEngine


def test_init_offsets_sets_offsets_from_meta_and_reports_them(spark, sqlite_url, warehouse):
    world = make_world(spark, connect(sqlite_url), warehouse)
    world.write_profiles([(1, "ann")])
    world.write_posts([(10, 1, "a"), (11, 1, "b")])
    engine = IncrementalEngine(spark, world.posts.plane)
    engine.run_changelist(world.enriched_transformation(), [{"post_id": 10}, {"post_id": 11}])

    result = CliRunner().invoke(
        main,
        ["--db-url", sqlite_url, "init-offsets", "enrich_posts", "--input", "posts",
         "--reference", "profiles:user_id=id", "--warehouse", warehouse],
    )
    assert result.exit_code == 0, result.output
    stored = OffsetRepository(world.posts.plane).get_offsets_for_transformation("enrich_posts")
    assert stored == {
        "posts": world.posts.last_committed().commit_ts,
        "profiles": world.profiles.last_committed().commit_ts,
    }
    assert result.output == (
        "enrich_posts: offsets set from its meta (an existing larger offset is kept)\n"
        f"  posts                    {iso_utc(stored['posts'])}\n"
        f"  profiles                 {iso_utc(stored['profiles'])}\n"
    )

    typo = CliRunner().invoke(main, ["--db-url", sqlite_url, "init-offsets", "enrich_post"])
    assert (typo.exit_code, typo.output) == (
        1, "error: no transformation 'enrich_post' in the control plane (transformations: enrich_posts)\n")


def test_init_offsets_without_inputs_names_the_missing_option(spark, sqlite_url, warehouse):
    world = make_world(spark, connect(sqlite_url), warehouse)
    world.write_profiles([(1, "ann")])
    world.write_posts([(10, 1, "a")])
    IncrementalEngine(spark, world.posts.plane).run_changelist(world.enriched_transformation(),
                                                              [{"post_id": 10}])
    result = CliRunner().invoke(main, ["--db-url", sqlite_url, "init-offsets", "enrich_posts"])
    assert result.exit_code == 1
    assert "name its inputs with --input" in result.output


def test_offset_store_initializes_offsets_from_meta_as_the_engine_does(spark, sqlite_url, warehouse):
    world = make_world(spark, connect(sqlite_url), warehouse)
    world.write_profiles([(1, "ann")])
    world.write_posts([(10, 1, "a"), (11, 1, "b")])
    IncrementalEngine(spark, world.posts.plane).run_changelist(
        world.enriched_transformation(), [{"post_id": 10}, {"post_id": 11}])

    found = OffsetStore(db_url=sqlite_url).initialize_offsets_from_transform_meta(world.enriched_transformation())
    assert found == OffsetRepository(world.posts.plane).get_offsets_for_transformation("enrich_posts") == {
        "posts": world.posts.last_committed().commit_ts,
        "profiles": world.profiles.last_committed().commit_ts,
    }
